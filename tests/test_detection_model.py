"""The detector ``faster_rcnn`` (rankrepro.models.detection): backbones, weights, RankRoIHeads.

Random weights and synthetic state dicts only (no network); tiny images (64 x 48, min_size 64).
Differential: the backbone against torchvision's ``resnet_fpn_backbone``, the ResNeXt trunk against
timm's ``resnext101_32x4d`` key names and shapes, the RoI heads' training losses against torchvision's
own RoIHeads with its ``fastrcnn_loss``.
"""

from __future__ import annotations

import urllib.error

import pytest
import torch
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
from torchvision.models.detection.roi_heads import RoIHeads

from rankrepro import catalog
from rankrepro.losses.detection import FasterRCNNLoss
from rankrepro.models import build_model
from rankrepro.models.detection import RESNEXT_URL, RankRoIHeads, build_detector, resnet_trunk

from lossutil import one_thread  # noqa: F401  (autouse fixture)

BACKBONES = ["resnet50", "resnet101", "resnext101_32x4d"]
TINY = dict(pretrained="none", min_size=64, max_size=96)
LOSS_NAMES = {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}


def images_and_targets():
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(3, 48, 64, generator=g), torch.rand(3, 48, 64, generator=g)]
    targets = [{"boxes": torch.tensor([[5.0, 5.0, 30.0, 40.0]]), "labels": torch.tensor([3])},
               {"boxes": torch.tensor([[10.0, 2.0, 60.0, 20.0], [1.0, 1.0, 20.0, 20.0]]),
                "labels": torch.tensor([7, 1])}]
    return images, targets


@pytest.fixture(scope="module")
def detectors():
    """One random detector per backbone (the ResNet-101s take most of the module's time)."""
    torch.manual_seed(0)
    return {name: build_detector(name, roi_loss=FasterRCNNLoss(), **TINY) for name in BACKBONES}


# ------------------------------------------------------------------------------------- backbones


def test_resnet50_backbone_is_torchvisions_resnet_fpn_backbone(detectors):
    ours = detectors["resnet50"].backbone
    ref = resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=3)
    shapes = lambda m: {k: tuple(v.shape) for k, v in m.state_dict().items()}  # noqa: E731
    assert shapes(ours) == shapes(ref)
    trained = lambda m: {k for k, p in m.named_parameters() if p.requires_grad}  # noqa: E731
    assert trained(ours) == trained(ref)
    assert not any(k.startswith(("body.conv1", "body.layer1")) for k in trained(ours))  # mmdet frozen_stages=1
    assert any(k.startswith("body.layer2") for k in trained(ours))


def test_resnext_trunk_has_timms_key_names_and_shapes():
    timm = pytest.importorskip("timm")
    ref = timm.create_model("resnext101_32x4d", pretrained=False).state_dict()
    ours = resnet_trunk("resnext101_32x4d").state_dict()
    ref = {k: v for k, v in ref.items() if not k.endswith("num_batches_tracked")}  # FrozenBN has no counter
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in ref.items()}
    conv = resnet_trunk("resnext101_32x4d").layer1[0].conv2
    assert (conv.groups, conv.in_channels) == (32, 128)  # 32 groups x 4 channels (x 64 / 64 at layer1)


@pytest.mark.parametrize("name", BACKBONES)
def test_a_state_dict_loads_strictly_into_each_backbone(tmp_path, name):
    torch.manual_seed(1)
    source = resnet_trunk(name)
    for m in source.modules():  # FrozenBN buffers are constants: give them values to find
        if hasattr(m, "running_mean") and m.running_mean is not None:
            m.running_mean.uniform_()
    state = source.state_dict()
    assert "fc.weight" in state  # an ImageNet file carries its classifier: ignored
    torch.save(state, tmp_path / "weights.pth")
    model = build_detector(name, **{**TINY, "pretrained": str(tmp_path / "weights.pth")})
    body = model.backbone.body.state_dict()
    assert set(body) == {k for k in state if not k.startswith("fc.")}
    assert all(torch.equal(body[k], state[k]) for k in body)
    del state["layer3.1.conv2.weight"]
    torch.save(state, tmp_path / "partial.pth")
    with pytest.raises(RuntimeError, match=r"backbone .* missing keys \['layer3.1.conv2.weight'\]"):
        build_detector(name, **{**TINY, "pretrained": str(tmp_path / "partial.pth")})


def test_missing_imagenet_files_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"resnext101_32x4d-a5af3160\.pth.*" + RESNEXT_URL.replace(".", r"\.")):
        build_detector("resnext101_32x4d", pretrained="imagenet")

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(RuntimeError, match=r"resnet101: could not get .*resnet101-63fe2227\.pth.*pretrained: <path"):
        build_detector("resnet101", pretrained="imagenet")
    with pytest.raises(ValueError, match="unknown detection backbone 'vgg16'"):
        build_detector("vgg16", pretrained="none")


