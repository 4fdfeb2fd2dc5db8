"""Training on a generated SOP replica: exact resume, warm-up, NaN stop, evaluation."""

import json

import pytest
import torch
from datautil import sop_manifest

from rankrepro.engine.tasks import retrieval as train_module
from rankrepro.engine.evaluate import evaluate
from rankrepro.engine.loop import NonFiniteLossError, train
from rankrepro.plan.planner import resolve_run


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    return sop_manifest(tmp_path_factory.mktemp("sop"))


def tiny_run(**overrides):
    base = {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
        "epochs": 2, "warmup_epochs": 0, "amp": "none",
    }
    return resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, {**base, **overrides})


class Interrupt(Exception):
    pass


def _stop_after_first_epoch(epoch):
    if epoch == 0:
        raise Interrupt


def _weights(path):
    return torch.load(path, weights_only=True)["state_dict"]


def test_resume_after_an_interruption_is_exact(tmp_path, manifest_dir):
    run = tiny_run()
    straight = train(run, manifest_dir, tmp_path / "a", run_id="r", progress=False)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False, on_epoch_end=_stop_after_first_epoch)
    assert (tmp_path / "b" / "checkpoint.pt").exists() and not (tmp_path / "b" / "model.pt").exists()
    resumed = train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False)
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "b" / "checkpoint.pt").exists()
    history = (tmp_path / "b" / "history.csv").read_text().splitlines()
    assert history[0].startswith("epoch,loss") and len(history) == 3


def test_max_batches_per_epoch_ends_each_epoch_early(tmp_path, manifest_dir):
    def batches(run, out):
        train(run, manifest_dir, tmp_path / out, run_id=out, progress=False)
        rows = (tmp_path / out / "history.csv").read_text().splitlines()
        column = rows[0].split(",").index("batches")
        return [int(row.split(",")[column]) for row in rows[1:]]

    full = batches(tiny_run(), "full")
    assert len(full) == 2 and min(full) >= 2  # the replica gives more than one batch per epoch
    assert batches(tiny_run(max_batches_per_epoch=1), "capped") == [1, 1]
    assert batches(tiny_run(max_batches_per_epoch=1000), "loose") == full


def test_a_checkpoint_of_another_run_is_set_aside_and_the_run_trains(tmp_path, manifest_dir, capsys):
    """One policy for a checkpoint the run cannot resume from (tests/test_checkpoint.py): moved aside, a warning,
    the run trains from its start in the same job."""
    run = tiny_run(epochs=1)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path, run_id="r1", progress=False, on_epoch_end=_stop_after_first_epoch)
    capsys.readouterr()
    model = train(run, manifest_dir, tmp_path, run_id="r2", progress=False)
    err = capsys.readouterr().err
    assert f"{tmp_path / 'checkpoint.pt'}: a checkpoint of run 'r1', not of 'r2'" in err and "epoch 1" in err
    assert model.exists() and (tmp_path / "checkpoint.pt.unusable-1").exists()


def test_warmup_freezes_the_backbone_and_pauses_the_schedule(tmp_path, manifest_dir):
    run = tiny_run(epochs=1, warmup_epochs=1)
    from rankrepro.engine.loop import seed_everything
    from rankrepro.models import build_model

    seed_everything(run["seed"])
    initial = build_model(run["model"]).state_dict()
    trained = _weights(train(run, manifest_dir, tmp_path, run_id="w", progress=False))
    backbone = [k for k in initial if k.startswith("backbone.") and "running" not in k and "num_batches" not in k]
    head = [k for k in initial if k.startswith("head.")]
    assert all(torch.equal(initial[k], trained[k]) for k in backbone)
    assert any(not torch.equal(initial[k], trained[k]) for k in head)
    row = (tmp_path / "history.csv").read_text().splitlines()[1].split(",")
    assert row[-1] == "True" and float(row[2]) == run["optimizer"]["groups"]["backbone"]["lr"]


class ExplodingLoss(torch.nn.Module):
    """Finite during the first epoch, NaN afterwards."""

    def __init__(self, finite_calls):
        super().__init__()
        self.calls, self.finite_calls = 0, finite_calls

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None):
        self.calls += 1
        value = embeddings.sum() * 0
        return value if self.calls <= self.finite_calls else value + float("nan")


