"""PML-compatible ``retrieval_metrics`` (R@k, mAP@R, RP at the finest label level).

A thin layer over :func:`rankrepro.metrics.core.compute_plain`; the metric definitions are in
:mod:`rankrepro.metrics.binary`.
"""

from __future__ import annotations

import numpy as np
import torch

from .core import compute_plain

__all__ = ["retrieval_metrics"]


def retrieval_metrics(
    embeddings,
    labels,
    *,
    recall_at=(1, 10, 100, 1000),
    map_at_r: bool = True,
    r_precision: bool = True,
    gallery=None,
    gallery_labels=None,
    chunk_size: int | None = None,
    device=None,
) -> dict:
    """``R@k`` (k in ``recall_at``), ``mAP@R`` and ``RP`` at the finest level (column 0).

    Exactly PML's AccuracyCalculator definitions (``precision_at_1`` == ``R@1``,
    ``mean_average_precision_at_r``, ``r_precision``; k beyond the gallery size is capped), computed
    by :func:`rankrepro.metrics.core.compute_plain`. Without a gallery each query is searched against
    all the other embeddings (itself removed by index). Returns the metrics plus ``n_queries``
    (queries used) and ``n_lone`` (queries without any positive, left out).
    """
    lab = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if lab.ndim == 2:
        lab = lab[:, 0]
    elif lab.ndim != 1:
        raise ValueError(f"labels must be [N] or [N, L], got shape {lab.shape}")
    n = embeddings.shape[0] if hasattr(embeddings, "shape") else len(embeddings)
    if n != len(lab):
        raise ValueError("embeddings and labels have different lengths")
    if gallery is None and gallery_labels is not None:
        raise ValueError("gallery_labels given without gallery")
    if gallery is not None and gallery_labels is None:
        raise ValueError("gallery given without gallery_labels")
    gl = gallery_labels
    if gl is not None:
        gl = gl.detach().cpu().numpy() if isinstance(gl, torch.Tensor) else np.asarray(gl)
        gl = gl[:, 0] if gl.ndim == 2 else gl
    names = [f"R@{int(k)}" for k in recall_at]
    if map_at_r:
        names.append("mAP@R")
    if r_precision:
        names.append("RP")
    if not isinstance(embeddings, (np.ndarray, torch.Tensor)):
        embeddings = np.asarray(embeddings, dtype=np.float32)
    return compute_plain(embeddings, lab, gallery, gl, metrics=names, device=device, max_rows=chunk_size)
