"""Faster R-CNN with FPN (torchvision) for RaMBO's object detection (paper section 5.2, Tables 5 and 8).

RaMBO trains mmdetection's (commit 9d767a03, v1 era) ``faster_rcnn_{r50,r101,x101_32x4d}_fpn_1x`` and
only exchanges the classifier's loss. :func:`build_detector` builds torchvision's ``FasterRCNN``, whose
RPN and RoI defaults equal mmdet's VOC config (anchors 32-512 x 3 ratios, 2000 / 1000 proposals,
512 RoIs per image at 0.25 positives, RoIAlign 7x7, two 1024-d FCs, target stds 0.1 / 0.2, test
score 0.05, NMS 0.5, 100 detections; ../shared/spec/reference/detection.md A.1, A.3), and replaces
its RoI heads with :class:`RankRoIHeads`, which compute the box head's losses with a given module
(:class:`rankrepro.losses.detection.FasterRCNNLoss`, the loss ``faster_rcnn``) instead of
torchvision's module-level ``fastrcnn_loss`` (never patched: a process may train several runs).

Backbones (``backbone``), each a torchvision ResNet trunk with FrozenBatchNorm2d (statistics and
affine parameters frozen; mmdet v1 freezes the statistics and trains the affine parameters of the
stages it trains) under torchvision's FPN (P2-P6, 256 channels):

* ``resnet50``, ``resnet101`` -- what ``fasterrcnn_resnet50_fpn`` / ``resnet_fpn_backbone`` build;
  ImageNet weights: torchvision's ``IMAGENET1K_V1`` (mmdet's ``torchvision://resnet50``, ``://resnet101``);
* ``resnext101_32x4d`` -- ``ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)`` (torchvision
  has no 32x4d model); ImageNet weights: mmdet's ``open-mmlab://resnext101_32x4d`` =
  :data:`RESNEXT_URL`, whose key names (conv1, bn1, layerN.i.convK / bnK / downsample) are
  torchvision's;
* ``resnet_tiny`` -- ``ResNet(BasicBlock, [1, 1, 1, 1])``, the retrieval registry's ``resnet_tiny``
  (:func:`rankrepro.models.backbones.resnet_tiny`) as a detection trunk: the demo's detection rows
  (no ImageNet weights: ``pretrained: none`` or a file; not a backbone of the papers).

``pretrained``: ``imagenet`` (the file above, from torch hub's checkpoint cache,
:func:`rankrepro.models.backbones.hub_checkpoint`; torchvision's files are downloaded there when
absent, the ResNeXt file is not: its absence is an error naming the file and URL), ``none`` (random
initialisation) or the path of a state dict of the same ResNet (``fc.*`` ignored). Weights load
strictly: every trunk key must match. ``trainable_layers`` (torchvision's ``trainable_backbone_layers``):
the stages trained, counted from layer4; 3 = layer2-4 trained, stem and layer1 frozen (mmdet
``frozen_stages=1``).

The model registry (:data:`rankrepro.models.heads.MODELS`) names it ``faster_rcnn``; the number of
classes (background included) and the RoI loss are the build's context, not run parameters.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.models.detection.roi_heads import RoIHeads
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.ops.misc import FrozenBatchNorm2d

from rankrepro.models.backbones import hub_checkpoint, read_state_dict, torchvision_state_dict
from rankrepro.models.heads import MODELS
from rankrepro.models.key_names import load_by_key_names
from rankrepro.registry import AtLeastTwoInt, NonNegativeInt, PositiveInt

__all__ = ["DETECTION_BACKBONES", "RESNEXT_URL", "RankRoIHeads", "build_detector", "detection_backbone",
           "resnet_trunk"]

#: mmdet's ``open-mmlab://resnext101_32x4d`` (mmcv's URL map; detection.md A.2)
RESNEXT_URL = "https://download.openmmlab.com/pretrain/third_party/resnext101_32x4d-a5af3160.pth"

#: backbone name -> its ImageNet weights: torchvision's weights enum, the URL of a file (:data:`RESNEXT_URL`), or
#: None (none: ``resnet_tiny``)
DETECTION_BACKBONES = {"resnet50": "ResNet50_Weights", "resnet101": "ResNet101_Weights",
                       "resnext101_32x4d": RESNEXT_URL, "resnet_tiny": None}


def resnet_trunk(name: str) -> ResNet:
    """The ResNet of backbone ``name`` (:data:`DETECTION_BACKBONES`) with FrozenBatchNorm2d, random weights."""
    if name == "resnext101_32x4d":
        return ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4, norm_layer=FrozenBatchNorm2d)
    if name == "resnet_tiny":
        return ResNet(BasicBlock, [1, 1, 1, 1], norm_layer=FrozenBatchNorm2d)
    if name not in DETECTION_BACKBONES:
        raise ValueError(f"unknown detection backbone {name!r}; known: {', '.join(DETECTION_BACKBONES)}")
    return getattr(torchvision.models, name)(norm_layer=FrozenBatchNorm2d)


def _imagenet_state(name: str) -> dict:
    """The ImageNet state dict of backbone ``name``, from torch hub's cache (module docstring)."""
    source = DETECTION_BACKBONES[name]
    if source is None:
        raise ValueError(f"backbone {name} has no ImageNet weights: use pretrained: none or the path of a state dict")
    if source.startswith("https://"):
        path = hub_checkpoint(source.rsplit("/", 1)[1])
        if not path.is_file():
            raise FileNotFoundError(
                f"backbone {name}: pretrained: imagenet reads mmdet's ImageNet weights from {path}, which does not "
                f"exist (not downloaded here). Download {source} into {path.parent} (torch hub's checkpoint "
                "cache, $TORCH_HOME/hub/checkpoints), or pass pretrained: <path to the file>; pretrained: none "
                "initialises at random")
        return read_state_dict(path)
    weights = getattr(torchvision.models, source).IMAGENET1K_V1
    try:
        return torchvision_state_dict(weights)
    except OSError as err:  # URLError offline, or a truncated download
        raise RuntimeError(
            f"backbone {name}: could not get torchvision's ImageNet weights {weights.url} (cached as "
            f"{hub_checkpoint(weights.url.rsplit('/', 1)[1])}): {type(err).__name__}: {err}. Without network, put "
            "the file there beforehand, or pass pretrained: <path to a state dict>") from err


