"""Differential tests of rankrepro.metrics against independent libraries.

pytorch-metric-learning's AccuracyCalculator (precision_at_1, r_precision, MAP@R, mAP with
k=None; faiss IndexFlatIP), scikit-learn (average_precision_score, ndcg_score,
normalized_mutual_info_score), plus the H-AP identities of SupRank (one level = AP; Property 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankrepro.metrics import compute
from rankrepro.metrics.clustering import kmeans, nmi

faiss = pytest.importorskip("faiss")
sk = pytest.importorskip("sklearn.metrics")
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator  # noqa: E402
from pytorch_metric_learning.utils.inference import FaissKMeans, FaissKNN  # noqa: E402


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def points_and_scores(seed, n, d, tied):
    """``(rng, x, x @ x.T in float64)``: integer points (many exact score ties) if ``tied``, else
    unit vectors; ``rng`` goes on drawing after ``x``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x = np.round(x).astype(np.float32) if tied else x / np.linalg.norm(x, axis=1, keepdims=True)
    return rng, x, (torch.from_numpy(x) @ torch.from_numpy(x).T).numpy().astype(np.float64)


def pml(x, y, k, gallery=None, gallery_labels=None):
    ac = AccuracyCalculator(include=("precision_at_1", "r_precision", "mean_average_precision_at_r",
                                     "mean_average_precision"), k=k, device=torch.device("cpu"),
                            knn_func=FaissKNN(index_init_fn=faiss.IndexFlatIP))
    if gallery is None:
        return ac.get_accuracy(torch.from_numpy(x), torch.from_numpy(y))
    return ac.get_accuracy(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(gallery),
                           torch.from_numpy(gallery_labels), ref_includes_query=False)


NAMES = ["R@1", "RP", "mAP@R", "mAP"]


def check_pml(ours, ref, map_key="mAP"):
    assert ours["R@1"] == pytest.approx(ref["precision_at_1"], abs=1e-9)
    assert ours["RP"] == pytest.approx(ref["r_precision"], abs=1e-9)
    assert ours["mAP@R"] == pytest.approx(ref["mean_average_precision_at_r"], abs=1e-9)
    if map_key:
        assert ours[map_key] == pytest.approx(ref["mean_average_precision"], abs=1e-9)


@pytest.mark.parametrize("seed,n,n_classes", [(0, 400, 80), (1, 300, 200), (2, 500, 40)])
def test_pml_same_set(seed, n, n_classes):
    rng = np.random.default_rng(seed)
    x, y = unit(rng, n, 16), rng.integers(0, n_classes, n)
    ours = compute(x, y, metrics=NAMES)
    assert ours["n_lone"] == int((np.bincount(y)[y] == 1).sum())
    check_pml(ours, pml(x, y, None))  # k=None: full lists, so PML's mAP is the full-list AP
    check_pml(ours, pml(x, y, "max_bin_count"), map_key=None)


def test_pml_query_gallery():
    rng = np.random.default_rng(3)
    q, g = unit(rng, 150, 12), unit(rng, 400, 12)
    ql, gl = rng.integers(0, 60, 150), rng.integers(0, 55, 400)  # labels 55..59 have no positive
    ours = compute(q, ql, g, gl, metrics=NAMES)
    check_pml(ours, pml(q, ql, None, g, gl))


def test_pml_exact_ties_full_lists():
    # integer embeddings: many exact ties. With k=None faiss lists tied neighbours by decreasing
    # index, which is the "index" convention, so every number must be identical.
    rng = np.random.default_rng(4)
    x = np.round(rng.standard_normal((300, 4)) * 1.2).astype(np.float32)
    y = rng.integers(0, 30, 300)
    ours = compute(x, y, metrics=NAMES, ties="index")
    check_pml(ours, pml(x, y, None))
    pess = compute(x, y, metrics=["mAP"], ties="pessimistic")["mAP"]
    assert pess != pytest.approx(ours["mAP"], abs=1e-6)  # ties do matter on this data


@pytest.mark.parametrize("tied", [False, True])
def test_sklearn_average_precision(tied):
    rng, x, s = points_and_scores(5, 120, 5, tied)
    y = rng.integers(0, 8, 120)
    ref = []
    for i in range(120):
        keep = np.arange(120) != i
        rel = y[keep] == y[i]
        if rel.any():
            ref.append(sk.average_precision_score(rel, s[i, keep]))
    got = compute(x, y, metrics=["mAP"])  # default: pessimistic ties = sklearn's thresholds
    assert got["mAP"] == pytest.approx(np.mean(ref), abs=1e-12)
    assert got["n_queries"] == len(ref)


