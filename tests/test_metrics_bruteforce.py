"""rankrepro.metrics against straightforward per-query loops written from the definitions.

Random data: unit embeddings (no ties) and small-integer embeddings (exact float scores with many
exact ties), same-set and query-gallery, two- and three-level tree labels, several chunkings."""

from __future__ import annotations

from math import log2

import numpy as np
import pytest
import torch

from rankrepro.metrics import compute, parse_metric
from rankrepro.metrics.core import _ties_for

# ------------------------------------------------------------------ reference implementation


def reference_lists(q, ql, g, gl, excl):
    """Per query: listed gallery indices, scores, depths, and ranks under each convention."""
    s_all = (torch.from_numpy(q) @ torch.from_numpy(g).T).numpy().astype(np.float64)
    out = []
    for i in range(len(q)):
        idx = np.arange(len(g))
        if excl[i] >= 0:
            idx = idx[idx != excl[i]]
        s = s_all[i, idx]
        depth = (gl[idx] == ql[i]).sum(1)
        order = np.lexsort((-idx, -s))  # decreasing score, then decreasing index
        rank_index = np.empty(len(idx), np.int64)
        rank_index[order] = np.arange(1, len(idx) + 1)
        ge = np.array([(s >= v).sum() for v in s])
        gt = np.array([(s > v).sum() for v in s])
        out.append(dict(idx=idx, s=s, depth=depth, index=rank_index, ge=ge, gt=gt))
    return out


def ref_binary(d, lam, kind, k, ties):
    pos = d["depth"] >= lam
    n_pos = int(pos.sum())
    if n_pos == 0:
        return np.nan
    rank = (d["index"] if ties == "index" else d["ge"])[pos]
    ps, pidx = d["s"][pos], d["idx"][pos]
    if ties == "index":
        o = np.lexsort((-pidx, -ps))
        rplus = np.empty(n_pos, np.int64)
        rplus[o] = np.arange(1, n_pos + 1)
    else:
        rplus = np.array([(ps >= v).sum() for v in ps])
    if kind == "R@k":
        return float((rank <= k).any())
    if kind == "MRR":
        return 1.0 / rank.min()
    if kind == "P@k":
        return (rank <= k).sum() / k
    if kind == "TR@k":
        return (rank <= k).sum() / min(n_pos, k)
    if kind == "RP":
        return (rank <= n_pos).sum() / n_pos
    if kind == "mAP@R":
        return (rplus / rank)[rank <= n_pos].sum() / n_pos
    if kind == "mAP@k":
        return (rplus / rank)[rank <= k].sum() / min(n_pos, k)
    if kind == "mAP":
        return (rplus / rank).sum() / n_pos
    raise AssertionError(kind)


def ref_hap(d, big_l, count_self, ties, alpha=1.0):
    depth, s = d["depth"], d["s"]
    rank = d["index"] if ties == "index" else d["ge"]
    n = np.array([(depth == lv).sum() for lv in range(big_l + 1)], float)
    if count_self:
        n[big_l] += 1
    rel_of = np.array([0.0] + [(lv / big_l) ** alpha / n[lv] if n[lv] else 0.0 for lv in range(1, big_l + 1)])
    rel = rel_of[depth]
    pos = np.flatnonzero(depth > 0)
    if len(pos) == 0:
        return np.nan
    num = 0.0
    for k in pos:  # eq. 18: H-rank+(k) = rel(k) + sum_{j != k} min(rel(k), rel(j)) H(s_j - s_k)
        h = rel[k]
        for j in pos:
            if j != k and ((rank[j] < rank[k]) if ties == "index" else (s[j] >= s[k])):
                h += min(rel[k], rel[j])
        num += h / rank[k]
    return num / rel[pos].sum()


def ref_asi(d, big_l, lam, ties):
    depth = d["depth"] if lam is None else (d["depth"] >= lam).astype(int)
    levels = big_l if lam is None else 1
    rank = d["index"] if ties == "index" else d["ge"]
    n_rel = int((depth > 0).sum())
    if n_rel == 0:
        return np.nan
    sizes = [(depth == lv).sum() for lv in range(levels + 1)]
    total = 0.0
    for m in range(1, n_rel + 1):
        inter, above = 0, 0
        for lv in range(levels, 0, -1):
            inter += min(((depth == lv) & (rank <= m)).sum(), min(max(m - above, 0), sizes[lv]))
            above += sizes[lv]
        total += inter / m
    return total / n_rel