def detection_backbone(name: str, pretrained: str = "imagenet",
                       trainable_layers: NonNegativeInt = 3) -> BackboneWithFPN:
    """The ResNet trunk ``name`` with its weights (``pretrained``) under torchvision's FPN, the first
    5 - ``trainable_layers`` stages frozen (module docstring)."""
    net = resnet_trunk(name)
    if pretrained != "none":
        state = _imagenet_state(name) if pretrained == "imagenet" else read_state_dict(pretrained)
        net.fc = nn.Identity()  # the FPN drops the classifier: its weights, if any, are not loaded
        load_by_key_names(net, f"backbone {name} ({pretrained})",
                          {k: v for k, v in state.items() if not k.startswith("fc.")})
    # torchvision's own builder of resnet_fpn_backbone / fasterrcnn_resnet50_fpn (freezing, P2-P6 FPN)
    return _resnet_fpn_extractor(net, trainable_layers)


class RankRoIHeads(RoIHeads):
    """torchvision's RoI heads with the training losses computed by ``roi_loss``.

    Training: ``select_training_samples`` -> ``box_roi_pool`` -> ``box_head`` -> ``box_predictor`` ->
    ``roi_loss(class_logits, box_regression, labels, regression_targets)`` (a dict of losses, e.g.
    :class:`rankrepro.losses.detection.FasterRCNNLoss`); evaluation: torchvision's forward unchanged
    (``postprocess_detections``). Box heads only (no mask or keypoint branch).

    ``roi_loss`` is held by reference, not as a submodule: the detector's state dict holds its weights
    only, and the loss's state (RaMBO's memory) is the trainer's to save, as the retrieval trainer
    saves its criterion. None: an evaluation-only model (training forward is an error).
    """

    def __init__(self, *args, roi_loss: nn.Module | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "roi_loss", roi_loss)  # not registered (class docstring)

    @classmethod
    def from_heads(cls, heads: RoIHeads, roi_loss: nn.Module | None) -> RankRoIHeads:
        """The heads built with the constructor arguments of ``heads`` (its submodules, matcher
        thresholds, sampler, box coder weights and inference settings) and ``roi_loss``."""
        if heads.has_mask() or heads.has_keypoint():
            raise ValueError("RankRoIHeads has box heads only: no mask or keypoint branch")
        return cls(heads.box_roi_pool, heads.box_head, heads.box_predictor,
                   heads.proposal_matcher.high_threshold, heads.proposal_matcher.low_threshold,
                   heads.fg_bg_sampler.batch_size_per_image, heads.fg_bg_sampler.positive_fraction,
                   heads.box_coder.weights, heads.score_thresh, heads.nms_thresh, heads.detections_per_img,
                   roi_loss=roi_loss)

    def forward(self, features, proposals, image_shapes, targets=None):
        if not self.training:
            return super().forward(features, proposals, image_shapes, targets)
        if self.roi_loss is None:
            raise ValueError("this detector was built without a RoI loss (roi_loss): it can only evaluate")
        for t in targets or ():  # torchvision's checks
            if not t["boxes"].is_floating_point():
                raise TypeError(f"target boxes must be of float type, got {t['boxes'].dtype}")
            if t["labels"].dtype != torch.int64:
                raise TypeError(f"target labels must be of int64 type, got {t['labels'].dtype}")
        proposals, _, labels, regression_targets = self.select_training_samples(proposals, targets)
        box_features = self.box_head(self.box_roi_pool(features, proposals, image_shapes))
        class_logits, box_regression = self.box_predictor(box_features)
        return [], self.roi_loss(class_logits, box_regression, labels, regression_targets)


