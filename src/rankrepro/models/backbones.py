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

from rankrepro.registry import Registry

#: name -> builder(pretrained) returning a torchvision ResNet (``fc`` still attached)
BACKBONES = Registry("backbone", context=("pretrained",))


def _torchvision_resnet(arch: str, weights_enum: str):
    def build(pretrained: str) -> ResNet:
        weights = getattr(torchvision.models, weights_enum).IMAGENET1K_V1 if pretrained == "imagenet" else None
        return getattr(torchvision.models, arch)(weights=weights)

    build.__name__ = build.__qualname__ = arch
    return build


for _arch, _weights in (("resnet18", "ResNet18_Weights"), ("resnet34", "ResNet34_Weights"),
                        ("resnet50", "ResNet50_Weights"), ("resnet101", "ResNet101_Weights")):
    BACKBONES.register(_arch, _torchvision_resnet(_arch, _weights))


@BACKBONES.register("resnet_tiny")
def resnet_tiny(pretrained: str) -> ResNet:
    """A ResNet with one BasicBlock per stage (for the demo and the tests; random init only)."""
    if pretrained == "imagenet":
        raise ValueError("resnet_tiny has no ImageNet weights: use pretrained: none or a file")
    return ResNet(BasicBlock, [1, 1, 1, 1])


def build_backbone(name: str, pretrained: str) -> tuple[nn.Module, int]:
    """Return (feature extractor without its pooling and classifier, output channels)."""
    net = BACKBONES.build(name, context={"pretrained": pretrained})
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
