"""The run features Smooth-AP's face tables need: a base loss kept under the appended one (``base_loss``),
evaluate-only runs (``epochs: 0``) and a second evaluation dataset (``eval.datasets``)."""

import json
import shutil

import pytest
import torch
from datautil import sop_manifest

from rankrepro import losses
from rankrepro.engine.evaluate import evaluate
from rankrepro.engine.loop import train
from rankrepro.engine.tasks.retrieval import build_loss
from rankrepro.losses.combined import WithBase
from rankrepro.losses.face import ArcFace, Softmax
from rankrepro.plan.complete import run_id
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.schema import PlanError

TINY = {
    "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
    "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
    "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
    "epochs": 1, "warmup_epochs": 0, "amp": "none",
}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    """results/manifests-like folder: ``sop`` and a copy of it named ``cub`` (another dataset's manifest)."""
    root = tmp_path_factory.mktemp("manifests")
    own = sop_manifest(root / "replica")
    shutil.copytree(own, root / "sop")
    shutil.copytree(own, root / "cub")
    return root


def tiny(**overrides):
    return resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, {**TINY, **overrides})


# ------------------------------------------------------------------------------------------- losses


def test_softmax_is_cross_entropy_of_its_linear_classifier():
    torch.manual_seed(0)
    loss = Softmax(num_classes=3, embedding_size=4)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    logits = x @ loss.classifier.weight.T + loss.classifier.bias
    by_hand = -(logits.log_softmax(1)[torch.arange(5), y]).mean()
    assert torch.allclose(loss(x, y), by_hand)


def test_arcface_adds_its_angular_margin_to_the_true_class_only():
    torch.manual_seed(0)
    loss = ArcFace(num_classes=3, embedding_size=4, margin=0.5, scale=64.0)
    x, y = torch.nn.functional.normalize(torch.randn(6, 4), dim=1), torch.tensor([0, 1, 2, 0, 1, 2])
    w = torch.nn.functional.normalize(loss.loss.W.T, dim=1)  # PML keeps W as [D, C]
    theta = torch.acos((x @ w.T).clamp(-1 + 1e-7, 1 - 1e-7))
    logits = 64.0 * torch.cos(theta + 0.5 * torch.nn.functional.one_hot(y, 3))
    by_hand = torch.nn.functional.cross_entropy(logits, y)
    assert torch.allclose(loss(x, y), by_hand, atol=1e-4)
    no_margin = ArcFace(num_classes=3, embedding_size=4, margin=1e-6, scale=64.0)
    no_margin.load_state_dict(loss.state_dict())
    assert loss(x, y) > no_margin(x, y)  # the margin penalises the true class


def test_a_base_loss_is_added_one_to_one_and_its_classifier_trains():
    torch.manual_seed(0)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    x = torch.nn.functional.normalize(torch.randn(8, 6), dim=1).requires_grad_()
    combined = build_loss({"name": "smooth_ap", "tau": 0.01, "memory": None}, labels[:, None].numpy(), 6,
                          base={"name": "softmax"})
    assert isinstance(combined, WithBase) and isinstance(combined.base, Softmax)
    assert combined.base.num_classes == 4 and combined.base.embedding_size == 6
    value = combined(x, labels)
    alone = losses.build("smooth_ap", tau=0.01)(x, labels) + combined.base(x, labels)
    assert torch.allclose(value, alone)
    value.backward()
    assert combined.base.classifier.weight.grad is not None and x.grad is not None
    assert [n for n, _ in combined.named_parameters()] == ["base.classifier.weight", "base.classifier.bias"]


def test_without_a_base_loss_the_loss_is_built_alone():
    labels = torch.tensor([0, 0, 1, 1])
    assert not isinstance(build_loss({"name": "smooth_ap", "tau": 0.01, "memory": None}, labels[:, None].numpy(), 4),
                          WithBase)


# ------------------------------------------------------------------------------------------- plan


def test_new_keys_at_their_defaults_leave_run_ids_unchanged():
    run = tiny()
    assert run["base_loss"] is None and run["eval"]["datasets"] == []
    legacy = {k: v for k, v in run.items() if k != "base_loss"}
    legacy["eval"] = {k: v for k, v in run["eval"].items() if k != "datasets"}
    assert run_id(run) == run_id(legacy)
    assert run_id(tiny(base_loss={"name": "softmax"})) != run_id(run)
    assert run_id(tiny(eval={"datasets": ["cub"]})) != run_id(run)


