"""The retrieval network: shapes, normalisation, pooling, frozen BN, weights from a file."""

import pytest
import torch

from rankrepro.models import RetrievalNet
from rankrepro.models.backbones import build_backbone
from rankrepro.models.pooling import GeM, build_pooling


@pytest.mark.parametrize("pooling", ["avg", "max", "gem"])
@pytest.mark.parametrize("layernorm", [True, False])
def test_embeddings_are_unit_norm(pooling, layernorm):
    net = RetrievalNet("resnet_tiny", "none", pooling=pooling, layernorm=layernorm, embed_dim=16)
    out = net(torch.randn(3, 3, 32, 32))
    assert out.shape == (3, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3))


def test_pooling_definitions():
    x = torch.rand(2, 5, 4, 4) + 0.1
    torch.testing.assert_close(build_pooling("avg")(x), x.mean(dim=(2, 3)))
    torch.testing.assert_close(build_pooling("max")(x), x.amax(dim=(2, 3)))
    gem = GeM(p=3.0)
    torch.testing.assert_close(gem(x), (x ** 3).mean(dim=(2, 3)) ** (1 / 3))
    assert gem.p.requires_grad
    # p = 1 is the average
    torch.testing.assert_close(GeM(p=1.0)(x), x.mean(dim=(2, 3)))


def test_layernorm_has_no_affine_parameters():
    net = RetrievalNet("resnet_tiny", "none", layernorm=True, embed_dim=8)
    ln = net.head[1]
    assert isinstance(ln, torch.nn.LayerNorm) and ln.weight is None and ln.bias is None


def test_frozen_batchnorm_keeps_running_statistics():
    net = RetrievalNet("resnet_tiny", "none", freeze_bn=True, embed_dim=8)
    bn = net.backbone[1]
    before = bn.running_mean.clone()
    net.train()
    net(torch.randn(4, 3, 32, 32) * 5 + 3)
    assert not bn.training
    torch.testing.assert_close(bn.running_mean, before)
    assert bn.weight.requires_grad  # affine weights stay trainable, as in the official code


def test_unfrozen_batchnorm_updates():
    net = RetrievalNet("resnet_tiny", "none", freeze_bn=False, embed_dim=8)
    net.train()
    before = net.backbone[1].running_mean.clone()
    net(torch.randn(4, 3, 32, 32) * 5 + 3)
    assert not torch.allclose(net.backbone[1].running_mean, before)


def test_weights_from_a_file(tmp_path):
    _, channels = build_backbone("resnet18", "none")
    import torchvision

    reference = torchvision.models.resnet18(weights=None)
    path = tmp_path / "r18.pt"
    torch.save(reference.state_dict(), path)
    loaded, _ = build_backbone("resnet18", str(path))
    torch.testing.assert_close(loaded[0].weight, reference.conv1.weight)
    assert channels == 512


def test_bad_names_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown backbone 'vgg'; registered: .*resnet50"):
        build_backbone("vgg", "none")
    with pytest.raises(ValueError, match="unknown pooling 'median'; registered: avg, cls, gem, identity, max"):
        build_pooling("median")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_backbone("resnet18", str(tmp_path / "missing.pt"))


# ---------------------------------------------------------------- vision transformers (SupRank Table IV)

VIT_WIDTH = {"deit_small": 384, "vit_base": 768}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deit_small", "vit_base"])
def test_vit_backbones_embed_at_224(name):
    width = VIT_WIDTH[name]
    features, channels = build_backbone(name, "none")
    assert channels == width and features.output == "tokens"
    # no BatchNorm (LayerNorm only): freeze_bn, false in the official deit_small / vit_base_512proj configs, is a no-op
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in features.modules())
    # the official models: CLS token, no LayerNorm, no projection (deit_small) or a projection (vit_base_512proj)
    for projection, dim in ((False, width), (True, 32)):
        net = RetrievalNet(name, "none", pooling="cls", layernorm=False, embed_dim=dim, projection=projection).eval()
        with torch.no_grad():
            out = net(torch.randn(2, 3, 224, 224))
        assert out.shape == (2, dim)
        torch.testing.assert_close(out.norm(dim=1), torch.ones(2))
    assert isinstance(net.projection_layer, torch.nn.Linear)


@pytest.mark.slow
def test_vit_cls_pooling_is_timms_token_pooling():
    net = RetrievalNet("deit_small", "none", pooling="cls", layernorm=False, embed_dim=384, projection=False).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        vit = net.backbone.model  # timm model, classifier removed: forward = norm -> CLS token
        torch.testing.assert_close(net.features(x), vit(x))
        torch.testing.assert_close(net(x), torch.nn.functional.normalize(vit(x), dim=-1))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deit_small", "vit_base"])
def test_vit_weights_from_a_file(tmp_path, name):
    import timm

    from rankrepro.models.backbones import TIMM_BACKBONES

    reference = timm.create_model(TIMM_BACKBONES[name]["arch"])  # with its classifier, as timm saves it
    path = tmp_path / f"{name}.pt"
    torch.save(reference.state_dict(), path)
    loaded, _ = build_backbone(name, str(path))
    torch.testing.assert_close(loaded.model.patch_embed.proj.weight, reference.patch_embed.proj.weight)
    torch.testing.assert_close(loaded.model.blocks[-1].mlp.fc2.weight, reference.blocks[-1].mlp.fc2.weight)
    with pytest.raises(FileNotFoundError, match="missing.pt does not exist"):
        build_backbone(name, str(tmp_path / "missing.pt"))


