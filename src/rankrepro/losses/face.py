"""The face networks' own training losses, and a loss with a base loss added.

Smooth-AP's face experiments (section 6.3: "we append Smooth-AP on top of modern methods") fine-tune
two networks trained with a classification loss over the 8,631 VGGFace2 training identities: VGG's
SENet-50 (softmax cross-entropy) and insightface's ArcFace ResNet-50 (additive angular margin). The
paper does not say whether that loss stays beside the appended one (issue #26 of the Smooth-AP
repository, unanswered); ../shared/spec/reference/faces.md B.2 keeps it, weight 1 : 1 [our choice].
A run's ``base_loss`` block (:class:`rankrepro.losses.combined.WithBase`, built by :func:`rankrepro.losses.registry.build`)
adds it; ``base_loss: null`` drops it.

- ``softmax``: ``CE(W x + b, y)``, a linear classifier over the training identities on the
  (L2-normalised) embedding.
- ``arcface``: ArcFace (Deng et al. 2019), PML ``ArcFaceLoss``: ``CE(s · cos(θ_y + m), ...)`` with
  L2-normalised class weights, scale s = 64 and margin m = 0.5 rad (insightface's values for its
  VGGFace2 ResNet-50, arcface_torch configs; PML takes the margin in degrees: 28.6479°).

Both keep their class weights as parameters of the loss: they train in the run's ``loss`` parameter
group (:mod:`rankrepro.engine.optim`). Their start, ``init`` [our choice: the released networks hold no
classifier, the paper says nothing of one]:

- ``imprint`` (default): weight imprinting (:mod:`rankrepro.losses.imprint`): class c's weight is the
  normalised mean m_c of the pretrained network's normalised embeddings of (at most ``imprint_per_class``
  of) its training images, computed by the retrieval task before the first step. A random 8,631-way head
  on a network that already separates the identities would pull the embedding towards random centres: with
  the released networks its gradient is about 9x Smooth-AP's on the same batch (issue 34), so the rows
  "+Smooth-AP" and the others would mostly measure the head's catching up. ``softmax``: W = s·m_c with
  s = :data:`IMPRINT_SCALE`, b = 0; ``arcface``: W = m_c (its weights are normalised anyway).
- ``random``: the module's own initialisation (``nn.Linear``'s; PML's for ArcFace), the start before
  imprinting existed.

``imprint_per_class`` = 32 [our choice]: VGGFace2 has about 360 images per identity; 32 of each (276k
images, a tenth of an epoch of inference) estimate a mean direction whose spread falls as 1/sqrt(32); every
image of a smaller class.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from rankrepro.registry import PositiveFloat, PositiveInt, choices

from .baselines import _ProxyAdapter, _check_sizes
from .registry import register

__all__ = ["IMPRINT_SCALE", "ArcFace", "Softmax"]


#: the scale of imprinted softmax weights (W = s·m_c): logits s·cos(x, m_c) in [-s, s]. [Our choice] the smallest
#: power of two for which NormFace's lower bound on a normalised softmax's loss (Wang et al. 2017:
#: log(1 + (n - 1) exp(-s n / (n - 1))) for n classes) is below 0.01 at VGGFace2's n = 8,631: 16 gives 0.001,
#: 8 gives 1.36 (unit weights, s = 1, could not go below 7.9: every logit within 2 of the others)
IMPRINT_SCALE = 16.0


class _BaseClassifier(_ProxyAdapter):
    """A face network's own classification loss: its class weights, their ``init`` and :meth:`imprint`."""

    def _init_options(self, num_classes: int, embedding_size: int, init: str, imprint_per_class: int) -> None:
        _check_sizes(num_classes, embedding_size)
        allowed = choices(type(self), "init")
        if init not in allowed:
            raise ValueError(f"init must be one of {', '.join(allowed)}, got {init!r}")
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.init, self.imprint_per_class = init, int(imprint_per_class)

    def extra_repr(self) -> str:
        return (f"num_classes={self.num_classes}, embedding_size={self.embedding_size}, init={self.init}, "
                f"imprint_per_class={self.imprint_per_class}")

    def imprint(self, means: torch.Tensor) -> None:
        """Set the class weights from ``means`` ([num_classes, embedding_size], unit rows: module docstring)."""
        if tuple(means.shape) != (self.num_classes, self.embedding_size):
            raise ValueError(f"imprint: means of shape {tuple(means.shape)}, the classifier has "
                             f"{self.num_classes} classes of {self.embedding_size}")
        with torch.no_grad():
            self._imprint(means)

    def _imprint(self, means: torch.Tensor) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@register("softmax")
class Softmax(_BaseClassifier):
    r"""Softmax cross-entropy over the training classes: ``CE(W x + b, y)`` (``nn.Linear``), the loss VGG's
    SENet-50 was trained with (faces.md B.1); imprinted (W = s·m_c, b = 0) or ``nn.Linear``'s start."""

    def __init__(self, num_classes: int, embedding_size: int, init: Literal["imprint", "random"] = "imprint",
                 imprint_per_class: PositiveInt = 32):
        super().__init__()
        self._init_options(num_classes, embedding_size, init, imprint_per_class)
        self.classifier = nn.Linear(embedding_size, num_classes)

    def _imprint(self, means):
        self.classifier.weight.copy_(IMPRINT_SCALE * means.to(self.classifier.weight))
        self.classifier.bias.zero_()

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return nn.functional.cross_entropy(self.classifier(emb), y)


@register("arcface")
class ArcFace(_BaseClassifier):
    r"""ArcFace, PML ``ArcFaceLoss``: ``-log softmax(s · [cos(θ_c + m·[c = y])]_c)[y]``, θ_c the angle
    between the embedding and the normalised class weight c; ``scale`` s = 64 and ``margin`` m = 0.5
    (radians; insightface arcface_torch ``config.margin_list (1.0, 0.5, 0.0)``, scale 64); imprinted
    (weight c = m_c) or PML's start."""

    def __init__(self, num_classes: int, embedding_size: int, margin: PositiveFloat = 0.5,
                 scale: PositiveFloat = 64.0, init: Literal["imprint", "random"] = "imprint",
                 imprint_per_class: PositiveInt = 32):
        from pytorch_metric_learning import losses as pml_losses

        super().__init__()
        self._init_options(num_classes, embedding_size, init, imprint_per_class)
        self.margin, self.scale = float(margin), float(scale)
        self.loss = pml_losses.ArcFaceLoss(num_classes, embedding_size, margin=math.degrees(self.margin),
                                           scale=self.scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, margin={self.margin}, scale={self.scale}"

    def _imprint(self, means):
        self.loss.W.copy_(means.T.to(self.loss.W))  # PML keeps the weights as [embedding_size, num_classes]

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return self.loss(emb, y)
