"""The face protocols ``face`` (VGGFace2 test) and ``ijbc`` (IJB-C): full-list AP per instance
against scikit-learn, hand-computed cases (AP values, IJB-C video averaging, the >= 5 instance
filter applied after the averaging), chunked == unchunked, the manifest's ``instance`` column and
evaluate() end to end on tiny synthetic manifests."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from rankrepro.data.manifest import Manifest, read_manifest, write_manifest
from rankrepro.engine import evaluate as evaluate_module
from rankrepro.engine.evaluate import evaluate
from rankrepro.metrics import compute
from rankrepro.metrics.protocols import DEFAULT_METRICS, average_templates, face_map, get, of_manifest
from rankrepro.plan.planner import resolve_run


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def at_angles(degrees) -> np.ndarray:
    """Unit vectors of the plane at these angles: scores order the points by angular distance."""
    a = np.radians(np.asarray(degrees, np.float64))
    return np.stack([np.cos(a), np.sin(a)], 1).astype(np.float32)


# -- the metric ----------------------------------------------------------------------------------

def test_default_metrics_are_map_only():
    assert DEFAULT_METRICS["face"] == DEFAULT_METRICS["ijbc"] == ("mAP",)
    rng = np.random.default_rng(0)
    x, y = unit(rng, 30, 4), np.repeat(np.arange(5), 6)
    assert set(compute(x, y, protocol="face")) == {"mAP", "n_queries", "n_lone", "n_instances"}


def test_hand_computed_ap_per_query():
    """Points at 0, 10, 25, 45 degrees, identities a, b, a, b. Ranked lists (nearest first):
    0: 10b 25a 45b -> AP 1/2; 10: 0a 25a 45b -> 1/3; 25: 10b 45b 0a -> 1/3; 45: 25a 10b 0a -> 1/2."""
    res = face_map(at_angles([0, 10, 25, 45]), np.array([0, 1, 0, 1]), per_query=True)
    np.testing.assert_allclose(res["per_query"]["mAP"], [1 / 2, 1 / 3, 1 / 3, 1 / 2], rtol=0, atol=1e-12)
    assert res["mAP"] == pytest.approx(5 / 12, abs=1e-12) and res["n_instances"] == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ap_per_query_matches_scikit_learn(seed):
    """50 random points of 6 identities, scores ties-free (checked): each query's AP over all the other
    points is scikit-learn's average_precision_score, the mAP their mean (over every instance)."""
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = 50
    x, y = unit(rng, n, 8), rng.integers(0, 6, n)
    assert all(np.bincount(y)[y] >= 2)  # every query has a positive
    s = x.astype(np.float64) @ x.T.astype(np.float64)
    res = face_map(x, y, per_query=True)
    expected = []
    for i in range(n):
        others = np.arange(n) != i
        assert np.diff(np.sort(s[i, others])).min() > 1e-6  # ties-free, also in float32 (ulp 1.2e-7)
        expected.append(metrics.average_precision_score(y[others] == y[i], s[i, others]))
    np.testing.assert_allclose(res["per_query"]["mAP"], expected, rtol=0, atol=1e-6)
    assert res["mAP"] == pytest.approx(np.mean(expected), abs=1e-6)
    assert res["n_instances"] == res["n_queries"] == n
    assert compute(x, y, protocol="face")["mAP"] == res["mAP"]


