r"""Relevances of the hierarchical ranking losses: shared levels between a query and each item of
its list, HAPPIER's relevance (H-AP) and the relevance under which H-AP equals ΣwAP."""

from __future__ import annotations

import torch

__all__ = ["shared_levels", "happier_relevance", "sigma_w_relevance"]


def shared_levels(y: torch.Tensor, yr: torch.Tensor, dtype=torch.long) -> torch.Tensor:
    """[B, N] number of hierarchy levels whose labels agree (SupRank's label matrix), as ``dtype``."""
    if y.shape[1] != yr.shape[1]:
        raise ValueError(f"labels have {y.shape[1]} levels but ref_labels have {yr.shape[1]}")
    out = (y[:, :1] == yr[:, 0].unsqueeze(0)).to(dtype)
    for lv in range(1, y.shape[1]):
        out += y[:, lv : lv + 1] == yr[:, lv].unsqueeze(0)
    return out


def happier_relevance(levels: torch.Tensor, num_levels: int, alpha: float = 1.0,
                      list_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""HAPPIER's relevance (eq. 20): rel(k) = (l/L)^alpha / |Omega^(l)| for k in Omega^(l).

    ``levels`` [Q, N] = number of shared levels l in 0..L; |Omega^(l)| counts the items of
    the query's list at that level (the query itself included when it is in its list).
    The official code ('pop' relevance) uses (l / (L - 1))^alpha: a constant factor, which
    H-AP is invariant to.
    """
    levels = levels.long()
    if list_mask is None:
        list_mask = torch.ones_like(levels, dtype=torch.bool)
    onehot = torch.nn.functional.one_hot(levels.clamp(0, num_levels), num_levels + 1)
    counts = (onehot * list_mask.unsqueeze(-1)).sum(1)  # [Q, L+1]
    w = (torch.arange(num_levels + 1, device=levels.device, dtype=torch.float64) / num_levels) ** alpha
    w[0] = 0.0
    per_level = w.unsqueeze(0) / counts.clamp_min(1).to(torch.float64)  # [Q, L+1]
    rel = per_level.gather(1, levels.clamp(0, num_levels)).float()
    return rel * list_mask


def sigma_w_relevance(levels: torch.Tensor, num_levels: int, weights=None,
                      list_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""The relevance under which H-AP equals ΣwAP = sum_l w_l AP^(l) (supplementary eq. 44).

    rel(k) = sum_{p=1}^{l_k} w_p / |Omega^{+,p}| where l_k is the number of levels k shares with
    the query, Omega^{+,p} the items of the query's list sharing at least p levels, and w_p the
    weight of AP at level p. ``weights``: one per label column, finest first (column c is level
    L - c; default uniform 1/L), as :func:`rankrepro.metrics.hierarchical.relevance`
    (``property1``) takes them, so a model trained on it optimises the ΣwAP it is tested on.
    """
    levels = levels.long()
    if list_mask is None:
        list_mask = torch.ones_like(levels, dtype=torch.bool)
    w_col = [1.0 / num_levels] * num_levels if weights is None else [float(x) for x in weights]
    if len(w_col) != num_levels:
        raise ValueError(f"sigma_w relevance needs {num_levels} weights (one per label column), got {len(w_col)}")
    onehot = torch.nn.functional.one_hot(levels.clamp(0, num_levels), num_levels + 1)
    counts = (onehot * list_mask.unsqueeze(-1)).sum(1).to(torch.float64)  # [Q, L+1]
    per_level = torch.zeros_like(counts)
    acc = torch.zeros_like(counts[:, 0])
    for p in range(1, num_levels + 1):
        tail = counts[:, p:].sum(1)
        acc = acc + torch.where(tail > 0, w_col[num_levels - p] / tail.clamp(min=1), torch.zeros_like(tail))
        per_level[:, p] = acc
    rel = per_level.gather(1, levels.clamp(0, num_levels)).float()
    return rel * list_mask
