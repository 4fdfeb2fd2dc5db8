"""The metrics engine: every metric of the papers from embeddings and labels, exactly.

:func:`compute_plain` evaluates one query set against a gallery (or against itself) — the
``same-set`` and ``query-gallery`` protocols. It is the layer the named protocols
(:mod:`rankrepro.metrics.protocols`) are built on; the public entry point is
:func:`rankrepro.metrics.compute` (:mod:`rankrepro.metrics.api`), which dispatches on ``protocol``.

Metric names (``metrics=[...]``; ``_level{c}`` evaluates a binary metric at label column c, default 0):

* ranked-list (counting path unless a full-list metric is also asked):
  ``R@k``, ``TR@k``, ``P@k``, ``mAP@R``, ``RP``, ``mAP@k`` (e.g. ``mAP@100``, DELF convention),
  ``MRR`` — see :mod:`rankrepro.metrics.binary`;
* full-list: ``mAP`` (alias ``AP``), ``ASI_level{c}``, ``NDCG_level{c}`` (binary), and the
  hierarchical ``H-AP``, ``ΣwAP`` (alias ``SwAP``), ``ASI``, ``NDCG`` over all label columns —
  see :mod:`rankrepro.metrics.hierarchical`;
* clustering and geometry: ``NMI``, ``F1``, ``dists@intra``, ``dists@inter``,
  ``dists@intra_over_inter`` — see :mod:`rankrepro.metrics.clustering` (query embeddings only).

Tie conventions (``ties``; definitions in :mod:`rankrepro.metrics.ranking`). Default (``None``):
ranked-list metrics ``"index"``, AP / H-AP / ΣwAP / ASI ``"pessimistic"`` (scikit-learn's AP),
NDCG ``"average"`` (scikit-learn's ``ndcg_score``). ``ties="index"`` or ``"pessimistic"`` forces one
convention for all; ``"average"`` means pessimistic except for NDCG.
"""

from __future__ import annotations

import numpy as np
import torch

from . import clustering
from .binary import binary_metric
from .chunks import chunk_rows, chunk_scores, for_chunks
from .counting import count_path, counted_chunk
from .full_list import sort_path
from .hierarchical import asi, discount_table, hap, ndcg, relevance
from .inputs import LabelIndex, as_embeddings, encode_labels
from .names import Spec, parse_metric
from .ranking import BIG, TIES
from .workers import Workers

__all__ = ["compute_plain", "parse_metric", "Spec", "PLAIN_PROTOCOLS"]

_DEFAULT_METRICS = ("R@1", "R@10", "R@100", "R@1000", "mAP@R", "RP")
PLAIN_PROTOCOLS = ("same-set", "query-gallery")  # the protocols compute_plain handles itself


def _ties_for(spec: Spec, ties: str | None) -> str:
    if ties is None:
        if spec.family == "ranked":
            return "index"
        return "average" if spec.kind == "NDCG" else "pessimistic"
    if ties == "average":
        return "average" if spec.kind == "NDCG" else "pessimistic"
    return ties


def _n_label_cols(labels) -> int:
    shape = labels.shape if hasattr(labels, "shape") else np.asarray(labels).shape
    return 1 if len(shape) == 1 else int(shape[1])


