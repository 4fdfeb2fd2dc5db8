"""The retrieval network: backbone -> pooling -> [LayerNorm, no affine] -> Linear -> L2 norm."""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from rankrepro.models.backbones import build_backbone, freeze_batchnorm
from rankrepro.models.pooling import build_pooling
from rankrepro.registry import Registry

MODELS = Registry("model")


@MODELS.register("retrieval_net")

class RetrievalNet(nn.Module):
    """Embeds images into L2-normalised vectors.

    ``backbone``: a name of :data:`rankrepro.models.backbones.BACKBONES`; ``pretrained``:
    ``imagenet``, ``none`` or a state-dict file; ``pooling``: a block of
    :data:`rankrepro.models.pooling.POOLINGS` (``{"name": "gem", "p": 3.0}``; a bare name
    takes its defaults); ``layernorm``: LayerNorm without affine parameters before the
    projection (SupRank); ``embed_dim``: output size; ``freeze_bn``: BatchNorm statistics frozen.

    ``backbone`` holds the pretrained feature extractor; ``head`` holds everything
    after it (pooling parameters, LayerNorm, projection) so the trainer can give the
    two groups their own learning rates.
    """

    def __init__(self, backbone: str = "resnet50", pretrained: str = "imagenet", pooling: str | dict = "avg",
                 layernorm: bool = True, embed_dim: int = 512, freeze_bn: bool = True):
        super().__init__()
        self.backbone, channels = build_backbone(backbone, pretrained)
        self.head = nn.Sequential(
            build_pooling(pooling),
            nn.LayerNorm(channels, elementwise_affine=False) if layernorm else nn.Identity(),
            nn.Linear(channels, embed_dim),
        )
        self.freeze_bn = freeze_bn
        if freeze_bn:
            freeze_batchnorm(self.backbone)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.head(self.backbone(images))
        return F.normalize(features.float(), dim=-1)


def build_model(block: dict) -> nn.Module:
    """Build from a run's ``model`` block (``{"name": "retrieval_net", **parameters}``)."""
    return MODELS.build_block(block)