def test_nan_loss_stops_with_a_clear_error_and_keeps_the_checkpoint(tmp_path, manifest_dir, monkeypatch):
    run = tiny_run()
    from rankrepro.data.manifest import read_manifest
    from rankrepro.data.samplers import build_sampler

    batches = len(build_sampler(run["sampler"], read_manifest(manifest_dir).split("train").labels(), 0))
    monkeypatch.setattr(train_module.losses, "build", lambda **_: ExplodingLoss(batches))
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at epoch 2.*checkpoint"):
        train(run, manifest_dir, tmp_path, run_id="n", progress=False)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 0 and not (tmp_path / "model.pt").exists()


def test_a_step_reads_its_loss_from_the_device_once(tmp_path, manifest_dir, monkeypatch):
    """One host sync per step (``loss.item()`` before the backward pass), not three (``isfinite`` tested, then two
    ``item()`` after the optimizer step, which wait for the backward pass and the step)."""
    reads = {"item": 0, "bool": 0}
    item, boolean = torch.Tensor.item, torch.Tensor.__bool__

    def counted(name, method):
        def read(self, *args):
            if self.dim() == 0 and self.requires_grad:  # the loss (a 0-d tensor in the graph)
                reads[name] += 1
            return method(self, *args)
        return read

    monkeypatch.setattr(torch.Tensor, "item", counted("item", item))
    monkeypatch.setattr(torch.Tensor, "__bool__", counted("bool", boolean))
    run = tiny_run(epochs=1, max_batches_per_epoch=3)
    train(run, manifest_dir, tmp_path, run_id="s", progress=True)
    assert reads == {"item": 3, "bool": 0}


def test_evaluate_writes_metrics(tmp_path, manifest_dir):
    run = tiny_run(epochs=1)
    model = train(run, manifest_dir, tmp_path, run_id="e", progress=False)
    result = evaluate(run, manifest_dir, model, tmp_path / "metrics.json", run_id="e", progress=False)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert saved["replica"] is True and saved["dataset"] == "sop"
    assert {"R@1", "R@10", "mAP@R"} <= set(saved["metrics"])
    assert 0.0 <= saved["metrics"]["mAP@R"] <= saved["metrics"]["R@10"] <= 1.0


def test_evaluate_any_compute_metric_on_every_level(tmp_path, manifest_dir):
    # an eval block with `metrics` goes through rankrepro.metrics.compute with the manifest's
    # [N, L] labels (SOP: product, then its super-category), so hierarchical metrics work
    from rankrepro.data.manifest import read_manifest
    from rankrepro.metrics import compute

    run = tiny_run(epochs=1)
    model = train(run, manifest_dir, tmp_path, run_id="h", progress=False)
    run["eval"] = {"split": "test", "metrics": ["R@1", "mAP@R", "mAP", "H-AP", "ASI", "NDCG", "mAP_level1"]}
    result = evaluate(run, manifest_dir, model, tmp_path / "metrics.json", run_id="h", progress=False)
    m = result["metrics"]
    assert set(run["eval"]["metrics"]) <= set(m) and all(0.0 <= m[k] <= 1.0 for k in run["eval"]["metrics"])
    # the same numbers as compute() on the embeddings the model gives
    from rankrepro.data.images import ImageDataset
    from rankrepro.data.transforms import test_transform
    from rankrepro.device import resolve_device
    from rankrepro.engine.evaluate import embed
    from rankrepro.engine.model_file import load_model

    test = read_manifest(manifest_dir).split("test")
    dev = resolve_device("cpu")
    emb = embed(load_model(model, dev), ImageDataset(test, test_transform(run["images"])), dev, "none",
                progress=False)
    ref = compute(emb, test.labels(), metrics=run["eval"]["metrics"])
    assert test.labels().shape[1] == 2
    for k in run["eval"]["metrics"]:
        assert m[k] == pytest.approx(ref[k], abs=1e-9), k


# ------------------------------------------------------------------ the test curve (eval.every)


