"""Backbones: convolutional ones return a [B, C, H, W] feature map, vision transformers their tokens,
the face networks their embedding vector.

``pretrained`` is ``imagenet`` (the weights the official code uses, through torchvision's or
timm's own download path and cache; BN-Inception's from a local file, see below), ``none``
(random initialisation) or a path to a state dict (``.pt``/``.pth``, or ``.safetensors``) saved
from the same architecture.

A builder of :data:`BACKBONES` returns either a torchvision ResNet (``fc`` still attached;
:func:`build_backbone` keeps its convolutional trunk, output ``"map"``) or a *feature extractor*:
a module with ``output`` (``"map"`` or ``"tokens"``), ``num_features`` (its channels / token
width) and ``load_weights(state_dict)``, returned as it is -- :class:`TimmViT` (output
``"tokens"``: [B, 1 + N, D], the CLS token first, after the final LayerNorm),
:class:`TorchvisionDenseNet` (``densenet201``) and
:class:`~rankrepro.models.bninception.BNInception` (``bninception``), and the face networks of
:mod:`rankrepro.models.face_backbones` (``senet50_256``, ``iresnet50``; output ``"vector"``: their own
embedding [B, D], taken unchanged by pooling ``identity``; no ImageNet weights, a local file only).
A pooling declares the input it takes (``input = "map"``, ``"tokens"`` or ``"vector"``) and
:class:`~rankrepro.models.heads.RetrievalNet` refuses a pooling that does not suit its backbone.

Input normalisation: :mod:`rankrepro.data.transforms` normalises every image with the
ImageNet mean/std (RGB, pixels in [0, 1]), as the official SupRank code does for every backbone
(its dataset configs, ViTs included). timm's own data config agrees for DeiT-S but not for ViT-B/16
``augreg_in21k`` (mean = std = 0.5); :data:`TIMM_BACKBONES` records both. A backbone whose
weights expect another convention declares it in an ``input_convention`` attribute, an
:class:`~rankrepro.models.input_convention.InputConvention` that its forward applies first:
BN-Inception (BGR, 0-255, mean [104, 117, 128], std 1), ``senet50_256`` (RGB, 0-255,
mean [131.0912, 103.8827, 91.4953], std 1), ``iresnet50`` (RGB, (x/255 - 0.5)/0.5). DenseNet201 takes torchvision's convention, the pipeline's.

BN-Inception's ImageNet weights are not on torchvision's or timm's download path (Cadene's
pretrainedmodels, unmaintained): ``pretrained: imagenet`` reads them from torch hub's checkpoint
cache, :func:`hub_checkpoint` (``$TORCH_HOME/hub/checkpoints/bn_inception-52deb4733.pth``, where
pretrainedmodels itself caches them), and fails naming that file and its URL when it is absent.

Every weights file is read with :func:`rankrepro.torchfile.load_plain` (tensors and plain data
only): a crafted or tampered file -- a state dict given as ``pretrained``, or a file in torch hub's
cache -- is refused naming it, and nothing in it runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from rankrepro.registry import Registry
from rankrepro.torchfile import load_plain

#: name -> builder(pretrained) returning a torchvision ResNet (``fc`` still attached) or a feature extractor
#: (``output``, ``num_features``, ``load_weights``: :class:`TimmViT`, :class:`TorchvisionDenseNet`, BNInception)
BACKBONES = Registry("backbone", context=("pretrained",))

def hub_checkpoint(filename: str) -> Path:
    """Where torch hub (and torchvision's and pretrainedmodels' downloads) caches ``filename``:
    ``torch.hub.get_dir()/checkpoints/filename`` (``$TORCH_HOME/hub/checkpoints``, by default
    ``~/.cache/torch/hub/checkpoints``)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def torchvision_state_dict(weights) -> dict:
    """The state dict of torchvision's ``weights`` (a ``*_Weights`` member), from torch hub's cache
    (:func:`hub_checkpoint`), where torch hub downloads it first (hash checked) when it is absent;
    read with :func:`~rankrepro.torchfile.load_plain`, as torchvision's own loader does not."""
    path = hub_checkpoint(weights.url.rsplit("/", 1)[1])
    if not path.is_file():
        torch.hub.load_state_dict_from_url(weights.url, progress=True, check_hash=True, weights_only=True)
    return load_plain(path, remedy=f"remove it: torch hub downloads it again from {weights.url}")