def compute_plain(query, query_labels, gallery=None, gallery_labels=None, metrics=None,
                  protocol: str | None = None, *, exclude=None, ties: str | None = None, alpha: float = 1.0,
                  hap_relevance: str = "pop", hap_count_self: bool | None = None, sigma_w=None,
                  n_clusters: int | None = None, kmeans_niter: int = 20, kmeans_seed: int = 1234,
                  device=None, memory_budget: int | None = None, max_rows: int | None = None,
                  per_query: bool = False, compiled: bool = True) -> dict:
    """Compute ``metrics`` for ``query`` against ``gallery`` (or against itself).

    Arguments and result as :func:`rankrepro.metrics.compute` (the entry point), with ``protocol``
    limited to ``None``, ``"same-set"`` and ``"query-gallery"``. ``compiled=False`` runs the torch
    code (the CUDA path) on CPU instead of the compiled kernels (:mod:`~rankrepro.metrics.workers`);
    the results are the same, which the tests check.
    """
    if protocol not in (None,) + PLAIN_PROTOCOLS:
        raise ValueError(f"compute_plain runs protocols None, {', '.join(PLAIN_PROTOCOLS)}; got {protocol!r} "
                         "(named protocols: rankrepro.metrics.compute)")
    if protocol == "same-set" and gallery is not None:
        raise ValueError("protocol 'same-set' takes no gallery")
    if protocol == "query-gallery" and gallery is None:
        raise ValueError("protocol 'query-gallery' needs a gallery")
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("give both gallery and gallery_labels, or neither")
    if ties is not None and ties not in TIES:
        raise ValueError(f"ties must be one of {TIES} or None, got {ties!r}")
    if metrics is None:
        metrics = _DEFAULT_METRICS
    if isinstance(metrics, str):
        metrics = [metrics]
    specs = [parse_metric(m) for m in metrics]
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"duplicate metric names in {list(metrics)}")

    q = as_embeddings(query, "query", device)
    g = q if gallery is None else as_embeddings(gallery, "gallery", q.device)
    on_cpu = q.device.type == "cpu"
    if max_rows is None:
        max_rows = 512 if on_cpu else 4096
    if memory_budget is None:
        memory_budget = 1 << 30 if on_cpu else 3 << 30
    if g.shape[1] != q.shape[1]:
        raise ValueError(f"dimension mismatch: query {q.shape[1]} vs gallery {g.shape[1]}")
    nq = q.shape[0]
    if len(np.asarray(query_labels) if not isinstance(query_labels, torch.Tensor) else query_labels) != nq:
        raise ValueError("query and query_labels have different lengths")
    if gallery_labels is not None and len(gallery_labels) != g.shape[0]:
        raise ValueError("gallery and gallery_labels have different lengths")

    n_cols_all = _n_label_cols(query_labels)
    out: dict = {}
    per: dict = {}
    label_specs = [s for s in specs if s.family in ("ranked", "full", "hier")]
    for s in specs:
        if s.col is not None and s.col >= n_cols_all:
            raise ValueError(f"{s.name}: labels have {n_cols_all} column(s), no column {s.col}")

    if label_specs:
        c_max = max((n_cols_all - 1) if s.family == "hier" else s.col for s in label_specs)
        qcodes, gcodes = encode_labels(query_labels, gallery_labels, n_cols=c_max + 1)
        if exclude is None:
            excl = np.arange(nq) if gallery is None else np.full(nq, -1)
        else:
            excl = np.asarray(exclude.cpu() if isinstance(exclude, torch.Tensor) else exclude, np.int64)
        index = LabelIndex(qcodes, gcodes, excl)
        if hap_count_self is None:
            hap_count_self = bool((excl >= 0).any())
        vals = _evaluate(q, g, index, label_specs, ties=ties, alpha=alpha, hap_relevance=hap_relevance,
                         hap_count_self=hap_count_self, sigma_w=sigma_w, c_max=c_max,
                         memory_budget=memory_budget, max_rows=max_rows, compiled=compiled)
        for s in label_specs:
            v = vals[s.name]
            per[s.name] = v
            out[s.name] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
        n_pos = index.n_relevant(0)
        out["n_queries"] = int((n_pos > 0).sum())
        out["n_lone"] = int(nq - out["n_queries"])

    cl_specs = [s for s in specs if s.family == "cluster"]
    d_specs = [s for s in specs if s.family == "dists"]
    if cl_specs or d_specs:
        ql = np.asarray(query_labels.cpu() if isinstance(query_labels, torch.Tensor) else query_labels)
        ql2 = ql[:, None] if ql.ndim == 1 else ql
    if cl_specs:
        done = {}
        for s in cl_specs:
            if s.col not in done:
                lab = ql2[:, s.col]
                k = n_clusters if n_clusters is not None else len(np.unique(lab))
                assign, cent = clustering.kmeans(q, k, niter=kmeans_niter, seed=kmeans_seed,
                                                 gpu=q.device.type == "cuda" and clustering.faiss_gpus() > 0)
                done[s.col] = (lab, assign, cent)
            lab, assign, cent = done[s.col]
            if s.kind == "NMI":
                out[s.name] = clustering.nmi(lab, assign)
            else:
                out[s.name] = clustering.clustering_f1(lab, assign, q, cent)
    if d_specs:
        cache = {}
        for s in d_specs:
            if s.col not in cache:
                cache[s.col] = clustering.dists(q, ql2[:, s.col])
            out[s.name] = cache[s.col][s.kind]
    if "n_queries" not in out:
        out["n_queries"], out["n_lone"] = nq, 0
    ordered = {s.name: out[s.name] for s in specs}
    ordered["n_queries"], ordered["n_lone"] = out["n_queries"], out["n_lone"]
    if per_query:
        ordered["per_query"] = per
    return ordered


