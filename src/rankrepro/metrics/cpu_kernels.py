"""Compiled (numba) CPU versions of the full-list metrics: one pass per query over its relevant
items in ranking order, instead of a few dozen whole-array tensor operations.

The definitions live in :mod:`rankrepro.metrics.hierarchical` and :mod:`rankrepro.metrics.retrieval`,
whose torch code runs on any device and is the reference these kernels are tested against
(``tests/test_metrics_kernels.py``); :func:`enabled` tells the torch functions to hand CPU work
here. Inputs are the arrays of a :class:`rankrepro.metrics.ranking.Ranked` for b queries: ``depth``
[b, P] (0 = padding, always after the relevant items), ``vals`` [b, P] scores in ranking order,
``rank`` [b, P] the rank under the chosen tie convention, ``gt``/``ge`` [b, P], ``n`` [b, C+1] items
per depth. ``pess``: "pessimistic" ties, where the relevant items tied in score count as ranked
at or before each other. ``lam`` > 0: the binary metric whose positives have depth >= lam; 0: the
hierarchical one over all depths.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["enabled", "set_enabled", "ap", "hap", "asi", "ndcg"]

_ENABLED = True


def enabled() -> bool:
    """Whether CPU metrics use these kernels (tests switch them off to run the torch code)."""
    return _ENABLED


def set_enabled(flag: bool) -> bool:
    """Switch the kernels on or off; returns the previous setting."""
    global _ENABLED
    prev, _ENABLED = _ENABLED, bool(flag)
    return prev


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
