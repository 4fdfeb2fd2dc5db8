"""Evaluation protocols of rankrepro.metrics.protocols on small synthetic data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rankrepro.metrics import compute
from rankrepro.metrics.protocols import average_templates, face_map, gldv2_official, gldv2_suprank, topk_exact


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_same_set_and_query_gallery_names():
    rng = np.random.default_rng(0)
    x, y = unit(rng, 80, 6), rng.integers(0, 10, 80)
    assert compute(x, y, protocol="same-set") == compute(x, y)
    with pytest.raises(ValueError, match="no gallery"):
        compute(x, y, x, y, protocol="same-set")
    with pytest.raises(ValueError, match="needs a gallery"):
        compute(x, y, protocol="query-gallery")
    qg = compute(x[:30], y[:30], x[30:], y[30:], protocol="query-gallery", metrics=["R@1"])
    assert qg == compute(x[:30], y[:30], x[30:], y[30:], metrics=["R@1"])


def test_vehicleid_all_vs_all_within_each_list():
    rng = np.random.default_rng(1)
    x, y = unit(rng, 120, 6), rng.integers(0, 30, 120)
    subsets = {"small": np.arange(40), "medium": np.arange(80), "large": np.arange(120)}
    res = compute(x, y, protocol="vehicleid", subsets=subsets)
    for name, idx in subsets.items():
        ref = compute(x[idx], y[idx], metrics=["R@1", "R@5"])
        assert res[f"{name}/R@1"] == ref["R@1"] and res[f"{name}/R@5"] == ref["R@5"]
        assert res[f"{name}/n_queries"] == ref["n_queries"]


def test_dyml_benchmarks_exclude_own_image_by_identity():
    rng = np.random.default_rng(2)
    out, manual = {}, {}
    benchmarks = {}
    for level, n_cls in (("fine", 12), ("middle", 5), ("coarse", 2)):
        g, gl = unit(rng, 60, 6), rng.integers(0, n_cls, 60)
        qi = rng.choice(60, 15, replace=False)  # queries are gallery images (SupRank's gallery_distractor)
        benchmarks[level] = dict(query=g[qi], query_labels=gl[qi], gallery=g, gallery_labels=gl,
                                 query_ids=[f"img{i}.jpg" for i in qi], gallery_ids=[f"img{i}.jpg" for i in range(60)])
        manual[level] = compute(g[qi], gl[qi], g, gl, metrics=["mAP", "ASI_level0", "R@1"], exclude=qi)
    out = compute(None, None, protocol="dyml", benchmarks=benchmarks)
    for level in benchmarks:
        for m in ("mAP", "ASI_level0", "R@1"):
            assert out[f"{level}/{m}"] == manual[level][m]
    for m in ("mAP", "ASI_level0", "R@1"):
        assert out[f"overall/{m}"] == pytest.approx(np.mean([manual[lv][m] for lv in benchmarks]))
    # without ids the query's own image stays in its list and is its own best match
    no_ids = {k: {kk: vv for kk, vv in b.items() if not kk.endswith("_ids")} for k, b in benchmarks.items()}
    assert compute(None, None, protocol="dyml", benchmarks=no_ids)["fine/R@1"] == 1.0


def test_dyml_product_levels():
    rng = np.random.default_rng(3)
    x = unit(rng, 90, 6)
    fine = rng.integers(0, 20, 90)
    mid = rng.integers(0, 6, 20)[fine]
    coarse = np.array([0, 0, 1, 1, 2, 2])[mid]
    lab = np.stack([fine, mid, coarse], 1)
    res = compute(x, lab, protocol="dyml")
    for c in range(3):
        ref = compute(x, lab[:, c], metrics=["mAP", "ASI", "R@1"])
        assert res[f"level{c}/mAP"] == pytest.approx(ref["mAP"], abs=1e-12)
        assert res[f"level{c}/ASI_level0"] == pytest.approx(ref["ASI"], abs=1e-12)
        assert res[f"level{c}/R@1"] == pytest.approx(ref["R@1"], abs=1e-12)
    assert res["overall/R@1"] == pytest.approx(np.mean([res[f"level{c}/R@1"] for c in range(3)]))


def test_gldv2_suprank_variant():
    rng = np.random.default_rng(4)
    index = unit(rng, 200, 8)
    land = rng.integers(0, 25, 200)
    cluster = rng.integers(0, 6, 25)[land]
    group = (np.arange(6) % 2)[cluster]
    lab = np.stack([land, cluster, group], 1)
    lab[:10] = -1  # no hierarchy: dropped (remove_nan)
    queries = unit(rng, 30, 8)
    gt = [None] * 30
    for i in range(20):
        gt[i] = rng.choice(200, size=rng.integers(1, 4), replace=False)
    gt[20] = np.array([3, 50])  # first ground-truth image unlabelled: query dropped
    res = compute(queries, None, index, lab, protocol="gldv2-suprank", ground_truth=gt)
    keep_q = [i for i in range(30) if gt[i] is not None and len(gt[i]) and gt[i][0] >= 10]
    ref = compute(queries[keep_q], lab[[gt[i][0] for i in keep_q]], index[10:], lab[10:],
                  metrics=["mAP@100", "H-AP", "ASI", "NDCG"])
    assert res["n_scored"] == len(keep_q)
    for m in ("mAP@100", "H-AP", "ASI", "NDCG"):
        assert res[m] == pytest.approx(ref[m], abs=1e-12)


def test_gldv2_official_hand():
    # index scores for query 0: items 0..5 with scores .9 .8 .7 .6 .5 .4 (k = 3)
    index = np.array([[0.9], [0.8], [0.7], [0.6], [0.5], [0.4]], np.float32)
    queries = np.ones((3, 1), np.float32)
    gt = [np.array([1, 5]), np.array([0, 2, 3, 4]), None]
    res = gldv2_official(queries, index, gt, ["Public", "Private", "Ignored"], k=3, precision_at=(1, 3))
    # Public (q0): top3 = 0 1 2, rel 0 1 0 -> AP@3 = (1/2) / min(2, 3)
    assert res["Public/mAP@3"] == pytest.approx(0.25)
    assert res["Public/P@1"] == 0 and res["Public/P@3"] == pytest.approx(1 / 3)
    # Private (q1): rel 1 0 1 -> (1 + 2/3) / min(4, 3)
    assert res["Private/mAP@3"] == pytest.approx((1 + 2 / 3) / 3)
    assert res["Public/n_queries"] == 1 and res["Private/n_queries"] == 1
    with pytest.raises(ValueError, match="Usage|usage"):
        gldv2_official(queries, index, gt, ["Public", "Test", "Ignored"], k=3)
    with pytest.raises(ValueError, match="ground-truth"):
        gldv2_official(queries, index, [None, None, None], ["Public", "Private", "Ignored"], k=3)


def test_topk_exact_tie_order():
    g = np.array([[1.0], [2.0], [2.0], [0.5], [2.0]], np.float32)
    s, i = topk_exact(np.ones((1, 1), np.float32), g, 2)
    np.testing.assert_array_equal(i[0], [4, 2])  # ties: decreasing index
    s, i = topk_exact(np.ones((1, 1), np.float32), g, 5)
    np.testing.assert_array_equal(i[0], [4, 2, 1, 0, 3])


def test_face_map_and_ijbc_templates():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    x, y = unit(rng, 60, 6), rng.integers(0, 6, 60)
    res = face_map(x, y)
    s = x @ x.T
    ap = [sk.average_precision_score(y[np.arange(60) != i] == y[i], s[i, np.arange(60) != i]) for i in range(60)]
    assert res["mAP"] == pytest.approx(np.mean(ap), abs=1e-6) and res["n_instances"] == 60
    # IJB-C: frames of a video (same template) are averaged; identities with < 5 instances dropped
    ident = np.repeat(np.arange(4), [12, 12, 12, 4])
    templates = np.concatenate([np.repeat(np.arange(6), 2), np.repeat(np.arange(6, 12), 2),
                                np.arange(12, 24), np.arange(24, 28)])  # ids 0, 1: videos of 2 frames
    frames = unit(rng, 40, 6)
    emb, lab, tid = average_templates(frames, ident, templates)
    assert len(tid) == 6 + 6 + 12 + 4 and np.allclose(np.linalg.norm(emb, axis=1), 1)
    mean0 = frames[:2].mean(0)
    np.testing.assert_allclose(emb[0], mean0 / np.linalg.norm(mean0), atol=1e-6)
    res = compute(frames, ident, protocol="ijbc", templates=templates)
    keep = lab != 3  # identity 3 has only 4 instances
    ref = compute(emb[keep], lab[keep], metrics=["mAP"])
    assert res["mAP"] == pytest.approx(ref["mAP"], abs=1e-12) and res["n_instances"] == int(keep.sum())
    with pytest.raises(ValueError, match="templates"):
        compute(frames, ident, protocol="ijbc")
    with pytest.raises(ValueError, match="different identities"):
        average_templates(frames[:2], [0, 1], [7, 7])


def test_torch_inputs_and_retrieval_metrics_compat():
    from rankrepro.metrics import retrieval_metrics

    rng = np.random.default_rng(6)
    x, y = unit(rng, 100, 6), rng.integers(0, 15, 100)
    a = retrieval_metrics(torch.from_numpy(x), torch.from_numpy(y), recall_at=(1, 10))
    b = compute(x, y, metrics=["R@1", "R@10", "mAP@R", "RP"])
    assert a == b


def _protocol_inputs(name, rng):
    """Minimal (args, kwargs) of compute for every protocol name."""
    x, y = unit(rng, 40, 6), rng.integers(0, 5, 40)
    if name == "same-set":
        return (x, y), {}
    if name == "query-gallery":
        return (x[:10], y[:10], x[10:], y[10:]), {}
    if name == "vehicleid":
        return (x, y), {"subsets": {"small": np.arange(20), "large": np.arange(40)}}
    if name == "dyml":
        b = {"fine": dict(query=x[:10], query_labels=y[:10], gallery=x[10:], gallery_labels=y[10:])}
        return (None, None), {"benchmarks": b}
    if name == "voc07":  # one image of class 0: one object found, one missed
        truth = [{"boxes": np.array([[1.0, 1.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]]), "labels": np.array([0, 0]),
                  "difficult": np.array([False, False])}]
        return ([{"boxes": np.array([[1.0, 1.0, 10.0, 10.0]]), "scores": np.array([0.9]), "labels": np.array([0])}],
                truth), {}
    gt = [np.array([i, (i + 1) % 30]) for i in range(10)]
    if name == "gldv2-suprank":
        return (x[30:], None, x[:30], y[:30]), {"ground_truth": gt}
    if name == "gldv2-official":
        return (x[30:], None, x[:30], None), {"ground_truth": gt, "usage": ["Public", "Private"] * 5}
    if name == "face":
        return (x, y), {}
    assert name == "ijbc"
    return (x, np.repeat(np.arange(4), 10)), {"templates": np.arange(40) // 2}


def test_protocol_names_are_exactly_the_manifest_strings():
    from rankrepro.metrics import PROTOCOLS
    from rankrepro.metrics.protocols import run_protocol

    assert PROTOCOLS == ("same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank", "gldv2-official",
                         "face", "ijbc", "voc07")
    for name in PROTOCOLS:
        args, kw = _protocol_inputs(name, np.random.default_rng(7))
        res = compute(*args, protocol=name, **kw)
        assert res and all(isinstance(k, str) for k in res)
        if name == "voc07":  # recall 1/2 at precision 1: six of the eleven recall points
            assert res["AP50"] == pytest.approx(6 / 11) and res["AP50/0"] == res["AP50"]
        assert run_protocol(name, *args, **kw) == res
    args, kw = _protocol_inputs("same-set", np.random.default_rng(7))
    listed = "same-set, query-gallery, vehicleid, dyml, gldv2-suprank, gldv2-official, face, ijbc, voc07"
    for bad in ("same_set", "query_gallery", "Same-Set", "sop", "gldv2", "ijb-c", ""):
        with pytest.raises(ValueError, match=f"unknown protocol {bad!r}; allowed: {listed}"):
            compute(*args, protocol=bad)
        with pytest.raises(ValueError, match=f"unknown protocol {bad!r}; allowed: {listed}"):
            run_protocol(bad, *args)
    with pytest.raises(ValueError, match="needs subsets="):
        compute(*args, protocol="vehicleid")
    with pytest.raises(ValueError, match="exclude= and per_query="):
        compute(*args, protocol="face", per_query=True)
    with pytest.raises(TypeError, match="subsets"):
        compute(*args, protocol="same-set", subsets={})


@pytest.mark.parametrize("name", ["same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank",
                                  "gldv2-official", "face", "ijbc"])
def test_device_reaches_every_protocol(name, monkeypatch):
    """``device`` is where every protocol scores: each embedding conversion is asked for it."""
    from rankrepro.metrics import core, inputs, protocols

    seen = []

    def spy(x, what, device=None):
        seen.append((what, device))
        return inputs.as_embeddings(x, what, device)

    monkeypatch.setattr(core, "as_embeddings", spy)
    monkeypatch.setattr(protocols.gldv2, "as_embeddings", spy)
    args, kw = _protocol_inputs(name, np.random.default_rng(8))
    ref = compute(*args, protocol=name, **kw)
    seen.clear()
    assert compute(*args, protocol=name, device="cpu", **kw) == ref
    assert seen and all(d == "cpu" for what, d in seen if what == "query"), seen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank",
                                  "gldv2-official", "face", "ijbc"])
def test_cuda_device_gives_the_cpu_results(name):
    args, kw = _protocol_inputs(name, np.random.default_rng(9))
    cpu = compute(*args, protocol=name, device="cpu", **kw)
    cuda = compute(*args, protocol=name, device="cuda", **kw)
    assert cuda.keys() == cpu.keys()
    for k in cpu:
        assert cuda[k] == pytest.approx(cpu[k], abs=1e-6), k
