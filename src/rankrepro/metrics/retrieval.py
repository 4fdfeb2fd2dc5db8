"""Binary retrieval metrics (one label level) and the PML-compatible ``retrieval_metrics``.

For a query with label y at the level used, the positives are the listed gallery items with label y
(the query itself is never listed in same-set protocols). ``R`` = number of positives; queries with
R = 0 ("lone") are left out of every metric (PML's convention). ``rank(p)`` is the 1-based position of
positive p in the list sorted by decreasing score, ``rank+(p)`` its position among the positives
(ties: :mod:`rankrepro.metrics.ranking`), ``P(i)`` the precision at position i.

========  ===========================================================================  ========
metric    definition (per query; the reported value is the mean over non-lone queries)  ties
========  ===========================================================================  ========
R@k       1 if a positive is among the top k (DML "recall"; R@1 == PML precision_at_1)    index
TR@k      #{p : rank(p) <= k} / min(R, k)   ("true" recall, SupRank eq. 14)              index
P@k       #{p : rank(p) <= k} / k                                                        index
mAP@R     (1/R) sum_{p : rank(p) <= R} rank+(p) / rank(p)   (PML MAP@R)                  index
RP        #{p : rank(p) <= R} / R   (R-precision)                                        index
mAP@k     (1/min(R, k)) sum_{p : rank(p) <= k} rank+(p) / rank(p)  (DELF / GLDv2 mAP@100) index
MRR       1 / min_p rank(p)                                                              index
mAP / AP  (1/R) sum_p rank+(p) / rank(p) over the full list (= PML mAP with k=None)      pessimistic
========  ===========================================================================  ========

Suffix ``_level{c}`` evaluates at label column c (default 0, the finest). With ties
``"pessimistic"``, ``rank(p) = #{items with score >= s_p}`` and ``rank+(p)`` likewise among positives,
so full-list AP equals scikit-learn's ``average_precision_score`` (AP = (1/R) sum_p
#{positives >= s_p} / #{items >= s_p}). With ``"index"`` every metric equals PML's
AccuracyCalculator (faiss IndexFlatIP) on full lists (k=None) even with exact ties; with a finite k
PML's faiss heap may keep other tied items at the k boundary.
"""

from __future__ import annotations

import numpy as np
import torch

from . import cpu_kernels
from .ranking import BIG, Ranked

__all__ = ["binary_metric", "retrieval_metrics", "RANKED_KINDS", "FULL_KINDS"]

RANKED_KINDS = ("R@k", "TR@k", "P@k", "mAP@R", "RP", "mAP@k", "MRR")
FULL_KINDS = ("mAP",)


def binary_metric(r: Ranked, lam: int, kind: str, k: int | None, ties: str) -> torch.Tensor:
    """Per-row value of one binary metric (float64 [b], NaN for lone rows).

    ``lam``: positives are the items of depth >= lam (lam = C - c for label column c)."""
    pos = r.depth >= lam
    rank = torch.where(pos, r.rank(ties), torch.full_like(r.depth, BIG))
    n_pos = r.n[:, lam:].sum(1)
    big_r = n_pos.clamp(min=1).to(torch.float64)
    if kind == "R@k":
        v = (rank.min(1).values <= k).to(torch.float64)
    elif kind == "MRR":
        best = rank.min(1).values
        v = torch.where(best < BIG, 1.0 / best.clamp(max=2**52).to(torch.float64), torch.zeros_like(big_r))
    elif kind == "P@k":
        v = (rank <= k).sum(1).to(torch.float64) / k
    elif kind == "TR@k":
        v = (rank <= k).sum(1).to(torch.float64) / torch.clamp(big_r, max=float(k))
    elif kind == "RP":
        v = (rank <= n_pos[:, None]).sum(1).to(torch.float64) / big_r
    elif kind == "mAP" and cpu_kernels.applies(r.depth):  # compiled, same definition
        out = np.empty(r.depth.shape[0])
        cpu_kernels.ap(*cpu_kernels.arrays(r.depth, r.vals, r.rank(ties), n_pos), lam, ties != "index", out)
        return torch.from_numpy(out)
    elif kind == "mAP":  # every positive has an exact rank here (sort path)
        term = r.before(ties, lam).to(torch.float64) / r.rank_f(ties)
        v = (term * pos).sum(1) / big_r
    elif kind in ("mAP@R", "mAP@k"):
        if kind == "mAP@R":
            cut, denom = n_pos[:, None], big_r
        else:
            cut, denom = k, torch.clamp(big_r, max=float(k))
        hit = rank <= cut
        term = r.before(ties, lam).to(torch.float64) / rank.clamp(max=2**52).to(torch.float64)
        v = (term * hit).sum(1) / denom
    else:  # pragma: no cover - guarded by the parser
        raise ValueError(f"unknown binary metric {kind!r}")
    return torch.where(n_pos > 0, v, torch.full_like(v, float("nan")))


def retrieval_metrics(
    embeddings,
    labels,
    *,
    recall_at=(1, 10, 100, 1000),
    map_at_r: bool = True,
    r_precision: bool = True,
    gallery=None,
    gallery_labels=None,
    chunk_size: int | None = None,
    device=None,
) -> dict:
    """``R@k`` (k in ``recall_at``), ``mAP@R`` and ``RP`` at the finest level (column 0).

    Exactly PML's AccuracyCalculator definitions (``precision_at_1`` == ``R@1``,
    ``mean_average_precision_at_r``, ``r_precision``; k beyond the gallery size is capped), computed
    by :func:`rankrepro.metrics.compute`. Without a gallery each query is searched against all the
    other embeddings (itself removed by index). Returns the metrics plus ``n_queries`` (queries used)
    and ``n_lone`` (queries without any positive, left out).
    """
    from .api import compute

    lab = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if lab.ndim == 2:
        lab = lab[:, 0]
    elif lab.ndim != 1:
        raise ValueError(f"labels must be [N] or [N, L], got shape {lab.shape}")
    n = embeddings.shape[0] if hasattr(embeddings, "shape") else len(embeddings)
    if n != len(lab):
        raise ValueError("embeddings and labels have different lengths")
    if gallery is None and gallery_labels is not None:
        raise ValueError("gallery_labels given without gallery")
    if gallery is not None and gallery_labels is None:
        raise ValueError("gallery given without gallery_labels")
    gl = gallery_labels
    if gl is not None:
        gl = gl.detach().cpu().numpy() if isinstance(gl, torch.Tensor) else np.asarray(gl)
        gl = gl[:, 0] if gl.ndim == 2 else gl
    names = [f"R@{int(k)}" for k in recall_at]
    if map_at_r:
        names.append("mAP@R")
    if r_precision:
        names.append("RP")
    if not isinstance(embeddings, (np.ndarray, torch.Tensor)):
        embeddings = np.asarray(embeddings, dtype=np.float32)
    return compute(embeddings, lab, gallery, gl, metrics=names, device=device, max_rows=chunk_size)