def ref_ndcg(d, lam, ties):
    gain = (2.0 ** d["depth"] - 1) if lam is None else (d["depth"] >= lam).astype(float)
    if gain.sum() == 0:
        return np.nan
    if ties == "average":
        disc = np.array([np.mean([1 / log2(1 + p) for p in range(a + 1, b + 1)]) for a, b in zip(d["gt"], d["ge"])])
    else:
        disc = 1 / np.log2(1 + (d["index"] if ties == "index" else d["ge"]))
    ideal = np.sort(gain)[::-1]
    return (gain * disc).sum() / (ideal / np.log2(2 + np.arange(len(ideal)))).sum()


def reference(names, q, ql, g, gl, excl, ties, count_self):
    lists = reference_lists(q, ql, g, gl, excl)
    big_l = ql.shape[1]
    out = {}
    for name in names:
        sp = parse_metric(name)
        t = _ties_for(sp, ties)
        lam = None if sp.col is None else big_l - sp.col
        if sp.kind == "H-AP":
            vals = [ref_hap(d, big_l, count_self, t) for d in lists]
        elif sp.kind == "ASI":
            vals = [ref_asi(d, big_l, lam, t) for d in lists]
        elif sp.kind == "NDCG":
            vals = [ref_ndcg(d, lam, t) for d in lists]
        else:
            vals = [ref_binary(d, lam, sp.kind, sp.k, t) for d in lists]
        out[name] = np.nanmean(vals) if np.isfinite(vals).any() else np.nan
    return out


# ------------------------------------------------------------------ data


def tree_labels(rng, n, sizes):
    """[n, L] tree labels: sizes = classes per level, finest first."""
    parents = [rng.integers(0, sizes[c + 1], sizes[c]) for c in range(len(sizes) - 1)]
    fine = rng.integers(0, sizes[0], n)
    cols = [fine]
    for p in parents:
        cols.append(p[cols[-1]])
    return np.stack(cols, 1)


def embeddings(rng, n, d, ties):
    x = rng.standard_normal((n, d)).astype(np.float32)
    if ties:  # small integers: inner products are exact, with many exact ties
        return np.round(x * 1.2).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


NAMES = ["R@1", "R@4", "TR@4", "P@3", "mAP@R", "RP", "mAP@5", "MRR", "mAP", "mAP_level1", "R@2_level1",
         "mAP@R_level1", "H-AP", "ASI", "NDCG", "ASI_level0", "NDCG_level1"]
RANKED_ONLY = ["R@1", "R@4", "TR@4", "P@3", "mAP@R", "RP", "mAP@5", "MRR", "R@2_level1", "mAP@R_level1"]


@pytest.mark.parametrize("ties_data", [False, True])
@pytest.mark.parametrize("ties", [None, "index", "pessimistic", "average"])
def test_same_set_matches_reference(ties_data, ties):
    rng = np.random.default_rng(7 + ties_data)
    x = embeddings(rng, 90, 5, ties_data)
    lab = tree_labels(rng, 90, (25, 4))
    excl = np.arange(90)
    ref = reference(NAMES, x, lab, x, lab, excl, ties, count_self=True)
    full = compute(x, lab, metrics=NAMES, ties=ties, max_rows=13)  # sort path
    counted = compute(x, lab, metrics=RANKED_ONLY, ties=ties, max_rows=29)  # counting path
    for name in NAMES:
        assert full[name] == pytest.approx(ref[name], abs=1e-12), name
    for name in RANKED_ONLY:
        assert counted[name] == pytest.approx(ref[name], abs=1e-12), name


@pytest.mark.parametrize("ties_data", [False, True])
def test_query_gallery_three_levels(ties_data):
    rng = np.random.default_rng(11)
    q, g = embeddings(rng, 40, 4, ties_data), embeddings(rng, 110, 4, ties_data)
    lab = tree_labels(rng, 150, (30, 8, 3))
    ql, gl = lab[:40], lab[40:]
    excl = np.full(40, -1)
    names = NAMES + ["mAP_level2", "R@1_level2", "ASI_level2"]
    for ties in (None, "index"):
        ref = reference(names, q, ql, g, gl, excl, ties, count_self=False)
        got = compute(q, ql, g, gl, metrics=names, ties=ties, max_rows=7, memory_budget=1 << 16)
        for name in names:
            assert got[name] == pytest.approx(ref[name], abs=1e-12), name
        assert got["n_queries"] == int(sum((gl[:, 0] == ql[i, 0]).any() for i in range(40)))


