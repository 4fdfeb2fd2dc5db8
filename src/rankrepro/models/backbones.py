"""Convolutional backbones that return a [B, C, H, W] feature map.

``pretrained`` is ``imagenet`` (torchvision's IMAGENET1K_V1 weights, through
torchvision's own download path and cache), ``none`` (random initialisation) or a
path to a state dict saved from the same torchvision architecture.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
import torchvision
from torchvision.models.resnet import BasicBlock, ResNet

TORCHVISION_RESNETS = {
    "resnet18": "ResNet18_Weights",
    "resnet34": "ResNet34_Weights",
    "resnet50": "ResNet50_Weights",
    "resnet101": "ResNet101_Weights",
}
BACKBONES = sorted([*TORCHVISION_RESNETS, "resnet_tiny"])


def _resnet_tiny() -> ResNet:
    """A ResNet with one BasicBlock per stage (for the demo and the tests; random init only)."""
    return ResNet(BasicBlock, [1, 1, 1, 1])


def build_backbone(name: str, pretrained: str = "imagenet") -> tuple[nn.Module, int]:
    """Return (feature extractor without its pooling and classifier, output channels)."""
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; allowed: {BACKBONES}")
    weights = None
    if name == "resnet_tiny":
        if pretrained == "imagenet":
            raise ValueError("resnet_tiny has no ImageNet weights: use pretrained: none or a file")
        net = _resnet_tiny()
    else:
        if pretrained == "imagenet":
            weights = getattr(torchvision.models, TORCHVISION_RESNETS[name]).IMAGENET1K_V1
        net = getattr(torchvision.models, name)(weights=weights)
    if pretrained not in ("imagenet", "none"):
        path = Path(pretrained)
        if not path.is_file():
            raise FileNotFoundError(f"pretrained weights file {path} does not exist")
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
    channels = net.fc.in_features
    features = nn.Sequential(*list(net.children())[:-2])
    return features, channels


def freeze_batchnorm(module: nn.Module) -> None:
    """Keep every BatchNorm in eval mode (frozen running statistics), whatever .train() is called.

    The affine weights stay trainable, as in the Smooth-AP, PNP and SupRank code.
    """
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
            m.train = lambda mode=True, _m=m: _m  # noqa: E731 - a no-op that keeps eval mode
