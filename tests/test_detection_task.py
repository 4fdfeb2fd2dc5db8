"""The detection task (RaMBO Tables 5 and 8): VOCImages' targets and flips on the voc07 replica, the shuffle
sampler, a planner-resolved Faster R-CNN trained and scored on the replica, exact resume with RaMBO's memory,
AP50 of a perfect detector, the planner's task checks and ``run_overrides.per_task``, and the tables' plan."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from datautil import voc07_manifest
from PIL import Image
from torchvision.transforms.functional import to_tensor

from rankrepro.data.datasets.voc import CLASSES
from rankrepro.data.image_files import ImageReadError
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.engine import loop
from rankrepro.engine.tasks import detection
from rankrepro.engine.tasks.detection import VOCImages
from rankrepro.models.detection import DETECTION_BACKBONES as MODEL_BACKBONES
from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.planner import Planner, resolve_run
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import Setup, load_setups

#: a tiny detector: no weights to download, images of the replica's size (64 x 48)
TINY = {"model": {"pretrained": "none", "min_size": 48, "max_size": 64}, "sampler": {"batch_size": 2},
        "epochs": 2, "max_batches_per_epoch": 2}
RAMBO_LOSS = {"name": "faster_rcnn", "classifier": "rambo_map"}


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    """The voc07 replica downloaded and prepared (:func:`datautil.voc07_manifest`)."""
    return voc07_manifest(tmp_path_factory.mktemp("voc07"))


# -------------------------------------------------------------------------------- VOCImages


def test_voc_images_targets_and_flip(manifest_dir):
    manifest = read_manifest(manifest_dir).split("train")
    data = VOCImages(manifest)
    assert len(data) == 6
    # 000007 (index 1): a difficult person [14, 2, 2, 20, 46] and a dog [11, 24, 18, 62, 46] -> only the dog
    assert manifest.table["path"].iloc[1].endswith("000007.jpg")
    image, target = data[(1, False)]
    assert torch.equal(target["labels"], torch.tensor([12]))  # dog 11 + 1
    assert torch.equal(target["boxes"], torch.tensor([[23.0, 17.0, 62.0, 46.0]]))  # x1 - 1, y1 - 1, x2, y2
    assert target["boxes"].dtype == torch.float32 and target["labels"].dtype == torch.int64
    root = Path(manifest.meta["root"])
    expected = to_tensor(Image.open(root / manifest.table["path"].iloc[1]).convert("RGB"))
    assert torch.equal(image, expected)
    width = image.shape[-1]
    assert width == 64

    flipped, ftarget = data[(1, True)]
    assert torch.equal(flipped, image.flip(-1)) and not torch.equal(flipped, image)
    assert torch.equal(ftarget["boxes"], torch.tensor([[64.0 - 62.0, 17.0, 64.0 - 23.0, 46.0]]))
    assert torch.equal(ftarget["labels"], target["labels"])

    # 000009 (index 2): three non-difficult objects, in the XML's order
    _, target = data[(2, False)]
    assert torch.equal(target["labels"], torch.tensor([13, 15, 7]))
    assert torch.equal(target["boxes"], torch.tensor([[5.0, 9.0, 40.0, 44.0], [41.0, 3.0, 60.0, 40.0],
                                                      [0.0, 35.0, 20.0, 48.0]]))
    _, ftarget = data[(2, True)]
    assert torch.equal(ftarget["boxes"], torch.tensor([[24.0, 9.0, 59.0, 44.0], [4.0, 3.0, 23.0, 40.0],
                                                       [44.0, 35.0, 64.0, 48.0]]))


def test_voc_images_image_with_only_difficult_objects(manifest_dir):
    """A test image whose only car is difficult keeps the other one; the targets have shape [n, 4] even empty."""
    manifest = read_manifest(manifest_dir).split("test")
    data = VOCImages(manifest)
    _, target = data[(3, False)]  # 000004: a difficult car [2, 30, 14, 40] and a car [20, 16, 60, 44]
    assert torch.equal(target["boxes"], torch.tensor([[19.0, 15.0, 60.0, 44.0]]))
    assert torch.equal(target["labels"], torch.tensor([7]))
    data.objects[3] = data.objects[3][:1]  # only the difficult one left
    _, target = data[(3, True)]
    assert target["boxes"].shape == (0, 4) and target["labels"].shape == (0,)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_an_unreadable_image_names_its_file_and_manifest_row(tmp_path, damage):
    """As the retrieval reader (tests/test_images.py): the file and its manifest.csv line are named, the other
    images still read."""
    manifest_dir = voc07_manifest(tmp_path)  # a copy of its own: an image is damaged
    test = read_manifest(manifest_dir).split("test")  # the manifest's rows: 6 train, then 4 test
    path = Path(test.meta["root"]) / test.table["path"].iat[2]
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"not a JPEG")
    images = VOCImages(test)
    with pytest.raises(ImageReadError) as err:
        images[(2, False)]
    assert f"cannot read image {path} (line 10 of {manifest_dir / 'manifest.csv'} (split 'test', index 2))" \
        in str(err.value)
    images[(1, False)]


# -------------------------------------------------------------------------------- shuffle sampler


def shuffle(n, batch_size, drop_last=False, seed=0):
    return build_sampler({"name": "shuffle", "batch_size": batch_size, "drop_last": drop_last},
                         np.zeros(n, dtype=np.int64), seed=seed)


def test_shuffle_sampler_each_index_once():
    sampler = shuffle(10, 4, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert [len(b) for b in batches] == [4, 4, 2] and len(sampler) == 3
        assert sorted(i for b in batches for i in b) == list(range(10))
        assert all(isinstance(i, int) for b in batches for i in b)


def test_shuffle_sampler_is_fixed_by_seed_and_epoch():
    def batches(seed, epoch):
        sampler = shuffle(30, 4, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert batches(1, 2) == batches(1, 2)
    assert batches(1, 2) != batches(1, 3)
    assert batches(1, 2) != batches(2, 2)
    assert [i for b in batches(1, 0) for i in b] != list(range(30))  # shuffled


def test_shuffle_sampler_drop_last():
    sampler = shuffle(10, 4, drop_last=True)
    batches = list(sampler)
    assert [len(b) for b in batches] == [4, 4] and len(set(i for b in batches for i in b)) == 8
    assert [len(b) for b in shuffle(8, 4, drop_last=True)] == [4, 4]
    with pytest.raises(ValueError, match="no batch of 4"):
        shuffle(3, 4, drop_last=True)
    with pytest.raises(ValueError):
        shuffle(0, 4)


# -------------------------------------------------------------------------------- train and evaluate


def tiny_run(**changes):
    overrides = {**TINY, **changes}
    return resolve_run("rambo_voc_frcnn_rambo", RAMBO_LOSS, overrides)


@pytest.mark.slow
def test_train_and_evaluate_on_the_replica(manifest_dir, tmp_path):
    run = tiny_run()
    assert run["task"] == "detection" and run["loss"]["classifier"] == "rambo_map"
    model_path = loop.train(run, manifest_dir, tmp_path / "run", device="cpu", run_id="r", progress=False)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert history["epoch"].tolist() == [1, 2] and history["batches"].tolist() == [2, 2]
    assert np.isfinite(history["loss"]).all()
    result = detection.evaluate(run, manifest_dir, model_path, tmp_path / "metrics.json", device="cpu",
                                run_id="r", progress=False)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written == json.loads(json.dumps(result))
    metrics = written["metrics"]
    assert 0.0 <= metrics["AP50"] <= 1.0
    assert {k for k in metrics if k.startswith("AP50/")} == {f"AP50/{c}" for c in CLASSES}
    assert metrics["n_images"] == 4 and written["replica"] is True and written["protocol"] == "voc07"


def tensors_equal(a, b) -> bool:
    """Nested dicts / lists / tensors equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(tensors_equal(x, y) for x, y in zip(a, b))
    return a == b


