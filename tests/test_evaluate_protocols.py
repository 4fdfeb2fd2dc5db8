"""evaluate() on the named protocols (vehicleid, dyml, gldv2-suprank): each dataset's replica
manifest built through the real write_replica -> download -> prepare path, an untrained tiny model
saved as train() saves one. Expected inputs (subsets, benchmarks, ground-truth positions) are
rebuilt here from the manifest and the replica's own files, not through evaluate.py."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rankrepro.data import datasets
from rankrepro.data.datasets.gldv2_ground_truth import ground_truth_positions
from rankrepro.data.manifest import read_manifest
from rankrepro.engine import evaluate as evaluate_module
from rankrepro.engine.evaluate import evaluate
from rankrepro.plan.planner import resolve_run
from rankrepro.metrics import compute
from rankrepro.metrics.protocols import run_protocol

NAMES = ("vehicleid", "dyml_vehicle", "dyml_product", "gldv2", "gldv2_hier")
#: the eval.metrics each test run asks for (the protocol's defaults, spelled out)
METRICS = {"vehicleid": ["R@1", "R@5"], "dyml_vehicle": ["mAP", "ASI_level0", "R@1"],
           "dyml_product": ["mAP", "ASI_level0", "R@1"], "gldv2": ["mAP@100", "H-AP", "ASI", "NDCG"],
           "gldv2_hier": ["mAP@100", "H-AP", "ASI", "NDCG"]}
TOP_KEYS = {"run_id", "dataset", "protocol", "splits", "replica", "n_images", "metrics", "seconds", "epoch", "select",
            "best_test"}  # the last three: model selection (rankrepro.record.selection)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    """{dataset name: manifest folder} of every replica."""
    out = {}
    for name in NAMES:
        root = tmp_path_factory.mktemp(name)
        dataset = datasets.load(name)
        dataset.write_replica(root / "replica")
        record = dataset.download(root / "data", replica_dir=root / "replica")
        dataset.prepare(record, root / "manifest", data_root=root / "data", replica=True)
        out[name] = root / "manifest"
    return out


@pytest.fixture(scope="module")
def base_run():
    overrides = {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
        "epochs": 1, "warmup_epochs": 0, "amp": "none",
    }
    return resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, overrides)


@pytest.fixture(scope="module")
def model_path(base_run, tmp_path_factory):
    """An untrained model, saved the way train() saves model.pt."""
    from rankrepro.models import build_model

    torch.manual_seed(0)
    model = build_model(base_run["model"])
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save({"run_id": "t", "model_cfg": base_run["model"], "state_dict": model.state_dict()}, path)
    return path


def run_for(base_run, name, metrics=None):
    return {**base_run, "dataset": name, "eval": {"metrics": list(metrics or METRICS[name])}}


def run_eval(base_run, manifests, model_path, tmp_path, name, metrics=None):
    out = tmp_path / f"{name}.json"
    result = evaluate(run_for(base_run, name, metrics), manifests[name], model_path, out, device="cpu",
                      run_id="r", progress=False)
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))
    return result


# -- what the protocols need, rebuilt by hand from the manifest and the replica files -------------

def vehicleid_reference(manifest, by_path, metrics):
    lists = {"small": "test_800", "medium": "test_1600", "large": "test_2400"}
    embs, labels, subsets, start = [], [], {}, 0
    for subset, split in lists.items():
        rows = manifest.split(split)
        embs.append(np.stack([by_path[p] for p in rows.table["path"]]))
        labels.append(rows.labels())
        subsets[subset] = np.arange(start, start + len(rows.table))
        start += len(rows.table)
    return run_protocol("vehicleid", np.concatenate(embs), np.concatenate(labels), subsets=subsets, metrics=metrics)


def dyml_benchmarks(manifest, by_path):
    out = {}
    for level, column in (("fine", "label"), ("middle", "level_1"), ("coarse", "level_2")):
        q, g = manifest.split(f"query_{level}").table, manifest.split(f"gallery_{level}").table
        out[level] = {"query": np.stack([by_path[p] for p in q["path"]]), "query_labels": q[column].to_numpy(),
                      "gallery": np.stack([by_path[p] for p in g["path"]]), "gallery_labels": g[column].to_numpy(),
                      "query_ids": [Path(p).name for p in q["path"]],
                      "gallery_ids": [Path(p).name for p in g["path"]]}
    return out


def solution_rows(manifest):
    """{test image id: [index image ids]} of the replica's retrieval_solution_v2.1.csv."""
    with open(Path(manifest.meta["root"]) / "ground_truth" / "retrieval_solution_v2.1.csv", newline="") as f:
        return {row["id"]: row["images"].split() for row in csv.DictReader(f)}


