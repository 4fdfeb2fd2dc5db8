"""Retrieval networks: backbone -> pooling -> [LayerNorm] -> linear projection -> L2 normalisation."""

from rankrepro.models.heads import RetrievalNet, build_model

__all__ = ["RetrievalNet", "build_model"]