def test_ijbc_video_averaged_and_filter_after_averaging():
    """Subject 1: 4 stills at 0, 10, 20, 30 degrees and a video of 2 frames at 35 and 45 (one
    instance at 40): 5 instances, kept. Subject 2: 3 stills at 5, 15, 25 and a video of 3 frames
    (3 images, one instance at 35): 6 images but 4 instances, dropped. Subject 3: 5 stills at 100 ...
    140, kept. The kept instances of each subject are nearer each other than any other: mAP 1;
    subject 2 kept (no filter, or frames counted as instances) would interleave with subject 1."""
    frames = at_angles([0, 10, 20, 30, 35, 45,  5, 15, 25, 30, 35, 40,  100, 110, 120, 130, 140])
    ident = np.array([1] * 6 + [2] * 6 + [3] * 5)
    templates = np.array(["1_0", "1_1", "1_2", "1_3", "1_v", "1_v", "2_0", "2_1", "2_2", "2_v", "2_v", "2_v",
                          "3_0", "3_1", "3_2", "3_3", "3_4"])
    emb, lab, ids = average_templates(frames, ident, templates)
    assert list(ids) == sorted(set(templates)) and len(ids) == 14
    np.testing.assert_allclose(emb[list(ids).index("1_v")], at_angles([40])[0], atol=1e-6)
    np.testing.assert_allclose(emb[list(ids).index("2_v")], at_angles([35])[0], atol=1e-6)
    assert lab[list(ids).index("2_v")] == 2 and np.bincount(lab).tolist() == [0, 5, 4, 5]

    res = compute(frames, ident, protocol="ijbc", templates=templates)
    assert res["mAP"] == 1.0 and res["n_instances"] == res["n_queries"] == 10
    assert face_map(frames, ident, templates=templates)["mAP"] < 1.0  # no filter: subject 2 interleaves
    assert face_map(frames, ident, templates=np.arange(17), min_instances=5)["mAP"] < 1.0  # frames as instances
    with pytest.raises(ValueError, match="needs templates="):
        compute(frames, ident, protocol="ijbc")
    with pytest.raises(ValueError, match="different identities"):
        average_templates(frames[:2], [0, 1], [7, 7])
    with pytest.raises(ValueError, match="same-set"):
        compute(frames, ident, frames, ident, protocol="face")


