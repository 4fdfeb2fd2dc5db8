"""Exact ranks of the relevant items of every query, computed chunk by chunk.

This is the one engine behind every retrieval metric of :mod:`rankrepro.metrics`. It never
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
    * *full-list path* (``sort_path``; AP, H-AP, ASI, NDCG): every relevant item of each row, in
      ranking order, with its counts ``gt``/``ge`` over the whole row. On CPU one compiled pass
      (:func:`rank_relevant`): the relevant items are radix-sorted, the row's entries grouped into
      buckets over their score range (a counting sort), and each item's counts are the entries of
      the higher buckets plus a few comparisons in its own: no sort of the row. On CUDA (or with
      the compiled kernels switched off): one stable ``torch.sort`` of each reversed row, so an
      item's position is its index-convention rank, and ``searchsorted`` for ``gt``/``ge``.
    * *counting path* (ranked-list metrics only: R@k, P@k, TR@k, mAP@R, RP, mAP@k, MRR): the rank
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
CPU each worker thread keeps its score buffers (:func:`scratch`) from one chunk to the next, for
the duration of one call.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from . import cpu_kernels

__all__ = [
    "TIES",
    "post_processing",
    "run_parallel",
    "LabelIndex",
    "Ranked",
    "as_embeddings",
    "encode_labels",
    "for_chunks",
    "chunk_scores",
    "scratch",
    "BlockScores",
    "counted_chunk",
    "sort_path",
    "count_path",
]

TIES = ("index", "pessimistic", "average")
BIG = 2**62  # rank sentinel: "beyond every cutoff"
_COUNT_ITERS = 8  # comparison passes per row after the best positive before the row is sorted instead

_POOL: ThreadPoolExecutor | None = None
_WORKERS: int | None = None  # set while torch is pinned to one thread (see ``post_processing``)


_LOCAL = threading.local()  # .inline: this thread is already one of several parallel workers


def _threads() -> int:
    if getattr(_LOCAL, "inline", False):
        return 1
    n = _WORKERS if _WORKERS is not None else torch.get_num_threads()
    return max(1, min(n, os.cpu_count() or 1))


def run_parallel(tasks: list, in_flight: int | None = None) -> None:
    """Run the callables ``tasks`` on the worker threads (each runs its numpy parts inline), at
    most ``in_flight`` at a time (memory), in order of submission."""
    global _POOL
    t = _threads()
    if t == 1 or len(tasks) < 2:
        for f in tasks:
            f()
        return
    if _POOL is None or _POOL._max_workers != t:  # noqa: SLF001
        _POOL = ThreadPoolExecutor(max_workers=t, thread_name_prefix="rankrepro-metrics")

    def inline(f):
        _LOCAL.inline = True
        try:
            return f()
        finally:
            _LOCAL.inline = False

    limit = in_flight or len(tasks)
    pending = []
    for f in tasks:
        if len(pending) >= limit:
            pending.pop(0).result()
        pending.append(_POOL.submit(inline, f))
    for fut in pending:
        fut.result()


class post_processing:
    """Context for the per-chunk work after the matrix product, on CPU.

    torch's small element-wise ops run single-threaded (OpenMP barriers on small tensors cost more
    than they save, badly so on a shared machine); the heavy numpy parts (sort, searchsorted,
    counting) still use one worker thread per torch thread."""

    def __init__(self, device: torch.device):
        self.active = device.type == "cpu"
        self.workers = 1

    def __enter__(self):
        global _WORKERS
        if self.active:
            self.saved = torch.get_num_threads()
            _WORKERS = self.saved
            torch.set_num_threads(1)
            self.workers = _threads()
        return self

    def __exit__(self, *exc):
        global _WORKERS
        if self.active:
            torch.set_num_threads(self.saved)
            _WORKERS = None
        return False


def _parallel_rows(fn, n: int, min_rows: int = 4) -> None:
    """Run ``fn(lo, hi)`` on contiguous row ranges in a thread pool (numpy releases the GIL)."""
    global _POOL
    t = _threads()
    if t == 1 or n < 2 * min_rows:
        fn(0, n)
        return
    if _POOL is None or _POOL._max_workers != t:  # noqa: SLF001 - resize with torch threads
        _POOL = ThreadPoolExecutor(max_workers=t, thread_name_prefix="rankrepro-metrics")
    bounds = np.linspace(0, n, t + 1).astype(int)
    futures = [_POOL.submit(fn, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    for f in futures:
        f.result()


# ----------------------------------------------------------------------------- primitives


def count_cmp(s: torch.Tensor, t: torch.Tensor, op: str, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per row, the number of entries of ``s`` [b, M] that are > (``op="gt"``) or == (``"eq"``) ``t``.

    ``rows`` (optional): count only in these rows of ``s`` (``t`` then has one value per listed row).
    ``s`` may be a :class:`BlockScores` (on CPU read in place by the compiled kernel)."""
    if isinstance(s, BlockScores):
        if not s.compiled():
            return count_cmp(s.full() if rows is None else s.rows(rows), t, op)
        b = s.shape[0]
        rr = np.arange(b, dtype=np.int64) if rows is None else np.ascontiguousarray(rows.numpy(), np.int64)
        out = np.empty(len(rr), np.int64)
        flat, tt = s.flat.numpy(), np.ascontiguousarray(t.numpy())
        _parallel_rows(lambda lo, hi: cpu_kernels.count_cmp_blocked(flat, b, s.block_cols, rr, tt, lo, hi,
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
    step = max(1, min((1 << 21) // max(1, a.shape[1]), -(-n // _threads())))
    compiled = cpu_kernels.applies(s)  # one pass, no temporaries: ~9x faster than compare + reduce
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

    _parallel_rows(work, n, min_rows=step)
    return torch.from_numpy(out)


def order_desc(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
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

    _parallel_rows(work, v.shape[0])
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


# ----------------------------------------------------------------------------- inputs


def as_embeddings(x, name: str, device=None) -> torch.Tensor:
    """[N, D] float32 tensor on ``device`` (default: the input's device)."""
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        t = torch.as_tensor(np.asarray(x))
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {t.dtype}")
    t = t.to(device=device if device is not None else t.device, dtype=torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return t.contiguous()


def _labels_2d(labels, name: str) -> np.ndarray:
    lab = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if lab.ndim == 1:
        lab = lab[:, None]
    if lab.ndim != 2:
        raise ValueError(f"{name} must be [N] or [N, L], got shape {lab.shape}")
    return lab


def encode_labels(query_labels, gallery_labels=None, n_cols: int | None = None):
    """Integer codes per column, joint over query and gallery: ``(qcodes [Nq, C], gcodes [Ng, C])``.

    Labels may be any hashable numpy dtype (ints, strings). ``n_cols`` limits the columns used."""
    q = _labels_2d(query_labels, "query_labels")
    g = q if gallery_labels is None else _labels_2d(gallery_labels, "gallery_labels")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"query_labels has {q.shape[1]} levels but gallery_labels has {g.shape[1]}")
    c = q.shape[1] if n_cols is None else n_cols
    if c > q.shape[1]:
        raise ValueError(f"metric needs label column {c - 1} but labels have {q.shape[1]} column(s)")
    qc = np.empty((len(q), c), np.int64)
    gc = np.empty((len(g), c), np.int64)
    for j in range(c):
        if gallery_labels is None:
            _, inv = np.unique(q[:, j], return_inverse=True)
            qc[:, j] = inv.reshape(-1)
        else:
            _, inv = np.unique(np.concatenate([q[:, j], g[:, j]]), return_inverse=True)
            inv = inv.reshape(-1)
            qc[:, j], gc[:, j] = inv[: len(q)], inv[len(q) :]
    if gallery_labels is None:
        gc = qc
    return qc, gc


class LabelIndex:
    """Gallery order in which every label block is contiguous, and each query's blocks.

    ``perm`` sorts the gallery by (column C-1, ..., column 0, index). For query i, the gallery items
    sharing its column-c label are ``perm[start[c, i]:stop[c, i]]``; blocks are nested (tree labels).
    ``excl[i]`` is the gallery index removed from query i's list (-1: none).
    """

    def __init__(self, qcodes: np.ndarray, gcodes: np.ndarray, excl: np.ndarray | None = None):
        self.qcodes, self.gcodes = qcodes, gcodes
        self.n_query, self.n_cols = qcodes.shape
        self.n_gallery = len(gcodes)
        if self.n_cols > 1:
            _check_tree(qcodes, gcodes)
        keys = [np.arange(self.n_gallery)] + [gcodes[:, c] for c in range(self.n_cols)]
        self.perm = np.lexsort(keys)
        self.inv_perm = np.empty_like(self.perm)
        self.inv_perm[self.perm] = np.arange(self.n_gallery)
        self.start = np.empty((self.n_cols, self.n_query), np.int64)
        self.stop = np.empty((self.n_cols, self.n_query), np.int64)
        for c in range(self.n_cols):
            sorted_codes = gcodes[self.perm, c]
            k = int(max(qcodes[:, c].max(initial=-1), gcodes[:, c].max(initial=-1))) + 1
            counts = np.bincount(sorted_codes, minlength=k)
            first = np.zeros(k, np.int64)
            present, first_pos = np.unique(sorted_codes, return_index=True)
            first[present] = first_pos
            self.start[c] = first[qcodes[:, c]]
            self.stop[c] = self.start[c] + counts[qcodes[:, c]]
        if excl is None:
            excl = np.full(self.n_query, -1, np.int64)
        excl = np.asarray(excl, np.int64)
        if excl.shape != (self.n_query,):
            raise ValueError(f"exclude must have one entry per query, got shape {excl.shape}")
        if (excl >= self.n_gallery).any() or (excl < -1).any():
            raise ValueError("exclude holds gallery indices out of range")
        self.excl = excl
        self.excl_pos = np.where(excl >= 0, self.inv_perm[np.maximum(excl, 0)], -1)
        qkeys = [np.arange(self.n_query)] + [qcodes[:, c] for c in range(self.n_cols)]
        self.qorder = np.lexsort(qkeys)

    def perm_tensor(self, device) -> torch.Tensor:
        """``perm`` as a tensor on ``device`` (cached)."""
        return self._tensor("perm", device)

    def inv_perm_tensor(self, device) -> torch.Tensor:
        """``inv_perm`` as a tensor on ``device`` (cached)."""
        return self._tensor("inv_perm", device)

    def _tensor(self, name: str, device) -> torch.Tensor:
        cache = self.__dict__.setdefault("_tensors", {})
        key = (name, str(device))
        if key not in cache:
            cache[key] = torch.from_numpy(getattr(self, name)).to(device)
        return cache[key]

    def by_index(self, c: int):
        """``(cols, start, stop, codes)``: the gallery sorted by (column-c label, index), for query i
        the range ``cols[start[i]:stop[i]]`` of the items sharing its column-c label, and the
        gallery's label columns 0..c (contiguous) (cached)."""
        cache = self.__dict__.setdefault("_by_index", {})
        if c not in cache:
            cols = np.argsort(self.gcodes[:, c], kind="stable")
            codes = self.gcodes[cols, c]
            start = np.searchsorted(codes, self.qcodes[:, c], "left")
            stop = np.searchsorted(codes, self.qcodes[:, c], "right")
            cache[c] = (cols.astype(np.int64), start.astype(np.int64), stop.astype(np.int64),
                        np.ascontiguousarray(self.gcodes[:, : c + 1]))
        return cache[c]

    def n_relevant(self, c: int) -> np.ndarray:
        """Number of gallery items with the query's column-c label, the excluded item not counted."""
        inside = (self.excl_pos >= self.start[c]) & (self.excl_pos < self.stop[c])
        return self.stop[c] - self.start[c] - inside

    def depth_counts(self, c_rel: int) -> np.ndarray:
        """[Nq, c_rel + 2]: items at each depth 0..c_rel+1 (depth = shared columns among 0..c_rel); cached."""
        cache = self.__dict__.setdefault("_depth_cache", {})
        if c_rel not in cache:
            cache[c_rel] = self._depth_counts(c_rel)
        return cache[c_rel]

    def _depth_counts(self, c_rel: int) -> np.ndarray:
        n = np.empty((self.n_query, c_rel + 2), np.int64)
        listed = self.n_gallery - (self.excl >= 0)
        cum = [self.n_relevant(c) for c in range(c_rel + 1)]  # cum[c]: depth >= c_rel + 1 - c
        for d in range(c_rel + 1, 0, -1):
            c = c_rel + 1 - d
            n[:, d] = cum[c] - (cum[c - 1] if c > 0 else 0)
        n[:, 0] = listed - cum[c_rel]
        return n


def _check_tree(qcodes: np.ndarray, gcodes: np.ndarray) -> None:
    codes = np.concatenate([qcodes, gcodes]) if gcodes is not qcodes else qcodes
    for c in range(codes.shape[1] - 1):
        pairs = np.unique(codes[:, c : c + 2], axis=0)
        if len(pairs) != len(np.unique(pairs[:, 0])):
            bad = pairs[np.flatnonzero(np.diff(pairs[:, 0]) == 0)[0], 0]
            raise ValueError(
                f"hierarchical labels must form a tree: a label of column {c} (code {bad}) has several "
                f"parents in column {c + 1}; give labels finest first with consistent coarser levels"
            )


# ----------------------------------------------------------------------------- chunks


def _chunk_rows(rows: np.ndarray, rel_size: np.ndarray, row_bytes: int, memory_budget: int, max_rows: int):
    """Consecutive slices of ``rows`` as large as the memory budget allows: ``row_bytes`` per row
    (its scores) plus ~250 bytes per relevant item (the per-item arrays of the rank computations)."""
    sizes = np.asarray(rel_size)[rows].astype(np.int64)
    i, n = 0, len(rows)
    while i < n:
        seg = sizes[i : i + max_rows]
        need = np.arange(1, len(seg) + 1) * (row_bytes + 250 * np.maximum.accumulate(seg))
        over = np.flatnonzero(need > memory_budget)
        j = i + (max(1, int(over[0])) if len(over) else len(seg))
        yield rows[i:j]
        i = j


def _exclude(s: torch.Tensor, index: "LabelIndex", chunk: np.ndarray, col0: int = 0) -> None:
    """Set the excluded item's score to -inf (columns col0.. of a block of the chunk's scores)."""
    ex = index.excl[chunk] - col0
    has = (ex >= 0) & (ex < s.shape[1]) & (index.excl[chunk] >= 0)
    if has.any():
        r = torch.from_numpy(np.flatnonzero(has)).to(s.device)
        s[r, torch.from_numpy(ex[has]).to(s.device)] = -math.inf


def for_chunks(device: torch.device, rows: np.ndarray, rel_size: np.ndarray, row_bytes: int, memory_budget: int,
               max_rows: int, fn) -> None:
    """Call ``fn(chunk)`` on consecutive chunks of ``rows`` sized by the memory budget (see
    :func:`_chunk_rows`).

    On CPU the chunks run concurrently on one worker thread per torch thread, with torch itself
    single-threaded: each worker does its own matrix product and per-row work, so no OpenMP thread
    spins idle between a product and the numpy work that follows (which, on a shared machine, cost
    more than the product itself). On CUDA the chunks run one after the other."""
    if device.type != "cpu":
        for chunk in _chunk_rows(rows, rel_size, row_bytes, memory_budget, max_rows):
            fn(chunk)
        return
    buffers: dict = {}  # worker thread -> its score buffer, reused chunk after chunk

    def task(ch):
        _LOCAL.buffers = buffers
        try:
            fn(ch)
        finally:
            _LOCAL.buffers = None

    with post_processing(device) as pp:
        workers = pp.workers
        per = max(1, min(max_rows, -(-len(rows) // workers)))
        chunks = list(_chunk_rows(rows, rel_size, row_bytes, memory_budget // workers, per))
        run_parallel([lambda ch=ch: task(ch) for ch in chunks], in_flight=workers)


def scratch(name: str, numel: int, device) -> torch.Tensor:
    """An uninitialised flat float32 tensor of ``numel`` elements for a chunk's scores. Inside
    :func:`for_chunks` on CPU each worker thread reuses its buffer of each ``name`` chunk after
    chunk: a fresh allocation of this size goes back to the OS when freed, and faulting its pages
    in again for every chunk costs several percent of the matrix product."""
    buffers = getattr(_LOCAL, "buffers", None)
    if buffers is None or torch.device(device).type != "cpu":
        return torch.empty(numel, dtype=torch.float32, device=device)
    key = (threading.get_ident(), name)
    buf = buffers.get(key)
    if buf is None or buf.numel() < numel:
        buf = buffers[key] = torch.empty(numel, dtype=torch.float32)
    return buf[:numel]


def chunk_scores(query: torch.Tensor, gallery: torch.Tensor, index: LabelIndex, chunk: np.ndarray) -> torch.Tensor:
    """Scores [b, Ng] of the queries ``chunk`` against the gallery, the excluded item at -inf."""
    q = query[torch.from_numpy(chunk).to(query.device)]
    b, m = len(chunk), gallery.shape[0]
    s = scratch("scores", b * m, q.device).view(b, m)
    if q.device.type == "cpu":
        # by blocks of columns, each product into a contiguous block still in cache, then copied:
        # ~20% faster than one product, and ~35% faster than products written straight into s
        tmp = scratch("block", b * 4096, q.device)
        for c0 in range(0, m, 4096):
            n = min(4096, m - c0)
            blk = tmp[: b * n].view(b, n)
            torch.mm(q, gallery[c0 : c0 + n].T, out=blk)
            s[:, c0 : c0 + n] = blk
    else:
        torch.mm(q, gallery.T, out=s)
    _exclude(s, index, chunk)
    return s


class BlockScores:
    """A chunk's scores [b, M] kept as the column blocks the matrix product wrote (no copy).

    ``rows(r)`` materialises the scores of a few rows; ``full()`` the whole matrix (cached). On CPU
    the counting kernels read the blocks in place (:func:`count_cmp`, :func:`rank_relevant`)."""

    def __init__(self, blocks: list, flat: torch.Tensor | None = None, block_cols: int = 0):
        self.blocks = blocks
        self.shape = (blocks[0].shape[0], sum(x.shape[1] for x in blocks))
        self.device = blocks[0].device
        self._full = None
        # the blocks laid out one after the other in ``flat`` (block at column c0 from b * c0),
        # each ``block_cols`` wide but the last: the compiled kernels read rows in place
        self.flat, self.block_cols = flat, block_cols

    def compiled(self) -> bool:
        """Whether the compiled kernels can read these scores in place."""
        return self.flat is not None and cpu_kernels.applies(self.flat)

    def rows(self, r: torch.Tensor) -> torch.Tensor:
        if self._full is not None:
            return self._full[r]
        return torch.cat([x[r] for x in self.blocks], 1)

    def full(self) -> torch.Tensor:
        if self._full is None:
            self._full = torch.cat(self.blocks, 1)
            self.blocks = [self._full]
        return self._full


def counted_chunk(query: torch.Tensor, gallery: torch.Tensor, index: LabelIndex, chunk: np.ndarray, c: int,
                  want_eq: bool, block_cols: int = 4096):
    """The chunk's scores fused with the counting path's first pass at column ``c``.

    Returns ``(scores, first)``: ``scores`` a :class:`BlockScores`, ``first = (cols,
    vals, depth, g0, e0)`` the positives in ranking order and, for each row's best positive, the
    number of listed items scoring above it (g0) and equal to it (e0, None unless ``want_eq``). The
    positives' scores are computed first (one small product on their columns, written into the
    scores), then the scores are computed in column blocks, each counted while it is still in
    cache (on CPU by a compiled pass, no temporaries)."""
    m = gallery.shape[0]
    dev = query.device
    if dev.type != "cpu":  # on a GPU one product for the whole row beats many small ones
        block_cols = m
    q = query[torch.from_numpy(chunk).to(dev)]
    cols, valid, depth = _relevant_cols(index, chunk, c, dev)
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
    order = order_desc(vals, cols)
    cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
    t0 = torch.where(torch.isfinite(vals[:, 0]), vals[:, 0], torch.full_like(vals[:, 0], math.inf))
    g0 = torch.zeros(len(chunk), dtype=torch.int64, device=dev)
    e0 = torch.zeros(len(chunk), dtype=torch.int64, device=dev) if want_eq else None
    b = len(chunk)
    buf = scratch("blocks", b * m, dev)  # each block contiguous: products into strided views are slow
    blocks = []
    for c0 in range(0, m, block_cols):
        c1 = min(m, c0 + block_cols)
        blk = buf[b * c0 : b * c1].view(b, c1 - c0)
        torch.mm(q, gallery[c0:c1].T, out=blk)
        inside = (uniq >= c0) & (uniq < c1)
        if bool(inside.any()):  # the positives' own scores, exactly as compared below
            blk[:, uniq[inside] - c0] = s_u[:, inside]
        _exclude(blk, index, chunk, c0)
        g0 += count_cmp(blk, t0, "gt")
        if e0 is not None:
            e0 += count_cmp(blk, t0, "eq")
        blocks.append(blk)
    return BlockScores(blocks, buf[: b * m], block_cols), (cols, vals, depth, g0, e0)


# ----------------------------------------------------------------------------- CPU ranks without a row sort


def rank_relevant(s, index: "LabelIndex", rows: np.ndarray, c_rel: int, local: np.ndarray | None = None):
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


# ----------------------------------------------------------------------------- ranked items


@dataclass
class Ranked:
    """The relevant items of a chunk of queries, in ranking order (decreasing score, then index).

    ``depth`` [b, P] (0 = padding), ``cols`` [b, P] gallery indices, ``gt``/``ge`` [b, P] (counts of
    listed items with a larger / larger-or-equal score; BIG where unknown), ``n`` [b, C+1] items per
    depth (excluded item not counted). ``rank_index`` is exact where ``index_exact`` holds.
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


def _relevant(s: torch.Tensor, index: LabelIndex, rows: np.ndarray, c_rel: int):
    """Gather the relevant items (column ``c_rel`` block) of each row: cols, vals, depth [b, P]."""
    cols, valid, depth = _relevant_cols(index, rows, c_rel, s.device)
    vals = s.gather(1, cols).masked_fill_(~valid, -math.inf)
    cols.masked_fill_(~valid, index.n_gallery)
    return cols, vals, depth


def _relevant_cols(index: LabelIndex, rows: np.ndarray, c_rel: int, dev):
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


def _index_ties(s: torch.Tensor, r: torch.Tensor, vals: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
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


def sort_path(s: torch.Tensor, index: LabelIndex, rows: np.ndarray, c_rel: int) -> Ranked:
    """Exact ranks of every item relevant at column ``c_rel`` (depths 1..c_rel+1) for a chunk, in
    every tie convention."""
    dev = s.device
    if cpu_kernels.applies(s):  # sort-free counting, index ties broken in the kernel (see rank_relevant)
        vals, cols, depth, gt, ge, after = map(torch.from_numpy, rank_relevant(s.numpy(), index, rows, c_rel))
        rank_index = after.add_(gt).add_(1)
    else:  # CUDA, or CPU without the compiled kernels: one stable sort per row
        cols, vals, depth = _relevant(s, index, rows, c_rel)
        pos, gt, ge = _sorted_ranks(s, cols, vals, depth == 0)
        order = torch.argsort(pos, dim=1)  # ranking order: padding (BIG) last
        cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
        pos, gt, ge = pos.gather(1, order), gt.gather(1, order), ge.gather(1, order)
        rank_index = torch.where(depth > 0, pos + 1, gt + 1)
    n = torch.from_numpy(index.depth_counts(c_rel)[rows]).to(dev)
    return Ranked(rows, depth, cols, vals, gt, ge, rank_index, n, c_rel + 1)


def count_path(s, index: LabelIndex, rows: np.ndarray, c: int, first_cutoff: np.ndarray,
               next_cutoff: np.ndarray, first=None) -> Ranked:
    """Ranks of the positives at column ``c`` by counting, only as far as the cutoffs need.

    ``s``: the chunk's scores (tensor or :class:`BlockScores`). The best positive's rank is exact
    whenever gt + 1 <= ``first_cutoff`` (else a lower bound > cutoff); the m-th positive's rank is
    computed while the previous one is <= ``next_cutoff``. Unknown ranks are BIG. The result has
    one level (depth 1 = positive). ``first``: positives and best-positive counts from
    :func:`counted_chunk` (then only rows needing more passes are materialised)."""
    if isinstance(s, torch.Tensor):
        s = BlockScores([s])
    dev = s.device
    b, m = s.shape
    if first is None:
        full = s.full()
        cols, vals, depth = _relevant(full, index, rows, c)
        order = order_desc(vals, cols)
        cols, vals, depth = cols.gather(1, order), vals.gather(1, order), depth.gather(1, order)
        t0 = torch.where(torch.isfinite(vals[:, 0]), vals[:, 0], torch.full_like(vals[:, 0], math.inf))
        g0 = count_cmp(full, t0, "gt").to(dev)
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
    if s.compiled():  # the compiled kernels read the rows in place
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
            e = count_cmp(sr, v[a_, q_], "eq", rows=a_.cpu()).to(dev)
            ge_top[a_, q_] = gt_top[a_, q_] + e
        gt[r] = torch.where(inside, gt_top, torch.where(okp, torch.full_like(gt_top, kk), gt[r]))
        ge[r] = torch.where(inside, ge_top, torch.where(okp, torch.full_like(ge_top, kk + 1), ge[r]))
        ri = torch.where(okp, gt[r] + 1, rank_index[r])
        tied = inside & (ge[r] - gt[r] > 1)
        if bool(tied.any()):
            a_, q_ = tied.nonzero(as_tuple=True)
            ri[a_, q_] += _index_ties(sr, a_, v[a_, q_], cols[r][a_, q_])
        rank_index[r] = ri

    def tie_break(r: torch.Tensor, p: int) -> None:
        lr = local[r]
        src = sub if sub is not s and bool((lr >= 0).all()) else s.rows(r)
        idx = lr if src is sub else torch.arange(len(r), device=dev)
        rank_index[r, p] += _index_ties(src, idx, vals[r, p], cols[r, p])

    def exact(r: torch.Tensor, p: int, g: torch.Tensor, e: torch.Tensor | None = None) -> None:
        """Set the p-th positive's ranks of rows r given g = #items above it (checks ties)."""
        if e is None:
            e = count_cmp(sub, vals[r, p], "eq", rows=local[r].cpu()).to(dev)
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
        g = count_cmp(sub, vals[r, p], "gt", rows=local[r].cpu()).to(dev)
        near = g + 1 <= c2[r]
        far = r[~near]
        gt[far, p], ge[far, p], rank_index[far, p] = g[~near], g[~near] + 1, g[~near] + 1
        if bool(near.any()):
            exact(r[near], p, g[near])
        active[r] = (npos[r] > p + 1) & (gt[r, p] + 1 <= c2[r])
        p += 1
    return _count_result(index, rows, c, m, depth, cols, vals, gt, ge, rank_index)


def _count_result(index, rows, c, m, depth, cols, vals, gt, ge, rank_index) -> Ranked:
    dev = depth.device
    b = depth.shape[0]
    n = torch.zeros((b, 2), dtype=torch.int64, device=dev)
    n[:, 1] = torch.from_numpy(index.n_relevant(c)[rows]).to(dev)
    listed = m - torch.from_numpy((index.excl[rows] >= 0).astype(np.int64)).to(dev)
    n[:, 0] = listed - n[:, 1]
    return Ranked(rows, depth, cols, vals, gt, ge, rank_index, n, 1)
