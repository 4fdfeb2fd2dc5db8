"""Retrieval networks: backbone -> pooling -> [LayerNorm] -> linear projection -> L2 normalisation;
the detector (Faster R-CNN, :mod:`rankrepro.models.detection`).

Three registries (:class:`rankrepro.registry.Registry`): ``MODELS`` (the network a run's
``model`` block names: ``retrieval_net``, ``faster_rcnn``), ``BACKBONES`` and ``POOLINGS``.
"""

from rankrepro.models.backbones import BACKBONES
from rankrepro.models.detection import build_detector
from rankrepro.models.heads import MODELS, RetrievalNet, build_model
from rankrepro.models.pooling import POOLINGS

__all__ = ["BACKBONES", "MODELS", "POOLINGS", "RetrievalNet", "build_detector", "build_model"]
