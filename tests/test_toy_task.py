"""A third task, registered here in tests/ with no file under src/ edited: a super-class classifier on the SOP
replica (task ``toy_classify``, model ``toy_classifier``, loss ``toy_cross_entropy``, metric ``accuracy``).

It shows what "a task is one module" means: the task gives its parts, batches, step and evaluator
(:class:`rankrepro.engine.tasks.Task`) and its facts; the catalog written from the live registries (what
``python -m rankrepro catalog`` does after a registration) carries them to the planner, which plans the run and
applies the facts; the shared loop (:func:`rankrepro.engine.loop.train`) trains it, stops it on SIGTERM and resumes
it exactly; its evaluator scores it.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch.utils.data import DataLoader

from datautil import sop_manifest
from rankrepro import catalog
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.data import transforms
from rankrepro.device import resolve_device
from rankrepro.engine import loop
from rankrepro.engine.model_file import load_model
from rankrepro.engine.tasks import TASKS, Parts, Task, task_of
from rankrepro.io import atomic_write_json
from rankrepro.losses.registry import LOSSES
from rankrepro.models.heads import MODELS
from rankrepro.plan.complete import run_id
from rankrepro.plan.cost import run_cost
from rankrepro.plan.planner import Planner
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import load_setups
from rankrepro.record.runtime import JobSettings
from rankrepro.record.selection import selection_record
from rankrepro.record.tasks import TaskFacts

SUPER_CLASSES = 12  # the SOP replica's super-classes, the classifier's targets (its level_1 label, 1-based)


class ToyClassifier(nn.Module):
    """A linear classifier of an image's pixels."""

    task = "toy_classify"

    def __init__(self, classes: int = SUPER_CLASSES, size: int = 16):
        super().__init__()
        self.linear = nn.Linear(3 * size * size, classes)

    def forward(self, images):
        return self.linear(images.flatten(1))


class ToyCrossEntropy(nn.Module):
    """Cross-entropy of the logits against the super-class (label level 1, 1-based)."""

    task = "toy_classify"

    def __init__(self, label_smoothing: float = 0.0):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels[:, 1] - 1, label_smoothing=self.label_smoothing)


def evaluate_accuracy(run, manifest_dir, model_path, out_path, *, device="auto", num_workers=0, batch_size=256,
                      run_id="", progress=True, image_cache=None) -> dict:
    """``metrics.json`` with the share of test images whose super-class the model predicts."""
    dev = resolve_device(device)
    test = ImageDataset(read_manifest(manifest_dir).split("test"), transforms.test_transform(run["images"]))
    model = load_model(model_path, dev).eval()
    right = 0
    with torch.no_grad():
        for images, labels, _ in DataLoader(test, batch_size=batch_size, num_workers=num_workers):
            right += int((model(images.to(dev)).argmax(1).cpu() == labels[:, 1] - 1).sum())
    metrics = {"accuracy": right / len(test)}
    result = {"run_id": run_id, "dataset": run["dataset"], "n_images": len(test), "metrics": metrics,
              **selection_record(run, metrics, [])}
    atomic_write_json(out_path, result)
    return result


class ToyClassifyTask(Task):
    """Super-class classification: parts, batches and step; the loop does the rest."""

    facts = TaskFacts(metrics=("accuracy",), backbones=None, refused={"eval.every": None, "base_loss": None},
                      throughput_key="{name}", bench_dataset=None)
    evaluator = staticmethod(evaluate_accuracy)
    #: a test's SIGTERM: after this many steps of this process (None: never)
    sigterm_after: int | None = None

    def build(self, run, manifest_dir, out_dir, settings, device):
        self.device, self.steps = device, 0
        manifest = read_manifest(manifest_dir).split(run["train_split"])
        self.dataset = ImageDataset(manifest, transforms.train_transform(run["images"]))
        self.sampler = build_sampler(run["sampler"], self.dataset.labels.numpy(), seed=run["seed"])
        self.model = MODELS.build_block(run["model"]).to(device)
        self.criterion = LOSSES.build_block({k: v for k, v in run["loss"].items() if k != "memory"}).to(device)
        return Parts(self.model, self.criterion, self.sampler)

    def batches(self, position, cap):
        batches = list(self.sampler)[:cap][position.batches:]  # the sampler's epoch (set_epoch by the loop)
        generator = torch.Generator().manual_seed(position.seed)  # the random crops and flips of the epoch
        return DataLoader(self.dataset, batch_sampler=batches, generator=generator)

    def step(self, batch):
        images, labels, _ = batch
        self.steps += 1
        if self.sigterm_after is not None and self.steps == self.sigterm_after:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop saves after this step and stops
        return self.criterion(self.model(images.to(self.device)), labels.to(self.device)), len(images)


