"""The two face networks of Smooth-AP's face experiments (../shared/spec/reference/faces.md B.1, B.3):
VGG's SE-ResNet-50-256D (``senet50_256``) and insightface's ArcFace ResNet-50 (``iresnet50``).

Both are written here (no third-party model code) with the parameter names of their published
weights, so that a local weights file loads by key names (``pretrained: <file>``; every key and
shape must match, the BatchNorm counters of pre-0.4.1 files excepted); neither has
ImageNet weights nor a download path (the files are manual, faces.md B.3). Both output the
network's own embedding, a vector [B, D] (``output = "vector"``), which the retrieval head takes
unchanged: model options ``pooling: identity, layernorm: false, projection: false, embed_dim: D``
(:class:`rankrepro.models.heads.RetrievalNet` then only L2-normalises it, as both networks'
own evaluation code does).

**SENet50_256** -- the network of ``senet50_256.pth``, the PyTorch port (pytorch-mcn, from
MatConvNet) of VGGFace2's ``SE-ResNet-50-256D`` (pretrained on MS-Celeb-1M, fine-tuned on
VGGFace2; ox-vgg/vgg_face2 README). Names, shapes and input convention as in the class
``Senet50_256`` of Andrew-Brown1/Automated_Face_Tracking_and_Labelling ``models/ID_discriminator.py``
(@264fc9c6, unchanged at e8964e47), which loads that file. Caffe-style SE-ResNet-50: stem
``conv1_7x7_s2`` (7x7/2, no bias) + ``conv1_7x7_s2_bn`` + ReLU + max pool 3/2 (no padding, ceil
mode); stages ``conv2``-``conv5`` of 3, 4, 6, 3 bottleneck blocks ``conv<s>_<b>`` (widths 64, 128,
256, 512, expansion 4; the stride 2 of stages 3-5 on the first 1x1 convolution and on the
projection, as in Caffe), each block

    ``_1x1_reduce`` (+``_bn``, ReLU) -> ``_3x3`` (+``_bn``, ReLU) -> ``_1x1_increase`` (+``_bn``) = u;
    squeeze-excitation: global mean of u -> ``_1x1_down`` (1x1 conv with bias, C/16) -> ReLU ->
    ``_1x1_up`` (1x1 conv with bias, C) -> sigmoid = g; out = ReLU(g * u + shortcut),

the shortcut being ``_1x1_proj`` (+``_proj_bn``) in the first block of each stage, the identity
otherwise; then ``pool5_7x7_s1`` (a 7x7 average, the global mean at 224 px) and ``feat_extract``
(1x1 conv 2048 -> 256, no bias): the 256-D embedding. We take the global mean at any size (the
same at 224 px). 383 tensors in the state dict (num_batches_tracked included).

Its input convention (``Senet50_256.meta`` and that repository's ``models/model_datasets.py``: PIL
image converted to RGB, 0-255, minus the mean, no scaling): **RGB** order, pixels 0-255, mean
[131.0912, 103.8827, 91.4953] (R, G, B), std 1. The *Caffe* release of the same networks and
cydonia999/VGGFace2-pytorch (a port of the Caffe ``senet50_ft``, 2048-D, other key names) use
the same mean in **BGR** order ([91.4953, 103.8827, 131.0912]); the PyTorch port comes from the
MatConvNet release, which is RGB. 224x224 crops.

**IResNet50** -- insightface's ``iresnet50`` of ``recognition/arcface_torch/backbones/iresnet.py``
(deepinsight/insightface @d9cb10e6, the file's last change): stem ``conv1`` (3x3/1, no bias),
``bn1``, ``prelu``; ``layer1``-``layer4`` of 3, 4, 14, 3 ``IBasicBlock`` (widths 64, 128, 256,
512; each ``bn1`` -> ``conv1`` (3x3/1) -> ``bn2`` -> ``prelu`` -> ``conv2`` (3x3, stride 2 in a
stage's first block) -> ``bn3``, plus the shortcut, ``downsample.0`` (1x1/2 conv) + ``downsample.1``
(BN) in a stage's first block, no ReLU after the sum); ``bn2`` (BatchNorm2d 512), flatten,
``fc`` (Linear 512*7*7 -> 512), ``features`` (BatchNorm1d 512 whose weight is fixed at 1:
``requires_grad`` off): the 512-D embedding. Dropout (p = 0 by default) has no parameters and is
left out. 112x112 input only (``fc`` takes the 7x7 map). 475 tensors in the state dict.
Input convention (arcface_torch ``inference.py``, ``dataset.py``): **RGB**, (x / 255 - 0.5) / 0.5,
i.e. 0-255, mean 127.5, std 127.5 per channel; faces aligned on 5 points to 112x112.

The ArcFace network of the paper (insightface's ``VGG2-ResNet50-Arcface``, trained on VGGFace2)
exists only as MXNet files (``model-symbol.json`` + ``model-0000.params``, in insightface's IJB
release). To use it, convert it once, offline, on a machine with ``mxnet`` (unmaintained: no
wheels for Python >= 3.11; e.g. a Python 3.8 environment with ``mxnet==1.9.1``):
``mx.model.load_checkpoint(prefix, 0)`` gives arg/aux params named after insightface's MXNet
``fresnet`` (``recognition/arcface_mxnet/symbol/fresnet.py`` @ce3600a7; that this release uses its
``residual_unit_v3`` and output "E", like insightface's other LResNet50E-IR models, is [unverified]
until ``model-symbol.json`` is read), renamed to these keys by

    conv0 -> conv1, bn0 -> bn1, relu0_gamma -> prelu.weight, stage<s>_unit<u>_{bn1,conv1,bn2,conv2,bn3}
    -> layer<s>.<u-1>.{bn1,conv1,bn2,conv2,bn3}, stage<s>_unit<u>_relu1_gamma -> layer<s>.<u-1>.prelu.weight,
    stage<s>_unit1_conv1sc -> layer<s>.0.downsample.0, stage<s>_unit1_sc -> layer<s>.0.downsample.1,
    bn1 (after the last stage) -> bn2, pre_fc1 -> fc, fc1 -> features;
    _weight -> .weight, _bias -> .bias, _gamma -> .weight, _beta -> .bias, _moving_mean -> .running_mean,
    _moving_var -> .running_var,

then saved with ``torch.save`` (tensors only). Three details: ``fc1`` has ``fix_gamma=True`` in
MXNet (its gamma is ignored: store ``features.weight`` = 1); the MXNet symbol normalises inside
the network as (x - 127.5) * 0.0078125, i.e. std 128 instead of 127.5 (multiply ``conv1.weight`` by
127.5 / 128 to keep this module's input convention exact); MXNet's BatchNorm eps is 2e-5 here 1e-5
(a negligible difference, kept). Loading the result with ``pretrained: <file>`` is strict, so a
symbol that differs (another unit version) fails loudly naming the keys. The documented fallback
(faces.md B.3) when the MXNet files or mxnet are unavailable: train ``iresnet50`` with ArcFace
(s = 64, m = 0.5) on VGGFace2 aligned to 112x112 ourselves (about 4-6 H100-hours), a deviation to
state in the results.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.models.input_convention import InputConvention
from rankrepro.models.key_names import load_by_key_names

__all__ = ["IRESNET50_CONVENTION", "IRESNET50_STAGES", "SENET50_256_CONVENTION", "SENET50_256_STAGES",
           "IResNet50", "SENet50_256"]

#: senet50_256.pth's input convention (Senet50_256.meta; RGB, as the author's data loader feeds it)
SENET50_256_CONVENTION = {"space": "RGB", "scale": 255.0, "mean": (131.0912, 103.8827, 91.4953),
                          "std": (1.0, 1.0, 1.0)}
#: arcface_torch's input convention: RGB, (x / 255 - 0.5) / 0.5
IRESNET50_CONVENTION = {"space": "RGB", "scale": 255.0, "mean": (127.5, 127.5, 127.5), "std": (127.5, 127.5, 127.5)}

#: SENet50_256 stage -> (bottleneck width, output channels, blocks, stride of the first block)
SENET50_256_STAGES = {2: (64, 256, 3, 1), 3: (128, 512, 4, 2), 4: (256, 1024, 6, 2), 5: (512, 2048, 3, 2)}
#: IResNet50 layer -> (channels, blocks); every layer starts with a stride-2 block
IRESNET50_STAGES = {1: (64, 3), 2: (128, 4), 3: (256, 14), 4: (512, 3)}

#: squeeze-excitation reduction of SENet50_256 (``_1x1_down`` has C / 16 channels)
SE_REDUCTION = 16


class SENet50_256(nn.Module):
    """VGGFace2's SE-ResNet-50-256D with ``senet50_256.pth``'s parameter names (see the module docstring);
    ``forward`` converts the pipeline's images to :data:`SENET50_256_CONVENTION` and returns the
    256-D embedding [B, 256] (not normalised)."""

    output = "vector"
    num_features = 256

    def __init__(self):
        super().__init__()
        self.input_convention = InputConvention(**SENET50_256_CONVENTION)
        self._conv_bn("conv1_7x7_s2", 3, 64, 7, stride=2)
        self.blocks: list[tuple[str, int, bool]] = []  # (block name, stride, has a projection)
        channels = 64
        for stage, (width, out, blocks, stride) in SENET50_256_STAGES.items():
            for b in range(1, blocks + 1):
                name, first = f"conv{stage}_{b}", b == 1
                self._conv_bn(f"{name}_1x1_reduce", channels, width, 1, stride=stride if first else 1)
                self._conv_bn(f"{name}_3x3", width, width, 3)
                self._conv_bn(f"{name}_1x1_increase", width, out, 1)
                setattr(self, f"{name}_1x1_down", nn.Conv2d(out, out // SE_REDUCTION, 1))
                setattr(self, f"{name}_1x1_up", nn.Conv2d(out // SE_REDUCTION, out, 1))
                if first:
                    self._conv_bn(f"{name}_1x1_proj", channels, out, 1, stride=stride, bn=f"{name}_1x1_proj_bn")
                self.blocks.append((name, stride if first else 1, first))
                channels = out
        self.feat_extract = nn.Conv2d(channels, self.num_features, 1, bias=False)

    def _conv_bn(self, name: str, cin: int, cout: int, k: int, stride: int = 1, bn: str | None = None) -> None:
        """``<name>`` (k x k convolution, no bias, padding k // 2) and ``<name>_bn`` (its BatchNorm)."""
        setattr(self, name, nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False))
        setattr(self, bn or f"{name}_bn", nn.BatchNorm2d(cout))

    def _unit(self, name: str, x: torch.Tensor, relu: bool = True) -> torch.Tensor:
        x = getattr(self, f"{name}_bn")(getattr(self, name)(x))
        return F.relu(x) if relu else x

    def _block(self, name: str, x: torch.Tensor, projection: bool) -> torch.Tensor:
        u = self._unit(f"{name}_1x1_increase", self._unit(f"{name}_3x3", self._unit(f"{name}_1x1_reduce", x)),
                       relu=False)
        g = getattr(self, f"{name}_1x1_up")(F.relu(getattr(self, f"{name}_1x1_down")(u.mean((2, 3), keepdim=True))))
        shortcut = self._unit(f"{name}_1x1_proj", x, relu=False) if projection else x
        return F.relu(torch.sigmoid(g) * u + shortcut)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self._unit("conv1_7x7_s2", self.input_convention(images))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        for name, _, projection in self.blocks:
            x = self._block(name, x, projection)
        return self.feat_extract(x.mean((2, 3), keepdim=True)).flatten(1)

    def load_weights(self, state: dict) -> None:
        """Load ``senet50_256.pth`` (or a state dict saved from this module) by key names
        (:func:`load_by_key_names`: all must match but the BatchNorm counters the 2018 file lacks)."""
        load_by_key_names(self, "senet50_256", state)


