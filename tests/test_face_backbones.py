"""The face networks senet50_256 and iresnet50 (models/face_backbones.py): the published weights' key
names (strict loading), output sizes, input conventions, the retrieval head without projection.

The expected key names are written here from the public definitions, independently of the module:
``Senet50_256`` in Andrew-Brown1/Automated_Face_Tracking_and_Labelling ``models/ID_discriminator.py``
@e8964e47 (the loader of ``senet50_256.pth``) and ``iresnet50`` in deepinsight/insightface
``recognition/arcface_torch/backbones/iresnet.py`` @d9cb10e6. The SHA-256 digests are those of the
sorted ``key:shape`` lines of a state dict of those two public classes (computed once from them)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from rankrepro.data import transforms
from rankrepro.models import BACKBONES, POOLINGS, RetrievalNet
from rankrepro.models.backbones import build_backbone

BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")

#: senet50_256.pth: stage -> blocks (conv2_1 ... conv5_3)
SENET_BLOCKS = {2: 3, 3: 4, 4: 6, 5: 3}
SENET_KEYS_SHA256 = "f4cc19e705a2ed3d06941f73c615f1c594516e6701f371a64a55168827062ccb"
#: arcface_torch iresnet50: layer -> IBasicBlocks
IRESNET_BLOCKS = {1: 3, 2: 4, 3: 14, 4: 3}
IRESNET_KEYS_SHA256 = "2771a5e3db26a3fe81a653a9341d5fa2a02aeaa50769b8b454285b4ea8c8f4c1"


def senet50_256_keys() -> list[str]:
    """The parameter and buffer names of ``Senet50_256`` (ID_discriminator.py), in definition order."""
    keys = ["conv1_7x7_s2.weight", *(f"conv1_7x7_s2_bn.{b}" for b in BN)]
    for stage, blocks in SENET_BLOCKS.items():
        for block in range(1, blocks + 1):
            p = f"conv{stage}_{block}"
            for conv in ("1x1_reduce", "3x3", "1x1_increase"):
                keys += [f"{p}_{conv}.weight", *(f"{p}_{conv}_bn.{b}" for b in BN)]
            keys += [f"{p}_1x1_down.weight", f"{p}_1x1_down.bias", f"{p}_1x1_up.weight", f"{p}_1x1_up.bias"]
            if block == 1:
                keys += [f"{p}_1x1_proj.weight", *(f"{p}_1x1_proj_bn.{b}" for b in BN)]
    return keys + ["feat_extract.weight"]


def iresnet50_keys() -> list[str]:
    """The parameter and buffer names of arcface_torch's ``iresnet50``, in definition order."""
    keys = ["conv1.weight", *(f"bn1.{b}" for b in BN), "prelu.weight"]
    for layer, blocks in IRESNET_BLOCKS.items():
        for block in range(blocks):
            p = f"layer{layer}.{block}"
            keys += [*(f"{p}.bn1.{b}" for b in BN), f"{p}.conv1.weight", *(f"{p}.bn2.{b}" for b in BN),
                     f"{p}.prelu.weight", f"{p}.conv2.weight", *(f"{p}.bn3.{b}" for b in BN)]
            if block == 0:
                keys += [f"{p}.downsample.0.weight", *(f"{p}.downsample.1.{b}" for b in BN)]
    return keys + [*(f"bn2.{b}" for b in BN), "fc.weight", "fc.bias", *(f"features.{b}" for b in BN)]


@pytest.fixture(scope="module")
def senet():
    torch.manual_seed(0)
    net, width = build_backbone("senet50_256", "none")
    return net.eval(), width


@pytest.fixture(scope="module")
def iresnet():
    torch.manual_seed(0)
    net, width = build_backbone("iresnet50", "none")
    return net.eval(), width


def _digest(state: dict) -> str:
    lines = sorted(f"{k}:{tuple(v.shape)}" for k, v in state.items())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# ------------------------------------------------------------------------ key names, as published


def test_senet50_256_has_the_published_key_names_and_shapes(senet):
    net, width = senet
    state = net.state_dict()
    assert list(state) == senet50_256_keys() and len(state) == 383
    assert _digest(state) == SENET_KEYS_SHA256
    assert tuple(state["conv1_7x7_s2.weight"].shape) == (64, 3, 7, 7)
    assert tuple(state["conv3_1_1x1_down.weight"].shape) == (32, 512, 1, 1)  # SE reduction 16
    assert tuple(state["conv5_1_1x1_proj.weight"].shape) == (2048, 1024, 1, 1)
    assert tuple(state["feat_extract.weight"].shape) == (256, 2048, 1, 1)
    assert sum(p.numel() for p in net.parameters()) == 26_563_312
    assert width == 256 and net.output == "vector"