SETUP = {"toy_sop_classify": {
    "description": "a linear super-class classifier on the SOP replica (tests/test_toy_task.py)",
    "task": "toy_classify", "dataset": "sop",
    "model": {"name": "toy_classifier"},
    "images": {"train_resize": None, "train_crop": 16, "rrc_scale": [1.0, 1.0], "rrc_ratio": [1.0, 1.0],
               "test_resize": 16, "test_crop": 16},
    "sampler": {"name": "shuffle", "batch_size": 8},
    "optimizer": {"name": "sgd", "momentum": 0.9, "groups": {"net": {"lr": 0.05}}},
    "schedule": {"name": "multistep", "milestones": [1]},
    "loss": {"name": "toy_cross_entropy"},
    "epochs": 2, "warmup_epochs": 0, "amp": "none", "seed": 3,
    "eval": {"metrics": ["accuracy"]},
}}


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """The toy task, model and loss registered (for this test only), the catalog rewritten with them, and a
    planner of the toy setup."""
    for registry, name, builder in ((TASKS, "toy_classify", ToyClassifyTask), (MODELS, "toy_classifier", ToyClassifier),
                                    (LOSSES, "toy_cross_entropy", ToyCrossEntropy)):
        registry.names()  # its package's registrations first
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        registry.register(name)(builder)
    monkeypatch.setattr(catalog, "CATALOG_PATH", catalog.write(tmp_path / "catalog.json"))
    (tmp_path / "setups").mkdir()
    (tmp_path / "setups" / "toy.yaml").write_text(yaml.safe_dump(SETUP))
    return Planner(catalog=catalog.load(), setups=load_setups(tmp_path / "setups"))


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    return sop_manifest(tmp_path_factory.mktemp("sop"))


def test_the_toy_task_plans_with_its_facts(toy):
    run = toy.resolve("toy_sop_classify")
    assert run["task"] == "toy_classify" and run["loss"] == {"name": "toy_cross_entropy", "label_smoothing": 0.0,
                                                             "memory": run["loss"]["memory"]}
    assert run["model"] == {"name": "toy_classifier", "classes": SUPER_CLASSES, "size": 16}
    assert run_id(run).startswith("sop-toy_cross_entropy-")
    entry = catalog.load()["task"]["toy_classify"]
    assert entry["facts"]["metrics"] == ["accuracy"] and entry["target"].endswith(":ToyClassifyTask")
    # its throughput key names the profile row its cost reads (the float32 tables: the toy run's amp is none)
    cost = run_cost(run, {"train_fp32": {"toy_classifier": {16: 1000.0}},
                          "inference_fp32": {"toy_classifier": {16: 4000.0}}}, {"train": 96, "test": 96})
    assert cost["backbone"] == "toy_classifier" and cost["gpu_h"] == pytest.approx((96 * 2 / 1000 + 96 / 4000) / 3600)


@pytest.mark.parametrize(("layer", "message"), [
    ({"eval": {"metrics": ["R@1"]}}, r"eval\.metrics\[0\]: unknown toy_classify metric 'R@1'; known: accuracy"),
    ({"eval": {"every": 1}}, r"eval\.every: a toy_classify run has no eval\.every \(only None\)"),
    ({"loss": {"name": "smooth_ap"}}, r"loss 'smooth_ap' is a retrieval loss, the run's task is 'toy_classify'"),
])
def test_the_toy_tasks_facts_refuse_what_it_does_not_do(toy, layer, message):
    with pytest.raises(PlanError, match=message):
        toy.resolve("toy_sop_classify", [("test", layer)])


def test_a_retrieval_run_cannot_take_the_toy_model(toy):
    with pytest.raises(PlanError, match=r"model 'toy_classifier' is a toy_classify model, the run's task is "
                                        r"'retrieval'"):
        toy.resolve("toy_sop_classify", [("test", {"task": "retrieval"})])


@pytest.mark.slow
def test_the_toy_task_trains_stops_on_sigterm_resumes_exactly_and_evaluates(toy, manifest_dir, tmp_path,
                                                                            monkeypatch):
    run = toy.resolve("toy_sop_classify")
    rid = run_id(run)
    settings = JobSettings(device="cpu", progress=False)
    straight = loop.train(run, manifest_dir, tmp_path / "a", settings, run_id=rid)

    monkeypatch.setattr(ToyClassifyTask, "sigterm_after", 5)  # in the first epoch's last batches (12 a epoch)
    with pytest.raises(SystemExit, match=r"stopped by SIGTERM at epoch 1 after 5 batches"):
        loop.train(run, manifest_dir, tmp_path / "b", settings, run_id=rid)
    assert (tmp_path / "b" / "checkpoint.pt").exists() and not (tmp_path / "b" / "model.pt").exists()
    monkeypatch.setattr(ToyClassifyTask, "sigterm_after", None)
    resumed = loop.train(run, manifest_dir, tmp_path / "b", settings, run_id=rid)

    a, b = torch.load(straight, weights_only=True), torch.load(resumed, weights_only=True)
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    history = [(tmp_path / d / "history.csv").read_text().splitlines() for d in "ab"]
    columns = history[0][0].split(",")
    drop = [columns.index(c) for c in ("seconds", "images_per_s")]
    rows = [[[v for i, v in enumerate(line.split(",")) if i not in drop] for line in h] for h in history]
    assert rows[0] == rows[1] and len(rows[0]) == 3  # header + 2 epochs, the losses identical
    assert not (tmp_path / "b" / "checkpoint.pt").exists()

    task = task_of(run)
    assert isinstance(task, ToyClassifyTask)
    result = task.evaluate(run, manifest_dir, resumed, tmp_path / "metrics.json", settings, run_id=rid)
    again = evaluate_accuracy(run, manifest_dir, straight, tmp_path / "m2.json", device="cpu", progress=False)
    assert result["metrics"] == again["metrics"] and 0 <= result["metrics"]["accuracy"] <= 1
    assert result["best_test"]["source"] == "last"
