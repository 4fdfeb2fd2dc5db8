"""Triplet indices without a B x N x N mask: every triplet, built per block of anchors from each
anchor's positives ([b, P_max, N], the "[B, P, N] trick"), or one sampled negative per positive
pair (uniform or distance weighted, by ``torch.multinomial``); self pairs (query i vs reference
i, see :mod:`rankrepro.losses.baselines`) are never used."""

from __future__ import annotations

import torch

from .inputs import clear_self_pairs
from .rank import gather_relevant

__all__ = ["all_triplets", "sampled_triplets", "distance_weights"]

_BLOCK_ELEMS = 1 << 22  # max elements of a [b, P, N] triplet mask block


def _positives(y, yr, n_self):
    """Positive mask [B, N] (self removed), padded positive indices [B, P] and validity."""
    same = y.unsqueeze(1) == yr.unsqueeze(0)
    pos = clear_self_pairs(same, n_self)
    if not pos.any():
        return same, pos, None, None
    pos_idx, valid, _ = gather_relevant(pos)
    return same, pos, pos_idx, valid


def all_triplets(y, yr, n_self, keep=None):
    """Every (a, p, n): p shares a's label (p != self), n does not; built per anchor block.

    ``keep(a, p, n) -> bool mask`` filters each block (e.g. semi-hard selection) so that
    only the kept triplets are ever stored.
    """
    same, _, pos_idx, valid = _positives(y, yr, n_self)
    empty = torch.empty(0, dtype=torch.long, device=y.device)
    if pos_idx is None:
        return empty, empty, empty
    B, P = pos_idx.shape
    N = yr.shape[0]
    step = max(1, _BLOCK_ELEMS // max(1, P * N))
    out_a, out_p, out_n = [], [], []
    for s in range(0, B, step):
        mask = valid[s : s + step].unsqueeze(2) & ~same[s : s + step].unsqueeze(1)  # [b, P, N]
        a, k, n = mask.nonzero(as_tuple=True)
        a = a + s
        p = pos_idx[a, k]
        if keep is not None:
            m = keep(a, p, n)
            a, p, n = a[m], p[m], n[m]
        out_a.append(a)
        out_p.append(p)
        out_n.append(n)
    return torch.cat(out_a), torch.cat(out_p), torch.cat(out_n)


def sampled_triplets(y, yr, n_self, neg_weights):
    """One triplet per positive pair (a, p), p != self, with n ~ neg_weights[a] (rows >= 0).

    Anchors whose weight row sums to 0 (no usable negative) are skipped.
    """
    _, pos, _, _ = _positives(y, yr, n_self)
    neg_weights = neg_weights * (~(y.unsqueeze(1) == yr.unsqueeze(0))).to(neg_weights.dtype)
    row_ok = neg_weights.sum(1) > 0
    pos = pos & row_ok.unsqueeze(1)
    a, p = pos.nonzero(as_tuple=True)
    if a.numel() == 0:
        empty = torch.empty(0, dtype=torch.long, device=y.device)
        return empty, empty, empty
    counts = pos.sum(1)
    rows = counts.nonzero(as_tuple=True)[0]
    k = int(counts.max())
    draws = torch.multinomial(neg_weights[rows], k, replacement=True)  # [R, k]
    row_of = torch.full((y.shape[0],), -1, dtype=torch.long, device=y.device)
    row_of[rows] = torch.arange(rows.numel(), device=y.device)
    first = torch.cumsum(counts, 0) - counts  # index of each anchor's first pair
    rank = torch.arange(a.numel(), device=y.device) - first[a]
    return a, p, draws[row_of[a], rank]


def distance_weights(emb, ref, cutoff: float = 0.5, nonzero_loss_cutoff: float = 1.4):
    """Wu et al. (2017) negative sampling weights q(d)^-1 on the unit sphere (as in PML's
    DistanceWeightedMiner): d clamped below at ``cutoff``; log w = (2 - D) log d
    - (D - 3)/2 log(1 - d²/4); w = 0 where d >= ``nonzero_loss_cutoff``. Each row is
    scaled by its max (PML: the global max), which only matters against underflow."""
    from pytorch_metric_learning import distances as pml_distances

    D = float(emb.shape[1])
    d = pml_distances.LpDistance(normalize_embeddings=True, p=2, power=1)(emb, ref).double()
    dc = d.clamp(min=cutoff)
    log_w = (2.0 - D) * torch.log(dc) - ((D - 3.0) / 2.0) * torch.log(1.0 - 0.25 * dc**2)
    bad = ~torch.isfinite(log_w) | (d >= nonzero_loss_cutoff)
    log_w = log_w.masked_fill(bad, float("-inf"))
    row_max = log_w.max(dim=1, keepdim=True).values
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    return torch.exp(log_w - row_max).float()