def _torchvision_resnet(arch: str, weights_enum: str):
    def build(pretrained: str) -> ResNet:
        net = getattr(torchvision.models, arch)()
        if pretrained == "imagenet":
            net.load_state_dict(torchvision_state_dict(getattr(torchvision.models, weights_enum).IMAGENET1K_V1))
        return net

    build.__name__ = build.__qualname__ = arch
    return build


for _arch, _weights in (("resnet18", "ResNet18_Weights"), ("resnet34", "ResNet34_Weights"),
                        ("resnet50", "ResNet50_Weights"), ("resnet101", "ResNet101_Weights")):
    BACKBONES.register(_arch, _torchvision_resnet(_arch, _weights))


class TorchvisionDenseNet(nn.Module):
    """A torchvision DenseNet's ``features`` (conv0 ... denseblock4, norm5), returned *without* the
    ReLU that torchvision's own forward applies after norm5, as the top-k precision code embeds
    ``model.features`` (../shared/spec/reference/losses.md §4.3). Output: [B, C, H/32, W/32]
    (C = 1920 for DenseNet201, 7x7 at 224 or 227 pixels). Input: torchvision's convention, the
    pipeline's (RGB, ImageNet mean/std)."""

    output = "map"

    def __init__(self, arch: str):
        super().__init__()
        net = getattr(torchvision.models, arch)()
        self.features = net.features
        self.num_features = net.classifier.in_features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images)

    #: torchvision's rename of the DenseNet release files' keys ("norm.1" -> "norm1", ...; densenet.py)
    OLD_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\."
                         r"((?:[12])\.(?:weight|bias|running_mean|running_var))$")

    def load_weights(self, state: dict) -> None:
        """Load a state dict of the same torchvision DenseNet (strictly; ``classifier.*`` dropped;
        the release files' old key names renamed as torchvision does)."""
        state = {self.OLD_KEY.sub(r"\1\2", k): v for k, v in state.items() if not k.startswith("classifier.")}
        self.load_state_dict(state, strict=True)


def _torchvision_densenet(arch: str, weights_enum: str):
    def build(pretrained: str) -> TorchvisionDenseNet:
        net = TorchvisionDenseNet(arch)
        if pretrained != "imagenet":
            return net
        weights = getattr(torchvision.models, weights_enum).IMAGENET1K_V1
        try:
            net.load_weights(torchvision_state_dict(weights))
            return net
        except OSError as err:  # URLError offline, or a truncated download
            raise RuntimeError(
                f"backbone {arch}: could not get torchvision's ImageNet weights {weights.url} (cached as "
                f"{hub_checkpoint(weights.url.rsplit('/', 1)[1])}): {type(err).__name__}: {err}. Without network, "
                "put the file there beforehand, or pass pretrained: <path to a state dict>") from err

    build.__name__ = build.__qualname__ = arch
    build.__doc__ = (f"torchvision {arch} ``features`` without the final ReLU ({weights_enum}.IMAGENET1K_V1 "
                     "with pretrained: imagenet).")
    return build


BACKBONES.register("densenet201", _torchvision_densenet("densenet201", "DenseNet201_Weights"))


@BACKBONES.register("bninception")
def bninception(pretrained: str) -> nn.Module:
    """Caffe-ported BN-Inception (:class:`rankrepro.models.bninception.BNInception`, 1024-d map).

    ``pretrained: imagenet`` loads Cadene's ``bn_inception-52deb4733.pth`` from
    :func:`hub_checkpoint` (never downloaded here)."""
    from rankrepro.models.bninception import WEIGHTS_FILE, WEIGHTS_URL, BNInception

    net = BNInception()
    if pretrained == "imagenet":
        path = hub_checkpoint(WEIGHTS_FILE)
        if not path.is_file():
            raise FileNotFoundError(
                f"backbone bninception: pretrained: imagenet reads Cadene's ImageNet weights {WEIGHTS_FILE} "
                f"from {path}, which does not exist (they are not downloaded here). Download {WEIGHTS_URL} "
                f"into {path.parent} (torch hub's checkpoint cache, $TORCH_HOME/hub/checkpoints), or pass "
                "pretrained: <path to the file>; pretrained: none initialises at random")
        net.load_weights(read_state_dict(path))
    return net


