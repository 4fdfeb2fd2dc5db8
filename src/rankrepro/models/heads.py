"""The retrieval network: backbone -> pooling -> [LayerNorm, no affine | L2] -> [Linear] -> L2 norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rankrepro.models.backbones import build_backbone, freeze_batchnorm, set_batchnorm_momentum
from rankrepro.models.pooling import build_pooling
from rankrepro.registry import PositiveFloat, Registry

#: the build's context: data sizes and modules a model may take that are not run parameters (the detector's
#: ``num_classes`` and ``roi_loss``, :mod:`rankrepro.models.detection`); given only to the builders that take them
MODELS = Registry("model", context=("num_classes", "roi_loss"))

#: values of ``projection_init``
PROJECTION_INITS = ("random", "pca")


class L2Normalize(nn.Module):
    """x / ||x||_2 over the last dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1)


@MODELS.register("retrieval_net")
class RetrievalNet(nn.Module):
    """Embeds images into L2-normalised vectors.

    ``backbone``: a name of :data:`rankrepro.models.backbones.BACKBONES`; ``pretrained``:
    ``imagenet``, ``none`` or a state-dict file; ``pooling``: a block of
    :data:`rankrepro.models.pooling.POOLINGS` (``{"name": "gem", "p": 3.0}``; a bare name
    takes its defaults) that suits the backbone's output (``cls`` for the vision transformers
    ``deit_small`` and ``vit_base``, a spatial pooling for the ResNets, ``identity`` for the face
    networks ``senet50_256`` and ``iresnet50``, which output their own embedding: with
    ``layernorm: false, projection: false, embed_dim: 256 | 512`` the model's output is that embedding,
    L2-normalised); ``layernorm``: LayerNorm
    without affine parameters before the projection (SupRank); ``l2_features``: L2 normalisation
    before the projection instead (SupRank's H-GLDv2 ResNet-101, whose projection is a PCA
    whitening of L2-normalised GeM features); ``embed_dim``: output size; ``freeze_bn``:
    BatchNorm statistics frozen.

    ``bn_momentum`` (default None: each BatchNorm keeps the backbone's own, PyTorch's 0.1): the
    momentum m of every BatchNorm layer of the backbone, in PyTorch's convention -- each
    training batch updates ``running = (1 - m) * running + m * batch_statistic``. The top-k
    precision code builds its BN-Inception with m = 0.9 in all 69 BatchNorm layers
    (BG2CRW/top_k_optimization ``models/bn_inception.py``, a Caffe-port artefact: the running
    statistics are about the last batch's). In (0, 1]; only meaningful with ``freeze_bn: false``
    (frozen statistics never update), so setting it with ``freeze_bn: true`` is an error.

    ``projection``: a Linear layer to ``embed_dim`` (false: none, the official DeiT-S / ViT-B
    ``without_fc`` models, where ``embed_dim`` must equal the backbone's width);
    ``projection_init``: ``random`` (PyTorch's default) or ``pca``: the trainer sets the
    projection to the PCA of the training images' features before a fresh run
    (:func:`rankrepro.models.pca.init_projection_pca`), with whitening when ``pca_whiten``
    (the official code's default), from ``pca_images`` training images drawn with the run's
    seed (null: all of them).

    ``backbone`` holds the pretrained feature extractor; ``head`` holds everything
    after it (pooling parameters, normalisation, projection) so the trainer can give the
    two groups their own learning rates.
    """

    def __init__(self, backbone: str = "resnet50", pretrained: str = "imagenet", pooling: str | dict = "avg",
                 layernorm: bool = True, embed_dim: int = 512, freeze_bn: bool = True, projection: bool = True,
                 l2_features: bool = False, projection_init: str = "random", pca_whiten: bool = True,
                 pca_images: int | None = None, bn_momentum: PositiveFloat | None = None):
        super().__init__()
        if projection_init not in PROJECTION_INITS:
            raise ValueError(f"projection_init must be one of {', '.join(PROJECTION_INITS)}, got {projection_init!r}")
        if projection_init == "pca" and not projection:
            raise ValueError("projection_init: pca needs a projection (projection: true)")
        if pca_images is not None and pca_images < 2:
            raise ValueError(f"pca_images must be null (all) or at least 2, got {pca_images}")
        if layernorm and l2_features:
            raise ValueError("layernorm and l2_features are exclusive: choose one normalisation before the projection")
        if bn_momentum is not None and not 0 < bn_momentum <= 1:
            raise ValueError(f"bn_momentum must be in (0, 1] or null, got {bn_momentum}")
        if bn_momentum is not None and freeze_bn:
            raise ValueError("bn_momentum needs freeze_bn: false (frozen BatchNorm statistics never update)")
        self.backbone, channels = build_backbone(backbone, pretrained)
        pool = build_pooling(pooling)
        produced, expected = getattr(self.backbone, "output", "map"), getattr(pool, "input", "map")
        if produced != expected:
            name = pooling if isinstance(pooling, str) else pooling.get("name")
            hints = {"tokens": "pooling: cls", "vector": "pooling: identity"}
            hint = hints.get(produced, "a spatial pooling (avg, gem, max)")
            what = {"map": "a [B, C, H, W] feature map", "tokens": "transformer tokens [B, 1 + N, D]",
                    "vector": "its own embedding vector [B, D]"}
            raise ValueError(f"pooling {name!r} takes {what[expected]} but backbone {backbone!r} outputs "
                             f"{what[produced]}: use {hint}")
        if not projection and embed_dim != channels:
            raise ValueError(f"without a projection the embedding is the backbone's output: embed_dim must be "
                             f"{channels} for {backbone!r}, got {embed_dim}")
        if layernorm:
            norm = nn.LayerNorm(channels, elementwise_affine=False)
        else:
            norm = L2Normalize() if l2_features else nn.Identity()
        self.head = nn.Sequential(
            pool,
            norm,
            nn.Linear(channels, embed_dim) if projection else nn.Identity(),
        )
        self.embed_dim = embed_dim
        self.projection_init = projection_init
        self.pca_whiten = pca_whiten
        self.pca_images = pca_images
        self.freeze_bn = freeze_bn
        self.bn_momentum = bn_momentum
        if freeze_bn:
            freeze_batchnorm(self.backbone)
        if bn_momentum is not None:
            set_batchnorm_momentum(self.backbone, bn_momentum)

    @property
    def projection_layer(self) -> nn.Module:
        """The last layer of the head: the ``nn.Linear`` projection (``nn.Identity`` without one)."""
        return self.head[-1]

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """What the projection sees: backbone -> pooling -> normalisation ([B, channels])."""
        return self.head[:-1](self.backbone(images))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.head(self.backbone(images))
        return F.normalize(features.float(), dim=-1)


def build_model(block: dict, context: dict | None = None) -> nn.Module:
    """Build from a run's ``model`` block (``{"name": "retrieval_net", **parameters}``); ``context``: see
    :data:`MODELS` (e.g. ``{"num_classes": 21, "roi_loss": loss}`` for ``faster_rcnn``)."""
    return MODELS.build_block(block, context=context)
