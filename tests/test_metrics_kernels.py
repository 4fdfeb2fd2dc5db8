"""The CPU rank-counting kernel of rankrepro.metrics.full_list against brute-force counts.

``rank_relevant`` puts the relevant items of each query in ranking order (decreasing score, then
decreasing gallery index) and counts, for each, the row entries above it (and at or above it),
without sorting the row. It is checked on data built to break it: exact ties (small integers),
signed zeros, a value range far below float resolution, one outlier that stretches the buckets,
crowded buckets (many equal values, more than the in-bucket scan handles), the excluded item
(-inf), queries with no relevant item, and three label levels (depth)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import torch

from rankrepro.metrics.full_list import rank_relevant, sort_path
from rankrepro.metrics.inputs import LabelIndex
from rankrepro.metrics.ranking import BIG
from rankrepro.metrics.workers import Workers


def _torch_path(s, index, rows, c_rel):
    """The same tuple from ``sort_path``'s torch code (the CUDA path, run on CPU)."""
    r = sort_path(torch.from_numpy(s), index, rows, c_rel, Workers(compiled=False))
    after = torch.where(r.depth > 0, r.rank_index - r.gt - 1, torch.zeros_like(r.gt))
    return tuple(x.numpy() for x in (r.vals, r.cols, r.depth, r.gt, r.ge, after))