@pytest.mark.parametrize("tied", [False, True])
def test_sklearn_ndcg(tied):
    rng, x, s = points_and_scores(6, 100, 5, tied)
    fine = rng.integers(0, 20, 100)
    sup = rng.integers(0, 4, 20)[fine]
    lab = np.stack([fine, sup], 1)
    graded, binary = [], []
    for i in range(100):
        keep = np.arange(100) != i
        depth = (lab[keep] == lab[i]).sum(1)
        gains = 2.0**depth - 1  # sklearn's gain is y_true itself
        if gains.any():
            graded.append(sk.ndcg_score(gains[None], s[i, keep][None]))
        if (depth == 2).any():
            binary.append(sk.ndcg_score((depth == 2)[None].astype(float), s[i, keep][None]))
    got = compute(x, lab, metrics=["NDCG", "NDCG_level0"])  # default: tie-averaged, as sklearn
    assert got["NDCG"] == pytest.approx(np.mean(graded), abs=1e-12)
    assert got["NDCG_level0"] == pytest.approx(np.mean(binary), abs=1e-12)


def test_nmi_matches_pml_and_sklearn():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((12, 8))
    y = rng.integers(0, 12, 600)
    x = (centers[y] + 0.6 * rng.standard_normal((600, 8))).astype(np.float32)
    got = compute(x, y, metrics=["NMI"])["NMI"]
    assign, _ = kmeans(x, 12)
    assert got == pytest.approx(sk.normalized_mutual_info_score(y, assign), abs=1e-12)
    assert got == pytest.approx(nmi(y, assign), abs=1e-12)
    ac = AccuracyCalculator(include=("NMI",), device=torch.device("cpu"), kmeans_func=FaissKMeans(niter=20))
    ref = ac.get_accuracy(torch.from_numpy(x), torch.from_numpy(y))["NMI"]
    assert got == pytest.approx(ref, abs=1e-12)
    assert got > 0.5


def test_hap_identities_on_random_data():
    rng = np.random.default_rng(8)
    x = unit(rng, 200, 8)
    fine = np.repeat(np.arange(40), 5)
    sup = rng.integers(0, 5, 40)[fine]
    lab = np.stack([fine, sup], 1)
    # one level: H-AP is the binary AP (any tie convention)
    one = compute(x, fine, metrics=["H-AP", "mAP"], per_query=True)
    np.testing.assert_allclose(one["per_query"]["H-AP"], one["per_query"]["mAP"], rtol=0, atol=1e-12)
    # Property 1: with rel(k) = sum_{p<=l} w_p / |Ω+,p|, H-AP = Σ_p w_p AP^(p), per query
    w = (0.3, 0.7)  # per label column, finest first
    res = compute(x, lab, metrics=["H-AP", "mAP", "mAP_level1", "ΣwAP"], hap_relevance="property1", sigma_w=w,
                  per_query=True)
    per = res["per_query"]
    np.testing.assert_allclose(per["H-AP"], w[0] * per["mAP"] + w[1] * per["mAP_level1"], rtol=0, atol=1e-12)
    assert res["ΣwAP"] == pytest.approx(w[0] * res["mAP"] + w[1] * res["mAP_level1"], abs=1e-12)
    assert res["ΣwAP"] == pytest.approx(res["H-AP"], abs=1e-12)
    # the paper's relevance (eq. 20) is a different weighting
    pop = compute(x, lab, metrics=["H-AP"])["H-AP"]
    assert pop != pytest.approx(res["H-AP"], abs=1e-4)


def test_perfect_and_reversed_rankings():
    # embeddings = one-hot of the class (+ tiny noise): every positive above every negative
    rng = np.random.default_rng(9)
    fine = np.repeat(np.arange(6), 4)
    sup = np.array([0, 0, 1, 1, 2, 2])[fine]
    x = np.zeros((24, 9), np.float32)
    x[np.arange(24), fine] = 1.0
    x[np.arange(24), 6 + sup] = 0.5  # super-class mates above other classes
    x += 1e-3 * rng.standard_normal(x.shape).astype(np.float32)
    lab = np.stack([fine, sup], 1)
    res = compute(x, lab, metrics=["R@1", "mAP@R", "RP", "mAP", "mAP_level1", "H-AP", "ASI", "NDCG", "TR@3"])
    for k in ("R@1", "mAP@R", "RP", "mAP", "mAP_level1", "H-AP", "ASI", "NDCG", "TR@3"):
        assert res[k] == pytest.approx(1.0, abs=1e-12), k
