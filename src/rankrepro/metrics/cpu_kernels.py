"""Compiled (numba) CPU kernels: the full-list ranks of :func:`rankrepro.metrics.ranking.sort_path`
(``pack_keys``/``unpack_keys`` behind ``order_relevant``, ``grid_counts`` behind ``ranks_by_grid``)
and the full-list metrics: one pass per query over its relevant items in ranking order, instead of
a few dozen whole-array tensor operations.

The definitions live in :mod:`rankrepro.metrics.hierarchical` and :mod:`rankrepro.metrics.retrieval`,
whose torch code runs on any device and is the reference these kernels are tested against
(``tests/test_metrics_kernels.py``); :func:`applies` tells the torch code to hand CPU work here. Inputs are the arrays of a :class:`rankrepro.metrics.ranking.Ranked` for b queries: ``depth``
[b, P] (0 = padding, always after the relevant items), ``vals`` [b, P] scores in ranking order,
``rank`` [b, P] the rank under the chosen tie convention, ``gt``/``ge`` [b, P], ``n`` [b, C+1] items
per depth. ``pess``: "pessimistic" ties, where the relevant items tied in score count as ranked
at or before each other. ``lam`` > 0: the binary metric whose positives have depth >= lam; 0: the
hierarchical one over all depths.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

__all__ = ["enabled", "set_enabled", "applies", "arrays", "pack_keys", "unpack_keys", "grid_counts", "ap", "hap",
           "asi", "ndcg"]

_ENABLED = True


def enabled() -> bool:
    """Whether CPU metrics use these kernels (tests switch them off to run the torch code)."""
    return _ENABLED


def applies(t: torch.Tensor) -> bool:
    """Whether work on tensor ``t`` goes to these kernels: on CPU, unless switched off."""
    return t.device.type == "cpu" and _ENABLED


def arrays(*tensors: torch.Tensor) -> tuple:
    """C-contiguous numpy views (or copies) of CPU tensors, as the kernels take them."""
    return tuple(np.ascontiguousarray(t.numpy()) for t in tensors)


def set_enabled(flag: bool) -> bool:
    """Switch the kernels on or off; returns the previous setting."""
    global _ENABLED
    prev, _ENABLED = _ENABLED, bool(flag)
    return prev


@numba.njit(nogil=True, cache=True)
def pack_keys(vals, cols, depth, key):  # pragma: no cover - compiled
    """key = (order-preserving uint32 of the float32 score) << 32 | gallery index << 4 | depth, or 0
    for padding (sorts first). -0.0 and +0.0 get the same key (they compare equal)."""
    b, p = vals.shape
    bits = vals.view(np.uint32)
    for r in range(b):
        for i in range(p):
            if depth[r, i] == 0:
                key[r, i] = 0
                continue
            u = np.uint64(bits[r, i])
            if u == np.uint64(0x80000000):  # -0.0
                u = np.uint64(0)
            u = (u ^ np.uint64(0xFFFFFFFF)) if u >> np.uint64(31) else (u | np.uint64(0x80000000))
            key[r, i] = (u << np.uint64(32)) | (np.uint64(cols[r, i]) << np.uint64(4)) | np.uint64(depth[r, i])


@numba.njit(nogil=True, cache=True)
def unpack_keys(key, asc_bits, cols_o, depth_o):  # pragma: no cover - compiled
    """From keys sorted increasingly: the scores' bits increasing (padding: -inf, first), and the
    columns and depths in decreasing key order (padding last: column -1, depth 0)."""
    b, p = key.shape
    for r in range(b):
        for i in range(p):
            k = key[r, i]
            j = p - 1 - i
            if k == 0:
                asc_bits[r, i] = np.uint32(0xFF800000)  # -inf
                cols_o[r, j] = -1
                depth_o[r, j] = 0
                continue
            u = np.uint32(k >> np.uint64(32))
            asc_bits[r, i] = (u ^ np.uint32(0x80000000)) if u >> np.uint32(31) else (u ^ np.uint32(0xFFFFFFFF))
            low = np.int64(k & np.uint64(0xFFFFFFFF))
            cols_o[r, j] = low >> 4
            depth_o[r, j] = low & 15


@numba.njit(nogil=True, cache=True)
def grid_counts(s, asc, gt, ge, grid):  # pragma: no cover - compiled
    """Per row: the values (the row's valid ``asc`` entries, increasing) span a range cut into
    ``grid`` cells per value, a few extreme values at each end left to the end cells. The cell of a
    score is a monotone function of it (float32 ``(x - lo) * scale`` clamped, the same for entries
    and values), so an entry lies above every value of the earlier cells and below every value of
    the later ones: one comparison places it in a cell holding at most one value, a binary search
    in a crowded one. ``hist[2i]`` counts the entries with exactly i values below them,
    ``hist[2i + 1]`` those that also equal value i (the first of its run of equal values)."""
    b, m = s.shape
    p = asc.shape[1]
    cell = np.empty(m, np.int32)
    zero = np.float32(0.0)
    for r in range(b):
        n_pad = 0
        while n_pad < p and asc[r, n_pad] == -np.inf:
            n_pad += 1
        k = p - n_pad
        gt[r, :n_pad] = 0
        ge[r, :n_pad] = 0
        if k == 0:
            continue
        v = asc[r, n_pad:]
        trim = k // 256
        lo = v[trim]
        width = np.float64(v[k - 1 - trim]) - np.float64(lo)
        g = grid * k
        scale = np.float32(min(g / width, 1e30)) if width > 0 else np.float32(1.0)
        top = np.float32(g - 1)
        first = np.zeros(g + 2, np.int32)  # first[c]: index of the first value of cell c
        for i in range(k):
            first[np.int32(min(max((v[i] - lo) * scale, zero), top)) + 1] += 1
        for c in range(g):
            first[c + 1] += first[c]
        first[g + 1] = k
        vp = np.empty(k + 1, np.float32)  # the values and a +inf sentinel
        vp[:k] = v
        vp[k] = np.inf
        row = s[r]
        for j in range(m):  # (a loop of its own: vectorised)
            cell[j] = np.int32(min(max((row[j] - lo) * scale, zero), top))
        hist = np.zeros(2 * (k + 1), np.int64)
        for j in range(m):
            x = row[j]
            c = cell[j]
            a = first[c]
            a += vp[a] < x  # values past the cell are above x
            if vp[a] < x:  # a crowded cell: binary search the rest
                e = first[c + 1]
                while a < e:
                    mid = (a + e) >> 1
                    if vp[mid] < x:
                        a = mid + 1
                    else:
                        e = mid
            hist[2 * a + (vp[a] == x)] += 1
        acc = 0
        run = 0
        for i in range(k):
            acc += hist[2 * i] + hist[2 * i + 1]
            if i == 0 or v[i] != v[i - 1]:
                run = i
            gt[r, n_pad + i] = m - acc
            ge[r, n_pad + i] = m - acc + hist[2 * run + 1]


@numba.njit(nogil=True, cache=True)
def _run_end(depth, vals, r, k):  # pragma: no cover - compiled
    """Last index of the run of relevant items tied in score with item k (row r)."""
    j = k
    p = depth.shape[1]
    while j + 1 < p and depth[r, j + 1] > 0 and vals[r, j + 1] == vals[r, k]:
        j += 1
    return j


@numba.njit(nogil=True, cache=True)
def ap(depth, vals, rank, n_pos, lam, pess, out):  # pragma: no cover - compiled
    """Binary AP per row: (1/R) Σ_{depth(k) >= lam} #{positives at or before k} / rank(k)."""
    b, p = depth.shape
    for r in range(b):
        if n_pos[r] == 0:
            out[r] = np.nan
            continue
        s = 0.0
        c = 0
        k = 0
        while k < p and depth[r, k] > 0:
            j = _run_end(depth, vals, r, k) if pess else k
            for i in range(k, j + 1):
                c += depth[r, i] >= lam
            for i in range(k, j + 1):
                if depth[r, i] >= lam:
                    s += c / rank[r, i]
            k = j + 1
        out[r] = s / n_pos[r]


@numba.njit(nogil=True, cache=True)
def hap(depth, vals, rank, rel, pess, out):  # pragma: no cover - compiled
    """H-AP per row (SupRank eq. 19): Σ_k H-rank(k) / rank(k) over Σ_k rel(k), where
    H-rank(k) = Σ_l min(rel(k), rel(l)) · #{depth-l items at or before k}."""
    b, p = depth.shape
    levels = rel.shape[1] - 1
    cnt = np.zeros(levels + 1, np.int64)
    for r in range(b):
        cnt[:] = 0
        num = 0.0
        den = 0.0
        k = 0
        while k < p and depth[r, k] > 0:
            j = _run_end(depth, vals, r, k) if pess else k
            for i in range(k, j + 1):
                cnt[depth[r, i]] += 1
            for i in range(k, j + 1):
                relk = rel[r, depth[r, i]]
                h = 0.0
                for lv in range(1, levels + 1):
                    h += min(relk, rel[r, lv]) * cnt[lv]
                num += h / rank[r, i]
                den += relk
            k = j + 1
        out[r] = num / den if den > 0 else np.nan


@numba.njit(nogil=True, cache=True)
def asi(depth, rank, n, lam, out):  # pragma: no cover - compiled
    """ASI per row: (1/N) Σ_{m=1..N} Σ_l min(#depth-l items in the top m, #in the ideal top m) / m,
    N = number of relevant items (binary at depth >= lam when lam > 0)."""
    b, p = depth.shape
    full = n.shape[1] - 1
    levels = 1 if lam > 0 else full
    for r in range(b):
        per = np.zeros(levels + 1, np.int64)
        if lam > 0:
            for d in range(lam, full + 1):
                per[1] += n[r, d]
        else:
            for d in range(1, full + 1):
                per[d] = n[r, d]
        total = 0
        for lv in range(1, levels + 1):
            total += per[lv]
        if total == 0:
            out[r] = np.nan
            continue
        hist = np.zeros((levels + 1, total + 1), np.int64)
        k = 0
        while k < p and depth[r, k] > 0:
            d = depth[r, k]
            lv = (1 if d >= lam else 0) if lam > 0 else d
            if lv > 0 and rank[r, k] <= total:
                hist[lv, rank[r, k]] += 1
            k += 1
        got = np.zeros(levels + 1, np.int64)
        acc = 0.0
        for m in range(1, total + 1):
            above = 0
            si = 0
            for lv in range(levels, 0, -1):
                got[lv] += hist[lv, m]
                ideal = min(max(m - above, 0), per[lv])
                si += min(got[lv], ideal)
                above += per[lv]
            acc += si / m
        out[r] = acc / total


@numba.njit(nogil=True, cache=True)
def ndcg(depth, gt, ge, rank, n, table, lam, average, out):  # pragma: no cover - compiled
    """NDCG per row over the full list: gains 2^depth − 1 (binary at depth >= lam when lam > 0),
    discount D[i] − D[i−1] with D the cumulative 1/log2(1 + i) ``table``; ``average``: tied items
    share the mean discount of the positions they occupy."""
    b, p = depth.shape
    last = table.shape[0] - 1
    full = n.shape[1] - 1
    for r in range(b):
        dcg = 0.0
        k = 0
        while k < p and depth[r, k] > 0:
            d = depth[r, k]
            gain = (1.0 if d >= lam else 0.0) if lam > 0 else 2.0**d - 1.0
            if gain > 0:
                if average:
                    hi = min(ge[r, k], last)
                    lo = min(gt[r, k], last)
                    disc = (table[hi] - table[lo]) / max(hi - lo, 1)
                else:
                    rk = min(max(rank[r, k], 1), last)
                    disc = table[rk] - table[rk - 1]
                dcg += gain * disc
            k += 1
        idcg = 0.0
        if lam > 0:
            tot = 0
            for d in range(lam, full + 1):
                tot += n[r, d]
            idcg = table[min(tot, last)]
        else:
            start = 0
            for d in range(full, 0, -1):
                stop = start + n[r, d]
                idcg += (2.0**d - 1.0) * (table[min(stop, last)] - table[min(start, last)])
                start = stop
        out[r] = dcg / idcg if idcg > 0 else np.nan