class IBasicBlock(nn.Module):
    """arcface_torch's ``IBasicBlock``: bn1 -> conv1 (3x3) -> bn2 -> prelu -> conv2 (3x3, ``stride``)
    -> bn3, plus the shortcut (``downsample``: 1x1 conv + BN, or the identity); no activation after the sum."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.prelu = nn.PReLU(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        return out + (x if self.downsample is None else self.downsample(x))


class IResNet50(nn.Module):
    """insightface arcface_torch's ``iresnet50`` with its parameter names (see the module docstring);
    ``forward`` converts the pipeline's 112x112 images to :data:`IRESNET50_CONVENTION` and returns the
    512-D embedding [B, 512] (not normalised)."""

    output = "vector"
    num_features = 512
    input_size = 112

    def __init__(self):
        super().__init__()
        self.input_convention = InputConvention(**IRESNET50_CONVENTION)
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.prelu = nn.PReLU(64)
        channels = 64
        for layer, (out, blocks) in IRESNET50_STAGES.items():
            setattr(self, f"layer{layer}", nn.Sequential(
                *(IBasicBlock(channels if b == 0 else out, out, 2 if b == 0 else 1) for b in range(blocks))))
            channels = out
        self.bn2 = nn.BatchNorm2d(channels)
        self.map_size = self.input_size // 2 ** len(IRESNET50_STAGES)
        self.fc = nn.Linear(channels * self.map_size ** 2, self.num_features)
        self.features = nn.BatchNorm1d(self.num_features)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False  # as arcface_torch (MXNet's fix_gamma=True)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if tuple(images.shape[-2:]) != (self.input_size, self.input_size):
            raise ValueError(f"iresnet50 takes {self.input_size}x{self.input_size} aligned faces (its fc layer reads "
                             f"the {self.map_size}x{self.map_size} map), got {tuple(images.shape[-2:])}")
        x = self.prelu(self.bn1(self.conv1(self.input_convention(images))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.features(self.fc(self.bn2(x).flatten(1)))

    def load_weights(self, state: dict) -> None:
        """Load an arcface_torch ``iresnet50`` state dict (``backbone.pth``; or one converted from MXNet as
        the module docstring says) by key names (:func:`load_by_key_names`)."""
        load_by_key_names(self, "iresnet50", state)
