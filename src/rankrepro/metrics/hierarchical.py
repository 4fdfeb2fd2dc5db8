"""Hierarchical (multi-level) metrics: H-AP, ΣwAP, ASI, NDCG, and the per-level binary AP.

Notation (SupRank TPAMI §V): labels have L columns, finest first. For a query, the listed items are
partitioned into Ω(0..L) by their *depth* l = number of shared label levels (Ω(L): same finest class,
Ω(0) = Ω⁻: negatives); Ω⁺ = Ω(1) ∪ ... ∪ Ω(L). ``rank(k)`` is k's position in the full ranked list
and H(x) the Heaviside step (ties: see :mod:`rankrepro.metrics.ranking`).

H-AP (eq. 18-19)
    H-rank⁺(k) = rel(k) + Σ_{j∈Ω⁺, j≠k} min(rel(k), rel(j)) · H(s_j − s_k)
    H-AP = [Σ_{k∈Ω⁺} H-rank⁺(k) / rank(k)] / Σ_{k∈Ω⁺} rel(k)
    With one level H-AP is the binary AP.

Relevance (eq. 20, ``relevance="pop"``)
    rel(k) = (l/L)^α / |Ω(l)| for k ∈ Ω(l), α = ``alpha`` (paper: 1). SupRank's evaluation code
    counts the query itself in |Ω(L)| (it precomputes relevances over the test set including self)
    while summing rel over retrieved items only; ``count_self=True`` reproduces the code (default in
    same-set protocols), ``False`` the paper text. (SupRank's code also finds an item's level by
    comparing relevance *values*, which double counts when two levels get equal relevance; here the
    level is the depth itself.) H-AP is invariant to scaling all weights, so the code's
    (l/(L-1))^α is the same metric.

Property 1 relevance (``relevance="property1"``)
    rel(k) = Σ_{p=1}^{l} w_p / |Ω^{+,p}| with Ω^{+,p} = Ω(p) ∪ ... ∪ Ω(L) and Σ w_p = 1; then H-AP
    equals ΣwAP = Σ_p w_p AP^(p), AP^(p) the binary AP whose positives are Ω^{+,p}.

ΣwAP
    Σ_p w_p · mAP^(p): the weighted sum of the per-level mAPs (each averaged over the queries that
    have positives at that level; identical to the per-query Property-1 H-AP when no level is empty).
    Weights are given per label column (finest first), default uniform.

ASI (DyML; SupRank appendix C-A1)
    With N = |Ω⁺| and the ideal ranking sorted by decreasing depth,
    SI(n) = Σ_{l≥1} min(#{depth-l items in the top n}, #{depth-l items in the ideal top n}) / n,
    ASI = (1/N) Σ_{n=1..N} SI(n). ``ASI_level{c}`` is the binary version at column c.

NDCG (eq. 23, full list, no cutoff)
    DCG = Σ_{k∈Ω⁺} (2^l(k) − 1) / log2(1 + rank(k)), NDCG = DCG / DCG(ideal ranking).
    ``NDCG_level{c}``: binary gains at column c. Default ties ``"average"``: each tied item gets the
    mean discount of the positions its tie group occupies (scikit-learn's ``ndcg_score``).
"""

from __future__ import annotations

import numpy as np
import torch

from . import cpu_kernels
from .ranking import Ranked

__all__ = ["relevance", "hap", "asi", "ndcg", "discount_table"]


def relevance(n: torch.Tensor, *, alpha: float = 1.0, kind: str = "pop", self_in: torch.Tensor | None = None,
              weights=None) -> torch.Tensor:
    """Per-row relevance of each depth 0..L: [b, L+1] float64 (depth 0 = 0).

    ``n`` [b, L+1]: items per depth. ``self_in`` [b] bool: count the query itself in |Ω(L)|
    (pop only). ``weights``: Property-1 weights per label column, finest first (default uniform)."""
    b, lp1 = n.shape
    big_l = lp1 - 1
    nf = n.to(torch.float64)
    rel = torch.zeros((b, lp1), dtype=torch.float64, device=n.device)
    if kind == "pop":
        if self_in is not None:
            nf = nf.clone()
            nf[:, big_l] += self_in.to(torch.float64)
        for lvl in range(1, lp1):
            w = (lvl / big_l) ** alpha
            rel[:, lvl] = torch.where(nf[:, lvl] > 0, w / nf[:, lvl].clamp(min=1), torch.zeros_like(nf[:, lvl]))
    elif kind == "property1":
        w_col = [1.0 / big_l] * big_l if weights is None else [float(x) for x in weights]
        if len(w_col) != big_l:
            raise ValueError(f"sigma_w needs {big_l} weights (one per label column), got {len(w_col)}")
        w_lvl = {big_l - c: w_col[c] for c in range(big_l)}  # column c <-> depth level L - c
        acc = torch.zeros(b, dtype=torch.float64, device=n.device)
        for p in range(1, lp1):
            tail = nf[:, p:].sum(1)
            acc = acc + torch.where(tail > 0, w_lvl[p] / tail.clamp(min=1), torch.zeros_like(tail))
            rel[:, p] = acc
    else:
        raise ValueError(f"hap_relevance must be 'pop' or 'property1', got {kind!r}")
    return rel