def test_averaging_is_in_float64_and_keeps_single_frames():
    rng = np.random.default_rng(3)
    x = unit(rng, 9, 5)
    emb, lab, ids = average_templates(torch.from_numpy(x), np.arange(9) // 3, np.arange(9))
    np.testing.assert_allclose(emb, x, atol=1e-7)  # a still image: its own normalised embedding
    emb, lab, ids = average_templates(x, np.arange(9) // 3, np.arange(9) // 3)
    mean = x.astype(np.float64).reshape(3, 3, 5).mean(1)
    np.testing.assert_allclose(emb, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-7)
    assert lab.tolist() == [0, 1, 2] and emb.dtype == np.float32


@pytest.mark.parametrize("protocol", ["face", "ijbc"])
def test_chunked_equals_unchunked_exactly(protocol):
    """Embeddings whose scores are exact in float32 whatever the BLAS blocking, with many ties:
    one query per chunk, tiny budgets and the default chunks agree exactly; the torch sort path
    (CUDA's) to the last bits of the AP sums. ``face``: integer vectors; ``ijbc``: videos of two
    frames v and 3 v, v with four entries +-1/2 (unit norm), so that each averaged instance is v
    exactly and scores are multiples of 1/4."""
    rng = np.random.default_rng(4)
    n = 240
    y = rng.integers(0, 12, n // 2).repeat(2)
    if protocol == "face":
        x, kw = rng.integers(-3, 4, (n, 6)).astype(np.float32), {}
    else:
        v = np.zeros((n // 2, 8), np.float32)
        for row in v:
            row[rng.choice(8, 4, replace=False)] = rng.choice([-0.5, 0.5], 4)
        x = (v[:, None, :] * np.array([1, 3], np.float32)[None, :, None]).reshape(n, 8)
        kw = {"templates": np.arange(n) // 2}
    ref = compute(x, y, protocol=protocol, **kw)
    assert 0 < ref["mAP"] < 1
    for chunking in ({"max_rows": 1}, {"max_rows": 7, "memory_budget": 1 << 12}, {"memory_budget": 1 << 40}):
        assert compute(x, y, protocol=protocol, **chunking, **kw) == ref, chunking
    per = face_map(x, y, per_query=True, min_instances=get(protocol).min_instances, **kw)["per_query"]["mAP"]
    torch_path = face_map(x, y, per_query=True, compiled=False, max_rows=5,
                          min_instances=get(protocol).min_instances, **kw)["per_query"]["mAP"]
    np.testing.assert_allclose(per, torch_path, rtol=0, atol=1e-12)  # same ranks, AP summed in another order
    if torch.cuda.is_available():
        assert compute(x, y, protocol=protocol, device="cuda", **kw)["mAP"] == pytest.approx(ref["mAP"], abs=1e-12)


# -- the manifest --------------------------------------------------------------------------------

def manifest(rows, instance=None, **meta) -> Manifest:
    table = pd.DataFrame(rows, columns=["path", "split", "label"])
    if instance is not None:
        table["instance"] = instance
    return Manifest(table, {"dataset": "tiny", "root": "/nowhere", "levels": ["identity"], **meta})


def test_face_reads_the_test_split_each_image_an_instance():
    m = manifest([("t0", "train", 9), ("a", "test", 1), ("b", "test", 2), ("c", "test", 1)], protocol="face")
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["test"] and list(parts["test"].table["path"]) == ["a", "b", "c"]
    emb = np.eye(3, dtype=np.float32)
    (query, labels), kwargs = inputs({"test": emb})
    assert query is emb and labels.tolist() == [1, 2, 1] and kwargs == {}


@pytest.mark.parametrize("protocol", ["face", "ijbc"])
def test_the_instance_column_gives_the_templates(protocol):
    m = manifest([("a", "test", 1), ("b", "test", 1), ("c", "test", 2), ("t", "train", 2)],
                 instance=[10, 10, 11, 12], protocol=protocol)
    (_, labels), kwargs = of_manifest(m).manifest_inputs(m)[1]({"test": np.eye(3, dtype=np.float32)})
    assert labels.tolist() == [1, 1, 2] and kwargs["templates"].tolist() == ["10", "10", "11"]


def test_instance_column_errors_name_the_file_and_line(tmp_path):
    rows = [("a", "test", 1), ("b", "test", 1), ("c", "test", 2)]
    meta = {"dataset": "tiny", "root": str(tmp_path), "levels": ["identity"], "protocol": "ijbc"}
    table = pd.DataFrame(rows, columns=["path", "split", "label"])
    write_manifest(tmp_path / "none", table, meta)
    m = read_manifest(tmp_path / "none")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'none' / 'manifest.csv'}: protocol 'ijbc' needs the column "
                                         r"'instance'"):
        of_manifest(m).manifest_inputs(m)
    meta = {**meta, "extra_columns": ["instance"]}  # the dataset's extra column (meta.json lists it)
    write_manifest(tmp_path / "gap", table.assign(instance=["1_1", None, "2_1"]), meta)
    m = read_manifest(tmp_path / "gap")
    with pytest.raises(ValueError, match=r"line 3 of .*gap/manifest.csv .*: no 'instance' value \(1 row"):
        of_manifest(m).manifest_inputs(m)
    write_manifest(tmp_path / "mixed", table.assign(instance=["v", "w", "v"]), meta)
    m = read_manifest(tmp_path / "mixed")
    with pytest.raises(ValueError, match=r"line 4 of .*: instance 'v' holds identity 2 and identity 1 \(line 2 of"):
        of_manifest(m).manifest_inputs(m)


def test_write_and_read_keep_the_instance_column(tmp_path):
    meta = {"dataset": "tiny", "root": str(tmp_path), "levels": ["identity"], "protocol": "ijbc",
            "extra_columns": ["instance"]}
    table = pd.DataFrame([("a", "test", 1, 7), ("b", "test", 1, 7)], columns=["path", "split", "label", "instance"])
    write_manifest(tmp_path / "m", table.assign(other="dropped"), meta)
    m = read_manifest(tmp_path / "m")
    assert list(m.table.columns) == ["path", "split", "label", "instance"]
    assert m.table["instance"].tolist() == ["7", "7"]  # read as strings


# -- evaluate() end to end -----------------------------------------------------------------------

#: a tiny IJB-C-like test split: (identity, instance, frames); identity 3 has 6 images but 4 instances
IJBC_ROWS = [(1, f"1_{k}", 1) for k in range(5)] + [(2, f"2_{k}", 1) for k in range(4)] + [(2, "2_v", 3)] + \
            [(3, f"3_{k}", 1) for k in range(3)] + [(3, "3_v", 3)]


def write_tiny_manifest(directory, protocol) -> list[str]:
    """A manifest of small random images: ``face``: 3 identities x 4 images; ``ijbc``: :data:`IJBC_ROWS`.
    Returns the test paths."""
    rng = np.random.default_rng(7)
    rows = []
    if protocol == "face":
        rows = [(f"test/n{i}/{k}.png", "test", i, None) for i in range(3) for k in range(4)]
    else:
        for ident, inst, n_frames in IJBC_ROWS:
            rows += [(f"frames/{inst}_{f}.png", "test", ident, inst) for f in range(n_frames)]
    rows.append(("train/x.png", "train", 0, "x"))
    for path, *_ in rows:
        (directory / "images" / path).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(directory / "images" / path)
    table = pd.DataFrame(rows, columns=["path", "split", "label", "instance"])
    if protocol == "face":
        table = table.drop(columns="instance")
    extra = {} if protocol == "face" else {"extra_columns": ["instance"]}
    write_manifest(directory / "manifest", table, {"dataset": f"tiny_{protocol}", "root": str(directory / "images"),
                                                   "levels": ["identity"], "protocol": protocol, "replica": True, **extra})
    return [r[0] for r in rows if r[1] == "test"]


@pytest.fixture(scope="module")
def run_and_model(tmp_path_factory):
    from rankrepro.models import build_model

    overrides = {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
        "epochs": 1, "warmup_epochs": 0, "amp": "none",
    }
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, overrides)
    torch.manual_seed(0)
    model = build_model(run["model"])
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save({"run_id": "t", "model_cfg": run["model"], "state_dict": model.state_dict()}, path)
    return run, path


@pytest.mark.parametrize("protocol", ["face", "ijbc"])
def test_evaluate_end_to_end(protocol, run_and_model, tmp_path, monkeypatch):
    run, model_path = run_and_model
    paths = write_tiny_manifest(tmp_path, protocol)
    calls = []

    def spy(model, dataset, device, amp, **kw):
        emb = real(model, dataset, device, amp, **kw)
        calls.append((list(dataset.manifest.table["path"]), emb))
        return emb

    real = evaluate_module.embed
    monkeypatch.setattr(evaluate_module, "embed", spy)
    run = {**run, "dataset": f"tiny_{protocol}", "eval": {"metrics": []}}  # the protocol's defaults: mAP
    out = tmp_path / "metrics.json"
    result = evaluate(run, tmp_path / "manifest", model_path, out, device="cpu", run_id="r", progress=False)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["protocol"] == protocol and result["splits"] == ["test"] and result["n_images"] == len(paths)
    (embedded, emb), = calls
    assert embedded == paths
    m = result["metrics"]
    assert set(m) == {"mAP", "n_queries", "n_lone", "n_instances"} and 0 < m["mAP"] <= 1
    labels = read_manifest(tmp_path / "manifest").split("test").labels()[:, 0]
    if protocol == "face":
        assert m["n_instances"] == m["n_queries"] == 12
        assert m["mAP"] == compute(emb, labels, metrics=["mAP"])["mAP"]
    else:
        assert m["n_instances"] == m["n_queries"] == 10  # identity 3 (4 instances, 6 images) dropped
        instances = [p.split("/")[1].rsplit("_", 1)[0] for p in paths]
        assert m["mAP"] == compute(emb, labels, protocol="ijbc", templates=instances)["mAP"]