def test_iresnet50_has_the_published_key_names_and_shapes(iresnet):
    net, width = iresnet
    state = net.state_dict()
    assert list(state) == iresnet50_keys() and len(state) == 475
    assert _digest(state) == IRESNET_KEYS_SHA256
    assert tuple(state["layer3.13.conv2.weight"].shape) == (256, 256, 3, 3)
    assert tuple(state["layer4.0.downsample.0.weight"].shape) == (512, 256, 1, 1)
    assert tuple(state["fc.weight"].shape) == (512, 512 * 7 * 7)
    assert sum(p.numel() for p in net.parameters()) == 43_590_848
    assert not net.features.weight.requires_grad  # fixed at 1, as arcface_torch
    assert width == 512 and net.output == "vector"


@pytest.mark.parametrize("name, keys, drop_counters", [("senet50_256", senet50_256_keys, True),
                                                       ("iresnet50", iresnet50_keys, False)])
def test_a_file_with_the_published_keys_loads_strictly(tmp_path, name, keys, drop_counters):
    """A synthetic weights file built from the published names (random values; senet50_256.pth, a 2018
    port, has no num_batches_tracked) loads with every value in place; one key renamed fails naming it."""
    shapes = {k: v.shape for k, v in build_backbone(name, "none")[0].state_dict().items()}
    g = torch.Generator().manual_seed(1)
    state = {k: torch.randn(shapes[k], generator=g) for k in keys() if not k.endswith("num_batches_tracked")}
    if not drop_counters:
        state |= {k: torch.tensor(7) for k in keys() if k.endswith("num_batches_tracked")}
    path = tmp_path / f"{name}.pth"
    torch.save(state, path)
    net, _ = build_backbone(name, str(path))
    loaded = net.state_dict()
    for key, value in state.items():
        torch.testing.assert_close(loaded[key], value)
    renamed = dict(state)
    first = next(iter(renamed))
    renamed[first.replace(".weight", "_x.weight")] = renamed.pop(first)
    torch.save(renamed, path)
    with pytest.raises(RuntimeError, match=rf"{name} weights do not match the network: missing keys \['{first}'\] "
                                           rf"\(1 in all\), unexpected keys \['{first.replace('.weight', '_x.weight')}'\]"):
        build_backbone(name, str(path))


@pytest.mark.parametrize("name", ["senet50_256", "iresnet50"])
def test_face_backbones_have_no_imagenet_weights(name):
    with pytest.raises(ValueError, match=rf"backbone {name} has no ImageNet weights: pass pretrained: <path"):
        build_backbone(name, "imagenet")


@pytest.mark.parametrize("name, named, filename", [("senet50_256", "vggface2", "senet50_256.pth"),
                                                    ("iresnet50", "vggface2_arcface", "vgg2_resnet50_arcface_iresnet50.pth")])
def test_named_face_weights_are_read_from_torch_hubs_cache(tmp_path, monkeypatch, name, named, filename):
    """``pretrained: vggface2`` (SENet) / ``vggface2_arcface`` (ArcFace) read a manual file in torch hub's cache:
    absent, the message names the file, where it goes and how to get it; present, it loads strictly."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    where = tmp_path / "hub" / "checkpoints" / filename
    with pytest.raises(FileNotFoundError, match=rf"backbone {name}: pretrained: {named} reads {where}, which is "
                                                r"absent\. It is a manual file: .*put it at"):
        build_backbone(name, named)
    net = build_backbone(name, "none")[0]
    state = {k: torch.full_like(v, 0.5) if v.is_floating_point() else v for k, v in net.state_dict().items()}
    where.parent.mkdir(parents=True)
    torch.save(state, where)
    loaded = build_backbone(name, named)[0].state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


# ----------------------------------------------------------------------------- outputs and inputs


def test_output_sizes_at_the_networks_input_sizes(senet, iresnet):
    with torch.no_grad():
        assert senet[0](torch.randn(2, 3, 224, 224)).shape == (2, 256)
        assert iresnet[0](torch.randn(2, 3, 112, 112)).shape == (2, 512)
        with pytest.raises(ValueError, match=r"iresnet50 takes 112x112 aligned faces .* got \(224, 224\)"):
            iresnet[0](torch.randn(1, 3, 224, 224))


def _first_conv_input(net, conv, rgb: tuple[int, int, int], size: int) -> torch.Tensor:
    """What ``conv`` receives when the constant image ``rgb`` goes through the pipeline's test transform."""
    image = Image.fromarray(np.full((size, size, 3), rgb, dtype=np.uint8))
    x = transforms.test_transform({"test_resize": [size, size], "test_crop": size})(image)
    seen = []
    hook = conv.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    try:
        with torch.no_grad():
            net(x.unsqueeze(0))
    finally:
        hook.remove()
    return seen[0][0]


