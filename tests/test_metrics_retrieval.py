"""Tests for rankrepro.metrics: exact k-NN and PML-compatible retrieval metrics."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from rankrepro.metrics import knn, knn_chunks, retrieval_metrics

knn_mod = importlib.import_module("rankrepro.metrics.knn")  # the name `knn` is the function


def circle(deg):
    a = np.deg2rad(np.asarray(deg, dtype=np.float64))
    return np.stack([np.cos(a), np.sin(a)], 1).astype(np.float32)


def rand_unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ----------------------------------------------------------------- brute force references


def brute_metrics(q, ql, g=None, gl=None, ks=(1, 2, 5)):
    """Metrics straight from the definitions, with a dense argsort (float64)."""
    same = g is None
    if same:
        g, gl = q, ql
    sims = q.astype(np.float64) @ g.astype(np.float64).T
    if same:
        np.fill_diagonal(sims, -np.inf)
    order = np.argsort(-sims, axis=1, kind="stable")
    if same:
        order = order[:, :-1]  # self (-inf) is last
    out = {f"R@{k}": [] for k in ks}
    out["mAP@R"], out["RP"] = [], []
    for n in range(len(q)):
        rel = gl[order[n]] == ql[n]
        R = int((gl == ql[n]).sum()) - (1 if same else 0)
        if R == 0:
            continue
        for k in ks:
            out[f"R@{k}"].append(float(rel[:k].any()))
        prec = np.cumsum(rel) / np.arange(1, len(rel) + 1)
        out["mAP@R"].append(float((prec[:R] * rel[:R]).sum() / R))
        out["RP"].append(float(rel[:R].sum() / R))
    return {k: float(np.mean(v)) for k, v in out.items()}, len(out["RP"])


# --------------------------------------------------------------------------- hand cases


def test_hand_circle_same_set():
    # angles 0,10,30,65,110,180 deg; neighbour orders by angular distance (no ties):
    # p0: p1 p2 p3 p4 p5 -> labels 0 1 0 1 2  (R=2) rel 1 0 1 0 0
    # p1: p0 p2 p3 p4 p5 -> labels 0 1 0 1 2  (R=2) rel 1 0 1 0 0
    # p2: p1 p0 p3 p4 p5 -> labels 0 0 0 1 2  (R=1) rel 0 0 0 1 0
    # p3: p2 p4 p1 p0 p5 -> labels 1 1 0 0 2  (R=2) rel 0 0 1 1 0
    # p4: p3 p5 p2 p1 p0 -> labels 0 2 1 0 0  (R=1) rel 0 0 1 0 0
    # p5: lone (label 2)
    x = circle([0, 10, 30, 65, 110, 180])
    y = np.array([0, 0, 1, 0, 1, 2])
    _, idx = knn(x, 5)
    np.testing.assert_array_equal(idx[:5], [[1, 2, 3, 4, 5], [0, 2, 3, 4, 5], [1, 0, 3, 4, 5],
                                            [2, 4, 1, 0, 5], [3, 5, 2, 1, 0]])
    m = retrieval_metrics(x, y, recall_at=(1, 2, 3, 4))
    assert m["n_queries"] == 5 and m["n_lone"] == 1
    assert m["R@1"] == pytest.approx(2 / 5)
    assert m["R@2"] == pytest.approx(2 / 5)
    assert m["R@3"] == pytest.approx(4 / 5)
    assert m["R@4"] == pytest.approx(1.0)
    assert m["RP"] == pytest.approx((0.5 + 0.5) / 5)
    assert m["mAP@R"] == pytest.approx((0.5 + 0.5) / 5)
    assert all(isinstance(v, float) for k, v in m.items() if k not in ("n_queries", "n_lone"))


def test_hand_query_gallery():
    # gallery at 10(A) 20(B) 30(A) 40(A) 50(B)
    # query 0 deg, A: order 10 20 30 40 50 -> rel 1 0 1 1 0, R=3 (only ranks <= 3 count):
    #   mAP@R = (1 + 2/3)/3 = 5/9, RP = 2/3, R@1 = 1
    # query 47 deg, B: order 50 40 30 20 10 -> rel 1 0 0 1 0, R=2: mAP@R = 1/2, RP = 1/2
    # query 200 deg, C: lone (no C in gallery)
    g = circle([10, 20, 30, 40, 50])
    gl = np.array(["A", "B", "A", "A", "B"])
    q = circle([0, 47, 200])
    ql = np.array(["A", "B", "C"])
    m = retrieval_metrics(q, ql, gallery=g, gallery_labels=gl, recall_at=(1, 2))
    assert m["n_queries"] == 2 and m["n_lone"] == 1
    assert m["R@1"] == pytest.approx(1.0)
    assert m["R@2"] == pytest.approx(1.0)
    assert m["mAP@R"] == pytest.approx((5 / 9 + 0.5) / 2)
    assert m["RP"] == pytest.approx((2 / 3 + 0.5) / 2)


def test_duplicates_self_removed_by_index():
    # x0 and x1 are identical (different labels): whichever comes first in the tie, each
    # must keep its twin and lose only itself. Dropping column 0 would, for one of them,
    # remove the twin and keep the query itself (a fake label-0/label-1 match).
    x = circle([0, 0, 5, 90])
    y = np.array([0, 1, 1, 0])
    _, idx = knn(x, 3)
    for n in range(4):
        assert n not in idx[n]
    assert idx[0, 0] == 1 and idx[1, 0] == 0
    m = retrieval_metrics(x, y, recall_at=(1,))
    # x0: twin x1 (label 1) first -> miss; x1: twin x0 (label 0) first -> miss
    # x2: x0/x1 tie first (labels 0/1): its rank-1 label depends on the tie -> check R@1 sum
    _, i2 = knn(x, 1)
    expect = np.mean([y[i2[n, 0]] == y[n] for n in range(4)])
    assert m["R@1"] == pytest.approx(expect)
    assert y[i2[0, 0]] != y[0] and y[i2[1, 0]] != y[1]


def test_drop_self_absent_drops_last_column():
    ids = np.array([[3, 0, 2], [5, 6, 7]])  # row 0 contains self (0); row 1 lacks self (1)
    sc = np.array([[0.9, 0.8, 0.7], [0.5, 0.4, 0.3]], np.float32)
    s, i = knn_mod._drop_self(sc, ids, start=0)
    np.testing.assert_array_equal(i, [[3, 2], [5, 6]])
    np.testing.assert_allclose(s, [[0.9, 0.7], [0.5, 0.4]])
    # global offset (chunked queries): rows are 10 and 11
    s, i = knn_mod._drop_self(sc, np.array([[10, 4, 2], [11, 11 + 1, 3]]), start=10)
    np.testing.assert_array_equal(i, [[4, 2], [12, 3]])


# ------------------------------------------------------------------------------ knn


def test_knn_matches_brute_force_and_chunking():
    x = rand_unit(257, 12, 0)
    sims = x.astype(np.float64) @ x.T.astype(np.float64)
    np.fill_diagonal(sims, -np.inf)
    expect = np.argsort(-sims, axis=1, kind="stable")[:, :7]
    s, i = knn(x, 7)
    assert s.dtype == np.float32 and i.dtype == np.int64 and i.shape == (257, 7)
    np.testing.assert_array_equal(i, expect)
    np.testing.assert_allclose(s, np.take_along_axis(sims, expect, 1), atol=1e-5)
    # chunked search: self removal uses global indices
    s2, i2 = knn(torch.from_numpy(x), 7, chunk_size=50)
    np.testing.assert_array_equal(i2, expect)
    assert all(n not in i2[n] for n in range(len(x)))
    chunks = list(knn_chunks(x, 7, chunk_size=50))
    assert [c[0] for c in chunks] == list(range(0, 257, 50))
    np.testing.assert_array_equal(np.concatenate([c[2] for c in chunks]), expect)


def test_knn_gallery_mode_and_cap():
    q, g = rand_unit(20, 8, 1), rand_unit(9, 8, 2)
    s, i = knn(q, 50, g)  # capped at the gallery size, no self removal
    assert i.shape == (20, 9)
    expect = np.argsort(-(q.astype(np.float64) @ g.T), axis=1, kind="stable")
    np.testing.assert_array_equal(i, expect)
    s, i = knn(q, 50)  # self mode: capped at N - 1
    assert i.shape == (20, 19)
    _, i = knn(q, 3, exclude_self=False)
    np.testing.assert_array_equal(i[:, 0], np.arange(20))


def test_knn_torch_fallback_matches_faiss(monkeypatch):
    x = rand_unit(300, 16, 3)
    s_f, i_f = knn(x, 10, chunk_size=64)
    monkeypatch.setattr(knn_mod, "faiss", None)
    s_t, i_t = knn(x, 10, chunk_size=64)
    np.testing.assert_array_equal(i_t, i_f)
    np.testing.assert_allclose(s_t, s_f, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_knn_cuda_matches_cpu():
    x = rand_unit(3000, 64, 4)
    s_c, i_c = knn(x, 20)
    s_g, i_g = knn(torch.from_numpy(x).cuda(), 20)
    np.testing.assert_allclose(s_g, s_c, atol=1e-5)
    assert (i_g == i_c).mean() > 0.999
    s_b, i_b = knn(torch.from_numpy(x).cuda(), 2500)  # k > 2048: torch topk fallback
    assert i_b.shape == (3000, 2500)
    assert (i_b[:, :20] == i_c).mean() > 0.999


# --------------------------------------------------------------------- differential


@pytest.mark.parametrize("seed,n,n_classes", [(0, 300, 60), (1, 400, 150), (2, 250, 120), (3, 500, 300)])
def test_matches_pml_accuracy_calculator(seed, n, n_classes):
    faiss = pytest.importorskip("faiss")
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import FaissKNN

    x = rand_unit(n, 16, seed)
    y = np.random.default_rng(seed + 100).integers(0, n_classes, n)
    ac = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        knn_func=FaissKNN(index_init_fn=faiss.IndexFlatIP),
    )
    ref = ac.get_accuracy(torch.from_numpy(x), torch.from_numpy(y))
    ours = retrieval_metrics(x, y)
    counts = np.bincount(y)[y]
    assert ours["n_lone"] == int((counts == 1).sum()) and ours["n_lone"] > 0
    assert ours["R@1"] == pytest.approx(ref["precision_at_1"], abs=1e-6)
    assert ours["RP"] == pytest.approx(ref["r_precision"], abs=1e-6)
    assert ours["mAP@R"] == pytest.approx(ref["mean_average_precision_at_r"], abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_set_vs_brute_force(seed):
    x = rand_unit(310, 10, seed)
    y = np.random.default_rng(seed).integers(0, 40, (310, 2))  # [N, L]: column 0 used
    ref, nq = brute_metrics(x, y[:, 0], ks=(1, 2, 5, 10, 100, 1000))
    ours = retrieval_metrics(torch.from_numpy(x), torch.from_numpy(y), recall_at=(1, 2, 5, 10, 100, 1000),
                             chunk_size=97)
    assert ours["n_queries"] == nq
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, abs=1e-9), k


@pytest.mark.parametrize("seed", [0, 1])
def test_query_gallery_vs_brute_force(seed):
    q, g = rand_unit(150, 10, seed), rand_unit(260, 10, seed + 50)
    rng = np.random.default_rng(seed)
    ql, gl = rng.integers(0, 50, 150), rng.integers(0, 45, 260)  # labels 45..49: lone queries
    ref, nq = brute_metrics(q, ql, g, gl, ks=(1, 2, 5, 10))
    ours = retrieval_metrics(q, ql, gallery=g, gallery_labels=gl, recall_at=(1, 2, 5, 10), chunk_size=64)
    assert ours["n_queries"] == nq and ours["n_lone"] == 150 - nq and nq < 150
    for k, v in ref.items():
        assert ours[k] == pytest.approx(v, abs=1e-9), k


def test_options_and_all_lone():
    x = rand_unit(30, 4, 0)
    m = retrieval_metrics(x, np.arange(30), recall_at=(1,))
    assert m["n_queries"] == 0 and m["n_lone"] == 30 and math.isnan(m["R@1"])
    y = np.arange(30) // 3
    m = retrieval_metrics(x, y, recall_at=(1, 5), map_at_r=False, r_precision=False)
    assert set(m) == {"R@1", "R@5", "n_queries", "n_lone"}
    assert 0.0 <= m["R@1"] <= m["R@5"] <= 1.0