def gldv2_inputs(manifest, by_path):
    q, g = manifest.split("query"), manifest.split("gallery")
    solution = solution_rows(manifest)
    stems = [Path(p).stem for p in g.table["path"]]
    gt = [np.array([stems.index(i) for i in solution[Path(p).stem]]) for p in q.table["path"]]
    return (np.stack([by_path[p] for p in q.table["path"]]), q.labels(),
            np.stack([by_path[p] for p in g.table["path"]]), g.labels()), {"ground_truth": gt}


def reference(name, manifest, by_path, metrics):
    if name == "vehicleid":
        return vehicleid_reference(manifest, by_path, metrics)
    if name == "dyml_vehicle":
        return run_protocol("dyml", None, None, benchmarks=dyml_benchmarks(manifest, by_path), metrics=metrics)
    if name == "dyml_product":
        rows = manifest.split("test")
        return run_protocol("dyml", np.stack([by_path[p] for p in rows.table["path"]]), rows.labels(), metrics=metrics)
    args, kw = gldv2_inputs(manifest, by_path)
    return run_protocol("gldv2-suprank", *args, metrics=metrics, **kw)


def expected_keys(name, metrics):
    counts = {"n_queries", "n_lone"}
    if name == "vehicleid":
        return {f"{s}/{m}" for s in ("small", "medium", "large") for m in [*metrics, "n_queries"]}
    if name == "dyml_vehicle":
        levels = ("fine", "middle", "coarse")
        return ({f"{lv}/{m}" for lv in levels for m in [*metrics, *counts]} |
                {f"overall/{m}" for m in metrics})
    if name == "dyml_product":
        return ({f"level{c}/{m}" for c in range(3) for m in metrics} | {"level0/n_queries"} |
                {f"overall/{m}" for m in metrics})
    return {*metrics, *counts, "n_scored"}


class Spy:
    """Wraps evaluate's embed: records every call's paths and embeddings (the real model's)."""

    def __init__(self, fake=None):
        self.calls, self.fake = [], fake

    def __call__(self, model, dataset, device, amp, **kw):
        emb = self.fake(dataset.manifest) if self.fake else self.real(model, dataset, device, amp, **kw)
        self.calls.append((list(dataset.manifest.table["path"]), emb))
        return emb

    real = staticmethod(evaluate_module.embed)

    def by_path(self):
        (paths, emb), = self.calls
        return dict(zip(paths, emb))


def label_embeddings(manifest):
    """One one-hot block per label level, weights 1, 1/2, 1/4 (-1 is a value like any other): items
    agreeing on more levels score higher by at least 1/16, so every retrieval metric is exactly 1.0.
    A last column of distinct values in [0.01, 0.02) breaks the ties between items of the same
    labels (adding under 4e-4 to a score): under the pessimistic convention two tied positives
    would cost ASI. Not normalised: scores are inner products either way."""
    labels = manifest.labels()
    blocks = []
    for c in range(labels.shape[1]):
        codes = np.unique(labels[:, c], return_inverse=True)[1].reshape(-1)
        blocks.append(np.eye(codes.max() + 1)[codes] * 0.5 ** c)
    blocks.append(0.01 * (1 + np.arange(len(labels)) / len(labels))[:, None])
    return np.concatenate(blocks, 1).astype(np.float32)


