"""The input convention of a backbone's weights, applied to the pipeline's image tensors.

Every image is normalised with the ImageNet mean/std (RGB, pixels in [0, 1]) by
:mod:`rankrepro.data.transforms`; a backbone whose weights expect another convention (BN-Inception:
BGR, 0-255, mean [104, 117, 128], std 1) declares an :class:`InputConvention` that its forward
applies first (see :mod:`rankrepro.models.backbones`).
"""

from __future__ import annotations

import torch
from torch import nn

from rankrepro.data.transforms import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["CHANNEL_ORDERS", "InputConvention"]

#: channel orders an :class:`InputConvention` knows, as permutations of the pipeline's RGB channels
CHANNEL_ORDERS = {"RGB": (0, 1, 2), "BGR": (2, 1, 0)}


class InputConvention(nn.Module):
    """Converts the pipeline's image tensors to the input convention of a backbone's weights.

    The transforms (:mod:`rankrepro.data.transforms`) give, per RGB channel j,
    x_j = (v_j - m_j) / s_j with v_j in [0, 1] the pixel value and m, s the ImageNet mean and std.
    Weights trained on channel order ``space`` (``RGB`` or ``BGR``; pi(c) = the RGB channel in
    position c), pixel values in [0, ``scale``], and per-channel ``mean`` and ``std`` (given in
    that channel order) expect

        y_c = (scale * v_pi(c) - mean_c) / std_c,   v_pi(c) = x_pi(c) * s_pi(c) + m_pi(c),

    an affine map per channel, y_c = a_c * x_pi(c) + b_c with a_c = scale * s_pi(c) / std_c and
    b_c = (scale * m_pi(c) - mean_c) / std_c. ``a`` and ``b`` are non-persistent buffers: the
    backbone's state dict keeps the weights file's keys. ``convention`` holds the declaration.
    """

    def __init__(self, space: str, scale: float, mean, std):
        super().__init__()
        if space not in CHANNEL_ORDERS:
            raise ValueError(f"input convention: space must be one of {', '.join(CHANNEL_ORDERS)}, got {space!r}")
        if len(mean) != 3 or len(std) != 3:
            raise ValueError(f"input convention: mean and std need 3 values (one per channel), got {mean}, {std}")
        self.convention = {"space": space, "scale": float(scale), "mean": tuple(map(float, mean)),
                           "std": tuple(map(float, std))}
        self.order = list(CHANNEL_ORDERS[space])
        m = torch.tensor(IMAGENET_MEAN, dtype=torch.float64)[self.order]
        s = torch.tensor(IMAGENET_STD, dtype=torch.float64)[self.order]
        mean_t, std_t = torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64)
        self.register_buffer("a", (scale * s / std_t).float().view(1, 3, 1, 1), persistent=False)
        self.register_buffer("b", ((scale * m - mean_t) / std_t).float().view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.order != [0, 1, 2]:
            x = x[:, self.order]
        return torch.addcmul(self.b.to(x.dtype), x, self.a.to(x.dtype))

    def extra_repr(self) -> str:
        c = self.convention
        return f"space={c['space']}, scale={c['scale']:g}, mean={c['mean']}, std={c['std']}"
