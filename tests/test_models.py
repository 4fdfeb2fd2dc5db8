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
    features, channels = build_backbone("resnet18", "none")
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
    with pytest.raises(ValueError, match="unknown pooling 'median'; registered: avg, gem, max"):
        build_pooling("median")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_backbone("resnet18", str(tmp_path / "missing.pt"))