def test_resnet_tiny_is_a_detection_trunk_without_imagenet_weights():
    """The demo's detection rows (profiles/demo/demo.yaml per_task.detection): a BasicBlock trunk under the FPN."""
    torch.manual_seed(0)
    model = build_detector("resnet_tiny", roi_loss=FasterRCNNLoss(), **TINY)
    trunk = model.backbone.body
    assert [len(getattr(trunk, f"layer{i}")) for i in range(1, 5)] == [1, 1, 1, 1]
    # the FPN's inputs: layer1-4 of BasicBlocks (64, 128, 256, 512 channels), 256 channels out
    assert [block[0].in_channels for block in model.backbone.fpn.inner_blocks] == [64, 128, 256, 512]
    assert model.backbone.out_channels == 256
    images, targets = images_and_targets()
    model.train()
    assert set(model(images, targets)) == LOSS_NAMES
    model.eval()
    with torch.no_grad():
        assert len(model(images)) == 2
    with pytest.raises(ValueError, match="resnet_tiny has no ImageNet weights"):
        build_detector("resnet_tiny", pretrained="imagenet")


# ----------------------------------------------------------------------------------- forward


@pytest.mark.parametrize("name", BACKBONES)
def test_train_mode_gives_the_four_losses_and_eval_mode_detections(detectors, name):
    model = detectors[name]
    images, targets = images_and_targets()
    model.train()
    out = model(images, targets)
    assert set(out) == LOSS_NAMES and all(v.ndim == 0 for v in out.values())
    model.eval()
    with torch.no_grad():
        dets = model(images)
    assert len(dets) == 2 and all(set(d) == {"boxes", "labels", "scores"} for d in dets)
    assert all(d["boxes"].shape[1] == 4 and len(d["boxes"]) <= 100 for d in dets)
    assert model.roi_heads.detections_per_img == 100 and model.roi_heads.score_thresh == 0.05


def test_rank_roi_heads_keep_torchvisions_settings_and_outputs(detectors):
    model = detectors["resnet50"]
    heads = model.roi_heads
    assert isinstance(heads, RankRoIHeads) and model.roi_heads.box_predictor.cls_score.out_features == 21
    assert (heads.proposal_matcher.high_threshold, heads.proposal_matcher.low_threshold) == (0.5, 0.5)
    assert (heads.fg_bg_sampler.batch_size_per_image, heads.fg_bg_sampler.positive_fraction) == (512, 0.25)
    assert heads.box_coder.weights == (10.0, 10.0, 5.0, 5.0) and heads.nms_thresh == 0.5
    assert (model.transform.min_size, model.transform.max_size) == ((64,), 96)
    # training: the same losses as torchvision's own heads (fastrcnn_loss, beta 1/9) with the CE loss at beta 1/9
    plain = RoIHeads(heads.box_roi_pool, heads.box_head, heads.box_predictor, 0.5, 0.5, 512, 0.25, None, 0.05, 0.5, 100)
    images, targets = images_and_targets()
    results = {}
    ours = RankRoIHeads.from_heads(heads, FasterRCNNLoss(box_beta=1 / 9))
    for key, roi_heads in (("ours", ours), ("torchvision", plain)):
        model.roi_heads = roi_heads
        model.train()
        torch.manual_seed(5)  # the samplers
        results[key] = model(images, targets)
        model.eval()
        with torch.no_grad():
            results[key + "_eval"] = model(images)
    model.roi_heads = heads
    assert all(torch.equal(results["ours"][k], results["torchvision"][k]) for k in LOSS_NAMES)
    for a, b in zip(results["ours_eval"], results["torchvision_eval"]):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_loss_is_not_part_of_the_detectors_state(detectors):
    model = detectors["resnet50"]
    assert not any("roi_loss" in k or "extra_state" in k for k in model.state_dict())
    bare = build_detector("resnet50", **TINY)  # no loss: evaluation only
    bare.load_state_dict(model.state_dict())
    bare.train()
    images, targets = images_and_targets()
    with pytest.raises(ValueError, match="without a RoI loss"):
        bare(images, targets)
    bare.eval()
    with torch.no_grad():
        assert len(bare(images)) == 2


def test_registered_as_model_faster_rcnn():
    entry = catalog.load()["model"]["faster_rcnn"]
    assert entry["task"] == "detection" and "task" not in catalog.load()["model"]["retrieval_net"]
    assert {k: p["default"] for k, p in entry["parameters"].items()} == {
        "backbone": "resnet50", "pretrained": "imagenet", "min_size": 600, "max_size": 1000, "trainable_layers": 3}
    loss = FasterRCNNLoss(classifier="rambo_map")
    model = build_model({"name": "faster_rcnn", "backbone": "resnet50", "pretrained": "none", "min_size": 64,
                         "max_size": 96, "trainable_layers": 0}, context={"num_classes": 5, "roi_loss": loss})
    assert model.roi_heads.box_predictor.cls_score.out_features == 5 and model.roi_heads.roi_loss is loss
    assert not any(p.requires_grad for p in model.backbone.body.parameters())  # trainable_layers 0


# ------------------------------------------------------------------------------------ training


def test_one_sgd_step_with_the_rank_classifier_changes_the_weights():
    torch.manual_seed(0)
    loss = FasterRCNNLoss(classifier="rambo_map")
    model = build_detector("resnet50", roi_loss=loss, **TINY)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    images, targets = images_and_targets()
    out = model(images, targets)
    total = sum(out.values())
    assert torch.isfinite(total) and 0 < out["loss_classifier"] <= 1  # 1 - mAP terms
    opt.zero_grad()
    total.backward()
    opt.step()
    head = model.roi_heads.box_predictor.cls_score.weight
    assert head.grad is not None and head.grad.abs().sum() > 0
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, params))
    assert len(loss.rank_loss.stored) == 1 and loss.rank_loss.stored[0][0].shape[1] == 21  # [RoIs, classes]
