"""Exact ranks of the relevant items of every query, computed chunk by chunk: the definitions.

This is the one engine behind every retrieval metric of :mod:`rankrepro.metrics`: this module
defines scores, depths, ranks and tie conventions and holds :class:`Ranked` (a chunk's relevant
items with their ranks) and the counting primitives; :mod:`~rankrepro.metrics.inputs` encodes the
labels, :mod:`~rankrepro.metrics.chunks` cuts the queries into chunks and scores them,
:mod:`~rankrepro.metrics.workers` runs their CPU work on threads, and the two ways to get the ranks
are :mod:`~rankrepro.metrics.full_list` and :mod:`~rankrepro.metrics.counting`. It never
materialises the [Nq, Ng] similarity matrix and never uses an approximate search.

Scores
    ``s(q, g) = <q, g>`` in float32 (cosine similarity for L2-normalised embeddings), computed by
    one matrix product per chunk of queries against the whole gallery. A query's ranked list is the
    gallery minus the item excluded for it: in same-set protocols the query itself, removed **by
    index** (its column is set to -inf), never by dropping the first neighbour, so exact duplicates
    of the query stay in its list.

Labels and depth
    Labels are [N] or [N, L], finest level in column 0. For the label columns ``0..C-1`` in use, an
    item's *depth* for a query is the number of those columns on which they agree (0 = negative,
    C = same finest class). An item is *relevant at column c* (a positive of the binary metrics of
    that level) iff it has the query's column-c label, i.e. depth >= C - c. When more than one
    column is used the labels must form a tree (a label at column c determines every coarser
    label); this is checked.

Ranks and tie conventions
    ``gt(k)`` and ``ge(k)`` are the numbers of listed items with a score > and >= that of item k
    (``ge`` counts k itself). The rank of k (1 = best) under each convention:

    * ``"index"``: strict order, decreasing score then *decreasing* gallery index:
      ``rank = gt + 1 + #{j : s_j = s_k, index_j > index_k}``. A tied negative is ranked before a
      positive iff its gallery index is higher. This is the order in which faiss (CPU, flat index)
      lists tied neighbours, so full-list results equal PML's AccuracyCalculator with faiss even
      on exact ties.
    * ``"pessimistic"``: every tied item counts as ranked before k: ``rank = ge``. This is
      scikit-learn's ``average_precision_score`` (one threshold per distinct score) and SupRank's
      rank with H(0) = 1.
    * ``"average"`` (only NDCG differs): tied items share the mean discount of the positions they
      occupy, as scikit-learn's ``ndcg_score``; rank-based metrics use ``"pessimistic"``.

    With a finite k, which of several tied items faiss keeps at the k boundary depends on its heap,
    so PML with k < gallery size can differ from every fixed convention when ties straddle rank k.

Two ways to get the ranks
    * *full-list path* (:mod:`~rankrepro.metrics.full_list`; AP, H-AP, ASI, NDCG): every relevant
      item of each row, in ranking order, with its counts ``gt``/``ge`` over the whole row. On CPU
      one compiled pass (``rank_relevant``): the relevant items are radix-sorted, the row's entries
      grouped into buckets over their score range (a counting sort), and each item's counts are
      the entries of the higher buckets plus a few comparisons in its own: no sort of the row. On CUDA (or with
      the compiled kernels switched off): one stable ``torch.sort`` of each reversed row, so an
      item's position is its index-convention rank, and ``searchsorted`` for ``gt``/``ge``.
    * *counting path* (:mod:`~rankrepro.metrics.counting`; ranked-list metrics only: R@k, P@k, TR@k, mAP@R, RP, mAP@k, MRR): the rank
      of a positive is ``1 + #{items with a larger score}``, one comparison pass over the row.
      The positives' own scores are computed first (a small product on their columns); the chunk's
      scores are then computed in blocks of 4096 gallery columns (on CUDA: one block), and the
      best positive's count is taken from each block while it is still in cache (a compiled pass
      on CPU; no full-row pass from memory). Further positives are counted only while their rank
      can still fall within the metric's cutoff (R, or k), on the rows that need it; rows that
      would need more than 8 such passes rank all their positives at once instead (on CPU the
      full-list kernel, on CUDA their top-(cutoff + 1) scores by ``torch.topk``). On CPU these
      passes read the column blocks in place (:class:`BlockScores`); on CUDA the rows are copied
      out. With a sort-free first pass, R@k costs little more than the product.

Reproducibility: scores are float32 BLAS products; with MKL the last bits of a score can depend on
the shape of the chunk it was computed in, so results are bit-reproducible for fixed chunking
(``memory_budget``, ``max_rows``) and may otherwise differ where two scores are within an ulp.

Memory is bounded by ``memory_budget`` (bytes, for the chunks in flight), independent of the number
of queries: about ``rows * (row_bytes + 250 * P)`` bytes, P the largest relevant set in the chunk;
``row_bytes`` is 8 * Ng for the counting path (16 * Ng on CUDA: row copies, boolean temporaries);
the full-list path gives half the budget to the chunk's scores (4 * Ng per row on CPU, 24 * Ng on
CUDA with the row sort's outputs) and half to its per-item arrays. On
CPU each worker thread keeps its score buffers (:meth:`~rankrepro.metrics.workers.Workers.scratch`)
from one chunk to the next, for the duration of one call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from . import cpu_kernels
from .chunks import BlockScores
from .inputs import LabelIndex
from .workers import Workers

__all__ = ["TIES", "BIG", "Ranked", "count_cmp", "order_desc", "relevant_items", "relevant_cols", "index_ties"]

TIES = ("index", "pessimistic", "average")
BIG = 2**62  # rank sentinel: "beyond every cutoff"


# ----------------------------------------------------------------------------- primitives


def count_cmp(s: torch.Tensor, t: torch.Tensor, op: str, rows: torch.Tensor | None = None,
              workers: Workers | None = None) -> torch.Tensor:
    """Per row, the number of entries of ``s`` [b, M] that are > (``op="gt"``) or == (``"eq"``) ``t``.

    ``rows`` (optional): count only in these rows of ``s`` (``t`` then has one value per listed row).
    ``s`` may be a :class:`BlockScores` (on CPU read in place by the compiled kernel)."""
    workers = workers or Workers()
    if isinstance(s, BlockScores):
        if not s.compiled(workers):
            return count_cmp(s.full() if rows is None else s.rows(rows), t, op, workers=workers)
        b = s.shape[0]
        rr = np.arange(b, dtype=np.int64) if rows is None else np.ascontiguousarray(rows.numpy(), np.int64)
        out = np.empty(len(rr), np.int64)
        flat, tt = s.flat.numpy(), np.ascontiguousarray(t.numpy())
        workers.rows(lambda lo, hi: cpu_kernels.count_cmp_blocked(flat, b, s.block_cols, rr, tt, lo, hi,
                                                                  op == "eq", out), len(rr))
        return torch.from_numpy(out)
    if s.device.type != "cpu":
        sub = s if rows is None else s[rows]
        c = (sub > t[:, None]) if op == "gt" else (sub == t[:, None])
        return c.sum(1)
    a, tt = s.numpy(), t.numpy()
    rr = None if rows is None else rows.numpy()
    n = a.shape[0] if rr is None else len(rr)
    out = np.empty(n, np.int64)
    cmp = np.greater if op == "gt" else np.equal
    # blocks of ~2M comparisons stay in cache; at least one block per worker thread
    step = max(1, min((1 << 21) // max(1, a.shape[1]), -(-n // workers.available())))
    compiled = workers.compiled_on(s)  # one pass, no temporaries: ~9x faster than compare + reduce
    if compiled:
        a = np.ascontiguousarray(a)
        rr_all = np.arange(n, dtype=np.int64) if rr is None else np.ascontiguousarray(rr, np.int64)
        tt = np.ascontiguousarray(tt)

    def work(lo, hi):
        if compiled:
            cpu_kernels.count_cmp(a, rr_all, tt, lo, hi, op == "eq", out)
            return
        for i in range(lo, hi, step):
            j = min(hi, i + step)
            block = a[i:j] if rr is None else a[rr[i:j]]
            out[i:j] = np.add.reduce(cmp(block, tt[i:j, None]), axis=1, dtype=np.int64)

    workers.rows(work, n, min_rows=step)
    return torch.from_numpy(out)


def order_desc(values: torch.Tensor, index: torch.Tensor, workers: Workers | None = None) -> torch.Tensor:
    """Per row, the permutation sorting by decreasing value then decreasing ``index`` (exact ties)."""
    if values.device.type != "cpu":
        o1 = torch.argsort(index, dim=1, descending=True, stable=True)
        o2 = torch.argsort(values.gather(1, o1), dim=1, descending=True, stable=True)
        return o1.gather(1, o2)
    v, ix = values.numpy(), index.numpy()
    out = np.empty(v.shape, np.int64)

    def work(lo, hi):
        o = np.argsort(-v[lo:hi], axis=1)  # fast SIMD argsort; runs of exact ties are fixed below
        sv = np.take_along_axis(v[lo:hi], o, 1)
        same = (sv[:, 1:] == sv[:, :-1]) & np.isfinite(sv[:, 1:])
        for r in np.flatnonzero(same.any(1)):
            starts = np.flatnonzero(np.diff(np.concatenate([[False], same[r], [False]]).astype(np.int8)) == 1)
            ends = np.flatnonzero(np.diff(np.concatenate([[False], same[r], [False]]).astype(np.int8)) == -1)
            for a, b in zip(starts, ends + 1):  # run o[r, a:b] has equal values: decreasing index
                seg = o[r, a:b]
                o[r, a:b] = seg[np.argsort(-ix[lo + r, seg], kind="stable")]
        out[lo:hi] = o

    (workers or Workers()).rows(work, v.shape[0])
    return torch.from_numpy(out)


def _group_end(sorted_desc: torch.Tensor) -> torch.Tensor:
    """For values sorted in decreasing order per row, the last position of each run of equal values."""
    b, p = sorted_desc.shape
    pos = torch.arange(p, device=sorted_desc.device).expand(b, p)
    boundary = torch.ones_like(sorted_desc, dtype=torch.bool)
    if p > 1:
        boundary[:, :-1] = sorted_desc[:, 1:] != sorted_desc[:, :-1]
    marked = torch.where(boundary, pos, torch.full_like(pos, p))
    return torch.flip(torch.cummin(torch.flip(marked, [1]), dim=1).values, [1])


# ----------------------------------------------------------------------------- ranked items


@dataclass
class Ranked:
    """The relevant items of a chunk of queries, in ranking order (decreasing score, then index).

    ``depth`` [b, P] (0 = padding), ``cols`` [b, P] gallery indices, ``gt``/``ge`` [b, P] (counts of
    listed items with a larger / larger-or-equal score; BIG where unknown), ``n`` [b, C+1] items per
    depth (excluded item not counted). ``rank_index`` is exact where ``index_exact`` holds.
    ``kernels``: whether the metrics of these items run as compiled kernels
    (:mod:`~rankrepro.metrics.cpu_kernels`; on CPU unless switched off, see
    :class:`~rankrepro.metrics.workers.Workers`).
    """

    rows: np.ndarray
    depth: torch.Tensor
    cols: torch.Tensor
    vals: torch.Tensor
    gt: torch.Tensor
    ge: torch.Tensor
    rank_index: torch.Tensor
    n: torch.Tensor
    n_cols: int
    kernels: bool
    _cache: dict = field(default_factory=dict)

    def rank(self, ties: str) -> torch.Tensor:
        return self.rank_index if ties == "index" else self.ge

    def rank_f(self, ties: str) -> torch.Tensor:
        """``rank`` as float64 (cached)."""
        key = ("rank_f", ties == "index")
        if key not in self._cache:
            self._cache[key] = self.rank(ties).to(torch.float64)
        return self._cache[key]

    def before(self, ties: str, lam: int) -> torch.Tensor:
        """# items of depth >= lam ranked at or before each item (ties: see module docstring)."""
        key = ("index" if ties == "index" else "pessimistic", lam)
        if key not in self._cache:
            c = torch.cumsum(self.depth >= lam, dim=1)
            if key[0] != "index" and self._has_ties():
                c = c.gather(1, self._group_end())
            self._cache[key] = c
        return self._cache[key]

    def _has_ties(self) -> bool:
        """Whether two relevant items of a row have exactly the same score."""
        if "ties" not in self._cache:
            v = self.vals
            self._cache["ties"] = v.shape[1] > 1 and bool(((v[:, 1:] == v[:, :-1]) & (self.depth[:, 1:] > 0)).any())
        return self._cache["ties"]

    def _group_end(self) -> torch.Tensor:
        if "end" not in self._cache:
            self._cache["end"] = _group_end(self.vals)
        return self._cache["end"]