def _face_backbone(name: str, network: str, weights: str, doc: str):
    """A builder of :mod:`rankrepro.models.face_backbones`' class ``network`` (face weights only: no ``imagenet``)."""

    def build(pretrained: str) -> nn.Module:
        from rankrepro.models import face_backbones

        if pretrained == "imagenet":
            raise ValueError(f"backbone {name} has no ImageNet weights: pass pretrained: <path to {weights}> "
                             "(a manual file, ../shared/spec/reference/faces.md B.3) or pretrained: none")
        return getattr(face_backbones, network)()

    build.__name__ = build.__qualname__ = name
    build.__doc__ = doc
    return build


BACKBONES.register("senet50_256", _face_backbone(
    "senet50_256", "SENet50_256", "senet50_256.pth",
    "VGGFace2's SE-ResNet-50-256D (:class:`rankrepro.models.face_backbones.SENet50_256`): a 256-d vector "
    "(pooling: identity); 224 px, RGB 0-255 minus its mean, std 1; weights: pretrained: <senet50_256.pth>."))
BACKBONES.register("iresnet50", _face_backbone(
    "iresnet50", "IResNet50", "an arcface_torch iresnet50 state dict",
    "insightface arcface_torch's iresnet50 (:class:`rankrepro.models.face_backbones.IResNet50`): a 512-d vector "
    "(pooling: identity); 112 px aligned faces, (x/255 - 0.5)/0.5 RGB; weights: pretrained: <state dict file>."))


@BACKBONES.register("resnet_tiny")
def resnet_tiny(pretrained: str) -> ResNet:
    """A ResNet with one BasicBlock per stage (for the demo and the tests; random init only)."""
    if pretrained == "imagenet":
        raise ValueError("resnet_tiny has no ImageNet weights: use pretrained: none or a file")
    return ResNet(BasicBlock, [1, 1, 1, 1])


#: backbone name -> the timm architecture built, the timm model (``arch.tag``) whose ImageNet weights
#: ``pretrained: imagenet`` loads, and timm's data config of those weights (not used by the transforms:
#: see the module docstring)
TIMM_BACKBONES = {
    # SupRank get_backbone.py `vit_small`: deit_small_patch16_224 created without weights, loaded with the
    # *distilled* DeiT-S weights minus the distillation token (ImageNet-1k); 384-d
    "deit_small": {"arch": "deit_small_patch16_224", "weights": "deit_small_distilled_patch16_224.fb_in1k",
                   "input_size": 224, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
    # SupRank `vit_base_in21k`: timm vit_base_patch16_224_in21k, in timm >= 0.9 vit_base_patch16_224.augreg_in21k
    # (ImageNet-21k, no representation layer); 768-d
    "vit_base": {"arch": "vit_base_patch16_224", "weights": "vit_base_patch16_224.augreg_in21k",
                 "input_size": 224, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)},
}


class TimmViT(nn.Module):
    """A timm vision transformer without its classifier; ``forward`` returns its tokens [B, 1 + N, D]
    (``forward_features``: CLS token first, after the final LayerNorm). Pooling ``cls`` then gives what
    timm's own ``global_pool="token"`` head gives, i.e. the official code's embedding."""

    output = "tokens"

    def __init__(self, arch: str):
        super().__init__()
        import timm

        self.model = timm.create_model(arch, pretrained=False, num_classes=0)
        self.num_features = self.model.num_features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(images)

    def load_weights(self, state: dict) -> None:
        """Load a state dict of the same timm architecture (strictly, classifier heads dropped).

        A *distilled* DeiT state dict (``dist_token``, ``head_dist``, one more position) is
        converted as the official code does: the distillation token and its position
        embedding are dropped."""
        state = {k: v for k, v in state.items() if not k.startswith(("head.", "head_dist."))}
        state = {k.removeprefix("model."): v for k, v in state.items()}
        if "dist_token" in state:
            state.pop("dist_token")
            pos = state["pos_embed"]
            state["pos_embed"] = torch.cat((pos[:, :1], pos[:, 2:]), dim=1)
        self.model.load_state_dict(state, strict=True)


def _timm_vit(name: str):
    spec = TIMM_BACKBONES[name]

    def build(pretrained: str) -> TimmViT:
        net = TimmViT(spec["arch"])
        if pretrained == "imagenet":
            import timm

            try:
                source = timm.create_model(spec["weights"], pretrained=True, num_classes=0)
            except Exception as err:  # timm/huggingface_hub raise many kinds when offline
                raise RuntimeError(
                    f"backbone {name}: could not get timm's ImageNet weights {spec['weights']!r} "
                    f"(hub id timm/{spec['weights']}): {type(err).__name__}: {err}. Without network, put them in the "
                    "Hugging Face cache (HF_HOME) beforehand, or pass pretrained: <path to a state dict>") from err
            net.load_weights(source.state_dict())
        return net

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"timm {spec['arch']} ({spec['weights']} weights with pretrained: imagenet)."
    return build


