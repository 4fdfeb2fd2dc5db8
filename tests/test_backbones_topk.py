"""The top-k precision paper's backbones (section 4.4: "the Inception with BN layer [30, 12] and
Densenet201"): torchvision DenseNet201 without its final ReLU (1920-d) and the Caffe-ported
BN-Inception (1024-d) with its weights' input convention (BGR, 0-255, mean [104, 117, 128]), its
weights loaded by Cadene's key names from torch hub's checkpoint cache or a file; and one
training step of a Table 1 setup end to end on CPU."""

import hashlib
import urllib.error

import numpy as np
import pytest
import torch
import torchvision
from datautil import sop_manifest
from PIL import Image

from rankrepro.data import transforms
from rankrepro.models import RetrievalNet
from rankrepro.models.backbones import build_backbone, hub_checkpoint
from rankrepro.models.input_convention import InputConvention
from rankrepro.models.bninception import WEIGHTS_FILE, WEIGHTS_URL, BNInception

#: sha256 of the sorted "key:shape" lines of pretrainedmodels' BNInception state dict (Cadene's
#: pretrained-models.pytorch, pretrainedmodels/models/bninception.py), without last_linear.* and
#: num_batches_tracked: the keys its weights file bn_inception-52deb4733.pth loads by
CADENE_KEYS_SHA256 = "2a626b768320ffcfe0418179a67a39836b29c1080054d6b1c01ae7b0ea59ca49"


@pytest.fixture(scope="module")
def densenet():
    torch.manual_seed(0)
    return build_backbone("densenet201", "none")


@pytest.fixture(scope="module")
def bninception():
    torch.manual_seed(0)
    return build_backbone("bninception", "none")


