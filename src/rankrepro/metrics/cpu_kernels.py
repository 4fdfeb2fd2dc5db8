"""Compiled (numba) CPU kernels: the full-list ranks of :func:`rankrepro.metrics.full_list.sort_path`
(``rank_relevant``) and the full-list metrics: one pass per query over its relevant items in
ranking order, instead of a few dozen whole-array tensor operations.

The definitions live in :mod:`rankrepro.metrics.hierarchical` and :mod:`rankrepro.metrics.retrieval`,
whose torch code runs on any device and is the reference these kernels are tested against
(``tests/test_metrics_kernels.py``); :meth:`rankrepro.metrics.workers.Workers.compiled_on` tells the
torch code to hand CPU work here (``Workers(compiled=False)`` switches them off). Inputs are the
arrays of a :class:`rankrepro.metrics.ranking.Ranked` for b queries: ``depth`` [b, P] (0 = padding,
always after the relevant items), ``vals`` [b, P] scores in ranking order, ``rank`` [b, P] the rank
under the chosen tie convention, ``gt``/``ge`` [b, P], ``n`` [b, C+1] items per depth. ``pess``:
"pessimistic" ties, where the relevant items tied in score count as ranked at or before each other.
``lam`` > 0: the binary metric whose positives have depth >= lam; 0: the hierarchical one over all
depths.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

__all__ = ["arrays", "count_cmp", "rank_relevant", "ap", "hap", "asi", "ndcg"]


def arrays(*tensors: torch.Tensor) -> tuple:
    """C-contiguous numpy views (or copies) of CPU tensors, as the kernels take them."""
    return tuple(np.ascontiguousarray(t.numpy()) for t in tensors)


@numba.njit(nogil=True, cache=True, inline="always")
def _seg_count(seg, x, equal):  # pragma: no cover - compiled
    """The entries of ``seg`` that are > x (== x if ``equal``)."""
    n = 0
    if equal:
        for j in range(seg.shape[0]):
            n += seg[j] == x
    else:
        for j in range(seg.shape[0]):
            n += seg[j] > x
    return n


@numba.njit(nogil=True, cache=True)
def count_cmp(s, rows, t, lo, hi, equal, out):  # pragma: no cover - compiled
    """For i in [lo, hi): out[i] = the entries of s[rows[i]] that are > t[i] (== t[i] if ``equal``)."""
    for i in range(lo, hi):
        out[i] = _seg_count(s[rows[i]], t[i], equal)


@numba.njit(nogil=True, cache=True)
def count_cmp_blocked(flat, b, bc, rows, t, lo, hi, equal, out):  # pragma: no cover - compiled
    """:func:`count_cmp` on scores kept as column blocks: ``flat`` holds the [b, w] blocks of
    ``bc`` columns one after the other (block at column c0 starts at ``b * c0``). Block by block,
    so memory is read in order (row by row across the blocks is 2x slower)."""
    m = flat.shape[0] // b
    for i in range(lo, hi):
        out[i] = 0
    for c0 in range(0, m, bc):
        w = min(bc, m - c0)
        for i in range(lo, hi):
            base = b * c0 + rows[i] * w
            out[i] += _seg_count(flat[base : base + w], t[i], equal)


@numba.njit(nogil=True, cache=True)
def _block_row(flat, b, bc, r, out):  # pragma: no cover - compiled
    """Copy row r of the column-blocked scores ``flat`` (see :func:`count_cmp_blocked`) into ``out``."""
    m = out.shape[0]
    for c0 in range(0, m, bc):
        w = min(bc, m - c0)
        base = b * c0 + r * w
        for j in range(w):
            out[c0 + j] = flat[base + j]


@numba.njit(nogil=True, cache=True, inline="always")
def _cell(x, lo, hi, scale, nb):  # pragma: no cover - compiled
    """Bucket of score x: 0 below ``lo``, ``nb + 1`` above ``hi``, 1..nb uniformly in between.
    A monotone function of x (float32 arithmetic), the same for row entries and relevant items."""
    f = min((x - lo) * scale, np.float32(nb - 1))
    c = np.int32(1) + np.int32(max(f, np.float32(0.0)))
    c = np.int32(0) if x < lo else c
    return np.int32(nb + 1) if x > hi else c


@numba.njit(nogil=True, cache=True)
def _gather(row, blk_cols, a, b, ex, gcodes, qcode, rel_v, rel_c, rel_d):  # pragma: no cover - compiled
    """The relevant items blk_cols[a:b] (increasing gallery index) minus ``ex``: scores, columns and
    depths (1 + number of finer label columns shared with the query). Returns their number."""
    c_rel = gcodes.shape[1] - 1
    k = 0
    for pos in range(a, b):
        c = blk_cols[pos]
        if c == ex:
            continue
        d = 1
        for lv in range(c_rel):
            d += gcodes[c, lv] == qcode[lv]
        rel_c[k] = c
        rel_d[k] = d
        rel_v[k] = row[c]
        k += 1
    return k


@numba.njit(nogil=True, cache=True)
def _order_desc(rel_v, k, key, ia, ib, hist):  # pragma: no cover - compiled
    """Permutation of rel_v[:k] by decreasing value, then decreasing position: a stable LSD radix
    sort (3 x 11 bits) of order-preserving uint32 keys, fed in decreasing position order. -0.0 and
    +0.0 get the same key (they compare equal)."""
    bits = rel_v.view(np.uint32)
    for i in range(k):
        u = bits[i]
        if u == np.uint32(0x80000000):
            u = np.uint32(0)
        u = (u ^ np.uint32(0xFFFFFFFF)) if u >> np.uint32(31) else (u | np.uint32(0x80000000))
        key[i] = ~u  # increasing as the score decreases
        ia[i] = k - 1 - i
    src = ia
    dst = ib
    for shift in (0, 11, 22):
        hist[:] = 0
        for t in range(k):
            hist[(key[src[t]] >> np.uint32(shift)) & np.uint32(2047)] += 1
        acc = 0
        for h in range(2048):
            n = hist[h]
            hist[h] = acc
            acc += n
        for t in range(k):
            i = src[t]
            h = (key[i] >> np.uint32(shift)) & np.uint32(2047)
            dst[hist[h]] = i
            hist[h] += 1
        src, dst = dst, src
    return src


@numba.njit(nogil=True, cache=True)
def _bucketize(row, lo, hi, scale, nb, cell, hist, grouped, gidx):  # pragma: no cover - compiled
    """Counting sort of the row's entries by bucket, highest bucket first: afterwards bucket c's
    entries (scores ``grouped``, gallery indices ``gidx``) are at [hist[c + 1], hist[c]) (from 0
    for the top bucket, nb + 1)."""
    m = row.shape[0]
    for j in range(m):  # (a loop of its own: vectorised)
        cell[j] = _cell(row[j], lo, hi, scale, nb)
    hist[:] = 0
    for j in range(m):
        hist[cell[j]] += 1
    acc = 0
    for c in range(nb + 1, -1, -1):
        n = hist[c]
        hist[c] = acc
        acc += n
    for j in range(m):
        c = cell[j]
        grouped[hist[c]] = row[j]
        gidx[hist[c]] = j
        hist[c] += 1


@numba.njit(nogil=True, cache=True)
def _count(vd, cd, k, grouped, gidx, sorted_vals, hist, lo, hi, scale, nb, gt, ge, after, scratch,
           sorted_flag, sorted_list):  # pragma: no cover - compiled
    """For the values vd[:k] (decreasing; columns cd): gt/ge, the entries of the higher buckets plus
    those of the value's own bucket above (at or above) it, compared one by one (a bucket of more
    than 64 entries is sorted once, into ``sorted_vals``, and binary-searched); and ``after``, the
    entries equal to the value with a larger gallery index (0 when untied)."""
    n_sorted = 0
    o = 0
    while o < k:
        v = vd[o]
        c = _cell(v, lo, hi, scale, nb)
        b0 = hist[c + 1] if c <= nb else 0
        b1 = hist[c]
        if b1 - b0 > 64:
            if sorted_flag[c] == 0:
                sorted_vals[b0:b1] = -np.sort(-grouped[b0:b1])  # decreasing
                sorted_flag[c] = 1
                sorted_list[n_sorted] = c
                n_sorted += 1
            a, e = b0, b1
            while a < e:
                mid = (a + e) >> 1
                if sorted_vals[mid] > v:
                    a = mid + 1
                else:
                    e = mid
            g = a
            e = b1
            while a < e:
                mid = (a + e) >> 1
                if sorted_vals[mid] >= v:
                    a = mid + 1
                else:
                    e = mid
            q = a
        else:
            g = b0
            q = 0
            for j in range(b0, b1):
                g += grouped[j] > v
                q += grouped[j] == v
            q += g
        # the run of items tied with this one (consecutive, decreasing column) shares the counts
        o1 = o + 1
        while o1 < k and vd[o1] == v:
            o1 += 1
        for t in range(o, o1):
            gt[t] = g
            ge[t] = q
            after[t] = 0
        if q - g > 1:  # other entries equal v: index tie-break from their sorted gallery indices
            n_eq = 0
            for j in range(b0, b1):
                if grouped[j] == v:
                    scratch[n_eq] = gidx[j]
                    n_eq += 1
            eq = np.sort(scratch[:n_eq])
            for t in range(o, o1):
                after[t] = n_eq - np.searchsorted(eq, cd[t], side="right")
        o = o1
    for t in range(n_sorted):
        sorted_flag[sorted_list[t]] = 0


@numba.njit(nogil=True, cache=True)
def rank_relevant(s, blk_cols, blk_start, blk_stop, gcodes, qcodes, excl, big, vals, cols, depth, gt, ge,
                  after):  # pragma: no cover - compiled
    """For each row r of the scores ``s`` [b, m] (float32): its relevant items
    ``blk_cols[blk_start[r]:blk_stop[r]]`` (increasing gallery index) minus ``excl[r]``, in ranking
    order (decreasing score, then decreasing gallery index), with their scores, columns, depths
    (label columns of ``gcodes`` [m, C] shared with ``qcodes[r]``), ``gt``/``ge`` (the numbers of
    entries of the row scoring > and >= them) and ``after`` (entries scoring the same with a
    larger gallery index). Outputs are [b, P], padded after the items with -inf, m, 0, ``big``,
    ``big``, 0.

    Without sorting the row: the items are sorted (radix), the range of their scores is cut into
    about m/2 buckets (a monotone float32 function of the score), the row's entries are grouped by
    bucket (one counting-sort pass), and each item's counts are the entries of the higher buckets
    plus a few comparisons within its own bucket."""
    w = _work(s.shape[1], vals.shape[1])
    for r in range(s.shape[0]):
        _rank_row(s[r], r, w, blk_cols, blk_start, blk_stop, gcodes, qcodes, excl, big, vals, cols, depth, gt, ge,
                  after)


@numba.njit(nogil=True, cache=True)
def rank_relevant_blocked(flat, b, bc, local, blk_cols, blk_start, blk_stop, gcodes, qcodes, excl, big, vals, cols,
                          depth, gt, ge, after):  # pragma: no cover - compiled
    """:func:`rank_relevant` for the rows ``local`` of column-blocked scores (see
    :func:`count_cmp_blocked`): each row is copied out of its blocks into one buffer, then ranked
    while in cache (output row i is for ``local[i]``; the label arguments are indexed by i)."""
    m = flat.shape[0] // b
    w = _work(m, vals.shape[1])
    row = np.empty(m, np.float32)
    for i in range(local.shape[0]):
        _block_row(flat, b, bc, local[i], row)
        _rank_row(row, i, w, blk_cols, blk_start, blk_stop, gcodes, qcodes, excl, big, vals, cols, depth, gt, ge,
                  after)


@numba.njit(nogil=True, cache=True)
def _work(m, p):  # pragma: no cover - compiled
    """Buffers of :func:`_rank_row` for rows of m entries with up to p relevant items."""
    nb = max(1, m // 2)
    return (np.empty(m, np.int32), np.empty(nb + 2, np.int32), np.empty(m, np.float32), np.empty(m, np.int32),
            np.empty(m, np.float32), np.empty(m, np.int64), np.empty(p, np.float32), np.empty(p, np.int64),
            np.empty(p, np.int64), np.empty(p, np.uint32), np.empty(p, np.int32), np.empty(p, np.int32),
            np.empty(2048, np.int32), np.zeros(nb + 2, np.uint8), np.empty(nb + 2, np.int32))


@numba.njit(nogil=True, cache=True)
def _rank_row(row, r, w, blk_cols, blk_start, blk_stop, gcodes, qcodes, excl, big, vals, cols, depth, gt, ge,
              after):  # pragma: no cover - compiled
    """Output row r of :func:`rank_relevant` from the scores ``row`` [m] (buffers ``w``)."""
    m = row.shape[0]
    p = vals.shape[1]
    nb = max(1, m // 2)
    cell, hist, grouped, gidx, sorted_vals, scratch, rel_v, rel_c, rel_d, key, ia, ib, radix, sorted_flag, \
        sorted_list = w
    k = _gather(row, blk_cols, blk_start[r], blk_stop[r], excl[r], gcodes, qcodes[r], rel_v, rel_c, rel_d)
    order = _order_desc(rel_v, k, key, ia, ib, radix)
    for o in range(k):
        i = order[o]
        vals[r, o] = rel_v[i]
        cols[r, o] = rel_c[i]
        depth[r, o] = rel_d[i]
    for o in range(k, p):
        vals[r, o] = np.float32(-np.inf)
        cols[r, o] = m
        depth[r, o] = 0
        gt[r, o] = big
        ge[r, o] = big
        after[r, o] = 0
    if k == 0:
        return
    lo = vals[r, k - 1]
    hi = vals[r, 0]
    width = np.float64(hi) - np.float64(lo)
    scale = np.float32(min(nb / width, 1e30)) if width > 0 else np.float32(1.0)
    _bucketize(row, lo, hi, scale, nb, cell, hist, grouped, gidx)
    _count(vals[r], cols[r], k, grouped, gidx, sorted_vals, hist, lo, hi, scale, nb, gt[r], ge[r], after[r],
           scratch, sorted_flag, sorted_list)


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
