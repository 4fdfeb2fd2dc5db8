"""The CPU rank-counting kernels of rankrepro.metrics.ranking against brute-force counts.

``ranks_by_grid`` counts, for each relevant value, the row entries above it (and at or above it)
without sorting the row; ``order_relevant`` puts the relevant items in ranking order with one sort
of packed keys. Both are checked on data built to break them: exact ties (small integers), signed
zeros, a value range far below float resolution, one outlier that stretches the grid, crowded
cells (many equal values), padding, and -inf entries (the excluded item)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from rankrepro.metrics.ranking import order_relevant, ranks_by_grid


def _rows(kind: str, rng, b: int, m: int) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal((b, m)).astype(np.float32)
    if kind == "integers":  # exact ties everywhere
        return np.round(rng.standard_normal((b, m)) * 2).astype(np.float32)
    if kind == "zeros":  # -0.0 == +0.0 for comparisons; keys must agree
        s = np.full((b, m), 0.5, np.float32)
        s[:, ::3] = -0.0
        s[:, 1::5] = 0.0
        return s
    if kind == "tiny":  # a range of ~1e-30: the grid's scale is huge
        return (rng.standard_normal((b, m)) * 1e-30).astype(np.float32)
    if kind == "outlier":  # one value far above the rest
        s = (rng.standard_normal((b, m)) * 0.05).astype(np.float32)
        s[:, 1] = 1.0
        return s
    if kind == "crowded":  # long runs of equal values and near-equal ones in one cell
        s = rng.standard_normal((b, m)).astype(np.float32)
        s[:, : m // 2] = 0.25
        s[:, m // 2 : m // 2 + 20] = np.nextafter(np.float32(0.25), np.float32(1))
        return s
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["normal", "integers", "zeros", "tiny", "outlier", "crowded"])
def test_counts_and_order_match_brute_force(kind):
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    for trial in range(40):
        b, m = int(rng.integers(1, 5)), int(rng.integers(1, 400))
        p = int(rng.integers(1, m + 1))
        s = _rows(kind, rng, b, m)
        if m > 2:
            s[:, 0] = -np.inf  # the excluded item
        cols = np.stack([rng.choice(m, p, replace=False) for _ in range(b)])
        depth = rng.integers(0, 3, (b, p))  # 0 = padding
        vals = np.take_along_axis(s, cols, 1)
        depth[~np.isfinite(vals)] = 0
        asc, cols_o, depth_o = order_relevant(vals, cols, depth)
        gt, ge = ranks_by_grid(s, asc)
        for r in range(b):
            keep = depth[r] > 0
            k = int(keep.sum())
            v = np.sort(vals[r][keep])
            assert np.array_equal(asc[r, p - k :], v) and np.all(asc[r, : p - k] == -np.inf)
            assert np.array_equal(gt[r, p - k :], (s[r][None, :] > v[:, None]).sum(1)), (kind, trial)
            assert np.array_equal(ge[r, p - k :], (s[r][None, :] >= v[:, None]).sum(1)), (kind, trial)
            # ranking order: decreasing score, then decreasing gallery index; padding last
            assert np.all(depth_o[r, :k] > 0) and np.all(depth_o[r, k:] == 0)
            sv, cv = s[r][cols_o[r, :k]], cols_o[r, :k]
            assert np.all((sv[:-1] > sv[1:]) | ((sv[:-1] == sv[1:]) & (cv[:-1] > cv[1:])))
            # every item kept its depth
            want = dict(zip(cols[r][keep].tolist(), depth[r][keep].tolist()))
            assert {int(c): int(d) for c, d in zip(cv, depth_o[r, :k])} == want


def test_no_values_and_all_padding():
    s = np.array([[0.1, 0.2, -np.inf]], np.float32)
    gt, ge = ranks_by_grid(s, np.zeros((1, 0), np.float32))
    assert gt.shape == (1, 0) and ge.shape == (1, 0)
    asc, cols, depth = order_relevant(np.array([[0.1, 0.2]], np.float32), np.array([[0, 1]]), np.zeros((1, 2), int))
    assert np.all(asc == -np.inf) and np.all(depth == 0)
    ranks_by_grid(s, asc)  # padding only: no error, counts unused


def test_huge_gallery_index_is_refused():
    with pytest.raises(ValueError, match="2\\^28 items"):
        order_relevant(np.zeros((1, 1), np.float32), np.array([[1 << 28]]), np.ones((1, 1), int))


@pytest.mark.parametrize("ties", [None, "index", "pessimistic", "average"])
@pytest.mark.parametrize("tied", [False, True])
def test_compiled_metrics_equal_the_torch_code(ties, tied):
    # the full-list ranks and metrics run as compiled kernels on CPU; with them switched off the
    # torch code (the CUDA path: row sort + searchsorted, tensor metrics) runs instead and is the
    # reference: same values on three-level labels, with and without exact score ties
    from rankrepro.metrics import compute, cpu_kernels

    rng = np.random.default_rng(7 if tied else 8)
    x = rng.standard_normal((150, 5))
    x = np.round(2 * x) if tied else x / np.linalg.norm(x, axis=1, keepdims=True)
    fine = rng.integers(0, 20, 150)
    lab = np.stack([fine, fine // 4, fine // 8], 1)
    names = ["mAP", "mAP_level1", "mAP_level2", "H-AP", "ΣwAP", "ASI", "ASI_level1", "NDCG", "NDCG_level0",
             "NDCG_level2"]
    got = compute(x.astype(np.float32), lab, metrics=names, ties=ties, per_query=True)
    prev = cpu_kernels.set_enabled(False)
    try:
        ref = compute(x.astype(np.float32), lab, metrics=names, ties=ties, per_query=True)
    finally:
        cpu_kernels.set_enabled(prev)
    for name in names:
        np.testing.assert_allclose(got["per_query"][name], ref["per_query"][name], rtol=1e-12, atol=1e-12,
                                   err_msg=name)
        assert np.isfinite(got[name])