def test_the_plan_completes_and_checks_the_base_loss():
    run = tiny(base_loss={"name": "arcface"})
    assert run["base_loss"] == {"name": "arcface", "margin": 0.5, "scale": 64.0, "init": "imprint",
                                "imprint_per_class": 32}
    with pytest.raises(PlanError, match=r"base_loss.name: unknown loss 'softmaxx'"):
        tiny(base_loss={"name": "softmaxx"})
    with pytest.raises(PlanError, match=r"base_loss.*margin"):
        tiny(base_loss={"name": "arcface", "margin": "wide"})


def test_eval_datasets_must_be_other_registered_datasets():
    with pytest.raises(PlanError, match=r"eval.datasets\[0\]: 'nope' is an unknown dataset"):
        tiny(eval={"datasets": ["nope"]})
    with pytest.raises(PlanError, match=r"eval.datasets\[1\]: 'sop' is the run's own dataset"):
        tiny(eval={"datasets": ["cub", "sop"]})


def test_epochs_zero_is_a_valid_run_and_negative_is_not():
    assert tiny(epochs=0)["epochs"] == 0
    with pytest.raises(PlanError, match="epochs"):
        tiny(epochs=-1)


# ------------------------------------------------------------------------------------------- engine


def test_an_evaluate_only_run_saves_the_model_as_built(tmp_path, manifests):
    run = tiny(epochs=0)
    model_path = train(run, manifests / "sop", tmp_path, run_id="z", progress=False)
    torch.manual_seed(run["seed"])
    from rankrepro.models import build_model

    built = build_model(run["model"]).state_dict()
    saved = torch.load(model_path, weights_only=True)["state_dict"]
    assert built.keys() == saved.keys() and all(torch.equal(built[k], saved[k]) for k in built)
    assert (tmp_path / "history.csv").read_text().strip() != ""  # a header, no epoch
    result = evaluate(run, manifests / "sop", model_path, tmp_path / "metrics.json", run_id="z", progress=False)
    assert result["epoch"] == 0 and 0.0 <= result["metrics"]["R@1"] <= 1.0


def test_a_run_is_also_scored_on_its_eval_datasets(tmp_path, manifests):
    run = tiny(eval={"metrics": ["R@1", "mAP@R"], "datasets": ["cub"]})
    model_path = train(run, manifests / "sop", tmp_path, run_id="x", progress=False)
    result = evaluate(run, manifests / "sop", model_path, tmp_path / "metrics.json", run_id="x", progress=False)
    metrics = result["metrics"]
    # the "cub" manifest is a copy of the run's own: the same numbers under the other dataset's prefix
    assert metrics["cub/R@1"] == metrics["R@1"] and metrics["cub/mAP@R"] == metrics["mAP@R"]
    assert result["other_datasets"]["cub"]["protocol"] == "same-set" and result["replica"] is True
    assert result["best_test"]["metrics"]["cub/R@1"] == metrics["cub/R@1"]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["metrics"] == json.loads(json.dumps(metrics))


def test_a_missing_eval_dataset_manifest_is_named_before_the_model_loads(tmp_path, manifests):
    run = tiny(eval={"metrics": ["R@1"], "datasets": ["cars"]})
    with pytest.raises(Exception, match="cars"):
        evaluate(run, manifests / "sop", tmp_path / "absent.pt", tmp_path / "m.json", progress=False)


@pytest.mark.parametrize("text, problem", [('{"protocol": "same-set"', r": not valid JSON \(Expecting ',' delimiter, "
                                                                       r"line 1 column 24\)"),
                                           ('["same-set"]', r": a JSON list, not the object a manifest's meta.json holds"),
                                           (b'{"dataset": "\xff"}', r", line 1: byte 14 of the line \(byte 14 of the file\) is not UTF-8: ff")])
def test_an_eval_dataset_whose_meta_json_is_broken_is_named_before_the_model_loads(tmp_path, manifests, text, problem):
    """Issue 33: a prepared meta.json that is not JSON gave json's bare error, naming no file."""
    from rankrepro.data.manifest import ManifestError

    shutil.copytree(manifests, tmp_path / "manifests")
    meta = tmp_path / "manifests" / "cub" / "meta.json"
    meta.write_bytes(text if isinstance(text, bytes) else text.encode())
    run = tiny(eval={"metrics": ["R@1"], "datasets": ["cub"]})
    with pytest.raises(ManifestError, match=rf"{meta}{problem}.*delete {meta.parent} and prepare the dataset again"):
        evaluate(run, tmp_path / "manifests" / "sop", tmp_path / "absent.pt", tmp_path / "m.json", progress=False)