def _history_without_timing(folder):
    """history.csv less its wall-clock columns (seconds, images/s differ between two runs)."""
    import csv

    with open(folder / "history.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in ("seconds", "images_per_s")} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_evaluating_during_training_leaves_the_training_unchanged(tmp_path, manifest_dir):
    """every = 1 scores the model after each epoch; the weights and the history equal those of the same
    run without a curve (the RNG streams and the modules' train/eval flags are restored)."""
    from rankrepro.record.selection import read_curve

    without = train(tiny_run(epochs=3, eval={"every": None}), manifest_dir, tmp_path / "a", run_id="r", progress=False)
    run = tiny_run(epochs=3, eval={"every": 1})
    with_curve = train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False)
    a, b = _weights(without), _weights(with_curve)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _history_without_timing(tmp_path / "a") == _history_without_timing(tmp_path / "b")
    assert not (tmp_path / "a" / "curve.csv").exists()
    curve = read_curve(tmp_path / "b" / "curve.csv")
    assert [r["epoch"] for r in curve] == [1, 2, 3]
    assert set(run["eval"]["metrics"]) <= set(curve[0]) and curve[0]["seconds"] > 0
    # the evaluate step scores the final model as the curve did, and records the best epoch from it
    result = evaluate(run, manifest_dir, with_curve, tmp_path / "b" / "metrics.json", run_id="r", progress=False)
    assert result["metrics"] == pytest.approx({k: v for k, v in curve[-1].items() if k not in ("epoch", "seconds")})
    best = result["best_test"]
    assert result["epoch"] == 3 and result["select"] == "last" and best["source"] == "curve"
    first = run["eval"]["metrics"][0]
    assert best["select_by"] == first and best["metrics"][first] == max(r[first] for r in curve)
    assert best["metrics"] == {k: v for k, v in curve[best["epoch"] - 1].items() if k not in ("epoch", "seconds")} \
        or best["epoch"] == 3


@pytest.mark.slow
def test_a_resumed_run_continues_its_curve(tmp_path, manifest_dir):
    from rankrepro.record.selection import read_curve

    run = tiny_run(epochs=3, eval={"every": 1})
    train(run, manifest_dir, tmp_path / "a", run_id="r", progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "curve.csv").write_text("epoch,seconds,R@1\n7,1.0,0.9\n")  # left by an earlier attempt
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False, on_epoch_end=_stop_after_first_epoch)
    assert [r["epoch"] for r in read_curve(tmp_path / "b" / "curve.csv")] == [1]  # the stale file was removed
    assert [r["epoch"] for r in torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["curve"]] == [1]
    (tmp_path / "b" / "curve.csv").unlink()  # the checkpoint holds the curve: the file is written again
    train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False)
    straight, resumed = read_curve(tmp_path / "a" / "curve.csv"), read_curve(tmp_path / "b" / "curve.csv")
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    drop = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert drop(resumed) == drop(straight)


def test_scoring_a_model_restores_its_modes_and_every_rng(tmp_path, manifest_dir):
    import random

    import numpy as np

    from rankrepro.engine.curve import TestCurve
    from rankrepro.device import resolve_device
    from rankrepro.models import build_model

    run = tiny_run(epochs=2, eval={"every": 1})
    model = build_model(run["model"])
    model.train()
    model.backbone.eval()  # modes differ between modules: each is restored as it was
    modes = [m.training for m in model.modules()]
    curve = TestCurve(run, manifest_dir, tmp_path, resolve_device("cpu"))
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    curve.after_epoch(model, 1)
    assert [m.training for m in model.modules()] == modes
    assert random.getstate() == states[0] and (np.random.get_state()[1] == states[1]).all()
    assert torch.equal(torch.get_rng_state(), states[2])
    assert [r["epoch"] for r in curve.rows] == [1] and (tmp_path / "curve.csv").is_file()


def _write_run(folder, run):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(run))
    return str(folder / "run.json")


