"""FastAP (Cakir, He, Xia, Kulis, Sclaroff, CVPR 2019) over pytorch-metric-learning."""

from __future__ import annotations

import torch

from rankrepro.registry import PositiveInt

from .inputs import attached_zero, clear_self_pairs, keep_in_graph, no_autocast, retrieval_lists
from .registry import register

__all__ = ["FastAP"]


@register("fast_ap")
class FastAP(torch.nn.Module):
    r"""FastAP loss ``1 - mean_q FastAP_q`` (PML ``FastAPLoss(num_bins)``).

    Distances are squared Euclidean on L2-normalised embeddings, d ∈ [0, 4], softly
    assigned to L = ``num_bins`` + 1 triangular bins centred at z_l = 4l/num_bins
    (width Δ = 4/num_bins): ``δ(d, z_l) = max(0, 1 - |d - z_l|/Δ)``. For query q with
    positives P (same label, the query itself excluded) and negatives N::

        h⁺_l = Σ_{j∈P} δ(d_qj, z_l),  h⁻_l = Σ_{j∈N} δ(d_qj, z_l)
        H⁺_l = Σ_{l'<=l} h⁺_l',       H_l = Σ_{l'<=l} (h⁺_l' + h⁻_l')
        FastAP_q = 1/|P| Σ_l h⁺_l H⁺_l / H_l

    averaged over the queries with |P| > 0 (terms with h⁺H⁺ = 0 or H = 0 are 0). SupRank
    (``fast_ap_loss.py``, ``fastap.yaml``: num_bins 10) wraps PML in the same way and uses
    it in-batch only. The original PyTorch code (kunhe) has a hand-written backward whose
    gradient is (B/2)x the true one and ignores ``grad_output``; PML (and this class) use
    autograd, i.e. the true gradient of the loss (same direction).

    Without a reference set this calls PML's ``FastAPLoss`` on the batch. A reference set
    (memory) is supported here although SupRank does not use it: the same histograms are
    computed against the reference set (detached), dropping each query's own entry (the
    column ``self_index`` gives; the memory passes it). With ref = the batch this
    equals the in-batch value (test). Memory: an [L, B, N] tensor, like PML.
    """

    family = "rank"  # AP through a histogram of distances (losses.registry)

    def __init__(self, num_bins: PositiveInt = 10):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        if not (isinstance(num_bins, int) and num_bins >= 1):
            raise ValueError(f"num_bins must be an int >= 1, got {num_bins!r}")
        self.num_bins = num_bins
        self.loss = pml_losses.FastAPLoss(num_bins=num_bins)

    def extra_repr(self) -> str:
        return f"num_bins={self.num_bins}"

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        with no_autocast(embeddings):
            lists = retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index)
            if lists.in_batch:
                return keep_in_graph(self.loss(lists.emb, lists.y), lists.emb)
            return self._with_ref(lists.emb, lists.y, lists.ref, lists.yr, lists.self_index)

    def _with_ref(self, emb, y, ref, yr, self_index):
        same = y.unsqueeze(1) == yr.unsqueeze(0)
        pos = clear_self_pairs(same, self_index)
        neg = ~same
        n_pos = pos.sum(1)
        valid = n_pos > 0
        if not bool(valid.any()):
            return attached_zero(emb)
        dist = self.loss.distance(emb[valid], ref)  # squared L2 of normalised vectors
        pos, neg, n_pos = pos[valid].to(dist.dtype), neg[valid].to(dist.dtype), n_pos[valid]
        hmax = 2.0 ** self.loss.distance.power
        delta = hmax / self.num_bins
        z = torch.linspace(0.0, hmax, self.num_bins + 1, device=dist.device, dtype=dist.dtype)
        pulse = torch.relu(1.0 - (dist.unsqueeze(0) - z.view(-1, 1, 1)).abs() / delta)  # [L, b, N]
        h_pos = (pulse * pos).sum(-1).T  # [b, L]
        h_neg = (pulse * neg).sum(-1).T
        H_pos = h_pos.cumsum(1)
        H = (h_pos + h_neg).cumsum(1)
        prod = h_pos * H_pos
        safe = (prod > 0) & (H > 0)
        ratio = torch.where(safe, prod / torch.where(safe, H, torch.ones_like(H)), torch.zeros_like(H))
        fast_ap = ratio.sum(1) / n_pos.to(ratio.dtype)
        return (1.0 - fast_ap).mean()
