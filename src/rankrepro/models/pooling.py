"""Global pooling of a backbone's output into [B, C].

Each pooling says what it takes in ``input``: ``"map"`` (a convolutional [B, C, H, W] feature map),
``"tokens"`` (a vision transformer's [B, 1 + N, D] tokens, CLS first) or ``"vector"`` (a network's own
embedding [B, D]: the face networks); see :func:`rankrepro.models.backbones.build_backbone`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.registry import PositiveFloat, Registry

POOLINGS = Registry("pooling")


@POOLINGS.register("gem")
class GeM(nn.Module):
    """Generalised mean pooling: (mean_hw x^p)^(1/p), with a learnable p (Radenović et al.)."""

    input = "map"

    def __init__(self, p: PositiveFloat = 3.0, eps: float = 1e-6, learnable: bool = True):
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

    input = "map"

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(-2, -1))


@POOLINGS.register("max")
class MaxPool(nn.Module):
    """Maximum over the spatial positions."""

    input = "map"

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 1).flatten(1)


@POOLINGS.register("cls")
class ClsToken(nn.Module):
    """The CLS token of a vision transformer's tokens (``x[:, 0]``): timm's ``global_pool="token"``, what the
    official SupRank code embeds with DeiT-S and ViT-B (``pooling: default`` there)."""

    input = "tokens"

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


@POOLINGS.register("identity")
class IdentityPooling(nn.Module):
    """The backbone's own embedding vector [B, D], unchanged: the pooling of a backbone whose output is
    ``"vector"`` (``senet50_256``, ``iresnet50``), whose networks pool (and project) themselves."""

    input = "vector"

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def build_pooling(block: dict | str) -> nn.Module:
    """The pooling of a run's ``model.pooling`` block (``{"name": "gem", "p": 3.0, ...}``; a bare name
    builds it with its defaults)."""
    return POOLINGS.build_block({"name": block} if isinstance(block, str) else block)
