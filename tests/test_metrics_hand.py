"""Hand-computed tiny cases for every metric of rankrepro.metrics (ties included).

Scores are made exact by construction: one query q = [1] against 1-D "embeddings" g_j = [s_j], so
s(q, g_j) = s_j with no rounding; tie cases use equal s_j."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rankrepro.metrics import compute, parse_metric
from rankrepro.metrics.clustering import clustering_f1, dists, nmi

Q = np.ones((1, 1), np.float32)


def one_query(scores, labels, query_label, metrics, **kw):
    g = np.asarray(scores, np.float32)[:, None]
    return compute(Q, np.asarray([query_label]), g, np.asarray(labels), metrics=metrics, **kw)


# ------------------------------------------------------------------ binary, no ties
# scores .9 .8 .7 .6 .5 .4, positives at ranks 1, 3, 6 (R = 3)
S1, Y1 = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [1, 0, 1, 0, 0, 1]
D = lambda n: 1 / math.log2(1 + n)  # noqa: E731  (DCG discount at position n)
BINARY_EXPECTED = {
    "R@1": 1.0,
    "R@2": 1.0,
    "MRR": 1.0,
    "P@2": 1 / 2,
    "P@3": 2 / 3,
    "TR@2": 1 / 2,  # one positive in the top 2, min(R, 2) = 2
    "TR@3": 2 / 3,
    "TR@10": 1.0,  # min(R, 10) = 3
    "mAP@R": (1 / 1 + 2 / 3) / 3,
    "RP": 2 / 3,
    "mAP": (1 / 1 + 2 / 3 + 3 / 6) / 3,
    "mAP@2": (1 / 1) / 2,  # DELF: divided by min(R, 2)
    "mAP@100": (1 + 2 / 3 + 3 / 6) / 3,
    "ASI_level0": (1 / 1 + 1 / 2 + 2 / 3) / 3,
    "NDCG_level0": (D(1) + D(3) + D(6)) / (D(1) + D(2) + D(3)),
}


@pytest.mark.parametrize("name", list(BINARY_EXPECTED))
def test_binary_hand(name):
    res = one_query(S1, Y1, 1, [name])
    assert res[name] == pytest.approx(BINARY_EXPECTED[name], abs=1e-12)
    assert res["n_queries"] == 1 and res["n_lone"] == 0


def test_all_binary_together_and_alias():
    # the same numbers whether the ranked metrics go through the counting or the sort path
    names = list(BINARY_EXPECTED)
    res = one_query(S1, Y1, 1, names + ["AP"])
    for n in names:
        assert res[n] == pytest.approx(BINARY_EXPECTED[n], abs=1e-12), n
    assert res["AP"] == res["mAP"]


def test_lone_query_is_left_out():
    g = np.array([[0.9], [0.5]], np.float32)
    res = compute(np.ones((2, 1), np.float32), np.array([1, 7]), g, np.array([1, 0]), metrics=["R@1", "mAP"])
    assert res["n_queries"] == 1 and res["n_lone"] == 1
    assert res["R@1"] == 1.0 and res["mAP"] == 1.0


# ------------------------------------------------------------------ binary, ties
# scores .9 .7 .7 .7 .5, positives idx 0, 3, 4 (R = 3); the tie group is idx 1, 2, 3
S2, Y2 = [0.9, 0.7, 0.7, 0.7, 0.5], [1, 0, 0, 1, 1]
# "index": decreasing score, then decreasing gallery index -> order 0, 3, 2, 1, 4 (positive idx 3 at rank 2)
# "pessimistic": every tied item counts as before -> idx 3 has rank #{s >= .7} = 4, rank+ 2
TIE_EXPECTED = {
    "index": {"mAP": (1 + 2 / 2 + 3 / 5) / 3, "P@2": 1.0, "mAP@R": (1 + 1) / 3, "RP": 2 / 3, "R@2": 1.0,
              "TR@2": 1.0, "mAP@2": (1 + 1) / 2, "ASI_level0": (1 + 1 + 2 / 3) / 3},
    "pessimistic": {"mAP": (1 + 2 / 4 + 3 / 5) / 3, "P@2": 1 / 2, "mAP@R": 1 / 3, "RP": 1 / 3, "R@2": 1.0,
                    "TR@2": 1 / 2, "mAP@2": 1 / 2, "ASI_level0": (1 + 1 / 2 + 1 / 3) / 3},
}


@pytest.mark.parametrize("ties", ["index", "pessimistic"])
@pytest.mark.parametrize("name", list(TIE_EXPECTED["index"]))
def test_binary_ties_hand(ties, name):
    res = one_query(S2, Y2, 1, [name], ties=ties)
    assert res[name] == pytest.approx(TIE_EXPECTED[ties][name], abs=1e-12)


def test_tie_defaults_and_sklearn_conventions():
    sk = pytest.importorskip("sklearn.metrics")
    res = one_query(S2, Y2, 1, ["mAP", "mAP@R", "NDCG_level0"])
    # defaults: AP pessimistic (= sklearn's thresholds), ranked metrics index, NDCG tie-averaged
    assert res["mAP"] == pytest.approx(sk.average_precision_score(Y2, S2), abs=1e-12)
    assert res["mAP"] == pytest.approx(TIE_EXPECTED["pessimistic"]["mAP"], abs=1e-12)
    assert res["mAP@R"] == pytest.approx(TIE_EXPECTED["index"]["mAP@R"], abs=1e-12)
    avg = (D(2) + D(3) + D(4)) / 3  # idx 3 shares the mean discount of positions 2..4
    assert res["NDCG_level0"] == pytest.approx((D(1) + avg + D(5)) / (D(1) + D(2) + D(3)), abs=1e-12)
    assert res["NDCG_level0"] == pytest.approx(sk.ndcg_score([Y2], [S2]), abs=1e-12)
    idx = one_query(S2, Y2, 1, ["NDCG_level0"], ties="index")["NDCG_level0"]
    assert idx == pytest.approx((D(1) + D(2) + D(5)) / (D(1) + D(2) + D(3)), abs=1e-12)
    pes = one_query(S2, Y2, 1, ["NDCG_level0"], ties="pessimistic")["NDCG_level0"]
    assert pes == pytest.approx((D(1) + D(4) + D(5)) / (D(1) + D(2) + D(3)), abs=1e-12)


def test_tied_negative_before_positive_by_index():
    # two items with equal score: the one with the higher gallery index is ranked first ("index")
    assert one_query([0.5, 0.5], [0, 1], 1, ["R@1"])["R@1"] == 1.0
    assert one_query([0.5, 0.5], [1, 0], 1, ["R@1"])["R@1"] == 0.0
    assert one_query([0.5, 0.5], [1, 0], 1, ["R@1"], ties="pessimistic")["R@1"] == 0.0
    assert one_query([0.5, 0.5], [0, 1], 1, ["R@1"], ties="pessimistic")["R@1"] == 0.0  # rank = #{s >= .5} = 2


# ------------------------------------------------------------------ hierarchical
# query (A, X); gallery by decreasing score: (B,X) (A,X) (C,Y) (A,X) (D,X) -> depths 1 2 0 2 1
G3 = [0.9, 0.8, 0.7, 0.6, 0.5]
L3 = [["B", "X"], ["A", "X"], ["C", "Y"], ["A", "X"], ["D", "X"]]
# pop relevance (alpha 1, L 2, self not counted): rel(depth 2) = 1 / 2, rel(depth 1) = (1/2) / 2
HAP = (0.25 / 1 + (0.5 + 0.25) / 2 + (0.5 + 0.25 + 0.5) / 4 + (0.25 + 3 * 0.25) / 5) / 1.5
ASI = (0 + 1 / 2 + 2 / 3 + 3 / 4) / 4
NDCG = (D(1) + 3 * D(2) + 3 * D(4) + D(5)) / (3 * D(1) + 3 * D(2) + D(3) + D(4))
AP0 = (1 / 2 + 2 / 4) / 2
AP1 = (1 / 1 + 2 / 2 + 3 / 4 + 4 / 5) / 4


def hier(metrics, **kw):
    g = np.asarray(G3, np.float32)[:, None]
    return compute(Q, np.array([["A", "X"]]), g, np.array(L3), metrics=metrics, **kw)


def test_hierarchical_hand():
    res = hier(["H-AP", "ASI", "NDCG", "mAP", "mAP_level1", "ΣwAP", "SwAP", "R@1_level1", "R@1"])
    assert res["H-AP"] == pytest.approx(HAP, abs=1e-12)
    assert res["ASI"] == pytest.approx(ASI, abs=1e-12)
    assert res["NDCG"] == pytest.approx(NDCG, abs=1e-12)
    assert res["mAP"] == pytest.approx(AP0, abs=1e-12)
    assert res["mAP_level1"] == pytest.approx(AP1, abs=1e-12)
    assert res["ΣwAP"] == pytest.approx(0.5 * AP0 + 0.5 * AP1, abs=1e-12) and res["SwAP"] == res["ΣwAP"]
    assert res["R@1_level1"] == 1.0 and res["R@1"] == 0.0


def test_hap_options_hand():
    # the query itself in the gallery (index 5, excluded from its list): SupRank's code counts it in
    # |Ω(2)| (default when an item is excluded) -> rel(depth 2) = 1 / 3; the paper text does not
    r2, r1 = 1 / 3, 0.25
    expect = (r1 / 1 + (r2 + r1) / 2 + (r2 + r1 + r2) / 4 + 4 * r1 / 5) / (2 * r1 + 2 * r2)
    g = np.asarray(G3 + [1.0], np.float32)[:, None]
    lab = np.array(L3 + [["A", "X"]])
    with_self = compute(Q, np.array([["A", "X"]]), g, lab, metrics=["H-AP", "mAP"], exclude=[5])
    assert with_self["H-AP"] == pytest.approx(expect, abs=1e-12)
    assert with_self["mAP"] == pytest.approx(AP0, abs=1e-12)  # the excluded item is not listed
    paper = compute(Q, np.array([["A", "X"]]), g, lab, metrics=["H-AP"], exclude=[5], hap_count_self=False)
    assert paper["H-AP"] == pytest.approx(HAP, abs=1e-12)
    # alpha = 2: level weights (l/2)^2 -> rel(depth 1) = (1/4) / 2
    r2, r1 = 0.5, 0.125
    expect = (r1 / 1 + (r2 + r1) / 2 + (r2 + r1 + r2) / 4 + 4 * r1 / 5) / (2 * r1 + 2 * r2)
    assert hier(["H-AP"], alpha=2.0)["H-AP"] == pytest.approx(expect, abs=1e-12)
    # Property 1 relevance with weights (w_level0, w_level1) = (.5, .5) gives ΣwAP
    assert hier(["H-AP"], hap_relevance="property1")["H-AP"] == pytest.approx(0.5 * AP0 + 0.5 * AP1, abs=1e-12)
    w = (0.8, 0.2)
    res = hier(["H-AP", "ΣwAP"], hap_relevance="property1", sigma_w=w)
    assert res["H-AP"] == pytest.approx(0.8 * AP0 + 0.2 * AP1, abs=1e-12)
    assert res["ΣwAP"] == pytest.approx(0.8 * AP0 + 0.2 * AP1, abs=1e-12)


def test_hap_single_level_is_ap():
    for ties in ("index", "pessimistic"):
        res = one_query(S2, Y2, 1, ["H-AP", "mAP", "ASI", "ASI_level0", "NDCG", "NDCG_level0"], ties=ties)
        assert res["H-AP"] == pytest.approx(res["mAP"], abs=1e-12)
        assert res["ASI"] == pytest.approx(res["ASI_level0"], abs=1e-12)
        assert res["NDCG"] == pytest.approx(res["NDCG_level0"], abs=1e-12)


# ------------------------------------------------------------------ clustering and dists


def test_clustering_hand():
    assert nmi([0, 0, 1, 1], [5, 5, 3, 3]) == pytest.approx(1.0)
    # pairs: same class 3 + 1, same cluster 1 + 3, both 1 + 1 -> P = R = 2/4
    assert clustering_f1([0, 0, 0, 1, 1], [0, 0, 1, 1, 1], medoid=False) == pytest.approx(0.5)
    assert clustering_f1([0, 0, 1, 1], [1, 1, 0, 0], medoid=False) == pytest.approx(1.0)
    # medoid labelling merges clusters whose centroids share their nearest point
    x = np.array([[0.0, 0], [0.1, 0], [5, 5], [5.1, 5]], np.float32)
    cent = np.array([[0.02, 0], [0.04, 0], [5.05, 5]], np.float32)  # clusters 0 and 1: same medoid (point 0)
    f1 = clustering_f1([0, 0, 1, 1], [0, 1, 2, 2], x, cent, medoid=True)
    assert f1 == pytest.approx(clustering_f1([0, 0, 1, 1], [0, 0, 2, 2], medoid=False))


def test_dists_hand():
    x = np.array([[1, 0], [0, 1], [1, 0], [1, 0], [0, 1]], np.float32)
    d = dists(x, [0, 0, 1, 1, 2])  # class 2 has one member: no pair, left out of intra
    intra = (1.0 + 0.0) / 2  # class 0: cos 0 -> distance 1; class 1: identical -> 0
    means = np.array([[1, 1], [1, 0], [0, 1]]) / np.array([[2**0.5], [1], [1]])
    cos = means @ means.T
    inter = (1 - cos)[~np.eye(3, dtype=bool)].mean()
    assert d["dists@intra"] == pytest.approx(intra)
    assert d["dists@inter"] == pytest.approx(inter)
    assert d["dists@intra_over_inter"] == pytest.approx(intra / inter)
    res = compute(x, np.array([0, 0, 1, 1, 2]), metrics=["dists@intra", "dists@inter"])
    assert res["dists@intra"] == pytest.approx(intra) and res["dists@inter"] == pytest.approx(inter)


# ------------------------------------------------------------------ names and errors


def test_metric_names():
    assert parse_metric("R@10").kind == "R@k" and parse_metric("R@10").k == 10
    assert parse_metric("mAP@100").kind == "mAP@k" and parse_metric("mAP@R").kind == "mAP@R"
    assert parse_metric("AP_level2").col == 2 and parse_metric("NDCG").family == "hier"
    assert parse_metric("NDCG_level0").family == "full"
    for bad in ("R@0", "recall@1", "H-AP_level1", "mAP@x", "NMI@3"):
        with pytest.raises(ValueError, match="allowed"):
            parse_metric(bad)


def test_errors():
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="ties"):
        compute(x, [0, 0, 1], metrics=["R@1"], ties="optimistic")
    with pytest.raises(ValueError, match="tree"):
        compute(x, np.array([[0, 0], [0, 1], [1, 1]]), metrics=["H-AP"])
    with pytest.raises(ValueError, match="column"):
        compute(x, [0, 0, 1], metrics=["mAP_level1"])
    with pytest.raises(ValueError, match="lengths"):
        compute(x, [0, 0], metrics=["R@1"])
    with pytest.raises(ValueError, match="NaN"):
        compute(np.full((3, 2), np.nan, np.float32), [0, 0, 1], metrics=["R@1"])
    with pytest.raises(ValueError, match="neither"):
        compute(x, [0, 0, 1], gallery=x, metrics=["R@1"])
    with pytest.raises(ValueError, match="protocol"):
        compute(x, [0, 0, 1], metrics=["R@1"], protocol="nope")
    with pytest.raises(ValueError, match="duplicate"):
        compute(x, [0, 0, 1], metrics=["R@1", "R@1"])
