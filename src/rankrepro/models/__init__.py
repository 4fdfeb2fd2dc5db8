"""Retrieval networks: backbone -> pooling -> [LayerNorm] -> linear projection -> L2 normalisation.

Three registries (:class:`rankrepro.registry.Registry`): ``MODELS`` (the network a run's
``model`` block names), ``BACKBONES`` and ``POOLINGS``.
"""

from rankrepro.models.backbones import BACKBONES
from rankrepro.models.heads import MODELS, RetrievalNet, build_model
from rankrepro.models.pooling import POOLINGS

__all__ = ["BACKBONES", "MODELS", "POOLINGS", "RetrievalNet", "build_model"]
