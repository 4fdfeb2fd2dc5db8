"""A loss with a base loss added (a run's ``base_loss``, :func:`rankrepro.losses.registry.build`)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["WithBase"]


class WithBase(nn.Module):
    """``loss(x, y, ...) + base(x, y)``: the run's loss with its ``loss.base`` added, weight 1 : 1
    (faces.md B.2). The base sees the current batch only (no reference set); both modules' parameters
    (and states, e.g. a memory) are this module's."""

    def __init__(self, loss: nn.Module, base: nn.Module):
        super().__init__()
        self.loss, self.base = loss, base

    def set_epoch(self, epoch: int) -> None:
        for part in (self.loss, self.base):
            if hasattr(part, "set_epoch"):
                part.set_epoch(epoch)

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None) -> torch.Tensor:
        return self.loss(embeddings, labels, ref_embeddings, ref_labels, self_index) + self.base(embeddings, labels)