@pytest.mark.slow
def test_a_batch_trains_each_run_as_its_own_job_would(tmp_path, manifest_dir):
    """runtime.runs_per_job: `train-batch` over two runs writes, for each, the run.json of its plan file and the
    files and the metrics a one-run `train --evaluate-out` job writes (each run seeds itself; order does not
    matter), without model.pt with --no-model."""
    from rankrepro.cli import main
    from rankrepro.plan.complete import run_id

    runs = [tiny_run(epochs=1), tiny_run(epochs=1, seed=3)]
    ids = [run_id(run) for run in runs]
    common = ["--manifest", str(manifest_dir), "--device", "cpu", "--threads", "1", "--no-progress"]
    singles = []
    for k, run in enumerate(runs):
        path = _write_run(tmp_path / "single" / f"r{k}", run)
        main(["train", "--run", path, *common, "--evaluate-out", f"{tmp_path}/single/r{k}/metrics.json"])
        singles.append(json.loads((tmp_path / "single" / f"r{k}" / "metrics.json").read_text())["metrics"])
    (tmp_path / "plan").mkdir()
    for rid, run in zip(ids, runs):
        (tmp_path / "plan" / f"{rid}.json").write_text(json.dumps({**run, "id": rid}))
    main(["train-batch", "--runs", *(str(tmp_path / "plan" / f"{rid}.json") for rid in reversed(ids)),
          "--staged", str(tmp_path / "staged"), "--runs-dir", str(tmp_path / "runs"), "--no-model", *common])
    for k, rid in enumerate(ids):
        folder = tmp_path / "runs" / rid
        assert {p.name for p in folder.iterdir()} == {"run.json", "history.csv", "metrics.json", "curve.csv"}
        assert json.loads((folder / "run.json").read_text()) == {**runs[k], "id": rid}
        assert json.loads((folder / "metrics.json").read_text())["metrics"] == singles[k]
    assert singles[0] != singles[1]  # the seeds matter, so the comparison can fail


class WritesMarker:
    """Pickles as a call of ``exec`` that writes ``marker``: what a crafted torch file runs when
    it is loaded with ``weights_only=False``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_crafted_model_is_refused_without_running_its_code(tmp_path, manifest_dir):
    marker = tmp_path / "marker"
    torch.save({"run_id": "m", "model_cfg": WritesMarker(marker), "state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(RuntimeError, match=r"model\.pt.*refused.*retrain"):
        evaluate(tiny_run(), manifest_dir, tmp_path / "model.pt", tmp_path / "metrics.json", progress=False)
    assert not marker.exists() and not (tmp_path / "metrics.json").exists()


def _truncate(path):
    """Keep the first 8 kB, as a killed copy or a full disk does (torch: a bare ``OSError: [Errno 22]``)."""
    path.write_bytes(path.read_bytes()[:8192])


def test_a_truncated_checkpoint_is_moved_aside_and_the_run_starts_over(tmp_path, manifest_dir, capsys):
    run = tiny_run()
    straight = train(run, manifest_dir, tmp_path / "a", run_id="t", progress=False)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path / "b", run_id="t", progress=False, on_epoch_end=_stop_after_first_epoch)
    _truncate(tmp_path / "b" / "checkpoint.pt")
    capsys.readouterr()
    restarted = train(run, manifest_dir, tmp_path / "b", run_id="t", progress=False)
    err = capsys.readouterr().err
    assert f"{tmp_path / 'b' / 'checkpoint.pt'}: cannot be read, it is truncated" in err
    assert "checkpoint.pt.unusable-1 (kept for inspection): run t trains from epoch 1" in err
    assert (tmp_path / "b" / "checkpoint.pt.unusable-1").exists() and not (tmp_path / "b" / "checkpoint.pt").exists()
    a, b = _weights(straight), _weights(restarted)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_truncated_model_names_the_file_and_says_to_retrain(tmp_path, manifest_dir):
    run = tiny_run(epochs=1)
    model = train(run, manifest_dir, tmp_path, run_id="x", progress=False)
    _truncate(model)
    with pytest.raises(RuntimeError, match=r"model\.pt.*cannot be read.*retrain"):
        evaluate(run, manifest_dir, model, tmp_path / "metrics.json", run_id="x", progress=False)


@pytest.mark.slow
def test_resume_is_exact_with_rambo_score_rows_in_the_checkpoint(tmp_path, manifest_dir):
    """rambo_recall's batch_memory rows live in the loss's state dict: an interrupted run resumes them
    (else the first batches after the resume would see an empty memory and the weights would differ)."""
    run = resolve_run("suprank_sop", {"name": "rambo_recall", "batch_memory": 2, "length": "rows"}, {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "class_random", "batch_size": 16, "samples_per_class": 4},
        "epochs": 2, "warmup_epochs": 0, "amp": "none"})
    straight = train(run, manifest_dir, tmp_path / "a", run_id="r", progress=False)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False, on_epoch_end=_stop_after_first_epoch)
    stored = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["criterion"]["_extra_state"]["stored"]
    assert len(stored) == 2
    resumed = train(run, manifest_dir, tmp_path / "b", run_id="r", progress=False)
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