def _rows(kind: str, rng, b: int, m: int) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal((b, m)).astype(np.float32)
    if kind == "integers":  # exact ties everywhere
        return np.round(rng.standard_normal((b, m)) * 2).astype(np.float32)
    if kind == "zeros":  # -0.0 == +0.0 for comparisons; the order must treat them as tied
        s = np.full((b, m), 0.5, np.float32)
        s[:, ::3] = -0.0
        s[:, 1::5] = 0.0
        return s
    if kind == "tiny":  # a range of ~1e-30: the buckets' scale is huge
        return (rng.standard_normal((b, m)) * 1e-30).astype(np.float32)
    if kind == "outlier":  # one value far above the rest
        s = (rng.standard_normal((b, m)) * 0.05).astype(np.float32)
        s[:, 1] = 1.0
        return s
    if kind == "crowded":  # long runs of equal values and near-equal ones in one bucket
        s = rng.standard_normal((b, m)).astype(np.float32)
        s[:, : m // 2] = 0.25
        s[:, m // 2 : m // 2 + 20] = np.nextafter(np.float32(0.25), np.float32(1))
        return s
    raise ValueError(kind)


@pytest.mark.parametrize("path", ["compiled", "torch"])
@pytest.mark.parametrize("kind", ["normal", "integers", "zeros", "tiny", "outlier", "crowded"])
def test_counts_and_order_match_brute_force(kind, path):
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    for trial in range(40):
        m = int(rng.integers(1, 400))
        fine = rng.integers(0, int(rng.integers(1, 12)), m)  # three tree levels over the gallery
        lab = np.stack([fine, fine // 3, fine // 6], 1)
        same_set = bool(rng.integers(0, 2))
        nq = m if same_set else int(rng.integers(1, 6))
        qlab = lab if same_set else np.stack([f := rng.integers(0, 14, nq), f // 3, f // 6], 1)
        excl = np.arange(m) if same_set else np.full(nq, -1)
        index = LabelIndex(qlab, lab, excl)
        rows = rng.permutation(nq)[: int(rng.integers(1, 5))]
        s = _rows(kind, rng, len(rows), m)
        s[excl[rows] >= 0, excl[rows][excl[rows] >= 0]] = -np.inf  # the excluded item
        c_rel = int(rng.integers(0, 3))
        ranks = rank_relevant if path == "compiled" else _torch_path
        vals, cols, depth, gt, ge, after = ranks(s, index, rows, c_rel)
        for r, q in enumerate(rows):
            rel = [j for j in range(m) if lab[j, c_rel] == qlab[q, c_rel] and j != excl[q]]
            k = len(rel)
            # ranking order: decreasing score, then decreasing gallery index; padding after
            want = sorted(rel, key=lambda j: (-float(s[r, j]), -j))
            assert cols[r, :k].tolist() == want, (kind, trial)
            assert np.array_equal(vals[r, :k], s[r, want])
            assert depth[r, :k].tolist() == [1 + int((lab[j, :c_rel] == qlab[q, :c_rel]).sum()) for j in want]
            v = s[r, want]
            assert np.array_equal(gt[r, :k], (s[r][None, :] > v[:, None]).sum(1)), (kind, trial)
            assert np.array_equal(ge[r, :k], (s[r][None, :] >= v[:, None]).sum(1)), (kind, trial)
            # the index tie-break: entries scoring the same with a larger gallery index
            assert after[r, :k].tolist() == [int((s[r, j + 1 :] == s[r, j]).sum()) for j in want], (kind, trial)
            assert np.all(vals[r, k:] == -np.inf) and np.all(cols[r, k:] == m) and np.all(depth[r, k:] == 0)
            assert np.all(gt[r, k:] == BIG) and np.all(ge[r, k:] == BIG)


def test_large_buckets_are_sorted_once():
    # thousands of entries in the relevant items' buckets (scores on a coarse lattice): the
    # in-bucket scan gives way to one sort of the bucket and binary searches; counts stay exact
    rng = np.random.default_rng(3)
    m = 5000
    lab = rng.integers(0, 3, m)
    index = LabelIndex(lab[:, None], lab[:, None], np.arange(m))
    s = (rng.integers(0, 4, (2, m)) / 4).astype(np.float32)
    s[[0, 1], [0, 1]] = -np.inf
    vals, cols, depth, gt, ge, after = rank_relevant(s, index, np.array([0, 1]), 0)
    for r in range(2):
        k = int((depth[r] > 0).sum())
        v = vals[r, :k]
        assert np.array_equal(gt[r, :k], (s[r][None, :] > v[:, None]).sum(1))
        assert np.array_equal(ge[r, :k], (s[r][None, :] >= v[:, None]).sum(1))
        assert after[r, :k].tolist() == [int((s[r, j + 1 :] == s[r, j]).sum()) for j in cols[r, :k]]


@pytest.mark.parametrize("op", ["gt", "eq"])
def test_compiled_count_cmp_equals_numpy(op):
    # the counting path's comparison passes: compiled kernel vs the numpy fallback, whole rows and
    # selected (repeated) rows, on data with exact ties and the excluded item at -inf
    import torch

    from rankrepro.metrics.ranking import count_cmp

    rng = np.random.default_rng(11)
    s = torch.from_numpy(np.round(rng.standard_normal((9, 300)) * 3).astype(np.float32))
    s[:, 5] = -np.inf
    t = s[:, 7].clone()
    rows = torch.tensor([4, 0, 4, 8])
    got = [count_cmp(s, t, op), count_cmp(s, t[:4], op, rows=rows)]
    torch_code = Workers(compiled=False)
    ref = [count_cmp(s, t, op, workers=torch_code), count_cmp(s, t[:4], op, rows=rows, workers=torch_code)]
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    cmp = np.greater if op == "gt" else np.equal
    assert got[0].tolist() == cmp(s.numpy(), t.numpy()[:, None]).sum(1).tolist()


@pytest.mark.parametrize("ties", [None, "index", "pessimistic", "average"])
@pytest.mark.parametrize("tied", [False, True])
def test_compiled_metrics_equal_the_torch_code(ties, tied):
    # the full-list ranks and metrics run as compiled kernels on CPU; with them switched off the
    # torch code (the CUDA path: row sort + searchsorted, tensor metrics) runs instead and is the
    # reference: same values on three-level labels, with and without exact score ties
    from rankrepro.metrics import compute
    from rankrepro.metrics.core import compute_plain

    rng = np.random.default_rng(7 if tied else 8)
    x = rng.standard_normal((150, 5))
    x = np.round(2 * x) if tied else x / np.linalg.norm(x, axis=1, keepdims=True)
    fine = rng.integers(0, 20, 150)
    lab = np.stack([fine, fine // 4, fine // 8], 1)
    names = ["mAP", "mAP_level1", "mAP_level2", "H-AP", "ΣwAP", "ASI", "ASI_level1", "NDCG", "NDCG_level0",
             "NDCG_level2"]
    got = compute(x.astype(np.float32), lab, metrics=names, ties=ties, per_query=True)
    ref = compute_plain(x.astype(np.float32), lab, metrics=names, ties=ties, per_query=True, compiled=False)
    for name in names:
        np.testing.assert_allclose(got["per_query"][name], ref["per_query"][name], rtol=1e-12, atol=1e-12,
                                   err_msg=name)
        assert np.isfinite(got[name])


@pytest.mark.parametrize("op", ["gt", "eq"])
def test_blocked_layout_equals_contiguous(op):
    # the counting path keeps a chunk's scores as column blocks laid one after the other; the
    # kernels that read them in place must agree with the same scores in one [b, m] array
    from rankrepro.metrics.chunks import BlockScores
    from rankrepro.metrics.ranking import count_cmp

    rng = np.random.default_rng(7)
    b, m, bc = 9, 1000, 96  # last block narrower
    s = np.round(rng.standard_normal((b, m)) * 3).astype(np.float32)  # exact ties
    flat = np.concatenate([s[:, c0 : c0 + bc].ravel() for c0 in range(0, m, bc)])
    blocks = BlockScores([torch.from_numpy(s[:, c0 : c0 + bc].copy()) for c0 in range(0, m, bc)],
                         torch.from_numpy(flat), bc)
    assert blocks.compiled()
    rows = torch.tensor([4, 0, 8, 4])
    t = torch.from_numpy(s[rows.numpy(), rng.integers(0, m, 4)])
    want = (s[rows.numpy()] > t.numpy()[:, None]) if op == "gt" else (s[rows.numpy()] == t.numpy()[:, None])
    assert count_cmp(blocks, t, op, rows=rows).tolist() == want.sum(1).tolist()
    fine = rng.integers(0, 7, m)
    lab = np.stack([fine, fine // 3], 1)
    index = LabelIndex(lab[:b], lab, np.arange(b))
    qrows = np.array([3, 1, 5])
    for c_rel in (0, 1):
        got = rank_relevant(blocks, index, qrows, c_rel, local=qrows)
        ref = rank_relevant(s[qrows], index, qrows, c_rel)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
