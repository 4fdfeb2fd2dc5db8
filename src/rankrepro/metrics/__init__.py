"""Retrieval evaluation: exact, chunked metrics and the papers' evaluation protocols.

``compute(query, query_labels, gallery=None, gallery_labels=None, metrics=[...], protocol=...)`` is
the entry point (:mod:`rankrepro.metrics.api`); definitions live in ``ranking`` (engine and tie
conventions), ``retrieval`` (binary metrics), ``hierarchical`` (H-AP, ΣwAP, ASI, NDCG),
``clustering`` (NMI, F1, dists) and ``protocols`` (dataset protocols). ``knn`` is exact k-NN search.
"""

from .api import compute, parse_metric
from .knn import knn, knn_chunks
from .retrieval import retrieval_metrics

__all__ = ["compute", "parse_metric", "knn", "knn_chunks", "retrieval_metrics"]
