"""SoftBin-AP (Revaud et al., ICCV 2019): AP through a soft quantisation of the scores."""

from __future__ import annotations

import torch

from rankrepro.registry import AtLeastTwoInt

from .inputs import attached_zero, clear_self_pairs, no_autocast, retrieval_lists
from .registry import register

__all__ = ["SoftBinAP", "soft_bins"]


def soft_bins(scores: torch.Tensor, num_bins: int, s_min: float, s_max: float) -> torch.Tensor:
    """Triangular soft assignment of ``scores`` [..., N] to ``num_bins`` bins -> [..., Q, N].

    Bin k (k = 0 .. Q-1) is centred at ``c_k = s_max - k·Δ``, Δ = (s_max - s_min)/(Q - 1),
    ordered from the highest scores down: ``q_k(s) = max(0, 1 - |s - c_k|/Δ)``; the first
    bin is 1 for s >= s_max and the last is 1 for s <= s_min (flat, clamped). The bins sum
    to 1 for every s. This is the NAVER/SupRank ``Conv1d`` quantiser, written directly.
    """
    delta = (s_max - s_min) / (num_bins - 1)
    centres = s_max - delta * torch.arange(num_bins, device=scores.device, dtype=scores.dtype)
    x = scores.unsqueeze(-2)  # [..., 1, N]
    c = centres.view(*([1] * (scores.ndim - 1)), num_bins, 1)
    q = torch.clamp(1.0 - (x - c).abs() / delta, min=0.0)
    first = torch.where(x >= s_max, torch.ones_like(x), q[..., :1, :])
    last = torch.where(x <= s_min, torch.ones_like(x), q[..., -1:, :])
    return torch.cat([first, q[..., 1:-1, :], last], dim=-2)


@register("softbin_ap")
class SoftBinAP(torch.nn.Module):
    r"""SoftBin-AP loss: ``1 - mean_q AP_q`` with AP computed on soft score histograms.

    For query q with scores s_j = <x_q, x_j> over its retrieval list and binary
    relevance y_j, with the soft bins q_k of :func:`soft_bins` (Q = ``num_bins`` on
    [``s_min``, ``s_max``] = [-1, 1], highest bin first)::

        n_k  = Σ_j q_k(s_j),    n⁺_k = Σ_j q_k(s_j) y_j
        P_k  = Σ_{k'<=k} n⁺_k' / Σ_{k'<=k} n_k',    R_k = n⁺_k / Σ_k' n⁺_k'
        AP_q = Σ_k P_k R_k

    as in the NAVER code that SupRank ships (``softbin_ap_loss.py``, config
    ``softbinap.yaml``: nq = 20, min = -1, max = 1; the 1e-16 guard of the official code is
    kept in P_k). Cost O(B·N·Q) — no B x B x B tensor.

    ``include_query`` (official code = ``True``, default): the query is in its own list
    (score s_qq = 1, relevant), as in SupRank's in-batch training; ``False`` removes it
    (Revaud et al.'s paper setting, query not in the database). With a reference set, the
    list is the reference set; ``include_query=False`` drops each query's own entry, the
    column ``self_index`` gives (the memory passes it).

    Queries with no relevant item besides themselves are skipped (the official code
    divides by zero there); if none is left the loss is 0, still attached to the graph.
    """

    family = "rank"  # AP through soft bins (losses.registry)

    def __init__(self, num_bins: AtLeastTwoInt = 20, s_min: float = -1.0, s_max: float = 1.0,
                 include_query: bool = True):
        super().__init__()
        if not (isinstance(num_bins, int) and num_bins >= 2):
            raise ValueError(f"num_bins must be an int >= 2, got {num_bins!r}")
        if not s_max > s_min:
            raise ValueError(f"need s_min < s_max, got s_min={s_min}, s_max={s_max}")
        self.num_bins, self.s_min, self.s_max = num_bins, float(s_min), float(s_max)
        self.include_query = bool(include_query)

    def extra_repr(self) -> str:
        return (f"num_bins={self.num_bins}, s_min={self.s_min}, s_max={self.s_max}, "
                f"include_query={self.include_query}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        with no_autocast(embeddings):
            return self._loss(retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index))

    def _loss(self, lists):
        emb, own = lists.emb, lists.self_index
        scores = lists.scores()  # [B, N]
        target = lists.same().to(scores.dtype)
        others = clear_self_pairs(target, own)  # relevant items besides the query itself
        keep = torch.ones_like(target)
        if not self.include_query:
            keep, target = clear_self_pairs(keep, own), others
        valid = others.sum(1) > 0
        if not bool(valid.any()):
            return attached_zero(emb)
        scores, target, keep = scores[valid], target[valid], keep[valid]
        q = soft_bins(scores, self.num_bins, self.s_min, self.s_max) * keep.unsqueeze(1)  # [b, Q, N]
        nbs = q.sum(-1)  # [b, Q]
        rec = (q * target.unsqueeze(1)).sum(-1)  # [b, Q]
        prec = rec.cumsum(-1) / (1e-16 + nbs.cumsum(-1))
        rec = rec / rec.sum(-1, keepdim=True)
        ap = (prec * rec).sum(-1)
        return 1.0 - ap.mean()
