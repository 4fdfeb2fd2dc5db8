"""The face networks' own training losses, and a loss with a base loss added.

Smooth-AP's face experiments (section 6.3: "we append Smooth-AP on top of modern methods") fine-tune
two networks trained with a classification loss over the 8,631 VGGFace2 training identities: VGG's
SENet-50 (softmax cross-entropy) and insightface's ArcFace ResNet-50 (additive angular margin). The
paper does not say whether that loss stays beside the appended one (issue #26 of the Smooth-AP
repository, unanswered); ../shared/spec/reference/faces.md B.2 keeps it, weight 1 : 1 [our choice].
A run's ``base_loss`` block (:class:`rankrepro.losses.combined.WithBase`, built by :func:`rankrepro.losses.registry.build`)
adds it; ``base_loss: null`` drops it.

- ``softmax``: ``CE(W x + b, y)``, a linear classifier over the training identities on the
  (L2-normalised) embedding, ``nn.Linear``'s initialisation [our choice: the released SENet-50
  weights hold no classifier we could start from, so the classifier starts afresh].
- ``arcface``: ArcFace (Deng et al. 2019), PML ``ArcFaceLoss``: ``CE(s · cos(θ_y + m), ...)`` with
  L2-normalised class weights, scale s = 64 and margin m = 0.5 rad (insightface's values for its
  VGGFace2 ResNet-50, arcface_torch configs; PML takes the margin in degrees: 28.6479°).

Both keep their class weights as parameters of the loss: they train in the run's ``loss`` parameter
group (:mod:`rankrepro.engine.optim`).
"""

from __future__ import annotations

import math

from pytorch_metric_learning import losses as pml_losses
from torch import nn

from rankrepro.registry import PositiveFloat

from .baselines import _ProxyAdapter, _check_sizes
from .registry import register

__all__ = ["Softmax", "ArcFace"]


@register("softmax")
class Softmax(_ProxyAdapter):
    r"""Softmax cross-entropy over the training classes: ``CE(W x + b, y)`` (``nn.Linear``, its own
    initialisation), the loss VGG's SENet-50 was trained with (faces.md B.1)."""

    def __init__(self, num_classes: int, embedding_size: int):
        super().__init__()
        _check_sizes(num_classes, embedding_size)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.classifier = nn.Linear(embedding_size, num_classes)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embedding_size={self.embedding_size}"

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return nn.functional.cross_entropy(self.classifier(emb), y)


@register("arcface")
class ArcFace(_ProxyAdapter):
    r"""ArcFace, PML ``ArcFaceLoss``: ``-log softmax(s · [cos(θ_c + m·[c = y])]_c)[y]``, θ_c the angle
    between the embedding and the normalised class weight c; ``scale`` s = 64 and ``margin`` m = 0.5
    (radians; insightface arcface_torch ``config.margin_list (1.0, 0.5, 0.0)``, scale 64)."""

    def __init__(self, num_classes: int, embedding_size: int, margin: PositiveFloat = 0.5,
                 scale: PositiveFloat = 64.0):
        super().__init__()
        _check_sizes(num_classes, embedding_size)
        self.num_classes, self.embedding_size = num_classes, embedding_size
        self.margin, self.scale = float(margin), float(scale)
        self.loss = pml_losses.ArcFaceLoss(num_classes, embedding_size, margin=math.degrees(self.margin),
                                           scale=self.scale)

    def extra_repr(self) -> str:
        return (f"num_classes={self.num_classes}, embedding_size={self.embedding_size}, margin={self.margin}, "
                f"scale={self.scale}")

    def _loss(self, emb, y, ref, yr, n_self):
        self._check_labels(y, self.num_classes)
        return self.loss(emb, y)