# -- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_real_model_matches_run_protocol_on_the_same_embeddings(name, base_run, manifests, model_path, tmp_path,
                                                                monkeypatch):
    spy = Spy()
    monkeypatch.setattr(evaluate_module, "embed", spy)
    result = run_eval(base_run, manifests, model_path, tmp_path, name)
    manifest = read_manifest(manifests[name])
    assert set(result) == TOP_KEYS and result["replica"] is True and result["dataset"] == name
    assert result["protocol"] == manifest.meta["protocol"]
    assert set(result["metrics"]) == expected_keys(name, METRICS[name])
    # each distinct image embedded once, in one call
    assert len(spy.calls) == 1
    paths = spy.calls[0][0]
    assert len(paths) == len(set(paths)) == result["n_images"]
    assert set(paths) == set(manifest.table.loc[manifest.table["split"].isin(result["splits"]), "path"])
    ref = reference(name, manifest, spy.by_path(), METRICS[name])
    assert result["metrics"].keys() == ref.keys()
    for k, v in ref.items():
        assert result["metrics"][k] == pytest.approx(v, abs=1e-12), k
    values = [v for k, v in result["metrics"].items() if not k.split("/")[-1].startswith("n_")]
    assert all(0.0 <= v <= 1.0 for v in values)


@pytest.mark.parametrize("name", NAMES)
def test_label_embeddings_score_one(name, base_run, manifests, model_path, tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate_module, "embed", Spy(label_embeddings))
    metrics = run_eval(base_run, manifests, model_path, tmp_path, name)["metrics"]
    for k, v in metrics.items():
        if not k.split("/")[-1].startswith("n_"):
            assert v == pytest.approx(1.0, abs=1e-12), k


def test_vehicleid_subsets_and_shared_images(base_run, manifests, model_path, tmp_path, monkeypatch):
    manifest = read_manifest(manifests["vehicleid"])
    lists = {s: manifest.split(s).table for s in ("test_800", "test_1600", "test_2400")}
    distinct = set().union(*(set(t["path"]) for t in lists.values()))
    assert len(distinct) < sum(len(t) for t in lists.values())  # the replica's lists share images
    spy = Spy()
    monkeypatch.setattr(evaluate_module, "embed", spy)
    result = run_eval(base_run, manifests, model_path, tmp_path, "vehicleid")
    assert result["splits"] == ["test_800", "test_1600", "test_2400"] and result["n_images"] == len(distinct)
    m = result["metrics"]
    for subset, split in (("small", "test_800"), ("medium", "test_1600"), ("large", "test_2400")):
        assert m[f"{subset}/n_queries"] == len(lists[split])  # every replica vehicle has >= 2 images per list
        rows = lists[split]
        emb = np.stack([spy.by_path()[p] for p in rows["path"]])
        assert m[f"{subset}/R@1"] == compute(emb, rows["label"].to_numpy(), metrics=["R@1"])["R@1"]


def test_dyml_removes_each_querys_own_image(base_run, manifests, model_path, tmp_path, monkeypatch):
    """Embeddings that only recognise the image itself (one-hot of its file name in its benchmark):
    were the query's own gallery copy kept, it would be the top-1 of every query (R@1 = 1)."""
    manifest = read_manifest(manifests["dyml_vehicle"])

    def by_image(rows):
        keys = [f"{Path(p).parent.parent.name}/{Path(p).name}" for p in rows.table["path"]]
        codes = np.unique(keys, return_inverse=True)[1].reshape(-1)
        return np.eye(codes.max() + 1, dtype=np.float32)[codes]

    spy = Spy(by_image)
    monkeypatch.setattr(evaluate_module, "embed", spy)
    m = run_eval(base_run, manifests, model_path, tmp_path, "dyml_vehicle", ["R@1", "mAP"])["metrics"]
    assert list(m)[:2] == ["fine/R@1", "fine/mAP"]  # benchmarks in level order, finest first
    bench = dyml_benchmarks(manifest, spy.by_path())
    for level, b in bench.items():
        q, g = manifest.split(f"query_{level}").table, manifest.split(f"gallery_{level}").table
        own = np.array([list(g["path"]).index(p.replace("/query/", "/gallery/")) for p in q["path"]])
        assert (g["path"].to_numpy()[own] != q["path"].to_numpy()).all()  # same file name, other folder
        kept = compute(b["query"], b["query_labels"], b["gallery"], b["gallery_labels"], metrics=["R@1", "mAP"])
        removed = compute(b["query"], b["query_labels"], b["gallery"], b["gallery_labels"], metrics=["R@1", "mAP"],
                          exclude=own)
        assert kept["R@1"] == 1.0 and removed["R@1"] < 1.0
        assert m[f"{level}/R@1"] == removed["R@1"] and m[f"{level}/mAP"] == removed["mAP"]