@MODELS.register("faster_rcnn")
def build_detector(backbone: str = "resnet50", pretrained: str = "imagenet", min_size: PositiveInt = 600,
                   max_size: PositiveInt = 1000, trainable_layers: NonNegativeInt = 3,
                   num_classes: AtLeastTwoInt = 21, roi_loss: nn.Module | None = None) -> FasterRCNN:
    """torchvision's Faster R-CNN + FPN on ``backbone`` (module docstring) with :class:`RankRoIHeads`.

    ``min_size = 600``, ``max_size = 1000``: mmdet's VOC ``img_scale=(1000, 600)``, keep ratio
    (torchvision's resize to the shorter side, capped by the longer); ``trainable_layers = 3``: mmdet's
    ``frozen_stages=1``; ``num_classes = 21``: the 20 VOC classes and background (index 0), mmdet v1;
    ``roi_loss``: the box head's training loss (``FasterRCNNLoss``; None: evaluation only). Every other
    setting is torchvision's default, equal to mmdet's (module docstring). Images: RGB in [0, 1]; the
    model normalises them with the ImageNet mean / std and pads to a multiple of 32.

    Train mode: ``model(images, targets)`` -> {loss_classifier, loss_box_reg, loss_objectness,
    loss_rpn_box_reg}; eval mode: ``model(images)`` -> [{boxes, labels, scores}] per image."""
    model = FasterRCNN(detection_backbone(backbone, pretrained, trainable_layers), num_classes=num_classes,
                       min_size=min_size, max_size=max_size)
    model.roi_heads = RankRoIHeads.from_heads(model.roi_heads, roi_loss)
    return model


build_detector.task = "detection"  # the catalog records it (rankrepro.registry.Entry.task)
