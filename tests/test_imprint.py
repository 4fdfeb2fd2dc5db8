"""Weight imprinting of the face runs' base classifier (rankrepro.losses.imprint, losses.face ``init``)."""

import math

import numpy as np
import pytest
import torch
from datautil import sop_manifest
from torch.utils.data import Dataset

import rankrepro.engine.tasks.retrieval as retrieval_task
from rankrepro.engine.loop import train
from rankrepro.losses.face import IMPRINT_SCALE, ArcFace, Softmax
from rankrepro.losses.imprint import chosen_images, class_means
from rankrepro.plan.build import make_plan
from rankrepro.plan.planner import resolve_run


class Vectors(Dataset):
    """Items ``(vector, label, index)``, as ImageDataset's: the "image" is its own embedding under ``torch.nn.Identity``."""

    def __init__(self, vectors):
        self.vectors = torch.tensor(vectors, dtype=torch.float32)

    def __len__(self):
        return len(self.vectors)

    def __getitem__(self, index):
        return self.vectors[index], 0, index


def test_chosen_images_takes_at_most_n_per_class_with_the_seed():
    labels = np.array([0, 0, 0, 1, 1, 2, 0])
    chosen = chosen_images(labels, per_class=2, seed=3)
    assert list(chosen) == sorted(chosen) and len(chosen) == 5
    assert sorted(labels[chosen].tolist()) == [0, 0, 1, 1, 2]  # two of class 0's four, all of the others
    assert list(chosen_images(labels, 2, 3)) == list(chosen)
    assert {tuple(chosen_images(labels, 2, s)) for s in range(20)} != {tuple(chosen)}  # the seed draws


def test_class_means_are_the_normalised_means_of_normalised_embeddings():
    # class 0: (3, 4) and (0, 2) -> (0.6, 0.8) and (0, 1) -> mean (0.3, 0.9) -> (1, 3) / sqrt(10); class 1: (-5, 0) -> (-1, 0)
    data = Vectors([[3.0, 4.0], [-5.0, 0.0], [0.0, 2.0]])
    means = class_means(torch.nn.Identity(), data, np.array([0, 1, 0]), 2, per_class=8, seed=0)
    assert torch.allclose(means, torch.tensor([[1 / math.sqrt(10), 3 / math.sqrt(10)], [-1.0, 0.0]]))
    with pytest.raises(ValueError, match="1 of 3 classes have no training image"):
        class_means(torch.nn.Identity(), data, np.array([0, 1, 0]), 3, per_class=8, seed=0)


def test_imprinting_sets_each_classifier_from_the_means():
    means = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=1)
    softmax = Softmax(num_classes=3, embedding_size=4)
    softmax.imprint(means)
    assert torch.equal(softmax.classifier.weight, IMPRINT_SCALE * means) and not softmax.classifier.bias.any()
    arcface = ArcFace(num_classes=3, embedding_size=4)
    arcface.imprint(means)
    assert torch.equal(arcface.loss.W, means.T)
    # an embedding equal to its class mean: ArcFace's cosine to its own class is 1, the loss its margin's only
    x, y = means.clone(), torch.arange(3)
    assert arcface(x, y) < ArcFace(num_classes=3, embedding_size=4)(x, y)
    with pytest.raises(ValueError, match=r"means of shape \(3, 5\), the classifier has 3 classes of 4"):
        softmax.imprint(torch.zeros(3, 5))


def test_random_init_is_the_module_start_as_before():
    torch.manual_seed(7)
    random = Softmax(num_classes=5, embedding_size=4, init="random")
    torch.manual_seed(7)
    linear = torch.nn.Linear(4, 5)
    assert torch.equal(random.classifier.weight, linear.weight) and torch.equal(random.classifier.bias, linear.bias)
    with pytest.raises(ValueError, match="init must be one of imprint, random, got 'zeros'"):
        Softmax(num_classes=5, embedding_size=4, init="zeros")


def test_the_face_setups_imprint_by_default():
    plan = make_plan({"smooth_ap": ["table4", "table5"]})
    bases = [run["base_loss"] for run in plan["runs"].values() if run["base_loss"]]
    assert bases and all(b["init"] == "imprint" and b["imprint_per_class"] == 32 for b in bases)


# ---------------------------------------------------------------- the trainer: once for a fresh run, never on resume

@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    return sop_manifest(tmp_path_factory.mktemp("sop"))


def face_like_run(init):
    """A tiny SOP run with a softmax base loss (the face rows' structure at the demo's size)."""
    return resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
        "epochs": 2, "warmup_epochs": 0, "amp": "none",
        "base_loss": {"name": "softmax", "init": init, "imprint_per_class": 2}})


class Interrupt(Exception):
    pass


def _stop_after_first_epoch(epoch):
    if epoch == 0:
        raise Interrupt


@pytest.mark.slow  # trains for seconds
def test_the_trainer_imprints_a_fresh_run_only(tmp_path, manifest_dir, monkeypatch):
    calls = []
    real = retrieval_task.class_means

    def counting(model, dataset, labels, num_classes, **kwargs):
        means = real(model, dataset, labels, num_classes, **kwargs)
        calls.append((num_classes, kwargs["per_class"], means))
        return means

    monkeypatch.setattr(retrieval_task, "class_means", counting)
    run = face_like_run("imprint")
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path, run_id="f", progress=False, on_epoch_end=_stop_after_first_epoch)
    assert len(calls) == 1 and calls[0][1] == 2 and calls[0][2].shape == (calls[0][0], 8)
    assert torch.allclose(calls[0][2].norm(dim=1), torch.ones(calls[0][0]))
    train(run, manifest_dir, tmp_path, run_id="f", progress=False)  # resumes: the checkpoint holds the weights
    assert len(calls) == 1 and (tmp_path / "model.pt").exists()


@pytest.mark.slow  # trains for seconds
def test_a_random_start_never_imprints(tmp_path, manifest_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("imprinted a base loss with init: random")

    monkeypatch.setattr(retrieval_task, "class_means", fail)
    run = face_like_run("random")
    run["epochs"] = 1
    train(run, manifest_dir, tmp_path, run_id="r", progress=False)