def relevant_items(s: torch.Tensor, index: LabelIndex, rows: np.ndarray, c_rel: int):
    """Gather the relevant items (column ``c_rel`` block) of each row: cols, vals, depth [b, P]."""
    cols, valid, depth = relevant_cols(index, rows, c_rel, s.device)
    vals = s.gather(1, cols).masked_fill_(~valid, -math.inf)
    cols.masked_fill_(~valid, index.n_gallery)
    return cols, vals, depth


def relevant_cols(index: LabelIndex, rows: np.ndarray, c_rel: int, dev):
    """Relevant items' gallery columns (padding: a valid column, masked), validity and depth [b, P]."""
    a, b_ = index.start[c_rel, rows], index.stop[c_rel, rows]
    p = int((b_ - a).max(initial=0))
    p = max(p, 1)
    pos = torch.from_numpy(a).to(dev)[:, None] + torch.arange(p, device=dev)[None, :]
    valid = pos < torch.from_numpy(b_).to(dev)[:, None]
    valid &= pos != torch.from_numpy(index.excl_pos[rows]).to(dev)[:, None]
    perm = index.perm_tensor(dev)
    cols = perm[pos.clamp_(max=index.n_gallery - 1)]
    depth = valid.to(torch.int64)
    for c in range(c_rel):  # nested finer blocks add one shared level each
        lo = torch.from_numpy(index.start[c, rows]).to(dev)[:, None]
        hi = torch.from_numpy(index.stop[c, rows]).to(dev)[:, None]
        depth += (pos >= lo) & (pos < hi) & valid
    return cols, valid, depth


def index_ties(s: torch.Tensor, r: torch.Tensor, vals: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """For items (row r, score v, column c): #{j > c : s[r, j] == v} (tie-break of the index order),
    on the device of ``s``."""
    if s.device.type == "cpu":
        sn, rn, vn, cn = s.numpy(), r.numpy(), vals.numpy(), cols.numpy()
        return torch.from_numpy(np.array([np.count_nonzero(sn[ri, c + 1 :] == v) for ri, v, c in zip(rn, vn, cn)],
                                         np.int64))
    m = s.shape[1]
    out = torch.zeros(len(r), dtype=torch.int64, device=s.device)
    step = max(1, (1 << 26) // max(m, 1))  # items per pass: bounded [k, M] temporaries
    ar = torch.arange(m, device=s.device)
    for a in range(0, len(r), step):
        sl = slice(a, a + step)
        eq = s[r[sl]] == vals[sl, None]
        eq &= ar[None, :] > cols[sl, None]
        out[sl] = eq.sum(1)
    return out
