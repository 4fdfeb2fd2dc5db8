"""The full-list path: exact ranks of every relevant item of each query, in every tie convention
(AP, H-AP, ASI, NDCG; definitions in :mod:`rankrepro.metrics.ranking`).

On CPU one compiled pass per row (:func:`rank_relevant`, no sort of the row); on CUDA, or with the
compiled kernels switched off, one stable sort of each reversed row (:func:`sort_path`'s torch
code), which the tests take as the reference for the compiled pass.
"""

from __future__ import annotations

import numpy as np
import torch

from . import cpu_kernels
from .chunks import BlockScores
from .inputs import LabelIndex
from .ranking import BIG, Ranked, relevant_items
from .workers import Workers

__all__ = ["rank_relevant", "sort_path"]


def rank_relevant(s, index: LabelIndex, rows: np.ndarray, c_rel: int, local: np.ndarray | None = None):
    """The items relevant at column ``c_rel`` of each row of ``s`` [b, Ng] (float32 scores of the
    queries ``rows``) in ranking order: ``(vals, cols, depth, gt, ge, after)`` [b, P], padded after
    the items with -inf, Ng, 0, BIG, BIG, 0; ``after``: the entries scoring the same as the item
    with a larger gallery index. Exact, without sorting the rows: see
    :func:`rankrepro.metrics.cpu_kernels.rank_relevant`. ``s`` may also be a :class:`BlockScores`
    read in place, its rows ``local`` being those of the queries ``rows``."""
    blk_cols, start, stop, gcodes = index.by_index(c_rel)
    a, b_ = start[rows], stop[rows]
    p = max(1, int((b_ - a).max(initial=0)))
    n = len(rows)
    vals = np.empty((n, p), np.float32)
    cols, depth, gt, ge, after = (np.empty((n, p), np.int64) for _ in range(5))
    labels = (blk_cols, a, b_, gcodes, np.ascontiguousarray(index.qcodes[rows, : c_rel + 1]), index.excl[rows], BIG)
    if isinstance(s, BlockScores):
        cpu_kernels.rank_relevant_blocked(s.flat.numpy(), s.shape[0], s.block_cols,
                                          np.ascontiguousarray(local, np.int64), *labels,
                                          vals, cols, depth, gt, ge, after)
    else:
        cpu_kernels.rank_relevant(np.ascontiguousarray(s, np.float32), *labels, vals, cols, depth, gt, ge, after)
    return vals, cols, depth, gt, ge, after


def _sorted_ranks(s: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, pad: torch.Tensor):
    """The torch path of :func:`sort_path` (CUDA; CPU without the compiled kernels): each row
    sorted once, by decreasing score then decreasing column (a stable sort of the reversed row), so
    an item's position is its exact index-convention rank - 1; ``gt``/``ge`` by binary search in
    the sorted scores.

    Returns ``(pos, gt, ge)`` [b, P] for the items ``cols`` (scores ``vals``; ``pad``: padding)."""
    b, m = s.shape
    srt, idx = torch.sort(s.flip(1), dim=1, descending=True, stable=True)  # ties: reversed column order
    pos_of = torch.empty((b, m), dtype=torch.int32, device=s.device)
    pos_of.scatter_(1, idx, torch.arange(m, dtype=torch.int32, device=s.device).expand(b, m))
    del idx
    pos = pos_of.gather(1, (m - 1 - cols).clamp_(min=0)).to(torch.int64)  # column c is m-1-c reversed
    del pos_of
    neg = srt.neg_()  # increasing
    v = vals.neg().contiguous()
    gt = torch.searchsorted(neg, v, right=False)  # #{s > val}
    ge = torch.searchsorted(neg, v, right=True)  # #{s >= val}
    big = torch.full_like(gt, BIG)
    return torch.where(pad, big, pos), torch.where(pad, big, gt), torch.where(pad, big, ge)


def sort_path(s: torch.Tensor, index: LabelIndex, rows: np.ndarray, c_rel: int,
              workers: Workers | None = None) -> Ranked:
    """Exact ranks of every item relevant at column ``c_rel`` (depths 1..c_rel+1) for a chunk, in
    every tie convention."""
    dev = s.device
    kernels = (workers or Workers()).compiled_on(s)
    if kernels:  # sort-free counting, index ties broken in the kernel (see rank_relevant)
        vals, cols, depth, gt, ge, after = map(torch.from_numpy, rank_relevant(s.numpy(), index, rows, c_rel))
        rank_index = after.add_(gt).add_(1)
    else:  # CUDA, or CPU without the compiled kernels: one stable sort per row
        cols, vals, depth = relevant_items(s, index, rows, c_rel)
        pos, gt, ge = _sorted_ranks(s, cols, vals, depth == 0)
        order = torch.argsort(pos, dim=1)  # ranking order: padding (BIG) last
        cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
        pos, gt, ge = pos.gather(1, order), gt.gather(1, order), ge.gather(1, order)
        rank_index = torch.where(depth > 0, pos + 1, gt + 1)
    n = torch.from_numpy(index.depth_counts(c_rel)[rows]).to(dev)
    return Ranked(rows, depth, cols, vals, gt, ge, rank_index, n, c_rel + 1, kernels)