def test_dyml_product_is_same_set_with_three_levels(base_run, manifests, model_path, tmp_path, monkeypatch):
    spy = Spy()
    monkeypatch.setattr(evaluate_module, "embed", spy)
    result = run_eval(base_run, manifests, model_path, tmp_path, "dyml_product", ["R@1", "mAP"])
    rows = read_manifest(manifests["dyml_product"]).split("test")
    emb = np.stack([spy.by_path()[p] for p in rows.table["path"]])
    assert result["splits"] == ["test"] and rows.labels().shape[1] == 3
    for c in range(3):
        ref = compute(emb, rows.labels()[:, c], metrics=["R@1", "mAP"])
        assert result["metrics"][f"level{c}/R@1"] == pytest.approx(ref["R@1"], abs=1e-12)
        assert result["metrics"][f"level{c}/mAP"] == pytest.approx(ref["mAP"], abs=1e-12)


@pytest.mark.parametrize("name", ["gldv2", "gldv2_hier"])
def test_gldv2_ground_truth_positions(name, manifests):
    manifest = read_manifest(manifests[name])
    q, g = manifest.split("query"), manifest.split("gallery")
    gt = ground_truth_positions(manifest, q, g)
    solution = solution_rows(manifest)
    assert len(gt) == len(q.table) and len(q.table) == sum(v != ["None"] for v in solution.values())
    gallery_paths = list(g.table["path"])
    for i, path in enumerate(q.table["path"]):
        ids = solution[Path(path).stem]
        assert [Path(gallery_paths[j]).stem for j in gt[i]] == ids
        # the query's label is the landmark of its first ground-truth image
        assert g.table["label"].iat[gt[i][0]] == q.table["label"].iat[i]
    # the replica's second scored query: ground truth starts with a 7002 image, then a 501 one
    second = gt[1]
    assert g.table["label"].iat[second[0]] == 7002 and g.table["label"].iat[second[1]] == 501
    first_id = solution[Path(q.table["path"].iat[0]).stem][0]
    assert gt[0][0] == gallery_paths.index(f"index/{first_id[0]}/{first_id[1]}/{first_id[2]}/{first_id}.jpg")


def test_gldv2_hier_drops_the_landmark_without_hierarchy(base_run, manifests, model_path, tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate_module, "embed", Spy(label_embeddings))
    flat = run_eval(base_run, manifests, model_path, tmp_path, "gldv2")["metrics"]
    hier = run_eval(base_run, manifests, model_path, tmp_path, "gldv2_hier")["metrics"]
    # replica: 5 scored queries, one of landmark 88 (no hierarchical label): dropped in H-GLDv2
    assert flat["n_scored"] == 5 and hier["n_scored"] == 4


def test_missing_ground_truth_and_unwired_protocols_fail_clearly(base_run, manifests, model_path, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(manifests["gldv2"], copy)
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "ground_truth": None}))
    with pytest.raises(ValueError, match="ground_truth"):
        evaluate(run_for(base_run, "gldv2"), copy, model_path, tmp_path / "x.json", device="cpu", progress=False)
    (copy / "meta.json").write_text(json.dumps({**meta, "protocol": "gldv2-official"}))
    with pytest.raises(NotImplementedError, match=r"'gldv2-official'.*supported: same-set, query-gallery, vehicleid, "
                                                  r"dyml, gldv2-suprank, face, ijbc"):
        evaluate(run_for(base_run, "gldv2"), copy, model_path, tmp_path / "x.json", device="cpu", progress=False)
    assert not (tmp_path / "x.json").exists()


def test_empty_metric_list_uses_the_protocol_defaults(base_run, manifests, model_path, tmp_path, monkeypatch):
    from rankrepro.metrics.protocols import DEFAULT_METRICS

    monkeypatch.setattr(evaluate_module, "embed", Spy(label_embeddings))
    run = {**base_run, "dataset": "vehicleid", "eval": {"metrics": []}}
    result = evaluate(run, manifests["vehicleid"], model_path, tmp_path / "v.json", device="cpu", progress=False)
    assert set(result["metrics"]) == expected_keys("vehicleid", DEFAULT_METRICS["vehicleid"])