for _name in TIMM_BACKBONES:
    BACKBONES.register(_name, _timm_vit(_name))


def read_state_dict(path: str | Path) -> dict:
    """A state dict from ``path`` (torch file, optionally under ``state_dict`` or ``model``; or safetensors),
    read with :func:`~rankrepro.torchfile.load_plain`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pretrained weights file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = load_plain(path, remedy="give a file of tensors only (a state dict, or .safetensors)")
    if isinstance(state, dict):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), dict):
                return state[key]
    return state


#: (backbone, pretrained name) -> the manual weights file it reads from torch hub's cache (:func:`hub_checkpoint`),
#: and how to get it (../shared/spec/reference/faces.md B.3): no public copy is served, so nothing downloads them
NAMED_WEIGHTS = {
    ("senet50_256", "vggface2"): (
        "senet50_256.pth", "VGGFace2's PyTorch port of SE-ResNet-50-256D (senet50_256_pytorch.tar.gz, formerly on the "
        "VGGFace2 site; ox-vgg/vgg_face2 README): extract senet50_256.pth"),
    ("iresnet50", "vggface2_arcface"): (
        "vgg2_resnet50_arcface_iresnet50.pth", "insightface's VGG2-ResNet50-Arcface (MXNet, in its IJB release), "
        "converted once to this state dict as rankrepro.models.face_backbones explains; or train an arcface_torch "
        "iresnet50 on aligned VGGFace2 and save its state dict"),
}


def named_weights_file(name: str, pretrained: str) -> str:
    """The file a named face-weights ``pretrained`` of backbone ``name`` reads (:data:`NAMED_WEIGHTS`), or
    ``pretrained`` unchanged; a :class:`FileNotFoundError` naming the file, where it goes and how to get it
    when it is absent."""
    if (name, pretrained) not in NAMED_WEIGHTS:
        return pretrained
    filename, how = NAMED_WEIGHTS[(name, pretrained)]
    path = hub_checkpoint(filename)
    if not path.is_file():
        raise FileNotFoundError(f"backbone {name}: pretrained: {pretrained} reads {path}, which is absent. It is a "
                                f"manual file: {how}; put it at {path} (or pass pretrained: <path to it>).")
    return str(path)


def build_backbone(name: str, pretrained: str) -> tuple[nn.Module, int]:
    """Return (feature extractor without its pooling and classifier, output channels / token width).

    The extractor's ``output`` attribute says what it returns: ``"map"`` ([B, C, H, W]),
    ``"tokens"`` ([B, 1 + N, D]) or ``"vector"`` ([B, D]); a state-dict file (``pretrained`` neither ``imagenet`` nor
    ``none``; a name of :data:`NAMED_WEIGHTS` reads its file) is loaded by the extractor's ``load_weights`` (a
    ResNet's: strictly)."""
    pretrained = named_weights_file(name, pretrained)
    net = BACKBONES.build(name, context={"pretrained": pretrained})
    state = read_state_dict(pretrained) if pretrained not in ("imagenet", "none") else None
    if not isinstance(net, ResNet):  # a feature extractor: output, num_features, load_weights
        if state is not None:
            net.load_weights(state)
        return net, net.num_features
    if state is not None:
        net.load_state_dict(state)
    channels = net.fc.in_features
    features = nn.Sequential(*list(net.children())[:-2])
    features.output = "map"
    return features, channels


def freeze_batchnorm(module: nn.Module) -> None:
    """Keep every BatchNorm in eval mode (frozen running statistics), whatever .train() is called.

    The affine weights stay trainable, as in the Smooth-AP, PNP and SupRank code.
    """
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
            m.train = lambda mode=True, _m=m: _m  # a no-op that keeps eval mode


def set_batchnorm_momentum(module: nn.Module, momentum: float) -> int:
    """Set the ``momentum`` of every BatchNorm in ``module`` (PyTorch's convention: ``running = (1 - momentum)
    * running + momentum * batch``); returns how many layers were set."""
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in layers:
        m.momentum = momentum
    return len(layers)
