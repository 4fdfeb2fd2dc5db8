"""The counting path: ranks of the positives of each query by counting, only as far as the
ranked-list metrics' cutoffs need (R@k, P@k, TR@k, mAP@R, RP, mAP@k, MRR; definitions and the
algorithm in :mod:`rankrepro.metrics.ranking`).

:func:`counted_chunk` computes a chunk's scores fused with the first pass (the best positive of
each row), :func:`count_path` the further passes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .chunks import BlockScores, mask_excluded
from .full_list import rank_relevant
from .inputs import LabelIndex
from .ranking import BIG, Ranked, count_cmp, index_ties, order_desc, relevant_cols, relevant_items
from .workers import Workers

__all__ = ["counted_chunk", "count_path"]

_COUNT_ITERS = 8  # comparison passes per row after the best positive before the row is sorted instead


def counted_chunk(query: torch.Tensor, gallery: torch.Tensor, index: LabelIndex, chunk: np.ndarray, c: int,
                  want_eq: bool, block_cols: int = 4096, workers: Workers | None = None):
    """The chunk's scores fused with the counting path's first pass at column ``c``.

    Returns ``(scores, first)``: ``scores`` a :class:`BlockScores`, ``first = (cols,
    vals, depth, g0, e0)`` the positives in ranking order and, for each row's best positive, the
    number of listed items scoring above it (g0) and equal to it (e0, None unless ``want_eq``). The
    positives' scores are computed first (one small product on their columns, written into the
    scores), then the scores are computed in column blocks, each counted while it is still in
    cache (on CPU by a compiled pass, no temporaries)."""
    workers = workers or Workers()
    m = gallery.shape[0]
    dev = query.device
    if dev.type != "cpu":  # on a GPU one product for the whole row beats many small ones
        block_cols = m
    q = query[torch.from_numpy(chunk).to(dev)]
    cols, valid, depth = relevant_cols(index, chunk, c, dev)
    # the chunk's positives lie in one range of the label-sorted gallery order
    st, sp = index.start[c, chunk], index.stop[c, chunk]
    nonempty = sp > st
    lo_pos = int(st[nonempty].min()) if nonempty.any() else 0
    hi_pos = int(sp[nonempty].max()) if nonempty.any() else 0
    uniq = index.perm_tensor(dev)[lo_pos:hi_pos]
    s_u = q @ gallery[uniq].T
    pos = (index.inv_perm_tensor(dev)[cols] - lo_pos).clamp_(0, max(hi_pos - lo_pos - 1, 0))
    vals = s_u.gather(1, pos) if hi_pos > lo_pos else torch.zeros(cols.shape, dtype=s_u.dtype, device=dev)
    vals = vals.masked_fill_(~valid, -math.inf)
    cols = cols.masked_fill(~valid, index.n_gallery)
    order = order_desc(vals, cols, workers)
    cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
    t0 = torch.where(torch.isfinite(vals[:, 0]), vals[:, 0], torch.full_like(vals[:, 0], math.inf))
    g0 = torch.zeros(len(chunk), dtype=torch.int64, device=dev)
    e0 = torch.zeros(len(chunk), dtype=torch.int64, device=dev) if want_eq else None
    b = len(chunk)
    buf = workers.scratch("blocks", b * m, dev)  # each block contiguous: products into strided views are slow
    blocks = []
    for c0 in range(0, m, block_cols):
        c1 = min(m, c0 + block_cols)
        blk = buf[b * c0 : b * c1].view(b, c1 - c0)
        torch.mm(q, gallery[c0:c1].T, out=blk)
        inside = (uniq >= c0) & (uniq < c1)
        if bool(inside.any()):  # the positives' own scores, exactly as compared below
            blk[:, uniq[inside] - c0] = s_u[:, inside]
        mask_excluded(blk, index, chunk, c0)
        g0 += count_cmp(blk, t0, "gt", workers=workers)
        if e0 is not None:
            e0 += count_cmp(blk, t0, "eq", workers=workers)
        blocks.append(blk)
    return BlockScores(blocks, buf[: b * m], block_cols), (cols, vals, depth, g0, e0)


def count_path(s, index: LabelIndex, rows: np.ndarray, c: int, first_cutoff: np.ndarray,
               next_cutoff: np.ndarray, first=None, workers: Workers | None = None) -> Ranked:
    """Ranks of the positives at column ``c`` by counting, only as far as the cutoffs need.

    ``s``: the chunk's scores (tensor or :class:`BlockScores`). The best positive's rank is exact
    whenever gt + 1 <= ``first_cutoff`` (else a lower bound > cutoff); the m-th positive's rank is
    computed while the previous one is <= ``next_cutoff``. Unknown ranks are BIG. The result has
    one level (depth 1 = positive). ``first``: positives and best-positive counts from
    :func:`counted_chunk` (then only rows needing more passes are materialised)."""
    workers = workers or Workers()
    if isinstance(s, torch.Tensor):
        s = BlockScores([s])
    dev = s.device
    b, m = s.shape
    if first is None:
        full = s.full()
        cols, vals, depth = relevant_items(full, index, rows, c)
        order = order_desc(vals, cols, workers)
        cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
        t0 = torch.where(torch.isfinite(vals[:, 0]), vals[:, 0], torch.full_like(vals[:, 0], math.inf))
        g0 = count_cmp(full, t0, "gt", workers=workers).to(dev)
        e0 = None
    else:
        cols, vals, depth, g0, e0 = first
    depth = (depth > 0).to(torch.int64)
    npos = depth.sum(1)
    gt = torch.full_like(cols, BIG)
    ge = torch.full_like(cols, BIG)
    rank_index = torch.full_like(cols, BIG)
    c1 = torch.from_numpy(np.asarray(first_cutoff, np.int64)).to(dev)
    c2 = torch.from_numpy(np.asarray(next_cutoff, np.int64)).to(dev)

    # Rows whose best positive is within its cutoff need its ties checked (e0 from the fused pass,
    # else one pass); rows whose positive may be followed by others within the cutoff need more
    # passes: only their scores are materialised, once.
    has = npos > 0
    g0 = torch.where(has, g0, torch.full_like(g0, BIG))
    gt[:, 0] = g0
    ge[:, 0] = g0 + 1  # provisional (no ties) where not checked
    rank_index[:, 0] = g0 + 1
    rc = (has & (g0 + 1 <= c1)).nonzero(as_tuple=True)[0]
    act = (npos > 1) & (g0 + 1 <= c2)
    mat = rc if e0 is None else act.nonzero(as_tuple=True)[0]
    if s.compiled(workers):  # the compiled kernels read the rows in place
        sub, local = s, torch.arange(b)
    else:
        sub = s.rows(mat) if len(mat) else None
        local = torch.full((b,), -1, dtype=torch.int64, device=dev)
        local[mat] = torch.arange(len(mat), device=dev)

    def _sort_rows_ranks(r: torch.Tensor) -> None:
        """Ranks of every positive of rows r that can be within the cutoff. On CPU the compiled
        full-list pass (:func:`rank_relevant`: exact ranks of all of them, no sort of the row);
        else from the top k = cutoff + 1 scores of each row (a partial sort), the others getting a
        lower bound > k."""
        if sub is s:
            kv, kc, _, kgt, kge, kaf = rank_relevant(s, index, rows[r.numpy()], c, local=r.numpy())
            p_ = kv.shape[1]  # same items, same order (decreasing score, then index) as vals[r]
            gt[r, :p_], ge[r, :p_] = torch.from_numpy(kgt), torch.from_numpy(kge)
            rank_index[r, :p_] = torch.from_numpy(kaf + kgt + 1)
            return
        sr = sub[local[r]]
        v = vals[r]
        okp = depth[r] > 0
        kk = int(min(m, int(c2[r].max()) + 1))
        top = torch.topk(sr, kk, dim=1, largest=True, sorted=True).values
        asc = top.flip(1).contiguous()
        gt_top = kk - torch.searchsorted(asc, v.contiguous(), right=True)
        ge_top = kk - torch.searchsorted(asc, v.contiguous(), right=False)
        low = top[:, -1:]
        inside = okp & (v >= low)  # every item scoring above v is among the top k
        edge = inside & (v == low)  # items equal to v may lie beyond the top k: count them all
        if bool(edge.any()):
            a_, q_ = edge.nonzero(as_tuple=True)
            e = count_cmp(sr, v[a_, q_], "eq", rows=a_.cpu(), workers=workers).to(dev)
            ge_top[a_, q_] = gt_top[a_, q_] + e
        gt[r] = torch.where(inside, gt_top, torch.where(okp, torch.full_like(gt_top, kk), gt[r]))
        ge[r] = torch.where(inside, ge_top, torch.where(okp, torch.full_like(ge_top, kk + 1), ge[r]))
        ri = torch.where(okp, gt[r] + 1, rank_index[r])
        tied = inside & (ge[r] - gt[r] > 1)
        if bool(tied.any()):
            a_, q_ = tied.nonzero(as_tuple=True)
            ri[a_, q_] += index_ties(sr, a_, v[a_, q_], cols[r][a_, q_])
        rank_index[r] = ri

    def tie_break(r: torch.Tensor, p: int) -> None:
        lr = local[r]
        src = sub if sub is not s and bool((lr >= 0).all()) else s.rows(r)
        idx = lr if src is sub else torch.arange(len(r), device=dev)
        rank_index[r, p] += index_ties(src, idx, vals[r, p], cols[r, p])

    def exact(r: torch.Tensor, p: int, g: torch.Tensor, e: torch.Tensor | None = None) -> None:
        """Set the p-th positive's ranks of rows r given g = #items above it (checks ties)."""
        if e is None:
            e = count_cmp(sub, vals[r, p], "eq", rows=local[r].cpu(), workers=workers).to(dev)
        gt[r, p], ge[r, p], rank_index[r, p] = g, g + e, g + 1
        tied = (e > 1).nonzero(as_tuple=True)[0]
        if len(tied):
            tie_break(r[tied], p)

    if len(rc):
        exact(rc, 0, g0[rc], None if e0 is None else e0[rc])
    active = act.clone()
    # positives are spread about (best rank) apart: a row expecting more than _COUNT_ITERS of them
    # within its cutoff takes its top-(cutoff + 1) scores at once instead (a partial sort)
    many = active & (c2 > _COUNT_ITERS * (g0 + 1)) & (npos > _COUNT_ITERS + 1)
    p = 1 if not bool(many.any()) else None
    if p is None:
        rs = many.nonzero(as_tuple=True)[0]
        _sort_rows_ranks(rs)
        active &= ~many
        p = 1
    while bool(active.any()):
        r = active.nonzero(as_tuple=True)[0]
        if p > _COUNT_ITERS:  # many positives within the cutoff: one partial sort beats more passes
            _sort_rows_ranks(r)
            break
        g = count_cmp(sub, vals[r, p], "gt", rows=local[r].cpu(), workers=workers).to(dev)
        near = g + 1 <= c2[r]
        far = r[~near]
        gt[far, p], ge[far, p], rank_index[far, p] = g[~near], g[~near] + 1, g[~near] + 1
        if bool(near.any()):
            exact(r[near], p, g[near])
        active[r] = (npos[r] > p + 1) & (gt[r, p] + 1 <= c2[r])
        p += 1
    return _count_result(index, rows, c, m, depth, cols, vals, gt, ge, rank_index, workers)


def _count_result(index, rows, c, m, depth, cols, vals, gt, ge, rank_index, workers: Workers) -> Ranked:
    dev = depth.device
    b = depth.shape[0]
    n = torch.zeros((b, 2), dtype=torch.int64, device=dev)
    n[:, 1] = torch.from_numpy(index.n_relevant(c)[rows]).to(dev)
    listed = m - torch.from_numpy((index.excl[rows] >= 0).astype(np.int64)).to(dev)
    n[:, 0] = listed - n[:, 1]
    return Ranked(rows, depth, cols, vals, gt, ge, rank_index, n, 1, workers.compiled_on(depth))