@pytest.mark.slow
def test_deit_small_takes_distilled_weights_as_the_official_code(tmp_path):
    import timm

    distilled = timm.create_model("deit_small_distilled_patch16_224")
    path = tmp_path / "deit_s_distilled.pth"
    torch.save({"model": distilled.state_dict()}, path)  # the layout of the DeiT release files
    loaded, _ = build_backbone("deit_small", str(path))
    pos = distilled.pos_embed
    torch.testing.assert_close(loaded.model.pos_embed, torch.cat((pos[:, :1], pos[:, 2:]), dim=1))
    torch.testing.assert_close(loaded.model.cls_token, distilled.cls_token)
    assert not hasattr(loaded.model, "dist_token") or loaded.model.dist_token is None


@pytest.mark.slow
def test_vit_weights_of_another_architecture_are_refused(tmp_path):
    import timm

    path = tmp_path / "vit_b.pt"
    torch.save(timm.create_model("vit_base_patch16_224").state_dict(), path)
    with pytest.raises(RuntimeError, match="size mismatch"):
        build_backbone("deit_small", str(path))


def test_imagenet_weights_without_network_are_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants

    # offline, with an empty cache: timm's download path fails at once instead of retrying for a minute
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"deit_small: could not get timm's ImageNet weights "
                                           r"'deit_small_distilled_patch16_224\.fb_in1k'.*pretrained: <path"):
        build_backbone("deit_small", "imagenet")


def test_pooling_must_suit_the_backbone():
    with pytest.raises(ValueError, match="pooling 'avg' takes a .* feature map but backbone 'deit_small' outputs "
                                         "transformer tokens .*use pooling: cls"):
        RetrievalNet("deit_small", "none", pooling="avg", embed_dim=8)
    with pytest.raises(ValueError, match="pooling 'cls' takes transformer tokens .* but backbone 'resnet_tiny'"):
        RetrievalNet("resnet_tiny", "none", pooling={"name": "cls"}, embed_dim=8)
    x = torch.randn(2, 5, 7)
    torch.testing.assert_close(build_pooling("cls")(x), x[:, 0])


def test_head_options_are_checked():
    with pytest.raises(ValueError, match="embed_dim must be 512 for 'resnet_tiny', got 8"):
        RetrievalNet("resnet_tiny", "none", embed_dim=8, projection=False)
    with pytest.raises(ValueError, match="projection_init must be one of random, pca"):
        RetrievalNet("resnet_tiny", "none", embed_dim=8, projection_init="whiten")
    with pytest.raises(ValueError, match="needs a projection"):
        RetrievalNet("resnet_tiny", "none", embed_dim=512, projection=False, projection_init="pca")
    with pytest.raises(ValueError, match="exclusive"):
        RetrievalNet("resnet_tiny", "none", embed_dim=8, layernorm=True, l2_features=True)
    net = RetrievalNet("resnet_tiny", "none", embed_dim=8, layernorm=False, l2_features=True)
    features = net.features(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(features.norm(dim=1), torch.ones(2))


def test_bn_momentum_reaches_every_backbone_batchnorm_and_sets_the_update():
    """bn_momentum m: running = (1 - m) running + m batch statistic (PyTorch's convention), in every
    BatchNorm of the backbone; None keeps PyTorch's 0.1."""
    net = RetrievalNet("resnet_tiny", "none", freeze_bn=False, embed_dim=8, bn_momentum=0.9)
    layers = [m for m in net.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert layers and all(m.momentum == 0.9 for m in layers)
    bn = net.backbone[1]
    before = bn.running_mean.clone()
    seen = []
    bn.register_forward_hook(lambda m, inputs, output: seen.append(inputs[0].detach().clone()))
    net.train()
    net(torch.randn(4, 3, 32, 32) * 5 + 3)
    batch_mean = seen[0].mean(dim=(0, 2, 3))
    torch.testing.assert_close(bn.running_mean, 0.1 * before + 0.9 * batch_mean, atol=1e-5, rtol=1e-5)
    default = RetrievalNet("resnet_tiny", "none", freeze_bn=False, embed_dim=8)
    assert {m.momentum for m in default.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)} == {0.1}


def test_bn_momentum_on_bninception_sets_all_69_layers_as_the_topk_code():
    """The top-k code's models/bn_inception.py builds its 69 BatchNorm2d layers with momentum=0.9."""
    from rankrepro.models.backbones import set_batchnorm_momentum

    backbone, _ = build_backbone("bninception", "none")
    assert set_batchnorm_momentum(backbone, 0.9) == 69
    assert {m.momentum for m in backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)} == {0.9}


def test_bn_momentum_is_checked():
    from rankrepro.models import build_model
    from rankrepro.registry import ParameterError

    with pytest.raises(ValueError, match="needs freeze_bn: false"):
        RetrievalNet("resnet_tiny", "none", embed_dim=8, freeze_bn=True, bn_momentum=0.9)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        RetrievalNet("resnet_tiny", "none", embed_dim=8, freeze_bn=False, bn_momentum=1.5)
    with pytest.raises(ParameterError, match="bn_momentum must be > 0"):
        build_model({"name": "retrieval_net", "backbone": "resnet_tiny", "pretrained": "none", "bn_momentum": 0.0})
