r"""Decomposability losses of ROADMAP / SupRank (paper sec. III-C).

* ``calibration`` -- L_DG, pair-based (eq. 7)::

      L_DG = 1/|Omega+| sum_{j in Omega+} [alpha - s_j]_+  +  1/|Omega-| sum_{j in Omega-} [s_j - beta]_+

* ``normalized_softmax_dg`` -- L_DG*, proxy-based (eq. 8, normalised softmax, Zhai & Wu 2018)::

      L_DG* = -log( exp(v^T p_y / eta) / sum_z exp(v^T p_z / eta) ),   p_z = W_z / ||W_z||
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.registry import NonNegativeInt, PositiveFloat

from .inputs import check_batch, check_class_range, check_embeddings, check_lengths, level_labels, no_autocast
from .registry import register

__all__ = ["CalibrationLoss", "NormalizedSoftmaxDG"]

REDUCTIONS = ("avg_non_zero", "mean")


@register("calibration")
class CalibrationLoss(nn.Module):
    r"""L_DG (eq. 7), ROADMAP's "calibration" loss: positives above ``alpha``, negatives below ``beta``.

    Pairs: without a reference set, every (i, j) of the batch with i != j; with one, every
    (query, ref item) pair (the ref set is detached), including the query's own entry when
    the ref set contains it (s = 1 > alpha: it adds nothing; ``self_index`` is accepted and
    not needed), as the official code does.
    Positive = same label at ``hierarchy_level`` (0 = finest).

    ``reduction``:

    * ``"avg_non_zero"`` (default): the official code (SupRank/ROADMAP ``CalibrationLoss`` =
      PML ``ContrastiveLoss(pos_margin=alpha, neg_margin=beta)`` with the
      ``AvgNonZeroReducer``): each of the two sums is averaged over its *non-zero* terms
      (over all pairs of the batch), then the two are added. This produced the papers'
      numbers.
    * ``"mean"``: the paper's eq. 7 literally -- per query, the mean over its positives plus
      the mean over its negatives, averaged over the queries.

    PML normalises the embeddings inside (same value on L2-normalised inputs, the gradient
    then has no radial component); here they are used as given.
    """

    family = "pair"  # thresholds on pairwise similarities (losses.registry)

    def __init__(self, alpha: float = 0.9, beta: float = 0.6, reduction: str = "avg_non_zero",
                 hierarchy_level: NonNegativeInt = 0):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
        if int(hierarchy_level) < 0:
            raise ValueError(f"hierarchy_level must be >= 0, got {hierarchy_level}")
        self.alpha, self.beta = float(alpha), float(beta)
        self.reduction = reduction
        self.hierarchy_level = int(hierarchy_level)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, reduction={self.reduction!r}"

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        with no_autocast(embeddings):
            emb, y, ref, yr = check_batch(embeddings, labels, ref_embeddings, ref_labels, self.hierarchy_level)
            if ref is None:
                ref, yr = emb, y
                pair = ~torch.eye(emb.shape[0], dtype=torch.bool, device=emb.device)
            else:
                pair = torch.ones(emb.shape[0], ref.shape[0], dtype=torch.bool, device=emb.device)
            s = emb @ ref.T
            same = y.unsqueeze(1) == yr.unsqueeze(0)
            pos, neg = pair & same, pair & ~same
            lp = F.relu(self.alpha - s) * pos
            ln = F.relu(s - self.beta) * neg
            if self.reduction == "avg_non_zero":
                return lp.sum() / (lp > 0).sum().clamp_min(1) + ln.sum() / (ln > 0).sum().clamp_min(1)
            per_q = lp.sum(1) / pos.sum(1).clamp_min(1) + ln.sum(1) / neg.sum(1).clamp_min(1)
            return per_q.mean()


@register("normalized_softmax_dg")
class NormalizedSoftmaxDG(nn.Module):
    r"""L_DG* (eq. 8): normalised-softmax cross-entropy against one proxy per class.

    logits = v . W_z / ||W_z|| / temperature, loss = mean cross-entropy over the batch, on
    the labels of ``hierarchy_level`` (0 = finest, as HAPPIER / ROADMAP++ use it). This is
    the official ``ClusterLoss`` (adapted from azgo14/classification_metric_learning):
    proxies W [num_classes, embedding_size] initialised U(-1/sqrt(d), 1/sqrt(d)) (as
    ``nn.Linear``), L2-normalised at every forward, embeddings used as given (the net
    already L2-normalises them). The proxies are an ``nn.Parameter``: the trainer puts them
    in the ``loss`` param group (official: Adam lr 10, cosine to 0.1 for SOP/iNat).

    Compared with PML's ``NormalizedSoftmaxLoss(num_classes, embedding_size, temperature)``:
    same loss value and proxy gradient on L2-normalised embeddings (checked in the tests);
    PML stores W transposed, initialises it N(0, 1) and normalises the embeddings inside
    (``normalize_embeddings=True`` here does the same). The optional multi-centre softmax
    of the official class is unused by every config and not reproduced. A reference set
    is ignored (official ``takes_ref_embeddings = False``).
    """

    family = "proxy"  # class proxies (losses.registry)

    def __init__(self, num_classes: int | None = None, embedding_size: int | None = None,
                 temperature: PositiveFloat = 0.05, hierarchy_level: NonNegativeInt = 0,
                 normalize_embeddings: bool = False):
        super().__init__()
        if num_classes is None or embedding_size is None:
            raise ValueError("num_classes and embedding_size are required (the trainer fills them in "
                             f"from the training set); got num_classes={num_classes}, "
                             f"embedding_size={embedding_size}")
        if int(num_classes) < 1 or int(embedding_size) < 1:
            raise ValueError(f"num_classes and embedding_size must be >= 1, got {num_classes}, {embedding_size}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if int(hierarchy_level) < 0:
            raise ValueError(f"hierarchy_level must be >= 0, got {hierarchy_level}")
        self.num_classes, self.embedding_size = int(num_classes), int(embedding_size)
        self.temperature = float(temperature)
        self.hierarchy_level = int(hierarchy_level)
        self.normalize_embeddings = bool(normalize_embeddings)
        self.weight = nn.Parameter(torch.empty(self.num_classes, self.embedding_size))
        stdv = 1.0 / math.sqrt(self.embedding_size)
        with torch.no_grad():
            self.weight.uniform_(-stdv, stdv)

    def extra_repr(self) -> str:
        return (f"num_classes={self.num_classes}, embedding_size={self.embedding_size}, "
                f"temperature={self.temperature}, hierarchy_level={self.hierarchy_level}")

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        check_embeddings(embeddings, self.embedding_size)
        y = level_labels(labels, self.hierarchy_level, embeddings.device)
        check_lengths(embeddings, y)
        check_class_range(y, self.num_classes, hint=" (contiguous training labels)")
        with no_autocast(embeddings):
            emb = embeddings.float()
            if self.normalize_embeddings:
                emb = F.normalize(emb, dim=1)
            logits = emb @ F.normalize(self.weight.float(), dim=1).T
            return F.cross_entropy(logits / self.temperature, y)
