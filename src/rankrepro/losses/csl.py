"""CSL — Cross-Scale Learning (Sun et al., "Dynamic Metric Learning", CVPR 2021)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .inputs import check_class_range, check_embeddings, check_lengths, hierarchical_labels, no_autocast
from .registry import register

__all__ = ["CSL", "DEFAULT_MARGINS"]

#: SupRank configs: csl_sop / csl_inat_base (2 levels), csl / csl_product / csl_gldv2_L3
#: (3 levels), csl_inat (iNat-full, 7 levels).
DEFAULT_MARGINS = {
    2: [0.25, 0.45],
    3: [0.25, 0.35, 0.45],
    7: [0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75],
}


@register("csl")
class CSL(nn.Module):
    r"""Cross-Scale Learning loss, as SupRank's ``CSLLoss`` (the DyML baseline).

    One proxy per finest class, P̂_c = P_c/||P_c||, s_c = <x, P̂_c> (x L2-normalised), scale
    γ = 32. For level l (finest = 0) and margin m_l::

        L_l = mean_i softplus( LSE_{c: y_l(c) != y_l(i)} γ s_ic  -  γ s_{i, y_0(i)}  +  γ m_l )

    The positive is always the sample's own finest proxy; the negatives at level l are the
    proxies whose level-l ancestor differs. ``reduction="sum"`` (official ``reduce_type``)
    adds the levels; ``"mean"`` averages them. Labels must be [B, L] with
    L >= len(``num_classes_per_level``); the first L columns are used.

    Margins default to the official configs for 2, 3 and 7 levels (:data:`DEFAULT_MARGINS`);
    pass ``margins`` for any other depth. Proxies are initialised U(-1/√D, 1/√D) from a
    generator seeded with ``proxies_seed`` (official: seed 0), leaving the global RNG alone.

    Proxy ancestry: the official code is given the unique label rows of the training set
    (``register_labels``). Here :meth:`register_labels` does the same, and, in addition,
    each training batch records the ancestors of its classes, so a run needs no extra
    call: until a class has been seen, its proxy is a negative at level 0 only (its
    coarse labels are unknown). The table is a buffer (saved in checkpoints).

    A reference set (memory) is ignored: CSL compares embeddings with proxies only.
    """

    uses_ref_set = False
    hierarchical = True  # its margins are per level: one level is a normalised softmax (losses.registry)
    family = "proxy"  # class proxies per level (losses.registry)

    def __init__(self, num_classes_per_level: list[int], embedding_size: int,
                 margins: list[float] | None = None, scale: float = 32.0, reduction: str = "sum",
                 proxies_seed: int | None = 0):
        super().__init__()
        levels = list(num_classes_per_level) if isinstance(num_classes_per_level, (list, tuple)) else None
        if not levels or not all(isinstance(c, int) and c >= 1 for c in levels):
            raise ValueError(f"num_classes_per_level must be a non-empty list of ints >= 1 (finest first), "
                             f"got {num_classes_per_level!r}")
        if not (isinstance(embedding_size, int) and embedding_size >= 1):
            raise ValueError(f"embedding_size must be an int >= 1, got {embedding_size!r}")
        L = len(levels)
        if margins is None:
            if L not in DEFAULT_MARGINS:
                raise ValueError(f"no default margins for {L} level(s) (defaults exist for "
                                 f"{DEFAULT_MARGINS}); pass margins=[...]")
            margins = DEFAULT_MARGINS[L]
        margins = [float(m) for m in margins]
        if len(margins) != L:
            raise ValueError(f"margins has {len(margins)} value(s) but there are {L} levels")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        if reduction not in ("sum", "mean"):
            raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
        self.num_classes_per_level, self.embedding_size = levels, embedding_size
        self.margins, self.scale, self.reduction = margins, float(scale), reduction
        self.proxies_seed = proxies_seed
        stdv = 1.0 / math.sqrt(embedding_size)
        g = torch.Generator()
        if proxies_seed is None:
            g.seed()
        else:
            g.manual_seed(int(proxies_seed))
        self.weight = nn.Parameter(torch.empty(levels[0], embedding_size).uniform_(-stdv, stdv, generator=g))
        table = torch.full((levels[0], L), -1, dtype=torch.long)
        table[:, 0] = torch.arange(levels[0])
        self.register_buffer("proxy_labels", table)

    def extra_repr(self) -> str:
        return (f"num_classes_per_level={self.num_classes_per_level}, embedding_size={self.embedding_size}, "
                f"margins={self.margins}, scale={self.scale}, reduction={self.reduction!r}")

    def _check(self, labels: torch.Tensor) -> torch.Tensor:
        L = len(self.num_classes_per_level)
        labels = hierarchical_labels(labels, L, "CSL")[:, :L].long()
        for lvl, c in enumerate(self.num_classes_per_level):
            check_class_range(labels[:, lvl], c, f"labels of level {lvl}", " (num_classes_per_level)")
        return labels

    @torch.no_grad()
    def register_labels(self, labels) -> None:
        """Record the ancestors of each finest class from label rows [n, L] (e.g. the whole
        training set); a class with two different ancestors at a level is an error."""
        labels = self._check(labels).to(self.proxy_labels.device)
        rows = torch.unique(labels, dim=0)
        fine = rows[:, 0]
        if torch.unique(fine).numel() != fine.numel():
            raise ValueError("labels are not a tree: a finest class has two different ancestors")
        known = self.proxy_labels[fine]
        clash = (known >= 0) & (known != rows)
        if bool(clash.any()):
            raise ValueError("labels are not a tree: a finest class has two different ancestors")
        self.proxy_labels[fine] = rows

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        check_embeddings(embeddings, self.embedding_size)
        labels = self._check(torch.as_tensor(labels, device=embeddings.device))
        check_lengths(embeddings, labels)
        if self.training:
            self.register_labels(labels)
        with no_autocast(embeddings):
            x = embeddings.float()
            sims = self.scale * (x @ F.normalize(self.weight.float(), dim=1).T)  # [B, C0]
            pos = sims.gather(1, labels[:, :1]).squeeze(1)  # own finest proxy
            table = self.proxy_labels.to(x.device)
            per_level = []
            for lvl, m in enumerate(self.margins):
                neg = (table[:, lvl].unsqueeze(0) != labels[:, lvl].unsqueeze(1)) & (table[:, lvl] >= 0).unsqueeze(0)
                lse_neg = torch.logsumexp(sims.masked_fill(~neg, float("-inf")), dim=1)
                per_level.append(F.softplus(lse_neg - pos + self.scale * m).mean())
            total = torch.stack(per_level).sum()
            return total if self.reduction == "sum" else total / len(per_level)