def _cadene_file(net: BNInception) -> dict:
    """``net``'s weights as Cadene's file holds them: with a 1000-way ``last_linear``, without the
    BatchNorm ``num_batches_tracked`` counters (the file predates them)."""
    state = {k: v.clone() for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    state["last_linear.weight"], state["last_linear.bias"] = torch.randn(1000, 1024), torch.zeros(1000)
    return state


# ------------------------------------------------------------------------------- densenet201


def test_densenet201_is_torchvisions_features_without_the_final_relu(densenet):
    features, channels = densenet
    assert channels == 1920 and features.output == "map" and features.num_features == 1920
    reference = torchvision.models.densenet201(weights=None)
    reference.load_state_dict({**{f"features.{k}": v for k, v in features.features.state_dict().items()},
                               "classifier.weight": reference.classifier.weight,
                               "classifier.bias": reference.classifier.bias})
    x = torch.randn(2, 3, 64, 64)
    features.eval(), reference.eval()
    with torch.no_grad():
        out = features(x)
        torch.testing.assert_close(out, reference.features(x))  # ends at norm5 ...
    assert out.shape == (2, 1920, 2, 2) and out.min() < 0  # ... with no ReLU after it (torchvision's forward has one)


def test_densenet201_weights_from_a_release_style_file(tmp_path, densenet):
    """torchvision's DenseNet release files name keys "norm.1", "conv.2": renamed as torchvision does."""
    features, _ = densenet
    old = {}  # the release file's keys: old names, no num_batches_tracked (older than PyTorch 0.4.1)
    for k, v in features.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue
        for new, legacy in (("norm1.", "norm.1."), ("norm2.", "norm.2."), ("conv1.", "conv.1."), ("conv2.", "conv.2.")):
            if "denselayer" in k and f".{new}" in k:
                k = k.replace(f".{new}", f".{legacy}")
        old[k] = v + 1.0 if v.is_floating_point() else v
    assert any(".norm.1." in k for k in old)
    old["classifier.weight"], old["classifier.bias"] = torch.zeros(1000, 1920), torch.zeros(1000)
    path = tmp_path / "densenet201-c1103571.pth"
    torch.save(old, path)
    loaded, _ = build_backbone("densenet201", str(path))
    layer = loaded.features.denseblock1.denselayer1
    torch.testing.assert_close(layer.norm1.weight, features.features.denseblock1.denselayer1.norm1.weight + 1.0)
    torch.testing.assert_close(loaded.features.norm5.running_var, features.features.norm5.running_var + 1.0)


def test_densenet201_imagenet_weights_without_network_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(RuntimeError, match=r"densenet201: could not get torchvision's ImageNet weights "
                                           r"https://\S+densenet201-c1103571\.pth .*pretrained: <path"):
        build_backbone("densenet201", "imagenet")


# ------------------------------------------------------------------------------ bninception


def test_bninception_has_cadenes_layers_and_a_1024d_map(bninception):
    net, channels = bninception
    assert channels == 1024 and net.output == "map" and isinstance(net, BNInception)
    state = net.state_dict()
    assert "conv1_7x7_s2.weight" in state and "inception_5b_pool_proj_bn.running_var" in state
    assert not any(k.startswith(("last_linear", "input_convention")) for k in state)
    lines = sorted(f"{k}:{tuple(v.shape)}" for k, v in state.items() if not k.endswith("num_batches_tracked"))
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == CADENE_KEYS_SHA256
    assert sum(p.numel() for p in net.parameters()) == 10_270_240
    net.eval()
    with torch.no_grad():  # 7x7 at the paper's 227 pixels: the code's AvgPool2d(7) is a global average
        assert net(torch.randn(1, 3, 227, 227)).shape == (1, 1024, 7, 7)
        assert net(torch.randn(1, 3, 64, 64)).shape == (1, 1024, 2, 2)


def test_bninception_sees_bgr_0_255_minus_its_mean(bninception):
    """A known RGB image, through the pipeline's transform (ImageNet mean/std), reaches the first
    convolution as BGR pixel values in 0-255 minus [104, 117, 128]."""
    net, _ = bninception
    rgb = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    x = transforms.test_transform({"test_resize": [64, 64], "test_crop": 64})(Image.fromarray(rgb))  # same size: no resampling
    torch.testing.assert_close(x, (torch.from_numpy(rgb).permute(2, 0, 1) / 255.0 - torch.tensor(
        [0.485, 0.456, 0.406]).view(3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1))
    seen = []
    hook = net.conv1_7x7_s2.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    try:
        net.eval()
        with torch.no_grad():
            net(x.unsqueeze(0))
    finally:
        hook.remove()
    expected = torch.from_numpy(rgb[:, :, ::-1].astype(np.float32) - np.array([104, 117, 128], np.float32))
    torch.testing.assert_close(seen[0][0], expected.permute(2, 0, 1), atol=2e-4, rtol=0)
    assert net.input_convention.convention == {"space": "BGR", "scale": 255.0, "mean": (104.0, 117.0, 128.0),
                                               "std": (1.0, 1.0, 1.0)}


def test_input_convention_definition():
    """y_c = (scale * v_pi(c) - mean_c) / std_c for pipeline tensors x = (v - m) / s; RGB identity included."""
    v = torch.rand(2, 3, 4, 4)
    m, s = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    x = (v - m) / s
    torch.testing.assert_close(InputConvention("RGB", 1.0, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))(x), x)
    mean, std = torch.tensor([10.0, 20.0, 30.0]).view(1, 3, 1, 1), torch.tensor([2.0, 4.0, 8.0]).view(1, 3, 1, 1)
    torch.testing.assert_close(InputConvention("BGR", 255, (10, 20, 30), (2, 4, 8))(x),
                               (255 * v[:, [2, 1, 0]] - mean) / std, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="space must be one of RGB, BGR, got 'YUV'"):
        InputConvention("YUV", 1.0, (0, 0, 0), (1, 1, 1))


def test_bninception_imagenet_weights_come_from_torch_hubs_cache(tmp_path, monkeypatch, bninception):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = hub_checkpoint(WEIGHTS_FILE)
    assert path == tmp_path / "hub" / "checkpoints" / "bn_inception-52deb4733.pth"
    with pytest.raises(FileNotFoundError) as missing:
        build_backbone("bninception", "imagenet")
    message = str(missing.value)
    assert str(path) in message and WEIGHTS_URL in message and "pretrained: <path" in message
    assert WEIGHTS_URL == "http://data.lip6.fr/cadene/pretrainedmodels/bn_inception-52deb4733.pth"

    source, _ = bninception
    path.parent.mkdir(parents=True)
    torch.save(_cadene_file(source), path)
    for pretrained in ("imagenet", str(path)):  # the cache, or the same file named
        loaded, _ = build_backbone("bninception", pretrained)
        for key in ("conv1_7x7_s2.weight", "inception_4c_double_3x3_1_bn.running_mean", "inception_5b_pool_proj.bias"):
            torch.testing.assert_close(loaded.state_dict()[key], source.state_dict()[key])


def test_bninception_refuses_weights_of_another_network(tmp_path, bninception):
    source, _ = bninception
    state = _cadene_file(source)
    state.pop("inception_3a_1x1.weight")
    state["fc.weight"] = torch.zeros(3)
    path = tmp_path / "other.pth"
    torch.save(state, path)
    with pytest.raises(RuntimeError, match=r"missing keys \['inception_3a_1x1.weight'\].*unexpected keys \['fc.weight'\]"):
        build_backbone("bninception", str(path))


@pytest.mark.slow
def test_bninception_embeds_and_trains_end_to_end():
    torch.manual_seed(0)
    net = RetrievalNet("bninception", "none", pooling="avg", layernorm=False, embed_dim=64, freeze_bn=False)
    out = net(torch.rand(2, 3, 64, 64))
    assert out.shape == (2, 64)
    out[0].dot(out[1]).backward()
    assert net.backbone.conv1_7x7_s2.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------- a Table 1 setup trains


@pytest.mark.slow
def test_a_table1_setup_trains_densenet201_on_cpu(tmp_path):
    """topk_densenet201_sop with demo-like overrides (random init, 32-pixel crops, one batch of the
    paper's sampler: 2 classes x 4 images, so l_k (k = 5) is not zero) on a generated SOP replica:
    the loss back-propagates into the backbone (no weight decay, so only its gradient moves it)."""
    from rankrepro.engine.loop import seed_everything, train
    from rankrepro.plan.planner import resolve_run
    from rankrepro.models import build_model

    manifest = sop_manifest(tmp_path / "sop")
    run = resolve_run("topk_densenet201_sop", {"name": "topk_precision", "k": 5, "margin": 0.1}, {
        "model": {"pretrained": "none"},
        "images": {"train_resize": [36, 36], "train_crop": 32, "test_resize": [36, 36], "test_crop": 32},
        "sampler": {"batch_size": 8, "samples_per_class": 4},
        "optimizer": {"weight_decay": 0.0},
        "epochs": 1, "max_batches_per_epoch": 1,
    })
    assert run["model"]["backbone"] == "densenet201" and run["sampler"]["name"] == "up_to_m_per_class"
    seed_everything(run["seed"])
    initial = build_model(run["model"]).state_dict()
    trained = torch.load(train(run, manifest, tmp_path / "run", run_id="t", progress=False),
                         weights_only=True)["state_dict"]
    assert not torch.equal(initial["backbone.features.conv0.weight"], trained["backbone.features.conv0.weight"])
    header, row = (tmp_path / "run" / "history.csv").read_text().splitlines()
    history = dict(zip(header.split(","), row.split(",")))
    assert history["batches"] == "1" and float(history["loss"]) > 0