def hap(r: Ranked, rel: torch.Tensor, ties: str) -> torch.Tensor:
    """Per-row H-AP (eq. 19) for relevances ``rel`` [b, L+1]; NaN when Ω⁺ is empty."""
    if r.kernels:
        out = np.empty(r.depth.shape[0])
        cpu_kernels.hap(*cpu_kernels.arrays(r.depth, r.vals, r.rank(ties), rel), ties != "index", out)
        return torch.from_numpy(out)
    big_l = r.n_cols
    relk = rel.gather(1, r.depth)  # 0 for padding (depth 0), so padding adds nothing below
    hrank = torch.zeros_like(relk)
    upper = None
    for lvl in range(big_l, 0, -1):
        cum = r.before(ties, lvl)
        c_l = cum if upper is None else cum - upper  # depth-lvl items ranked at or before
        upper = cum
        hrank.addcmul_(torch.minimum(relk, rel[:, lvl : lvl + 1]), c_l.to(torch.float64))
    num = (hrank / r.rank_f(ties)).sum(1)
    den = relk.sum(1)
    return torch.where(den > 0, num / den.clamp(min=1e-300), torch.full_like(num, float("nan")))


def asi(r: Ranked, ties: str, lam: int | None = None) -> torch.Tensor:
    """Per-row ASI over the full relevant set (``lam``: binary version, positives = depth >= lam)."""
    if r.kernels:
        out = np.empty(r.depth.shape[0])
        cpu_kernels.asi(*cpu_kernels.arrays(r.depth, r.rank(ties), r.n), lam or 0, out)
        return torch.from_numpy(out)
    if lam is None:
        depth, n = r.depth, r.n
    else:
        depth = (r.depth >= lam).to(torch.int64)
        n = torch.stack([r.n[:, :lam].sum(1), r.n[:, lam:].sum(1)], 1)
    b, levels = n.shape[0], n.shape[1] - 1
    dev = depth.device
    total = n[:, 1:].sum(1)
    nmax = int(total.max().item()) if b else 0
    out = torch.full((b,), float("nan"), dtype=torch.float64, device=dev)
    if nmax == 0:
        return out
    rank = r.rank(ties)
    width = nmax + 1
    offs = (torch.arange(b, device=dev) * width)[:, None]
    steps = torch.arange(width, device=dev, dtype=torch.int64)[None, :]
    si = torch.zeros((b, width), dtype=torch.float64, device=dev)
    above = torch.zeros(b, dtype=torch.int64, device=dev)
    for lvl in range(levels, 0, -1):
        sel = (depth == lvl) & (rank <= total[:, None])
        idx = (offs + rank.clamp(max=nmax))[sel]
        hist = torch.bincount(idx, minlength=b * width).reshape(b, width)
        got = torch.cumsum(hist, 1)
        ideal = (steps - above[:, None]).clamp(min=0)
        ideal = torch.minimum(ideal, n[:, lvl : lvl + 1])
        si += torch.minimum(got, ideal).to(torch.float64)
        above += n[:, lvl]
    si[:, 0] = 0
    si = si / steps.clamp(min=1).to(torch.float64)
    si = torch.where(steps <= total[:, None], si, torch.zeros_like(si))
    val = si.sum(1) / total.clamp(min=1).to(torch.float64)
    return torch.where(total > 0, val, out)


def discount_table(m: int, device) -> torch.Tensor:
    """D[n] = Σ_{i=1..n} 1 / log2(1 + i), n = 0..m (float64)."""
    i = torch.arange(1, m + 1, dtype=torch.float64, device=device)
    return torch.cat([torch.zeros(1, dtype=torch.float64, device=device), torch.cumsum(1.0 / torch.log2(1.0 + i), 0)])


def ndcg(r: Ranked, ties: str, table: torch.Tensor, lam: int | None = None) -> torch.Tensor:
    """Per-row NDCG with gains 2^depth − 1 (or binary gains at depth >= ``lam``)."""
    if r.kernels:
        out = np.empty(r.depth.shape[0])
        cpu_kernels.ndcg(*cpu_kernels.arrays(r.depth, r.gt, r.ge, r.rank(ties), r.n, table), lam or 0,
                         ties == "average", out)
        return torch.from_numpy(out)
    if lam is None:
        gain_of = (2.0 ** torch.arange(r.n_cols + 1, dtype=torch.float64, device=r.depth.device)) - 1.0
        gain = gain_of[r.depth]
        n = r.n
    else:
        gain = (r.depth >= lam).to(torch.float64)
        gain_of = torch.tensor([0.0, 1.0], dtype=torch.float64, device=r.depth.device)
        n = torch.stack([r.n[:, :lam].sum(1), r.n[:, lam:].sum(1)], 1)
    pos = gain > 0
    last = table.shape[0] - 1
    if ties == "average":
        ge = r.ge.clamp(max=last)
        gt = r.gt.clamp(max=last)
        width = (ge - gt).clamp(min=1).to(torch.float64)
        disc = (table[ge] - table[gt]) / width
    else:
        rk = r.rank(ties).clamp(min=1, max=last)
        disc = table[rk] - table[rk - 1]
    dcg = torch.where(pos, gain * disc, torch.zeros_like(gain)).sum(1)
    idcg = torch.zeros_like(dcg)
    start = torch.zeros(n.shape[0], dtype=torch.int64, device=n.device)
    for lvl in range(n.shape[1] - 1, 0, -1):
        stop = start + n[:, lvl]
        idcg += gain_of[lvl] * (table[stop.clamp(max=last)] - table[start.clamp(max=last)])
        start = stop
    return torch.where(idcg > 0, dcg / idcg.clamp(min=1e-300), torch.full_like(dcg, float("nan")))


