"""Standard deep-metric-learning baselines as thin adapters over pytorch-metric-learning.

Every class here wraps a PML loss (and miner) so that it follows the rankrepro loss
contract: ``loss(embeddings, labels, ref_embeddings=None, ref_labels=None)``; labels [B]
or [B, L] (column 0, the finest level, is used); computation in float32 with autocast
off. What PML does not do is added here, and only that:

* **Reference set (memory / XBM).** ``ref_embeddings``/``ref_labels`` go to PML's
  ``ref_emb``/``ref_labels`` (detached). When the caller says the reference set starts
  with the current batch (``self_index = arange(B)``, what
  :class:`~rankrepro.losses.memory.MemoryLoss` passes: ref rows 0..B-1 are the batch
  itself), the self pairs (query i vs ref i) are removed from the index tuples handed to
  PML, as PML's ``CrossBatchMemory`` does with ``remove_self_comparisons``. Without a reference set PML
  runs in-batch and removes the diagonal itself.
* **Memory-lean triplets.** PML's ``get_all_triplets_indices`` (used by
  ``TripletMarginLoss(triplets_per_anchor="all")`` and ``TripletMarginMiner``) builds a
  B x N x N mask; here (:mod:`rankrepro.losses.triplets`) the triplet indices are built per
  block of anchors from each anchor's positives ([b, P_max, N], the "[B, P, N] trick").
  Triplet sampling (uniform, distance weighted) uses ``torch.multinomial`` (seeded by
  ``torch.manual_seed``) instead of PML's global-numpy sampler, so that self pairs can be
  excluded.
* **Lifted structure** is computed in O(B·N) (per-row log-sum-exp) instead of PML's
  [#pos pairs x #neg pairs] tensor (≈ 50M entries at B = 256); it equals PML's
  ``LiftedStructureLoss`` (differential test).

Proxy losses (``proxy_nca``, ``proxy_nca_pp``, ``normalized_softmax``) and ``npair``
compare each embedding with proxies or with the batch only: a reference set is accepted
and ignored (a warning is emitted once). Their proxies are ``nn.Parameter``s created in
``__init__``; the trainer puts them in the run's ``loss`` parameter group (:mod:`rankrepro.engine.optim`).

Baseline list: the topk paper's Table 1 (uniform / hard / semi-hard / distance-weighted
triplet, contrastive, lifted structure, N-pair, angular, ProxyNCA) and the SupRank
baselines (triplet "SH", XBM, NSM, ProxyNCA++), plus multi-similarity.
XBM = any pair loss here wrapped with ``memory={"size": N, "warmup_epochs": 1}``; the
SupRank "XBM" row uses ``contrastive`` with ``formulation="xbm"``.

PML is imported where a loss is built or computed, not at module level: registering the losses
(every training job imports :mod:`rankrepro.losses`) does not import it (nor the scikit-learn and
SciPy it imports).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
from torch import nn

from rankrepro.registry import PositiveFloat

from .inputs import (
    attached_zero,
    check_class_range,
    clear_self_pairs,
    keep_in_graph,
    no_autocast,
    prefix_self_index,
    retrieval_lists,
)
from .registry import compose, register
from .triplets import all_triplets, distance_weights, sampled_triplets

__all__ = [
    "Triplet",
    "Contrastive",
    "LiftedStructure",
    "NPair",
    "Angular",
    "MultiSimilarity",
    "ProxyNCA",
    "ProxyNCAPP",
    "NormalizedSoftmax",
]

# --------------------------------------------------------------------------- helpers


def _drop_self(idx: tuple, n_self: int) -> tuple:
    """Remove (query i, ref i) pairs, i < n_self, from a pair (4) or triplet (3) tuple."""
    if n_self == 0:
        return idx
    a, p = idx[0], idx[1]
    keep = a != p
    if len(idx) == 3:
        return a[keep], p[keep], idx[2][keep]
    return a[keep], p[keep], idx[2], idx[3]


def _distance(name: str):
    """PML's distance of that name on the embeddings: ``euclidean`` and ``squared_euclidean`` (|a - b|, |a - b|^2,
    both L2-normalised first), ``cosine``, ``dot``."""
    from pytorch_metric_learning import distances as pml_distances

    if name in ("euclidean", "squared_euclidean"):
        return pml_distances.LpDistance(normalize_embeddings=True, p=2, power=1 if name == "euclidean" else 2)
    if name in ("cosine", "dot"):
        return pml_distances.CosineSimilarity() if name == "cosine" else pml_distances.DotProductSimilarity()
    raise ValueError(f"distance must be 'euclidean', 'squared_euclidean', 'cosine' or 'dot', got {name!r}")


def _check_choice(param: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{param} must be one of {list(allowed)}, got {value!r}")


def _check_positive(param: str, value) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{param} must be a positive number, got {value!r}")


class _Adapter(nn.Module):
    """Contract plumbing shared by the adapters: validation, float32, labels, ref set."""

    family = "pair"  # compares embeddings of pairs / triplets of the batch (losses.registry)

    #: label level (column of [B, L] labels) the loss trains on (0 = finest).
    level = 0
    #: False: a reference set is accepted but ignored (proxy losses, N-pair).
    uses_ref_set = True
    #: True: the value depends on random sampling (mining by sampling).
    stochastic = False
    #: True: the value depends on the order of the batch (N-pair picks the first pair per class).
    order_dependent = False

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        with no_autocast(embeddings):
            lists = retrieval_lists(embeddings, labels, ref_embeddings, ref_labels, self_index, self.level,
                                    ignore_ref=not self.uses_ref_set)
            if ref_embeddings is not None and not self.uses_ref_set:
                _warn_ignored(type(self).__name__)
            emb, y = lists.emb, lists.y
            if lists.in_batch:
                return keep_in_graph(self._loss(emb, y, None, None, 0), emb)
            # a distinct label tensor: PML changes behaviour when ``ref_labels is labels``
            n_self = prefix_self_index(lists, type(self).__name__)
            return keep_in_graph(self._loss(emb, y, lists.ref, lists.yr.clone(), n_self), emb)

    def _loss(self, emb, y, ref, yr, n_self):  # pragma: no cover - abstract
        raise NotImplementedError


_WARNED: set[str] = set()


def _warn_ignored(name: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(f"{name} compares embeddings with proxies / the batch only: the reference "
                      "set (memory) is ignored", stacklevel=4)


def _all_pairs(y, yr, n_self):
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    a1, p, a2, n = lmu.get_all_pairs_indices(y, yr)
    return _drop_self((a1, p, a2, n), n_self)


class _SelfAwareMiner:
    """Mixin for PML batch miners: drop (query i, ref i) pairs before selecting per row."""

    exclude_self = False

    def get_x_per_row(self, xtype, mat, anchor_idx, other_idx, *args, **kwargs):
        if self.exclude_self:
            keep = anchor_idx != other_idx
            anchor_idx, other_idx = anchor_idx[keep], other_idx[keep]
        return super().get_x_per_row(xtype, mat, anchor_idx, other_idx, *args, **kwargs)


@functools.cache
def _self_aware_miner(name: str) -> type:
    """PML's batch miner ``name`` (``BatchHardMiner``, ``BatchEasyHardMiner``) with :class:`_SelfAwareMiner`
    mixed in (the class is made on first use: PML is imported then)."""
    from pytorch_metric_learning import miners as pml_miners

    return type(f"_SelfAware{name}", (_SelfAwareMiner, getattr(pml_miners, name)), {})


# ----------------------------------------------------------------------------- losses


@register("triplet")
class Triplet(_Adapter):
    r"""Triplet margin loss ``[d(a, p) - d(a, n) + margin]_+`` (PML ``TripletMarginLoss``,
    mean over the non-zero terms, PML's ``AvgNonZeroReducer``); with ``distance="dot"``
    the term is ``[s_an - s_ap + margin]_+``.

    ``mining`` picks the triplets:

    * ``"all"`` (default): every triplet of the batch (/ batch x ref set) — SupRank
      ``triplet.yaml``, ``triplet_double.yaml``;
    * ``"uniform"``: every positive pair with one uniformly drawn negative (topk paper
      "Uniform Triplet");
    * ``"hard"``: PML ``BatchHardMiner``: hardest positive and hardest negative per anchor;
    * ``"semihard"``: FaceNet semi-hard, the rule of PML ``TripletMarginMiner(
      type_of_triplets="semihard")`` with ``margin`` = the loss margin:
      0 < d(a, n) - d(a, p) <= margin;
    * ``"easy_semihard"``: PML ``BatchEasyHardMiner()`` defaults (easiest positive,
      semi-hard negative) — SupRank's ``semihard: True`` (``triplet_mining.yaml``);
    * ``"distance_weighted"``: every positive pair with one negative drawn with
      probability ∝ q(d)^-1 (Wu et al. 2017, PML ``DistanceWeightedMiner`` weights,
      ``cutoff``, ``nonzero_loss_cutoff``).

    ``distance``: ``"euclidean"`` (PML default ``LpDistance`` on normalised embeddings),
    ``"squared_euclidean"`` (its square: FaceNet's ``[|a - p|^2 - |a - n|^2 + margin]_+``, margin 0.2; the
    semi-hard rule then compares squared distances too) or ``"dot"`` (SupRank's ``DotProductSimilarity``;
    use with margin 0.05 for its triplet).
    Sampled mining (uniform, distance_weighted) draws from torch's global RNG.
    """

    MINING = ("all", "uniform", "hard", "semihard", "easy_semihard", "distance_weighted")

    def __init__(self, margin: float = 0.05, mining: str = "all", distance: str = "euclidean",
                 cutoff: float = 0.5, nonzero_loss_cutoff: float = 1.4):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        _check_choice("mining", mining, self.MINING)
        _check_choice("distance", distance, ("euclidean", "squared_euclidean", "dot"))
        if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
            raise ValueError(f"margin must be a number >= 0, got {margin!r}")
        if not 0 <= cutoff < nonzero_loss_cutoff:
            raise ValueError(f"need 0 <= cutoff < nonzero_loss_cutoff, got {cutoff}, {nonzero_loss_cutoff}")
        self.margin, self.mining, self.distance = float(margin), mining, distance
        self.cutoff, self.nonzero_loss_cutoff = float(cutoff), float(nonzero_loss_cutoff)
        self.stochastic = mining in ("uniform", "distance_weighted")
        self.loss = pml_losses.TripletMarginLoss(margin=self.margin, distance=_distance(distance))
        if mining == "hard":
            self.miner = _self_aware_miner("BatchHardMiner")(distance=_distance(distance))
        elif mining == "easy_semihard":
            self.miner = _self_aware_miner("BatchEasyHardMiner")(distance=_distance(distance))
        else:
            self.miner = None

    def extra_repr(self) -> str:
        return f"margin={self.margin}, mining={self.mining!r}, distance={self.distance!r}"

    def _indices(self, emb, y, ref, yr, n_self):
        from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

        r, ry = (emb, y) if ref is None else (ref, yr)
        n_self = emb.shape[0] if ref is None else n_self
        if self.miner is not None:
            self.miner.exclude_self = n_self > 0
            with torch.no_grad():
                out = self.miner(emb, y, ref, yr)
            return lmu.convert_to_triplets(out, y, ry)
        if self.mining == "all":
            return all_triplets(y, ry, n_self)
        if self.mining == "semihard":
            with torch.no_grad():
                mat = self.loss.distance(emb, r)
            inverted = self.loss.distance.is_inverted

            def keep(a, p, n):
                gap = mat[a, p] - mat[a, n] if inverted else mat[a, n] - mat[a, p]
                return (gap > 0) & (gap <= self.margin)

            return all_triplets(y, ry, n_self, keep)
        with torch.no_grad():
            if self.mining == "uniform":
                w = torch.ones(y.shape[0], ry.shape[0], device=emb.device)
            else:
                w = distance_weights(emb, r, self.cutoff, self.nonzero_loss_cutoff)
        return sampled_triplets(y, ry, n_self, w)

    def _loss(self, emb, y, ref, yr, n_self):
        idx = self._indices(emb, y, ref, yr, n_self)
        return self.loss(emb, y, idx, ref, yr)


@register("contrastive")
class Contrastive(_Adapter):
    r"""Contrastive (pair) loss.

    ``formulation="pml"`` (default; PML ``ContrastiveLoss``, Hadsell et al. 2006):
    ``[d_ap - m_pos]_+`` over positive pairs and ``[m_neg - d_an]_+`` over negative pairs,
    each averaged over its non-zero terms and summed. Euclidean distance: m_pos = 0,
    m_neg = 1 by default; ``distance="cosine"``: ``[m_pos - s]_+`` / ``[s - m_neg]_+``
    with m_pos = 1, m_neg = 0.5 by default.

    ``formulation="xbm"``: the XBM paper's (Wang et al. 2020) and SupRank's ``XBMLoss``
    (cosine only): ``1/B Σ_i [Σ_{p∈P(i)} (1 - s_ip) + Σ_{n∈N(i), s_in > m_neg} s_in]``
    with m_neg = 0.5 — a per-anchor sum averaged over all B anchors, and a negative term
    that is ``s``, not ``s - m``. Official code drops positives with s >= 1 - 1e-5 (the
    self pair, but also exact duplicates); here self pairs are dropped by index.

    Wrapped in ``memory={"size": N, "warmup_epochs": 1}`` this is XBM; with the same
    memory content it equals PML's ``CrossBatchMemory(ContrastiveLoss())`` (test).
    """

    def __init__(self, pos_margin: float | None = None, neg_margin: float | None = None,
                 distance: str | None = None, formulation: str = "pml"):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        _check_choice("formulation", formulation, ("pml", "xbm"))
        if distance is None:
            distance = "cosine" if formulation == "xbm" else "euclidean"
        _check_choice("distance", distance, ("euclidean", "cosine"))
        if formulation == "xbm" and distance != "cosine":
            raise ValueError("formulation='xbm' is defined on cosine similarity: use distance='cosine'")
        defaults = {"euclidean": (0.0, 1.0), "cosine": (1.0, 0.5)}[distance]
        self.pos_margin = float(defaults[0] if pos_margin is None else pos_margin)
        self.neg_margin = float(defaults[1] if neg_margin is None else neg_margin)
        self.distance, self.formulation = distance, formulation
        self.loss = pml_losses.ContrastiveLoss(pos_margin=self.pos_margin, neg_margin=self.neg_margin,
                                               distance=_distance(distance))

    def extra_repr(self) -> str:
        return (f"pos_margin={self.pos_margin}, neg_margin={self.neg_margin}, "
                f"distance={self.distance!r}, formulation={self.formulation!r}")

    def _loss(self, emb, y, ref, yr, n_self):
        if self.formulation == "pml":
            if ref is None:
                return self.loss(emb, y)
            return self.loss(emb, y, _all_pairs(y, yr, n_self), ref, yr)
        r, ry = (emb, y) if ref is None else (ref, yr)
        n_self = emb.shape[0] if ref is None else n_self
        s = torch.nn.functional.normalize(emb, dim=1) @ torch.nn.functional.normalize(r, dim=1).T
        same = y.unsqueeze(1) == ry.unsqueeze(0)
        pos = clear_self_pairs(same, n_self)
        pos_term = torch.where(pos, torch.relu(self.pos_margin - s), torch.zeros_like(s)).sum(1)
        neg_term = torch.where(~same & (s > self.neg_margin), s, torch.zeros_like(s)).sum(1)
        return (pos_term + neg_term).mean()


@register("lifted_structure")
class LiftedStructure(_Adapter):
    r"""Lifted structured loss (Oh Song et al. 2016), exactly PML ``LiftedStructureLoss``:
    for each positive pair (i, j) with Euclidean distance D_ij,

        J_ij = log( Σ_{(i,k) neg} e^{m_neg - D_ik} + Σ_{(j,l) neg} e^{m_neg - D_jl} ) + D_ij - m_pos

    and ``loss = mean_{(i,j)} [J_ij]_+² / 2`` over the ordered positive pairs. The
    log-sum-exp over the union of both negative sets is ``logaddexp`` of two per-row
    log-sum-exps, so the cost is O(B·N) instead of PML's [#pos x #neg] tensor. With a
    reference set, the second set exists only when j is a batch item (j < B, the memory
    convention), as in PML where ``a2 == p`` compares a ref index with anchor indices.
    """

    def __init__(self, neg_margin: float = 1.0, pos_margin: float = 0.0):
        super().__init__()
        self.neg_margin, self.pos_margin = float(neg_margin), float(pos_margin)
        self.dist = _distance("euclidean")

    def extra_repr(self) -> str:
        return f"neg_margin={self.neg_margin}, pos_margin={self.pos_margin}"

    def _loss(self, emb, y, ref, yr, n_self):
        from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

        B = emb.shape[0]
        if ref is None:
            r, ry = emb, y
            a1, p, _, _ = lmu.get_all_pairs_indices(y)
            p_is_anchor = torch.ones_like(p, dtype=torch.bool)
        else:
            r, ry = ref, yr
            a1, p, _, _ = _all_pairs(y, yr, n_self)
            p_is_anchor = (p < B) if n_self else torch.zeros_like(p, dtype=torch.bool)
        if a1.numel() == 0:
            return attached_zero(emb)
        D = self.dist(emb, r)  # [B, N]
        neg = y.unsqueeze(1) != ry.unsqueeze(0)
        lse = torch.logsumexp((self.neg_margin - D).masked_fill(~neg, float("-inf")), dim=1)  # [B]
        lse_a = lse[a1]
        lse_p = torch.where(p_is_anchor, lse[p.clamp(max=B - 1)], torch.full_like(lse_a, float("-inf")))
        neg_part = torch.logaddexp(lse_a, lse_p)
        # no negative at all: PML's masked log-sum-exp gives 0
        neg_part = torch.where(torch.isfinite(neg_part), neg_part, torch.zeros_like(neg_part))
        J = neg_part + D[a1, p] - self.pos_margin
        return (torch.relu(J) ** 2 / 2).mean()


@register("npair")
class NPair(_Adapter):
    r"""Multi-class N-pair loss (Sohn 2016), PML ``NPairsLoss``: one (anchor, positive)
    pair per class of the batch (PML takes the first pair of each label, so the value
    depends on the batch order), ``CE(s(a_i, p_j)_j, i)`` with dot-product similarity,
    averaged. In-batch only: a reference set is ignored (PML does not support one)."""

    uses_ref_set = False
    order_dependent = True

    def __init__(self):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        self.loss = pml_losses.NPairsLoss()

    def _loss(self, emb, y, ref, yr, n_self):
        return self.loss(emb, y)


@register("angular")
class Angular(_Adapter):
    r"""Angular loss (Wang et al. 2017), PML ``AngularLoss(alpha)``: for each positive
    pair (a, p), ``log(1 + Σ_n exp(4 tan²α (x_a + x_p)ᵀx_n - 2 (1 + tan²α) x_aᵀx_p))``,
    averaged over positive pairs; ``alpha`` in degrees (default 40, PML)."""

    def __init__(self, alpha: float = 40.0):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        if not 0 < alpha < 90:
            raise ValueError(f"alpha (degrees) must be in (0, 90), got {alpha!r}")
        self.alpha = float(alpha)
        self.loss = pml_losses.AngularLoss(alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"

    def _loss(self, emb, y, ref, yr, n_self):
        if ref is None:
            return self.loss(emb, y)
        return self.loss(emb, y, _all_pairs(y, yr, n_self), ref, yr)


@register("multi_similarity")
class MultiSimilarity(_Adapter):
    r"""Multi-similarity loss (Wang et al. 2019), PML ``MultiSimilarityLoss(alpha, beta,
    base)`` on cosine similarity: per anchor
    ``1/α log(1 + Σ_P e^{-α(s - λ)}) + 1/β log(1 + Σ_N e^{β(s - λ)})``, averaged;
    ``mining=True`` (paper default) adds PML ``MultiSimilarityMiner(epsilon)`` pair mining.
    With a reference set, self pairs are removed from the mined pairs; an anchor whose only
    positive is itself still gets its negatives mined against s_ii = 1 (PML in-batch would
    mine none) — a negligible edge case."""

    def __init__(self, alpha: PositiveFloat = 2.0, beta: PositiveFloat = 50.0, base: float = 0.5,
                 mining: bool = True, epsilon: float = 0.1):
        from pytorch_metric_learning import losses as pml_losses
        from pytorch_metric_learning import miners as pml_miners

        super().__init__()
        _check_positive("alpha", alpha)
        _check_positive("beta", beta)
        self.alpha, self.beta, self.base = float(alpha), float(beta), float(base)
        self.mining, self.epsilon = bool(mining), float(epsilon)
        self.loss = pml_losses.MultiSimilarityLoss(alpha=self.alpha, beta=self.beta, base=self.base)
        self.miner = pml_miners.MultiSimilarityMiner(epsilon=self.epsilon) if self.mining else None

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, base={self.base}, mining={self.mining}"

    def _loss(self, emb, y, ref, yr, n_self):
        if self.miner is not None:
            idx = _drop_self(self.miner(emb, y, ref, yr), n_self if ref is not None else 0)
        elif ref is not None:
            idx = _all_pairs(y, yr, n_self)
        else:
            idx = None
        return self.loss(emb, y, idx, ref, yr)


# ------------------------------------------------------------------------ proxy losses


class _ProxyAdapter(_Adapter):
    family = "proxy"  # compares embeddings with learned class proxies (losses.registry)
    uses_ref_set = False

    def _check_labels(self, y, num_classes):
        check_class_range(y, num_classes, f"labels (level {self.level})", f" for num_classes={num_classes}")


def _check_sizes(num_classes, embedding_size):
    if not (isinstance(num_classes, int) and num_classes >= 1):
        raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
    if not (isinstance(embedding_size, int) and embedding_size >= 1):
        raise ValueError(f"embedding_size must be an int >= 1, got {embedding_size!r}")


class ProxyNCA(_ProxyAdapter):
    r"""ProxyNCA (Movshovitz-Attias et al. 2017) as PML ``ProxyNCALoss``:
    ``-log softmax_c(-scale · ||x̂ - p̂_c||²)[y]`` over all proxies (normalised embeddings
    and proxies), averaged. PML keeps the positive proxy in the denominator (the
    ProxyNCA++ form), unlike the original paper. ``softmax_scale`` = 1 (PML default);
    proxies ~ N(0, ``proxy_std``²) (PML init: 1). Registered twice: ``proxy_nca``
    (``proxy_std`` fixed to 1) and ``proxy_nca_pp`` (below: scale 1/T, std 1/8)."""

    def __init__(self, num_classes: int, embedding_size: int, softmax_scale: float = 1.0, proxy_std: float = 1.0):
        from pytorch_metric_learning import losses as pml_losses
        from pytorch_metric_learning.utils import common_functions as pml_cf

        super().__init__()
        _check_sizes(num_classes, embedding_size)
        _check_positive("softmax_scale", softmax_scale)
        _check_positive("proxy_std", proxy_std)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.softmax_scale, self.proxy_std = float(softmax_scale), float(proxy_std)
        self.temperature = None  # the ProxyNCA++ parametrisation (scale = 1/T), when built so
        init = {} if proxy_std == 1.0 else {
            "weight_init_func": pml_cf.TorchInitWrapper(torch.nn.init.normal_, std=self.proxy_std)}
        self.loss = pml_losses.ProxyNCALoss(num_classes, embedding_size, softmax_scale=self.softmax_scale, **init)

    def extra_repr(self) -> str:
        scale = f"softmax_scale={self.softmax_scale}" if self.temperature is None else f"temperature={self.temperature}"
        return f"num_classes={self.num_classes}, embedding_size={self.embedding_size}, {scale}"

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return self.loss(emb, y)


register("proxy_nca", proxy_std=1.0)(ProxyNCA)


def _nca_pp(num_classes: int, embedding_size: int, temperature: PositiveFloat = 1.0 / 9.0) -> ProxyNCA:
    """ProxyNCA with softmax scale 1/``temperature`` and proxies ~ N(0, 1/8²)."""
    _check_positive("temperature", temperature)
    loss = ProxyNCA(num_classes, embedding_size, softmax_scale=1.0 / float(temperature), proxy_std=1.0 / 8.0)
    loss.temperature = float(temperature)
    return loss


ProxyNCAPP = register("proxy_nca_pp", compose("ProxyNCAPP", __name__, lambda v: _nca_pp(**v), _nca_pp, family="proxy", doc=r"""ProxyNCA++ (Teh et al. 2020): ``-log softmax_c(-||x̂ - p̂_c||² / T)[y]``, T = 1/9
    (``temperature``), as PML ``ProxyNCALoss(softmax_scale=1/T)`` — identical to SupRank's
    ``ProxyNCAppLoss`` (scale 3 on both x̂ and p̂ = softmax scale 9 on the squared
    distance; no label smoothing; checked in a test). Proxies are initialised
    N(0, 1)/8 as in SupRank (PML: N(0, 1); the scale is removed by the normalisation).
    The other "++" ingredients are recipe items outside the loss: fast proxies = a
    larger learning rate for the proxies (the run's ``loss`` parameter group; SupRank
    ``proxy_nca_pp.yaml`` uses the head optimizer), max+avg pooling and layer norm
    (model options)."""))


@register("normalized_softmax")
class NormalizedSoftmax(_ProxyAdapter):
    r"""Normalized softmax / NSM (Zhai & Wu 2018), PML ``NormalizedSoftmaxLoss``:
    ``CE(x̂ · Ŵ / T, y)`` with L2-normalised class weights W, T = 0.05 (``temperature``;
    SupRank ``ClusterLoss`` η = 0.05). Weights initialised U(-1/√D, 1/√D) as SupRank
    (PML: N(0, 1); the scale is removed by the normalisation). The proxies train in
    the run's ``loss`` parameter group (SupRank SOP: Adam 10, cosine to 0.1; iNat: the head's)."""

    def __init__(self, num_classes: int, embedding_size: int, temperature: PositiveFloat = 0.05):
        from pytorch_metric_learning import losses as pml_losses
        from pytorch_metric_learning.utils import common_functions as pml_cf

        super().__init__()
        _check_sizes(num_classes, embedding_size)
        _check_positive("temperature", temperature)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.temperature = float(temperature)
        bound = 1.0 / math.sqrt(embedding_size)
        self.loss = pml_losses.NormalizedSoftmaxLoss(
            num_classes, embedding_size, temperature=self.temperature,
            weight_init_func=pml_cf.TorchInitWrapper(torch.nn.init.uniform_, a=-bound, b=bound))

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embedding_size={self.embedding_size}, temperature={self.temperature}"

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return self.loss(emb, y)
