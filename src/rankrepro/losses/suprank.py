r"""SupRank family (Ramzi et al., TPAMI "Optimization of Rank Losses for Image Retrieval";
ROADMAP NeurIPS 2021; HAPPIER ECCV 2022): thin heads over :mod:`rankrepro.losses.rank`.

Registered losses (all ``loss(embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None)``):

==================  ==========================================================================
``sup_ap``          1 - mean AP with SupRank ranks (eq. 11)
``sup_recall``      Sup-R@K (eq. 16), K = {1, 2, 4, 8, 16}
``smooth_recall``   Smooth-R@K (Patel et al. CVPR'22): sigmoid ranks on every pair
``sup_hap``         Sup-H-AP (eq. 21) with HAPPIER's relevance (eq. 20)
``smooth_hap``      the same with sigmoid ranks (paper Tab. X baseline, ``smoothhap.yaml``)
``sup_ndcg``        Sup-NDCG (eq. 24), gains 2^l - 1
``smooth_ndcg``     the same with sigmoid ranks (``smoothndcg.yaml``)
``roadmap``         (1 - lam) Sup-AP + lam L_DG* (proxy, TPAMI) or L_DG (pair, NeurIPS)   (eq. 2/12)
``rod_recall``      (1 - lam) Sup-R@K + lam L_DG* / L_DG                                  (eq. 17)
``happier``         (1 - lam) Sup-H-AP + lam L_DG*                                        (eq. 22)
``happier_f``       HAPPIER_F: HAPPIER with a larger relevance exponent alpha
``rod_ndcg``        (1 - lam) Sup-NDCG + lam L_DG*                                        (eq. 25)
==================  ==========================================================================

Conventions shared by all (official-code facts: ``spec/reference/suprank.md`` §2):

* Scores are dot products ``emb @ ref.T`` of the (L2-normalised) embeddings; computation
  is in float32 with autocast disabled.
* ``include_query=True`` (default, the official code, whose numbers the papers report):
  the query is in its own retrieval list (score s_qq, relevant at the top level), so
  the batch AP includes a "self" positive at rank ~1 and normalises by |P| including it.
  ``False``: the paper text, the query is removed from its list. With a reference set
  (memory), the list is the reference set (detached); the query's own entry is the column
  ``self_index`` gives (``MemoryLoss`` passes it: the batch first, as the official XBM
  enqueues before reading) and is kept iff ``include_query``.
* Queries with no relevant item in their list other than themselves are skipped (mean
  over the others; the loss is 0, still attached to the graph, if none is left). Under
  the papers' m-per-class samplers no query is skipped.
* Hierarchical losses (``*_hap``, ``*_ndcg``, ``happier*``, ``rod_ndcg``) use every label
  column: level l of an item = number of levels whose labels agree with the query's
  (0..L; SupRank's label matrix). Flat losses use column 0 (finest).
* SupRank step (:class:`rankrepro.losses.steps.SupRankStep`): ``tau`` 0.01, ``rho`` 100,
  ``delta`` 0.05, ``start`` 0.5, ``offset`` 1.44 = the SOP/CUB configs (``supap.yaml``,
  ``ROADMAP_SOP.yaml``, ``HAPPIER_SOP.yaml``...). The iNat configs use ``start=0.0,
  offset=1.0``: H^- then stays below H on (0, delta] and the losses are no longer upper
  bounds there. ``offset=None`` = sigma(delta/tau) + start (the value in eq. 4).
  ``step_fix``: ``"post_pr13"`` = rho (t - delta) + offset (paper eq. 4, SupRank code,
  default), ``"pre_pr13"`` = rho t + offset (ROADMAP NeurIPS code before PR #13).
* Structure: each head (:class:`~rankrepro.losses.rank.APLoss`, :class:`RecallLoss`,
  :class:`HAPLoss`, :class:`NDCGLoss`) takes its surrogate as one keyword-only ``step=``
  object; each registered name is a builder (:func:`~rankrepro.losses.registry.compose`)
  with flat JSON keywords: the step's (``tau``, ``rho``, ...), the head's, the combination's.
* Memory: ranks are only computed for relevant items, in query blocks of at most
  ``max_elements`` [b, P, N] entries (``chunk_size`` = queries per block overrides),
  with an analytic backward that recomputes each block -- see
  :func:`rankrepro.losses.rank.relevant_ranks`.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from rankrepro.registry import PositiveFloat, PositiveInt

from .calibration import CalibrationLoss, NormalizedSoftmaxDG
from .rank import DEFAULT_MAX_ELEMENTS, APLoss, RankingLoss, ap_head, ideal_dcg, ndcg_head, recall_head, stepped
from .registry import compose, pick, register
from .relevance import happier_relevance, sigma_w_relevance
from .steps import SigmoidStep, Step, SupRankStep

__all__ = [
    "RecallLoss", "HAPLoss", "NDCGLoss", "Combined",
    "SupAP", "SupRecall", "SmoothRecall", "SupHAP", "SmoothHAP", "SupNDCG", "SmoothNDCG",
    "ROADMAP", "RODRecall", "HAPPIER", "HAPPIERF", "RODNDCG",
]

DEFAULT_AT_K = (1, 2, 4, 8, 16)
DECOMPOSABILITY = ("proxy", "pair")
#: the SupRank step of the SOP/CUB configs (``offset`` 1.44; SupRankStep's own default is None)
SUP_DEFAULTS = {"offset": 1.44}


# -------------------------------------------------------------------------------- heads


class RecallLoss(RankingLoss):
    r"""1 - mean_{k in K} 1/min(|P|, k) sum_{p in P} sigma((k - rank(p)) / temp) (eq. 16).

    ``at_k`` = K, ``temp`` = tau* of the outer sigmoid; rank from ``step``."""

    def __init__(self, *, step: Step, at_k: Sequence[PositiveInt] = DEFAULT_AT_K, temp: PositiveFloat = 1.0,
                 include_query: bool = True, chunk_size: PositiveInt | None = None,
                 max_elements: PositiveInt = DEFAULT_MAX_ELEMENTS):
        super().__init__(step=step, include_query=include_query, chunk_size=chunk_size, max_elements=max_elements)
        at_k = tuple(int(k) for k in (at_k if isinstance(at_k, (list, tuple)) else [at_k]))
        if not at_k or min(at_k) < 1:
            raise ValueError(f"at_k must be a non-empty list of integers >= 1, got {at_k}")
        if not temp > 0:
            raise ValueError(f"temp must be > 0, got {temp}")
        self.at_k, self.temp = at_k, float(temp)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, at_k={list(self.at_k)}, temp={self.temp}"

    def _metric(self, scores, level, list_mask, num_levels):
        r = self._ranks(scores, level, list_mask=list_mask, need_rank_plus=False)
        return recall_head(r, level.sum(1), self.at_k, self.temp)


class HAPLoss(RankingLoss):
    r"""1 - mean H-AP (eq. 19 / 21). ``relevance``: ``"hap"`` = HAPPIER's relevance (eq. 20,
    exponent ``alpha``); ``"sigma_w"`` = the relevance of supplementary eq. 44, under which H-AP is
    ΣwAP = sum_l w_l AP^(l) (``weights`` per label column, finest first, default uniform; Table XI's
    "trained with ΣwAP" row)."""

    hierarchical = True

    def __init__(self, *, step: Step, alpha: float = 1.0, relevance: str = "hap", weights: list | None = None,
                 include_query: bool = True, chunk_size: PositiveInt | None = None,
                 max_elements: PositiveInt = DEFAULT_MAX_ELEMENTS):
        super().__init__(step=step, include_query=include_query, chunk_size=chunk_size, max_elements=max_elements)
        if not alpha >= 0:
            raise ValueError(f"alpha (relevance exponent) must be >= 0, got {alpha}")
        if relevance not in ("hap", "sigma_w"):
            raise ValueError(f"relevance must be 'hap' (eq. 20) or 'sigma_w' (ΣwAP, eq. 44), got {relevance!r}")
        if weights is not None and (relevance != "sigma_w" or not weights or min(float(w) for w in weights) < 0):
            raise ValueError(f"weights (non-negative, one per label column) go with relevance 'sigma_w', got "
                             f"{weights!r} with relevance {relevance!r}")
        self.alpha, self.relevance = float(alpha), relevance
        self.weights = None if weights is None else [float(w) for w in weights]

    def extra_repr(self) -> str:
        extra = f", relevance={self.relevance}, weights={self.weights}" if self.relevance != "hap" else ""
        return f"{super().extra_repr()}, alpha={self.alpha}{extra}"

    def _metric(self, scores, level, list_mask, num_levels):
        if self.relevance == "sigma_w":
            rel = sigma_w_relevance(level, num_levels, self.weights, list_mask)
        else:
            rel = happier_relevance(level, num_levels, self.alpha, list_mask)
        r = self._ranks(scores, level, rel=rel, list_mask=list_mask)
        return ap_head(r, rel.sum(1))


class NDCGLoss(RankingLoss):
    r"""1 - mean NDCG (eq. 23 / 24): gains 2^l - 1 (l = shared levels), iDCG at exact ranks."""

    hierarchical = True

    def _metric(self, scores, level, list_mask, num_levels):
        gains = 2.0 ** level.to(scores.dtype) - 1.0  # 0 outside the list (level 0 there)
        r = self._ranks(scores, level, list_mask=list_mask, need_rank_plus=False)
        return ndcg_head(r, gains.gather(1, r.index) * r.valid, ideal_dcg(gains, list_mask))


def _stepped(name, head, step_cls, doc, **defaults):
    return stepped(name, __name__, head, step_cls, doc, **defaults)


SupAP = register("sup_ap", _stepped("SupAP", APLoss, SupRankStep, r"""Sup-AP (eq. 11): 1 - mean_q 1/|P| sum_{k in P} rank+(k) / (rank+(k) + rank^-_s(k)).

    rank+ uses the exact H, rank^-_s SupRank's H^- over the negatives (see the module
    docstring for ``tau``, ``rho``, ``delta``, ``start``, ``offset``, ``step_fix`` and
    ``include_query``). Upper bound of 1 - AP with ``start >= 0.5``, ``offset >= 1``.
    """, **SUP_DEFAULTS))

SupRecall = register("sup_recall", _stepped("SupRecall", RecallLoss, SupRankStep, r"""Sup-R@K (eq. 16): 1 - mean_{k in K} 1/min(|P|, k) sum_{p in P} sigma((k - rank_s(p)) / temp).

    rank_s = rank+ + rank^-_s (SupRank), K = ``at_k`` = {1, 2, 4, 8, 16} and
    ``temp`` = tau* = 1 (``suprecall.yaml``; Patel et al.'s tau_1). |P| counts the query
    itself with ``include_query``. The outer sigmoid makes this a smooth surrogate of
    1 - R@K, not a guaranteed upper bound: a positive just beyond rank k still scores
    sigma(-1/temp) > 0 (see the tests; it tends to one as ``temp`` -> 0). Any number of
    positives per query (the official ``reduce_rank`` view needs equal counts).
    """, **SUP_DEFAULTS))

SmoothRecall = register("smooth_recall", _stepped("SmoothRecall", RecallLoss, SigmoidStep, r"""Smooth-R@K (Patel et al. CVPR'22, paper Tab. II baseline, ``smoothrecall.yaml``).

    1 - mean_{k in K} 1/min(|P|, k) sum_{p in P} sigma((k - rank(p)) / temp), with
    rank(p) = 1 + sum_{j != p} sigma((s_j - s_p) / tau) over every pair. K = {1,2,4,8,16},
    ``tau`` = 0.01 (tau_2), ``temp`` = 1 (tau_1 = tau*). Patel et al. leave the query out
    of its list; the SupRank code (default ``include_query=True``) keeps it.
    """))

SupHAP = register("sup_hap", _stepped("SupHAP", HAPLoss, SupRankStep, r"""Sup-H-AP (eq. 21): 1 - mean_q 1/sum rel sum_{k in P} H-rank+(k) / (rank+(k) + rank^-_s(k)).

    Labels [B, L] (finest first). Level l = number of shared levels; relevance (eq. 20)
    rel(k) = (l/L)^alpha / |Omega^(l)| (HAPPIER 'pop', ``alpha`` = 1 in every config);
    H-rank+(k) = rel(k) + sum_{j != k} H(s_j - s_k) min(rel(k), rel(j)) (eq. 18, exact H:
    ``with_hrank: False`` in every SupRank config); rank^-_s = SupRank H^- over the items of
    a strictly lower level. With one level it equals Sup-AP.
    """, **SUP_DEFAULTS))

SmoothHAP = register("smooth_hap", _stepped("SmoothHAP", HAPLoss, SigmoidStep,
                                            """H-AP with sigmoid(t / tau) ranks on every pair, rank and H-rank+ (``smoothhap.yaml``)."""))

SupNDCG = register("sup_ndcg", _stepped("SupNDCG", NDCGLoss, SupRankStep, r"""Sup-NDCG (eq. 24): 1 - mean_q sum_k (2^{l_k} - 1) / log2(1 + rank_s(k)) / iDCG_q.

    l_k = number of shared levels (the official gains use this level count, not HAPPIER
    relevances); rank_s = SupRank rank (H^- over strictly lower levels); iDCG with the
    exact ideal ranks. Upper bound of 1 - NDCG with ``start >= 0.5``, ``offset >= 1``.
    """, **SUP_DEFAULTS))

SmoothNDCG = register("smooth_ndcg", _stepped("SmoothNDCG", NDCGLoss, SigmoidStep,
                                              """NDCG with sigmoid(t / tau) ranks on every pair (``smoothndcg.yaml``)."""))


# ------------------------------------------------------------------- ROD combinations


class Combined(nn.Module):
    """(1 - lam) * rank_loss + lam * decomposability_loss (eq. 2)."""

    def __init__(self, rank_loss: nn.Module, dg: nn.Module, lam: float):
        super().__init__()
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {lam}")
        self.rank_loss, self.dg, self.lam = rank_loss, dg, float(lam)

    def extra_repr(self) -> str:
        return f"lam={self.lam}"

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        lr = self.rank_loss(embeddings, labels, ref_embeddings, ref_labels, self_index=self_index)
        ld = self.dg(embeddings, labels, ref_embeddings, ref_labels, self_index=self_index)
        return (1.0 - self.lam) * lr + self.lam * ld


def _weight(lam: float = 0.1):
    """The combination weight (a part of the combined builders' signatures)."""


def decomposability(decomposability: str = "proxy", num_classes: int | None = None,
                    embedding_size: int | None = None, temperature: PositiveFloat = 0.05, alpha: float = 0.9,
                    beta: float = 0.6) -> nn.Module:
    """L_DG* (``"proxy"``: :class:`NormalizedSoftmaxDG`) or L_DG (``"pair"``: :class:`CalibrationLoss`)."""
    if decomposability not in DECOMPOSABILITY:
        raise ValueError(f"decomposability must be one of {list(DECOMPOSABILITY)}, got {decomposability!r}")
    if decomposability == "pair":
        return CalibrationLoss(alpha=alpha, beta=beta)
    return NormalizedSoftmaxDG(num_classes=num_classes, embedding_size=embedding_size, temperature=temperature)


def _proxy_dg(num_classes: int | None = None, embedding_size: int | None = None, temperature: PositiveFloat = 0.05):
    return NormalizedSoftmaxDG(num_classes=num_classes, embedding_size=embedding_size, temperature=temperature)


def _combined(name, head, dg, doc, **defaults):
    """Registered builder ``Combined(head(step=SupRankStep(...), ...), dg(...), lam)``."""

    def make(v):
        rank_loss = head(step=SupRankStep(**pick(v, SupRankStep)), **pick(v, head))
        return Combined(rank_loss, dg(**pick(v, dg)), v["lam"])

    return compose(name, __name__, make, _weight, dg, head, SupRankStep, doc=doc,
                   **{**SUP_DEFAULTS, **defaults})


ROADMAP = register("roadmap", _combined("ROADMAP", APLoss, decomposability, r"""ROADMAP: (1 - lam) Sup-AP + lam L_DG (eq. 2 / 12).

    ``decomposability="proxy"`` (default; TPAMI, which keeps only L_DG*, configs
    ``ROADMAP_pp*``): L_DG* = normalised softmax over fine-class proxies, ``temperature``
    eta = 0.05, ``num_classes``/``embedding_size`` filled by the trainer. ``"pair"``: L_DG
    (eq. 7) with ``alpha`` 0.9, ``beta`` 0.6 (ROADMAP NeurIPS; SupRank ``ROADMAP_SOP.yaml``).
    ``lam`` = 0.1 (paper; SupRank configs weights [0.9, 0.1]). The ROADMAP NeurIPS repo
    (``roadmap.yaml``) adds both terms with weight 1 (= 2 x lam 0.5) and used the
    ``step_fix="pre_pr13"`` surrogate: ``roadmap(decomposability="pair", lam=0.5,
    step_fix="pre_pr13")`` is that code up to a factor 2.
    """))

RODRecall = register("rod_recall", _combined("RODRecall", RecallLoss, decomposability, r"""ROD-R@K: (1 - lam) Sup-R@K + lam L_DG (eq. 17); options as :func:`ROADMAP`.

    ``lam`` = 0.5: the official configs (``ROADRatk*.yaml``) give both terms weight 1/2
    (``weight: null``); the paper only states lam = 0.1 for ROADMAP. Default L_DG* (proxy,
    Tab. II's best on iNat, ``ROADRatk_pp*``); ``"pair"`` = ``ROADRatk_{SOP,inat}``.
    """, lam=0.5))

HAPPIER = register("happier", _combined("HAPPIER", HAPLoss, _proxy_dg, r"""HAPPIER (eq. 22): (1 - lam) Sup-H-AP + lam L_DG*, lam = 0.1 (``HAPPIER*.yaml``: [0.9, 0.1]).

    L_DG* = normalised softmax on the finest level (``temperature`` 0.05; proxies for
    ``num_classes`` fine classes). ``alpha`` = relevance exponent of eq. 20 (1).
    """))

HAPPIERF = register("happier_f", _combined("HAPPIERF", HAPLoss, _proxy_dg, r"""HAPPIER_F, the fine-grained variant: HAPPIER with relevance exponent ``alpha`` > 1.

    Paper (sec. VII-C, C-A3): alpha = 5 on SOP (default) and 3 on iNat-base/full. The paper
    gives no lam for it; the official config named "HAPPIER_F" (``HAPPIER_5*.yaml``,
    HAPPIER repo "HAPPIER_05") weights the two terms [0.5, 0.5] -> ``lam`` = 0.5 here (the
    config leaves alpha to the dataset config, 1.0 unless overridden on the command line).
    The HAPPIER-repo ``HAPPIER_5_SOP.yaml`` also switches on ``with_hrank`` (a leaky
    surrogate for H-rank+); SupRank's configs do not, and it is not reproduced here.
    """, lam=0.5, alpha=5.0))

RODNDCG = register("rod_ndcg", _combined("RODNDCG", NDCGLoss, _proxy_dg, r"""ROD-NDCG (eq. 25): (1 - lam) Sup-NDCG + lam L_DG*, lam = 0.1 (``roadndcg_*.yaml``;
    ``roadndcg_05.yaml`` = 0.5)."""))
