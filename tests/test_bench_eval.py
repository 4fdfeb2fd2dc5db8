"""The full-size evaluation benchmark (rankrepro.bench.eval) at tiny sizes, its label trees, its budget and
extrapolation, and the exact metrics it times: chunked = unchunked with 7 and 3 levels."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from rankrepro.bench import eval as bench
from rankrepro.metrics import compute

INAT, GLD = bench.SIZES
TINY_INAT = replace(INAT, images=1500, queries=1500, dim=8, taxonomy=(300, 120, 40, 15, 6, 3, 2), drawn=100)
TINY_GLD = replace(GLD, images=2000, queries=30, dim=8, taxonomy=(300, 13, 2), drawn=300)


def test_tiny_run_writes_the_table(tmp_path):
    record = bench.run(tmp_path, sizes=(TINY_INAT, TINY_GLD), fractions={"iNat-full": (0.1, 0.2)}, isolate=False)
    text = (tmp_path / "eval.md").read_text()
    assert json.loads((tmp_path / "eval.json").read_text())["rows"] == record["rows"]
    header = next(line for line in text.splitlines() if line.startswith("| size |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "size", "device", "images", "queries (measured)", "levels (classes per level)", "metrics",
        "chunk: budget, score rows, item rows", "wall s, measured", "wall s, all queries", "peak MiB",
        "resident MiB", "load"]
    inat, gld = record["rows"]
    assert (inat["queries"], inat["extrapolated"], len(inat["runs"])) == (300, True, 2)
    assert (gld["queries"], gld["extrapolated"]) == (30, False)
    assert len(inat["classes"]) == 7 and inat["classes"][0] == 100 and len(gld["classes"]) == 3
    assert set(inat["values"]) == set(INAT.metrics) and set(gld["values"]) == set(GLD.metrics)
    for row in (inat, gld):
        assert row["seconds"] > 0 and row["peak_mib"] > 0 and row["score_rows"] >= 1 and row["item_rows"] >= 1
    assert "(extrapolated)" in text and text.count("not measured") == 2  # one GPU row per size


def test_taxonomy_labels_form_a_tree_with_the_drawn_classes():
    labels = bench.taxonomy_labels(TINY_INAT, np.random.default_rng(0))
    assert labels.shape == (1500, 7)
    assert len(np.unique(labels[:, 0])) == 100 and np.bincount(labels[:, 0]).max() > 2 * 1500 / 100  # long tail
    for c in range(6):  # each class has one parent
        assert len({tuple(p) for p in labels[:, c : c + 2].tolist()}) == len(np.unique(labels[:, c]))
    assert all(len(np.unique(labels[:, c])) <= TINY_INAT.taxonomy[c] for c in range(7))


def test_landmark_labels_split_clusters_as_hgldv2():
    size = replace(TINY_GLD, taxonomy=(300, 78, 2))
    labels = bench.landmark_labels(size, np.random.default_rng(1))
    group_of = dict(labels[:, 1:].tolist())
    assert len(group_of) == 78 and sorted(np.bincount(list(group_of.values()))) == [18, 60]
    assert len({tuple(p) for p in labels[:, :2].tolist()}) == 300  # a landmark has one cluster


def test_attach_gives_every_parent_a_child():
    parent = bench.attach(50, 20, np.random.default_rng(2))
    assert sorted(set(parent.tolist())) == list(range(20)) and len(parent) == 50


def test_choose_budget():
    gib = 1 << 30
    assert bench.choose_budget(6 * gib, 24 * gib, "cpu") == gib  # compute's CPU default
    assert bench.choose_budget(6 * gib, 80 * 10**9, "cuda") == 3 * gib  # compute's GPU default
    assert bench.choose_budget(6 * gib, 7 * gib, "cpu") == int(gib / bench.BUDGET_FACTOR["cpu"])
    assert bench.choose_budget(6 * gib, 6 * gib, "cuda") == 64 << 20  # the floor


def test_full_size_extrapolates_the_time_per_query():
    size = replace(TINY_INAT, queries=1000)
    runs = [{"queries": 400, "seconds": 5.0, "cpu_s": 8.0}, {"queries": 100, "seconds": 2.0, "cpu_s": 2.0}]
    row = bench.full_size(size, runs)
    assert row["per_query_s"] == pytest.approx(0.01) and row["full_seconds"] == pytest.approx(11.0)
    assert row["predicted_cpu_s"] == pytest.approx(20.0) and row["extrapolated"]
    assert bench.full_size(size, [{"queries": 1000, "seconds": 3.0}])["full_seconds"] == 3.0
    checked = bench.full_size(size, runs + [{"queries": 1000, "seconds": 12.0, "cpu_s": 21.0}])  # full run too
    assert checked["full_seconds"] == 12.0 and checked["predicted_seconds"] == pytest.approx(11.0)
    assert not checked["extrapolated"]
    with pytest.raises(ValueError, match="two fractions"):
        bench.full_size(size, [{"queries": 10, "seconds": 1.0}])


def _integer_embeddings(n, rng):
    # small integers: exact float32 products, so any chunk shape gives bit-identical scores (and many ties)
    return torch.from_numpy(rng.integers(-2, 3, (n, 6)).astype(np.float32))


def test_chunked_equals_unchunked_with_seven_levels():
    rng = np.random.default_rng(3)
    labels = bench.taxonomy_labels(replace(TINY_INAT, images=400), rng)
    x = _integer_embeddings(400, rng)
    whole = compute(x, labels, metrics=list(INAT.metrics), max_rows=400, memory_budget=1 << 30, per_query=True)
    with bench._ChunkLog() as log:
        small = compute(x, labels, metrics=list(INAT.metrics), max_rows=16, memory_budget=1 << 16, per_query=True)
    assert 1 <= log.rows["scores"] <= 16 and log.rows["items"] <= log.rows["scores"]
    for name in INAT.metrics:
        np.testing.assert_array_equal(small["per_query"][name], whole["per_query"][name], err_msg=name)


def test_chunked_equals_unchunked_for_gldv2():
    rng = np.random.default_rng(4)
    labels = bench.landmark_labels(replace(TINY_GLD, images=600, taxonomy=(120, 13, 2), drawn=120), rng)
    index, queries = _integer_embeddings(600, rng), _integer_embeddings(40, rng)
    gt = [[int(i)] for i in rng.choice(600, 40)]
    kw = dict(protocol="gldv2-suprank", ground_truth=gt, metrics=list(GLD.metrics))
    whole = compute(queries, None, index, labels, max_rows=40, memory_budget=1 << 30, **kw)
    small = compute(queries, None, index, labels, max_rows=3, memory_budget=1 << 14, **kw)
    assert small == whole


def test_gldv2_suprank_does_not_copy_a_fully_labelled_index(monkeypatch):
    from rankrepro.metrics.protocols import gldv2

    seen = {}

    def capture(q, ql, g, gl, **kw):
        seen["g"] = g
        return {}
    monkeypatch.setattr(gldv2, "compute_plain", capture)
    index = torch.randn(50, 4)
    labels = np.stack([np.arange(50) % 10, np.arange(50) % 2], 1)
    gldv2.gldv2_suprank(torch.randn(3, 4), index, labels, [[0], [1], [2]])
    assert seen["g"] is index


def test_embeddings_are_checked_block_by_block(monkeypatch):
    from rankrepro.metrics import inputs

    monkeypatch.setattr(inputs, "FINITE_CHECK_VALUES", 8)  # two rows of 4 per check
    x = torch.zeros(9, 4)
    assert inputs.as_embeddings(x, "query") is not None
    x[8, 3] = float("nan")  # in the last block only
    with pytest.raises(ValueError, match="query contains NaN"):
        inputs.as_embeddings(x, "query")
