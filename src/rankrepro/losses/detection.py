"""The losses of a Faster R-CNN's box head (RaMBO section 5.2, Tables 5 and 8): ``faster_rcnn``.

RaMBO trains mmdetection's Faster R-CNN and "only exchange[s] the cross-entropy loss of the classifier
with a weighted combination of L_mAP and L_APC" (paper section 5.2); the box regression and the RPN
losses stay as they are. :class:`FasterRCNNLoss` is that box-head loss: the detector's RoI heads
(:class:`rankrepro.models.detection.RankRoIHeads`) call it in training with what torchvision's
``fastrcnn_loss`` takes.

It is registered in the loss registry with ``task = "detection"``: it scores RoIs, not embeddings,
so the embedding losses' callers and contract (``rankrepro.losses.names()``, the retrieval losses)
leave it out and the catalog records its task.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.registry import NonNegativeFloat, NonNegativeInt, PositiveFloat

from .blackbox import RaMBOMapDetLoss
from .registry import register

__all__ = ["FasterRCNNLoss", "box_regression_loss"]

CLASSIFIERS = ("cross_entropy", "rambo_map")
SCORES = ("logits", "softmax")


def box_regression_loss(box_regression: torch.Tensor, labels: torch.Tensor, regression_targets: torch.Tensor,
                        beta: float) -> torch.Tensor:
    """Smooth L1 (``beta``) between each positive RoI's regression of its own class and its target,
    summed over the positive RoIs and the 4 coordinates and divided by the number of RoIs (positives
    and negatives) -- torchvision's ``fastrcnn_loss`` and mmdet v1's ``avg_factor`` = sampled RoIs.

    ``box_regression`` [N, 4 * classes], ``labels`` [N] (0 = background), ``regression_targets`` [N, 4]."""
    pos = torch.where(labels > 0)[0]
    per_class = box_regression.reshape(labels.shape[0], box_regression.size(-1) // 4, 4)
    loss = F.smooth_l1_loss(per_class[pos, labels[pos]], regression_targets[pos], beta=beta, reduction="sum")
    return loss / labels.numel()


@register("faster_rcnn")
class FasterRCNNLoss(nn.Module):
    r"""The box head's two losses: ``loss_classifier`` and ``loss_box_reg``.

    ``forward(class_logits [N, C], box_regression [N, 4 C], labels: list of [n_i], regression_targets:
    list of [n_i, 4]) -> {"loss_classifier", "loss_box_reg"}`` over the N = sum n_i sampled RoIs of
    the batch (C classes, background = 0), the arguments of torchvision's ``fastrcnn_loss``.

    * ``classifier: cross_entropy`` -- ``F.cross_entropy(class_logits, labels)`` (mean over RoIs), as
      torchvision and mmdet v1 (``CrossEntropyLoss``, averaged over the sampled RoIs).
    * ``classifier: rambo_map`` -- ``rank_weight`` x RaMBO's L_mAP + L_APC
      (:class:`~rankrepro.losses.blackbox.RaMBOMapDetLoss`, the official ``MapLoss``) over the
      [N, C] scores and the one-hot targets of the RoIs' labels. ``score``: the class logits
      (``logits``) or their softmax (``softmax``); ``background``: the background column 0 is one of
      the ranked classes (false: only the C - 1 object columns; background RoIs are then negatives
      of every column and the background logit gets no gradient).

    ``loss_box_reg``: :func:`box_regression_loss` with smooth-L1 ``box_beta``.

    Defaults and their sources:

    * ``classifier = cross_entropy``: the detector's own loss (the CE baselines of Tables 5 and 8);
      a RaMBO run sets ``rambo_map``.
    * ``lambda_val = 0.5``, ``margin = 0.15``, ``memory_batches = 7`` (tau), ``interclass_coef = 1/3``
      (L_mAP : L_APC = 2 : 1): paper section 5.2.
    * ``random_margin = true``: the official ``MapLoss`` (martius-lab/blackbox-backprop
      ``blackbox_backprop/mAP.py``) draws the margin as ``margin * |N(0,1)|``; false = the paper's
      deterministic eq. 14. The official code produced the paper's numbers, hence the default.
    * ``score = logits``: our choice -- the paper does not say which scores enter the loss; the
      margin "removes the destabilizing scale-invariance", a property of logits, and AP-loss (the
      paper's [8]) ranks logits (../shared/spec/reference/detection.md A.2).
    * ``background = true``: our choice -- the loss replaces the classifier's cross-entropy, and
      without the column the background logit, which the test-time softmax uses, gets no gradient
      (detection.md A.2).
    * ``rank_weight = 1.0``: our choice (not stated; the rank loss replaces CE one for one).
    * ``box_beta = 1.0``: mmdet v1's RCNN ``SmoothL1Loss(beta=1.0)`` (the detector the paper cites,
      mmdetection 9d767a03); torchvision's ``fastrcnn_loss`` uses 1/9 (detection.md A.3).

    ``score``, ``background`` and ``rank_weight`` belong to the rank classifier: other values with
    ``cross_entropy`` are an error (the RaMBO hyper-parameters are unused there). The RaMBO memory
    is this module's state (``state_dict``: the trainer checkpoints it); :meth:`reset` clears it.
    Float32 for the rank loss (autocast disabled inside it; ties).
    """

    #: what the loss scores: the RoIs of a detector (not embeddings); see the loss registry's ``names``
    task = "detection"

    def __init__(
        self,
        classifier: str = "cross_entropy",
        lambda_val: PositiveFloat = 0.5,
        margin: NonNegativeFloat = 0.15,
        interclass_coef: float = 1.0 / 3.0,
        memory_batches: NonNegativeInt = 7,
        random_margin: bool = True,
        score: str = "logits",
        background: bool = True,
        box_beta: NonNegativeFloat = 1.0,
        rank_weight: PositiveFloat = 1.0,
    ):
        super().__init__()
        if classifier not in CLASSIFIERS:
            raise ValueError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {classifier!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        if not box_beta >= 0:
            raise ValueError(f"box_beta must be >= 0, got {box_beta}")
        if not rank_weight > 0:
            raise ValueError(f"rank_weight must be > 0, got {rank_weight}")
        if classifier == "cross_entropy" and (score != "logits" or not background or rank_weight != 1.0):
            raise ValueError("score, background and rank_weight set the rank classifier: with classifier: "
                             "cross_entropy keep score: logits, background: true, rank_weight: 1.0")
        self.classifier = classifier
        self.score = score
        self.background = bool(background)
        self.box_beta = float(box_beta)
        self.rank_weight = float(rank_weight)
        self.rank_loss = (RaMBOMapDetLoss(lambda_val, margin, interclass_coef, memory_batches, random_margin)
                          if classifier == "rambo_map" else None)

    def extra_repr(self) -> str:
        out = f"classifier={self.classifier}, box_beta={self.box_beta}"
        if self.rank_loss is not None:
            out += f", score={self.score}, background={self.background}, rank_weight={self.rank_weight}"
        return out

    def reset(self) -> None:
        """Forget the rank loss's memory (nothing to do with cross-entropy)."""
        if self.rank_loss is not None:
            self.rank_loss.reset()

    def classifier_loss(self, class_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The classifier's loss of ``class_logits`` [N, C] and ``labels`` [N] (class docstring)."""
        if self.rank_loss is None:
            return F.cross_entropy(class_logits, labels)
        scores = class_logits.float()
        if self.score == "softmax":
            scores = scores.softmax(dim=1)
        targets = F.one_hot(labels, class_logits.shape[1]).to(scores.dtype)
        if not self.background:
            scores, targets = scores[:, 1:], targets[:, 1:]
        return self.rank_weight * self.rank_loss(scores, targets)

    def forward(self, class_logits: torch.Tensor, box_regression: torch.Tensor, labels: list[torch.Tensor],
                regression_targets: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        labels_ = torch.cat(labels, dim=0)
        targets = torch.cat(regression_targets, dim=0)
        return {"loss_classifier": self.classifier_loss(class_logits, labels_),
                "loss_box_reg": box_regression_loss(box_regression, labels_, targets, self.box_beta)}
