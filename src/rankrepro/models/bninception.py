"""BN-Inception (Ioffe & Szegedy 2015, "Inception with Batch Normalization"), Caffe-ported.

The network of Cadene's ``pretrainedmodels.bninception`` (pretrained-models.pytorch,
``pretrainedmodels/models/bninception.py``), written here without that (unmaintained) package:
the same layers under the same attribute names, so that its ImageNet weights file
``bn_inception-52deb4733.pth`` (:data:`WEIGHTS_URL`) loads by state-dict key names. The top-k
precision code's ``bn_inception_v2`` is the same network (../shared/spec/reference/losses.md §4.3).

Layers (every convolution has a bias and is followed by ``<name>_bn``, a BatchNorm2d with
PyTorch's defaults, and a ReLU; ceil-mode pooling as in Caffe):

- stem: ``conv1_7x7_s2`` (7x7, stride 2) -> max pool 3/2 -> ``conv2_3x3_reduce`` (1x1)
  -> ``conv2_3x3`` (3x3) -> max pool 3/2;
- inception modules 3a, 3b, 3c, 4a-4e, 5a, 5b (:data:`MODULES`), each the concatenation of
  ``<m>_1x1``; ``<m>_3x3_reduce`` -> ``<m>_3x3``; ``<m>_double_3x3_reduce`` -> ``<m>_double_3x3_1``
  -> ``<m>_double_3x3_2``; and a 3x3 pooling followed by ``<m>_pool_proj`` (1x1). The reduction
  modules 3c and 4e have no 1x1 branch, stride 2 in their second 3x3 convolutions and a bare
  max pool 3/2 branch.

:meth:`BNInception.forward` returns Cadene's ``features``: the [B, 1024, H/32, W/32] output of
``inception_5b`` (7x7 at 224 or 227 pixels), with no global pooling and no classifier
(``last_linear`` of the weights file is dropped on loading).

Input convention of the weights (Cadene's ``pretrained_settings``): BGR channel order, pixel
range 0-255, mean [104, 117, 128] (B, G, R) subtracted, std 1. The network declares it
(:data:`INPUT_CONVENTION`) and its forward converts the pipeline's tensors to it first
(:class:`rankrepro.models.input_convention.InputConvention`).

BatchNorm momentum: PyTorch's default 0.1 here, as in Cadene's network; the top-k precision
code's port has 0.9 in every layer (a Caffe-port artefact), which the model parameter
``bn_momentum`` sets (:class:`rankrepro.models.heads.RetrievalNet`; the topk_bninception_* setups).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.models.input_convention import InputConvention
from rankrepro.models.key_names import load_by_key_names

__all__ = ["INPUT_CONVENTION", "MODULES", "WEIGHTS_FILE", "WEIGHTS_URL", "BNInception"]

#: Cadene's ImageNet weights (pretrainedmodels ``pretrained_settings["bninception"]["imagenet"]["url"]``)
WEIGHTS_URL = "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"
WEIGHTS_FILE = WEIGHTS_URL.rsplit("/", 1)[1]

#: what the weights expect: channel order, pixel range [0, scale], per-channel mean and std (in that channel order)
INPUT_CONVENTION = {"space": "BGR", "scale": 255.0, "mean": (104.0, 117.0, 128.0), "std": (1.0, 1.0, 1.0)}

#: inception module -> (input channels, 1x1, 3x3 reduce, 3x3, double 3x3 reduce, double 3x3, pool, pool proj);
#: 1x1 = pool proj = None: a reduction module (stride 2, max pool branch without projection)
MODULES = {
    "3a": (192, 64, 64, 64, 64, 96, "avg", 32),
    "3b": (256, 64, 64, 96, 64, 96, "avg", 64),
    "3c": (320, None, 128, 160, 64, 96, "max", None),
    "4a": (576, 224, 64, 96, 96, 128, "avg", 128),
    "4b": (576, 192, 96, 128, 96, 128, "avg", 128),
    "4c": (576, 160, 128, 160, 128, 160, "avg", 128),
    "4d": (608, 96, 128, 192, 160, 192, "avg", 128),
    "4e": (608, None, 128, 192, 192, 256, "max", None),
    "5a": (1056, 352, 192, 320, 160, 224, "avg", 128),
    "5b": (1024, 352, 192, 320, 192, 224, "max", 128),
}


class BNInception(nn.Module):
    """BN-Inception's convolutional trunk (see the module docstring); ``forward`` returns its
    [B, 1024, h, w] feature map after converting the input to :data:`INPUT_CONVENTION`."""

    output = "map"
    num_features = 1024

    def __init__(self):
        super().__init__()
        self.input_convention = InputConvention(**INPUT_CONVENTION)
        self._unit("conv1_7x7_s2", 3, 64, 7, stride=2)
        self.pool1_3x3_s2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self._unit("conv2_3x3_reduce", 64, 64, 1)
        self._unit("conv2_3x3", 64, 192, 3)
        self.pool2_3x3_s2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        for m, (c_in, c1, c3r, c3, cdr, cd, pool, proj) in MODULES.items():
            stride = 2 if c1 is None else 1
            p = f"inception_{m}_"
            if c1 is not None:
                self._unit(p + "1x1", c_in, c1, 1)
            self._unit(p + "3x3_reduce", c_in, c3r, 1)
            self._unit(p + "3x3", c3r, c3, 3, stride=stride)
            self._unit(p + "double_3x3_reduce", c_in, cdr, 1)
            self._unit(p + "double_3x3_1", cdr, cd, 3)
            self._unit(p + "double_3x3_2", cd, cd, 3, stride=stride)
            if pool == "avg":
                self.add_module(p + "pool", nn.AvgPool2d(3, stride=1, padding=1, ceil_mode=True,
                                                         count_include_pad=True))
            elif stride == 2:
                self.add_module(p + "pool", nn.MaxPool2d(3, stride=2, ceil_mode=True))
            else:  # 5b
                self.add_module(p + "pool", nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True))
            if proj is not None:
                self._unit(p + "pool_proj", c_in, proj, 1)

    def _unit(self, name: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        self.add_module(name, nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2))
        self.add_module(name + "_bn", nn.BatchNorm2d(c_out))

    def _run(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """conv -> BatchNorm -> ReLU of unit ``name``."""
        return F.relu(getattr(self, name + "_bn")(getattr(self, name)(x)), inplace=True)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.input_convention(images)
        x = self.pool1_3x3_s2(self._run("conv1_7x7_s2", x))
        x = self.pool2_3x3_s2(self._run("conv2_3x3", self._run("conv2_3x3_reduce", x)))
        for m, (_, c1, *_rest, proj) in MODULES.items():
            p = f"inception_{m}_"
            branches = [self._run(p + "1x1", x)] if c1 is not None else []
            branches.append(self._run(p + "3x3", self._run(p + "3x3_reduce", x)))
            double = self._run(p + "double_3x3_1", self._run(p + "double_3x3_reduce", x))
            branches.append(self._run(p + "double_3x3_2", double))
            pooled = getattr(self, p + "pool")(x)
            branches.append(self._run(p + "pool_proj", pooled) if proj is not None else pooled)
            x = torch.cat(branches, 1)
        return x

    def load_weights(self, state: dict) -> None:
        """Load a state dict of this network by key names: Cadene's ``bn_inception-52deb4733.pth``
        (its classifier ``last_linear.*`` dropped; files older than PyTorch 0.4.1 lack the
        BatchNorm ``num_batches_tracked`` counters, which then start at 0) or one saved from a
        :class:`BNInception`. Any other missing or unexpected key is an error."""
        load_by_key_names(self, "BN-Inception", {k: v for k, v in state.items() if not k.startswith("last_linear.")})
