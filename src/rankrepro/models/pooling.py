"""Global pooling of a [B, C, H, W] feature map into [B, C]."""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from rankrepro.registry import Registry

POOLINGS = Registry("pooling")


@POOLINGS.register("gem")
class GeM(nn.Module):
    """Generalised mean pooling: (mean_hw x^p)^(1/p), with a learnable p (Radenović et al.)."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6, learnable: bool = True):
        super().__init__()
        p_tensor = torch.tensor(float(p))
        self.p = nn.Parameter(p_tensor) if learnable else p_tensor
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.p.to(x.dtype)
        return x.clamp(min=self.eps).pow(p).mean(dim=(-2, -1)).pow(1.0 / p)


@POOLINGS.register("avg")
class AvgPool(nn.Module):
    """Average over the spatial positions."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(-2, -1))


@POOLINGS.register("max")
class MaxPool(nn.Module):
    """Maximum over the spatial positions."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 1).flatten(1)


def build_pooling(block: dict | str) -> nn.Module:
    """The pooling of a run's ``model.pooling`` block (``{"name": "gem", "p": 3.0, ...}``; a bare name
    builds it with its defaults)."""
    return POOLINGS.build_block({"name": block} if isinstance(block, str) else block)
