"""Binary retrieval metrics (one label level): definitions and ``binary_metric``.

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

__all__ = ["binary_metric", "RANKED_KINDS", "FULL_KINDS"]

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
    elif kind == "mAP" and r.kernels:  # compiled, same definition
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