class Interrupt(Exception):
    pass


@pytest.mark.slow
def test_exact_resume_with_the_rambo_memory(manifest_dir, tmp_path):
    run = tiny_run()
    straight = loop.train(run, manifest_dir, tmp_path / "a", device="cpu", run_id="r", progress=False)

    def stop_after_first(epoch):
        if epoch == 0:
            raise Interrupt

    with pytest.raises(Interrupt):
        loop.train(run, manifest_dir, tmp_path / "b", device="cpu", run_id="r", progress=False,
                        on_epoch_end=stop_after_first)
    assert (tmp_path / "b" / "checkpoint.pt").exists() and not (tmp_path / "b" / "model.pt").exists()
    resumed = loop.train(run, manifest_dir, tmp_path / "b", device="cpu", run_id="r", progress=False)
    a, b = torch.load(straight, weights_only=False), torch.load(resumed, weights_only=False)
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert a["criterion"] and tensors_equal(a["criterion"], b["criterion"])
    # the memory holds something after training (else the comparison says nothing)
    stored = a["criterion"]["rank_loss._extra_state"]["stored"]
    assert len(stored) == 4 and all(isinstance(t, torch.Tensor) for rows in stored for t in rows)
    history_a = pd.read_csv(tmp_path / "a" / "history.csv")
    history_b = pd.read_csv(tmp_path / "b" / "history.csv")
    assert history_a["loss"].tolist() == history_b["loss"].tolist()