def test_senet50_256_sees_rgb_0_255_minus_vggs_mean(senet):
    """Pixel (R, G, B) = (200, 100, 50) reaches conv1 as (200 - 131.0912, 100 - 103.8827, 50 - 91.4953):
    RGB order (the MatConvNet/PyTorch port's), std 1."""
    seen = _first_conv_input(senet[0], senet[0].conv1_7x7_s2, (200, 100, 50), 32)
    expected = torch.tensor([68.9088, -3.8827, -41.4953]).view(3, 1, 1).expand(3, 32, 32)
    torch.testing.assert_close(seen, expected, atol=2e-4, rtol=0)


def test_iresnet50_sees_rgb_scaled_to_minus_one_one(iresnet):
    """Pixel (200, 100, 50) reaches conv1 as (v / 255 - 0.5) / 0.5 = (200, 100, 50) / 127.5 - 1, RGB order."""
    seen = _first_conv_input(iresnet[0], iresnet[0].conv1, (200, 100, 50), 112)
    expected = torch.tensor([0.5686275, -0.2156863, -0.6078431]).view(3, 1, 1).expand(3, 112, 112)
    torch.testing.assert_close(seen, expected, atol=1e-5, rtol=0)


# --------------------------------------------------------------------- the head, registries, catalog


def test_the_retrieval_head_takes_the_networks_embedding_unchanged(senet):
    """pooling: identity, layernorm: false, projection: false, embed_dim: 256: the output is the network's
    256-d embedding, L2-normalised (the retrieval head adds nothing)."""
    torch.manual_seed(0)
    model = RetrievalNet("senet50_256", "none", pooling="identity", layernorm=False, projection=False,
                         embed_dim=256).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.normalize(model.backbone(x), dim=-1))
    assert sum(p.numel() for p in model.head.parameters()) == 0
    with pytest.raises(ValueError, match=r"pooling 'gem' takes a \[B, C, H, W\] feature map but backbone "
                                         r"'iresnet50' outputs its own embedding vector \[B, D\]: use pooling: identity"):
        RetrievalNet("iresnet50", "none", pooling="gem", projection=False, embed_dim=512)
    with pytest.raises(ValueError, match="embed_dim must be 512 for 'iresnet50', got 256"):
        RetrievalNet("iresnet50", "none", pooling="identity", projection=False, embed_dim=256)
    with pytest.raises(ValueError, match=r"pooling 'identity' takes its own embedding vector \[B, D\] but backbone "
                                         r"'resnet_tiny' outputs a \[B, C, H, W\] feature map"):
        RetrievalNet("resnet_tiny", "none", pooling="identity")


def test_registries_and_catalog_list_the_face_networks():
    from rankrepro import catalog

    assert {"senet50_256", "iresnet50"} <= set(BACKBONES.names()) and "identity" in POOLINGS.names()
    stored = catalog.load()
    assert {"senet50_256", "iresnet50"} <= set(stored["backbone"]) and "identity" in stored["pooling"]


@pytest.mark.slow
def test_iresnet50_embeds_and_trains_end_to_end():
    """One backward pass through the retrieval head reaches the first convolution; ``features.weight`` stays
    fixed (no gradient), as in arcface_torch."""
    torch.manual_seed(0)
    model = RetrievalNet("iresnet50", "none", pooling="identity", layernorm=False, projection=False, embed_dim=512)
    out = model(torch.randn(2, 3, 112, 112))
    assert out.shape == (2, 512)
    out[0].dot(out[1]).backward()
    assert model.backbone.conv1.weight.grad.abs().sum() > 0 and model.backbone.features.weight.grad is None
