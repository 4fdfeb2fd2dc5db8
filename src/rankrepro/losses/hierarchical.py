"""Hierarchical Σ baselines of SupRank/HAPPIER: a flat loss applied at every level.

For labels [B, L] (finest first) and a set of levels Λ (default: all),

    L_Σ = w · Σ_{l ∈ Λ} L_flat(x, y_l)

with w = 1/|Λ| (``reduction="mean"``, default) or 1 (``"sum"``). The official configs
(``triplet_double/triple/seven.yaml``, ``norm_softmax_*_double/triple/seven.yaml``) list one
loss per level with ``weight:`` null, which SupRank turns into uniform weights 1/n — a
mean, despite the Σ in the tables' names. Proxy losses get one proxy set per level
(C_l proxies at level l); each level's proxies are a separate submodule, all in the run's
``loss`` parameter group (:mod:`rankrepro.engine.optim`). ``levels`` reproduces configs that skip a level:
``triplet_seven.yaml`` lists levels [0, 1, 3, 4, 5, 6] (level 2 is missing — an official
slip; the default here uses every level).
"""

from __future__ import annotations

import torch
from torch import nn

from rankrepro.registry import PositiveFloat

from .baselines import Triplet
from .inputs import hierarchical_labels
from .registry import LOSSES, compose, register

__all__ = ["SumTripletSH", "ProxyLevelSum", "SumNSM", "SumNCAPP"]


def _check_reduction(reduction):
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")


def _check_levels(levels, num_levels=None):
    if levels is None:
        return None
    if not isinstance(levels, (list, tuple)) or not levels or not all(isinstance(v, int) and v >= 0 for v in levels):
        raise ValueError(f"levels must be None or a non-empty list of level indices >= 0, got {levels!r}")
    if len(set(levels)) != len(levels):
        raise ValueError(f"levels has duplicates: {levels!r}")
    if num_levels is not None and max(levels) >= num_levels:
        raise ValueError(f"levels {levels!r} out of range for {num_levels} level(s) (num_classes_per_level)")
    return [int(v) for v in levels]


class _LevelSum(nn.Module):
    hierarchical = True  # a sum over levels: one level is its base loss alone (losses.registry)

    def _reduce(self, values):
        total = torch.stack(values).sum()
        return total / len(values) if self.reduction == "mean" else total


@register("sum_triplet_sh")
class SumTripletSH(_LevelSum):
    r"""ΣTL_SH: the triplet loss of :class:`~rankrepro.losses.baselines.Triplet` at every
    level (positives at level l share the level-l label), averaged over the levels.

    Defaults follow SupRank's ``TripletLoss``: ``distance="dot"`` (DotProductSimilarity,
    term ``[s_an - s_ap + 0.05]_+``), margin 0.05, mean over non-zero triplets. Mining:
    the tables call the baseline "semi-hard" (TL_SH) and SupRank's semi-hard switch
    (``semihard: True``, ``triplet_mining.yaml``) is PML ``BatchEasyHardMiner()`` =
    ``mining="easy_semihard"`` (default); the shipped multi-level configs
    (``triplet_double/seven.yaml``) set ``semihard: False``, which is ``mining="all"``.
    With a reference set, each level uses the reference labels of that level.
    """

    family = "pair"  # a triplet loss per level (losses.registry)

    def __init__(self, margin: float = 0.05, mining: str = "easy_semihard", distance: str = "dot",
                 levels: list[int] | None = None, reduction: str = "mean"):
        super().__init__()
        _check_reduction(reduction)
        self.levels = _check_levels(levels)
        self.reduction = reduction
        self.triplet = Triplet(margin=margin, mining=mining, distance=distance)
        self.stochastic = self.triplet.stochastic

    def extra_repr(self) -> str:
        return f"levels={self.levels}, reduction={self.reduction!r}"

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        levels = self.levels
        labels = hierarchical_labels(labels, 1 if levels is None else max(levels) + 1, "sum_triplet_sh")
        if levels is None:
            levels = list(range(labels.shape[1]))
        if ref_labels is not None:
            ref_labels = hierarchical_labels(ref_labels, max(levels) + 1, "sum_triplet_sh (ref_labels)")
        values = []
        for lvl in levels:
            values.append(self.triplet(embeddings, labels[:, lvl], ref_embeddings,
                                       None if ref_labels is None else ref_labels[:, lvl], self_index=self_index))
        return self._reduce(values)


class ProxyLevelSum(_LevelSum):
    r"""Σ of a proxy loss: ``proxy_loss`` (a registered loss name taking ``num_classes``,
    ``embedding_size`` and ``temperature``) with its own C_l proxies at every level, averaged
    (``reduction="mean"``) or summed over the levels. Registered with ``proxy_loss`` fixed:
    ``sum_nsm``, ``sum_nca_pp``."""

    family = "proxy"  # a proxy loss per level (losses.registry)

    uses_ref_set = False

    def __init__(self, num_classes_per_level: list[int], embedding_size: int, proxy_loss: str = "normalized_softmax",
                 temperature: PositiveFloat = 0.05, levels: list[int] | None = None, reduction: str = "mean"):
        super().__init__()
        counts = list(num_classes_per_level) if isinstance(num_classes_per_level, (list, tuple)) else None
        if not counts or not all(isinstance(c, int) and c >= 1 for c in counts):
            raise ValueError(f"num_classes_per_level must be a non-empty list of ints >= 1 (finest first), "
                             f"got {num_classes_per_level!r}")
        _check_reduction(reduction)
        self.levels = _check_levels(levels, len(counts)) or list(range(len(counts)))
        self.num_classes_per_level, self.embedding_size = counts, embedding_size
        self.proxy_loss, self.reduction = proxy_loss, reduction
        self.per_level = nn.ModuleDict({
            str(lvl): LOSSES.build(proxy_loss, context={"num_classes": counts[lvl], "embedding_size": embedding_size},
                                   temperature=temperature)
            for lvl in self.levels})

    def extra_repr(self) -> str:
        return (f"proxy_loss={self.proxy_loss!r}, num_classes_per_level={self.num_classes_per_level}, "
                f"levels={self.levels}, reduction={self.reduction!r}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        labels = hierarchical_labels(labels, max(self.levels) + 1, f"the level sum of {self.proxy_loss}")
        values = []
        for lvl in self.levels:
            try:
                values.append(self.per_level[str(lvl)](embeddings, labels[:, lvl]))
            except ValueError as err:
                raise ValueError(f"level {lvl}: {err}") from None
        return self._reduce(values)


def _level_sum(name, proxy_loss, doc, **defaults):
    return compose(name, __name__, lambda v: ProxyLevelSum(**v), ProxyLevelSum, fixed={"proxy_loss": proxy_loss},
                   doc=doc, **defaults)


SumNSM = register("sum_nsm", _level_sum("SumNSM", "normalized_softmax", r"""ΣNSM: :class:`~rankrepro.losses.baselines.NormalizedSoftmax` (η = ``temperature`` =
    0.05) with its own C_l proxies at every level, averaged over the levels
    (``norm_softmax_sop_double.yaml`` etc.; proxies Adam lr 10 there: the run's ``loss`` group).""", temperature=0.05))

SumNCAPP = register("sum_nca_pp", _level_sum("SumNCAPP", "proxy_nca_pp", r"""ΣNCA++: :class:`~rankrepro.losses.baselines.ProxyNCAPP` (T = ``temperature`` = 1/9)
    with its own C_l proxies at every level, averaged over the levels (no official config
    ships it; built like the other Σ baselines).""", temperature=1.0 / 9.0))