def test_exclude_any_item():
    rng = np.random.default_rng(3)
    q, g = embeddings(rng, 20, 4, True), embeddings(rng, 60, 4, True)
    ql, gl = rng.integers(0, 6, (20, 1)), rng.integers(0, 6, (60, 1))
    excl = rng.integers(-1, 60, 20)
    names = ["R@1", "mAP@R", "mAP", "NDCG", "P@5"]
    ref = reference(names, q, ql, g, gl, excl, None, count_self=False)
    got = compute(q, ql, g, gl, metrics=names, exclude=excl, hap_count_self=False)
    for name in names:
        assert got[name] == pytest.approx(ref[name], abs=1e-12), name


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("iters", [2, None])
@pytest.mark.parametrize("tied", [False, True])
def test_counting_path_many_positives(iters, tied, compiled, monkeypatch):
    # clustered embeddings: the positives fill the top of every list, so the counting path needs
    # one pass per positive; past the limit it ranks all of the row's positives at once instead
    # (compiled: the full-list kernel; torch: the row's top-(cutoff + 1) scores, a partial sort);
    # results must not change, with or without exact ties
    from rankrepro.metrics import counting
    from rankrepro.metrics.core import compute_plain

    if iters is not None:
        monkeypatch.setattr(counting, "_COUNT_ITERS", iters)
    rng = np.random.default_rng(5)
    centers = rng.standard_normal((8, 6))
    lab = np.repeat(np.arange(8), 12)
    x = centers[lab] + (0.3 if tied else 0.05) * rng.standard_normal((96, 6))
    if tied:  # small integers: exact scores, many exact ties
        x = np.round(2 * x)
    else:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    x = x.astype(np.float32)
    names = ["mAP@R", "RP", "P@10", "R@1", "mAP@8", "MRR"]
    for ties in (None, "pessimistic"):
        ref = reference(names, x, lab[:, None], x, lab[:, None], np.arange(96), ties, count_self=True)
        got = compute_plain(x, lab, metrics=names, ties=ties, compiled=compiled)
        for name in names:
            assert got[name] == pytest.approx(ref[name], abs=1e-12), name
    assert got["mAP@R"] > 0.5


def test_chunking_and_budget_do_not_change_results():
    # integer embeddings: the BLAS gives bit-identical scores whatever the chunk shape (with general
    # floats the last bits of a score may depend on the chunk shape, as with any BLAS search)
    rng = np.random.default_rng(2)
    x = embeddings(rng, 300, 8, True)
    lab = tree_labels(rng, 300, (60, 5))
    # full-list metrics (sort path) and ranked-list ones alone (counting path); chunks of unequal
    # sizes reuse each worker's score buffers
    for names in (["R@1", "R@10", "mAP@R", "mAP", "H-AP", "ASI", "NDCG"], ["R@1", "R@10", "mAP@R", "P@5"]):
        base = compute(x, lab, metrics=names, per_query=True)
        for kw in ({"max_rows": 1}, {"max_rows": 37}, {"memory_budget": 1}):
            other = compute(torch.from_numpy(x), torch.from_numpy(lab), metrics=names, per_query=True, **kw)
            for name in names:
                np.testing.assert_allclose(other["per_query"][name], base["per_query"][name], rtol=0, atol=1e-15)


def test_label_order_and_dtype_invariance():
    rng = np.random.default_rng(4)
    x = embeddings(rng, 120, 6, False)
    lab = tree_labels(rng, 120, (30, 4))
    names = ["R@1", "mAP@R", "mAP", "H-AP", "NDCG", "ASI"]
    a = compute(x, lab, metrics=names)
    relabel = np.stack([np.array([f"c{v * 7 % 31}" for v in lab[:, 0]]), 100 - lab[:, 1]], 1)
    b = compute(x.astype(np.float64), relabel, metrics=names)
    for name in names:
        assert a[name] == pytest.approx(b[name], abs=1e-12), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(0)
    x = embeddings(rng, 3000, 32, False)
    lab = tree_labels(rng, 3000, (400, 10))
    names = ["R@1", "R@10", "R@100", "mAP@R", "RP", "mAP", "H-AP", "ASI", "NDCG", "mAP_level1"]
    cpu = compute(x, lab, metrics=names)
    gpu = compute(torch.from_numpy(x).cuda(), lab, metrics=names)
    for name in names:  # scores differ in the last float bits between CPU and GPU products
        assert gpu[name] == pytest.approx(cpu[name], abs=2e-4), name
    xi = embeddings(rng, 500, 6, True)  # integer embeddings: identical scores on both devices
    li = tree_labels(rng, 500, (60, 6))
    cpu = compute(xi, li, metrics=names)
    gpu = compute(torch.from_numpy(xi).cuda(), li, metrics=names)
    for name in names:
        assert gpu[name] == pytest.approx(cpu[name], abs=1e-12), name