def _cutoff(s: Spec, r_pos: np.ndarray) -> np.ndarray:
    """The deepest rank a ranked-list metric looks at, per query."""
    if s.kind in ("mAP@R", "RP"):
        return r_pos
    if s.kind == "MRR":
        return np.full_like(r_pos, BIG)
    return np.full_like(r_pos, s.k)


def _evaluate(q, g, index: LabelIndex, specs, *, ties, c_max, memory_budget, max_rows, compiled,
              **hap_kw) -> dict:
    """Per-query values (float64 [Nq], NaN where undefined) of label-based metrics, on worker
    threads of this call (:class:`~rankrepro.metrics.workers.Workers`)."""
    with Workers.for_device(q.device, compiled) as workers:
        if any(s.family in ("full", "hier") for s in specs):
            return _evaluate_sorted(q, g, index, specs, workers, ties=ties, c_rel=c_max, memory_budget=memory_budget,
                                    max_rows=max_rows, **hap_kw)
        return _evaluate_counted(q, g, index, specs, workers, ties=ties, memory_budget=memory_budget,
                                 max_rows=max_rows)


def _evaluate_sorted(q, g, index, specs, workers: Workers, *, ties, c_rel, memory_budget, max_rows, alpha,
                     hap_relevance, hap_count_self, sigma_w) -> dict:
    nq = q.shape[0]
    big_c = c_rel + 1
    res = {s.name: np.full(nq, np.nan) for s in specs}
    n_rel = {c: index.n_relevant(c) for c in range(big_c)}
    swap = [s for s in specs if s.kind == "SwAP"]
    per_level = np.full((big_c, nq), np.nan) if swap else None
    table = discount_table(g.shape[0], q.device) if any(s.kind == "NDCG" for s in specs) else None

    def process(s_mat: torch.Tensor, chunk: np.ndarray) -> None:
        r = sort_path(s_mat, index, chunk, c_rel, workers)
        for s in specs:
            t = _ties_for(s, ties)
            lam = None if s.col is None else big_c - s.col
            if s.kind == "ASI":
                v = asi(r, t, lam)
            elif s.kind == "NDCG":
                v = ndcg(r, t, table, lam)
            elif s.kind == "H-AP":
                self_in = None
                if hap_count_self:
                    self_in = torch.from_numpy(index.excl[chunk] >= 0).to(r.depth.device)
                rel = relevance(r.n, alpha=alpha, kind=hap_relevance, self_in=self_in, weights=sigma_w)
                v = hap(r, rel, t)
            elif s.kind == "SwAP":
                for lv in range(1, big_c + 1):
                    per_level[lv - 1, chunk] = binary_metric(r, lv, "mAP", None, t).cpu().numpy()
                continue
            else:
                v = binary_metric(r, lam, s.kind, s.k, t)
            res[s.name][chunk] = v.cpu().numpy()

    rows = index.qorder[n_rel[c_rel][index.qorder] > 0]
    size = index.stop[c_rel] - index.start[c_rel]
    m = g.shape[0]
    zero = np.zeros(nq, np.int64)
    threads = max(1, torch.get_num_threads()) if q.device.type == "cpu" else 1

    def chunk_fn(big: np.ndarray) -> None:
        # one product for the chunk (sized for its scores), then the per-item work on sub-chunks
        # of rows sized for their relevant sets
        s_big = chunk_scores(q, g, index, big, workers)
        a = 0
        for chunk in chunk_rows(big, size, 0, memory_budget // 2 // threads, max_rows):  # views of s_big
            process(s_big[a : a + len(chunk)], chunk)
            a += len(chunk)

    # the scores (on CPU, 4 * Ng per row); the torch path's row sort adds 20 * Ng per row (sorted
    # copy, int64 order, int32 positions)
    row_bytes = 4 * m if workers.compiled_on(q) else 24 * m
    for_chunks(workers, q.device, rows, zero, row_bytes, memory_budget // 2, max_rows, chunk_fn)
    for s in swap:  # a dataset-level value: Σ_l w_l · mAP^(l) (see hierarchical.py)
        w = [1.0 / big_c] * big_c if sigma_w is None else [float(x) for x in sigma_w]
        if len(w) != big_c:
            raise ValueError(f"sigma_w needs {big_c} weights (one per label column), got {len(w)}")
        means = [np.nanmean(p) if np.isfinite(p).any() else np.nan for p in per_level]
        res[s.name][:] = sum(w[big_c - lv] * means[lv - 1] for lv in range(1, big_c + 1))
    return res


def _evaluate_counted(q, g, index, specs, workers: Workers, *, ties, memory_budget, max_rows) -> dict:
    nq = q.shape[0]
    res = {s.name: np.full(nq, np.nan) for s in specs}
    cols = sorted({s.col for s in specs})
    n_rel = {c: index.n_relevant(c) for c in cols}
    first = {c: np.zeros(nq, np.int64) for c in cols}
    nxt = {c: np.zeros(nq, np.int64) for c in cols}
    for s in specs:
        cut = _cutoff(s, n_rel[s.col])
        first[s.col] = np.maximum(first[s.col], cut)
        if s.kind not in ("R@k", "MRR"):
            nxt[s.col] = np.maximum(nxt[s.col], cut)
    anyrel = np.zeros(nq, bool)
    for c in cols:
        anyrel |= n_rel[c] > 0
    rows = index.qorder[anyrel[index.qorder]]
    size = np.max([index.stop[c] - index.start[c] for c in cols], axis=0)
    c_first = cols[0]
    state = {"need_eq": 0.0}  # fraction of rows of the last chunk whose best positive needed its ties

    def chunk_fn(chunk: np.ndarray) -> None:
        # counting ties in cache is cheaper than re-reading the rows that need it, once many do
        s_mat, pre = counted_chunk(q, g, index, chunk, c_first, want_eq=state["need_eq"] > 0.25, workers=workers)
        state["need_eq"] = float(np.mean(pre[3].cpu().numpy() + 1 <= first[c_first][chunk]))
        for c in cols:
            r = count_path(s_mat, index, chunk, c, first[c][chunk], nxt[c][chunk],
                           first=pre if c == c_first else None, workers=workers)
            for s in specs:
                if s.col == c:
                    res[s.name][chunk] = binary_metric(r, 1, s.kind, s.k, _ties_for(s, ties)).cpu().numpy()

    # the score blocks (4 * Ng per row) and the rows that need further passes: on CPU read in place
    # (their per-row buffers are small), on a GPU copied, compared into boolean temporaries and
    # partially sorted (measured on an H100: 6.2 GB peak for a 3 GiB budget at 8 * Ng)
    row_bytes = (8 if workers.compiled_on(q) else 16) * g.shape[0]
    for_chunks(workers, q.device, rows, size, row_bytes, memory_budget, max_rows, chunk_fn)
    return res