def test_perfect_detector_scores_ap50_one(manifest_dir, tmp_path, monkeypatch):
    run = resolve_run("rambo_voc_frcnn_ce", {"name": "faster_rcnn"}, {**TINY, "epochs": 0})
    model_path = loop.train(run, manifest_dir, tmp_path / "run", device="cpu", run_id="p", progress=False)

    def ground_truth(model, dataset, device, batch_size, num_workers=0, progress=True):
        return [{"boxes": o[:, 1:5], "scores": np.ones(len(o)), "labels": o[:, 0].astype(np.int64)}
                for o in dataset.objects]  # every object, difficult ones too, VOC's convention

    monkeypatch.setattr(detection, "detections", ground_truth)
    metrics = detection.evaluate(run, manifest_dir, model_path, tmp_path / "metrics.json", device="cpu",
                                 progress=False)["metrics"]
    with_gts = {"dog", "train", "sofa", "chair", "person", "car"}  # the replica's test objects
    assert metrics["AP50"] == 1.0
    assert {c: metrics[f"AP50/{c}"] for c in CLASSES} == {c: float(c in with_gts) for c in CLASSES}


def test_evaluate_refuses_a_retrieval_manifest(manifest_dir, tmp_path):
    meta = json.loads((manifest_dir / "meta.json").read_text())
    other = tmp_path / "m"
    other.mkdir()
    (other / "manifest.csv").write_text((manifest_dir / "manifest.csv").read_text())
    (other / "meta.json").write_text(json.dumps({**meta, "protocol": "same-set"}))
    run = tiny_run()
    with pytest.raises(ValueError, match=r"m/meta.json: protocol 'same-set' scores retrieval runs, not detection runs "
                                         r"\(the protocols of detection: voc07\)"):
        detection.evaluate(run, other, tmp_path / "model.pt", tmp_path / "metrics.json", device="cpu")


def test_a_retrieval_run_refuses_the_voc_manifest(manifest_dir, tmp_path):
    from rankrepro.engine.evaluate import evaluate as retrieval_evaluate

    run = resolve_run("suprank_sop", {"name": "smooth_ap"})
    with pytest.raises(ValueError, match=r"protocol 'voc07' scores detection runs, not retrieval runs"):
        retrieval_evaluate(run, manifest_dir, tmp_path / "model.pt", tmp_path / "metrics.json", device="cpu")


def test_the_voc07_protocol_is_registered_and_scores_with_voc_ap(manifest_dir):
    from rankrepro.metrics import protocols

    protocol = protocols.of_manifest(read_manifest(manifest_dir), task="detection")
    parts, inputs = protocol.manifest_inputs(read_manifest(manifest_dir))
    truth = inputs({"test": []})[0][1]
    perfect = [{"boxes": t["boxes"], "scores": np.ones(len(t["boxes"])), "labels": t["labels"]} for t in truth]
    args, kwargs = inputs({"test": perfect})
    metrics = protocol.score(*args, **kwargs)
    assert protocol.name == "voc07" and list(parts) == ["test"] and metrics["AP50"] == 1.0
    assert set(metrics) == {"AP50", *(f"AP50/{c}" for c in CLASSES)}


# -------------------------------------------------------------------------------- planner checks


def test_the_planner_reads_the_detectors_backbones_from_the_task_facts():
    facts = catalog.load()["task"]["detection"]["facts"]
    assert facts["backbones"] == list(MODEL_BACKBONES)  # the catalog is written from the model's own list


def test_a_retrieval_loss_in_a_detection_run_fails():
    with pytest.raises(PlanError, match=r"retrieval loss.*'detection'"):
        resolve_run("rambo_voc_frcnn_ce", {"name": "smooth_ap"}, TINY)


def test_unknown_detector_backbone_fails():
    with pytest.raises(PlanError, match="resnet18.*resnet50, resnet101, resnext101_32x4d"):
        resolve_run("rambo_voc_frcnn_ce", {"name": "faster_rcnn"}, {"model": {"backbone": "resnet18"}})


def test_retrieval_metric_in_a_detection_run_fails():
    with pytest.raises(PlanError, match="R@1.*AP50"):
        resolve_run("rambo_voc_frcnn_ce", {"name": "faster_rcnn"}, {"eval": {"metrics": ["R@1"]}})


def test_face_crop_in_a_detection_run_fails():
    with pytest.raises(PlanError, match="images.face"):
        resolve_run("rambo_voc_frcnn_ce", {"name": "faster_rcnn"},
                    {"images": {"face": {"name": "extend_box", "factor": 0.3}}})


