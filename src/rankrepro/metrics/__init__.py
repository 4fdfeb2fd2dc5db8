"""Retrieval evaluation: exact k-NN search and PML-compatible metrics."""

from .knn import knn, knn_chunks
from .retrieval import retrieval_metrics

__all__ = ["knn", "knn_chunks", "retrieval_metrics"]