def test_per_task_inside_a_setup_fails():
    setups = load_setups()
    bad = Setup("bad_detection", setups["rambo_voc_frcnn_ce"].file,
                {"extends": "rambo_voc_frcnn_ce", "per_task": {"detection": {"epochs": 1}}})
    planner = Planner(setups={**setups, "bad_detection": bad})
    with pytest.raises(PlanError, match="per_task belongs in the config's run_overrides only"):
        planner.resolve("bad_detection", [("loss", {"loss": {"name": "faster_rcnn"}})])


def test_per_task_overrides_replace_the_general_ones_for_their_task_only():
    overrides = {"epochs": 1, "model": {"backbone": "resnet18"}, "per_task": {"detection": TINY}}
    planner = Planner(overrides)
    run = planner.resolve("rambo_voc_frcnn_rambo", [("loss", {"loss": RAMBO_LOSS})])
    assert run["epochs"] == 2 and run["model"]["backbone"] == "resnet50"  # not the general resnet18 / 1 epoch
    assert run["model"]["min_size"] == 48 and run["sampler"]["batch_size"] == 2 and run["max_batches_per_epoch"] == 2
    assert "per_task" not in run
    retrieval = planner.resolve("rambo_cub", [("loss", {"loss": {"name": "rambo_recall"}})])
    assert retrieval["task"] == "retrieval"
    assert retrieval["epochs"] == 1 and retrieval["model"]["backbone"] == "resnet18"
    assert "per_task" not in retrieval


def test_unknown_task_in_per_task_fails():
    with pytest.raises(PlanError, match="per_task.segmentation: unknown task 'segmentation'.*detection"):
        Planner({"per_task": {"segmentation": {"epochs": 1}}})


# -------------------------------------------------------------------------------- the plan of Tables 5 and 8


@pytest.fixture(scope="module")
def plan():
    return make_plan({"rambo": ["table5", "table8"]})


def test_tables_5_and_8_plan(plan):
    t5, t8 = plan["tables"]["rambo/table5"], plan["tables"]["rambo/table8"]
    assert all(c["pending"] is None for t in (t5, t8) for c in t["cells"])
    assert len(t5["cells"]) == 8 and len(t8["cells"]) == 5
    assert len(set(t5["runs"])) == 24 and len(set(t8["runs"])) == 15
    shared = set(t5["runs"]) & set(t8["runs"])
    assert len(shared) == 6
    cells8 = {c["row"]: c["run_ids"] for c in t8["cells"]}
    assert shared == set(cells8[0]) | set(cells8[3])  # the CE row and the lambda 0.5 + margin row
    cells5 = {(c["row"], c["column"]): c["run_ids"] for c in t5["cells"]}
    assert shared == set(cells5[(0, 0)]) | set(cells5[(0, 1)])  # Table 5's first row (ResNet50, VOC 07)
    runs = plan["runs"]
    assert len(runs) == 24 + 15 - 6
    for (row, column), ids in cells5.items():
        for rid in ids:
            run = runs[rid]
            assert run["task"] == "detection" and run["eval"]["metrics"] == ["AP50"]
            assert run["optimizer"]["groups"]["net"]["lr"] == (0.005 if column == 0 else 0.1)  # CE: 0.01 x 8/16 (mmdet's guide)
            assert run["loss"]["classifier"] == ("cross_entropy" if column == 0 else "rambo_map")
            assert run["grad_clip"] == 35 and run["epochs"] == 12
            assert run["schedule"]["milestones"] == [9] and run["schedule"]["gamma"] == 0.1
            assert run["sampler"] == {"name": "shuffle", "batch_size": 8, "drop_last": False}
        assert sorted(runs[rid]["seed"] for rid in ids) == [0, 1, 2]
    datasets_by_row = {row: runs[ids[0]]["dataset"] for (row, _), ids in cells5.items()}
    assert datasets_by_row == {0: "voc07", 1: "voc0712", 2: "voc0712", 3: "voc0712"}
    backbones = {row: runs[ids[0]]["model"]["backbone"] for (row, _), ids in cells5.items()}
    assert backbones == {0: "resnet50", 1: "resnet50", 2: "resnet101", 3: "resnext101_32x4d"}
    for row, ids in cells8.items():
        for rid in ids:
            assert runs[rid]["optimizer"]["groups"]["net"]["lr"] == (0.005 if row == 0 else 0.1)
            assert runs[rid]["dataset"] == "voc07" and runs[rid]["model"]["backbone"] == "resnet50"
