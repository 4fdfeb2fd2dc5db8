"""Retrieval metrics with the exact definitions of PML's ``AccuracyCalculator``.

For a query with label y, let ``rel_i`` = 1 if its i-th nearest neighbour (exact inner
product, query removed by index in same-set mode) has label y, and
``P(i) = (sum_{j<=i} rel_j) / i``.

* ``R`` = number of items with label y in the reference set, minus the query itself in
  same-set mode (no gallery). Queries with ``R = 0`` ("lone") are dropped from every
  metric (counted in ``n_lone``).
* ``R@k`` = 1 if any of the top-k neighbours has label y (``R@1`` == PML
  ``precision_at_1``). k larger than the reference set is capped at its size.
* ``mAP@R`` = (1/R) sum_{i<=R} P(i) rel_i   (PML ``mean_average_precision_at_r``).
* ``RP`` = (sum_{i<=R} rel_i) / R            (PML ``r_precision``).

All are means over the kept queries, returned as Python floats in [0, 1] (NaN if every
query is lone). Searched k = max(max(recall_at), max R), capped at the reference size.
"""

from __future__ import annotations

import numpy as np
import torch

from .knn import knn_chunks

__all__ = ["retrieval_metrics"]


def _to_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _finest(labels, name):
    lab = _to_numpy(labels)
    if lab.ndim == 2:
        lab = lab[:, 0]
    elif lab.ndim != 1:
        raise ValueError(f"{name} must be [N] or [N, L], got shape {lab.shape}")
    return lab


def retrieval_metrics(
    embeddings,
    labels,
    *,
    recall_at=(1, 10, 100, 1000),
    map_at_r: bool = True,
    r_precision: bool = True,
    gallery=None,
    gallery_labels=None,
    chunk_size: int = 4096,
    device=None,
) -> dict:
    """Compute ``R@k`` (for k in ``recall_at``), ``mAP@R`` and ``RP``.

    Args:
        embeddings: [N, D] query embeddings (numpy or torch), assumed L2-normalised
            (inner-product search; nothing is normalised here).
        labels: [N] or [N, L]; column 0 (finest level) is used.
        gallery, gallery_labels: optional reference set (query/gallery protocol, e.g.
            In-Shop): no self removal. Without them each query is searched against all
            the other embeddings (self removed by index).
        chunk_size, device: passed to :func:`rankrepro.metrics.knn.knn_chunks`; queries
            are processed in chunks so memory is O(chunk_size * k).

    Returns:
        dict with ``R@k`` keys, ``mAP@R``, ``RP`` (as requested), ``n_queries`` (queries
        used) and ``n_lone`` (dropped queries with R = 0).
    """
    q_lab = _finest(labels, "labels")
    n = len(q_lab)
    if not isinstance(embeddings, (np.ndarray, torch.Tensor)):
        embeddings = np.asarray(embeddings, dtype=np.float32)
    if embeddings.shape[0] != n:
        raise ValueError("embeddings and labels have different lengths")
    same_set = gallery is None
    if same_set:
        if gallery_labels is not None:
            raise ValueError("gallery_labels given without gallery")
        codes, q_codes = np.unique(q_lab, return_inverse=True)
        q_codes = q_codes.reshape(-1)
        g_codes = q_codes
        n_gallery = n
        R = np.bincount(q_codes, minlength=len(codes))[q_codes] - 1
    else:
        if gallery_labels is None:
            raise ValueError("gallery given without gallery_labels")
        g_lab = _finest(gallery_labels, "gallery_labels")
        codes, inv = np.unique(np.concatenate([q_lab, g_lab]), return_inverse=True)
        inv = inv.reshape(-1)
        q_codes, g_codes = inv[:n], inv[n:]
        n_gallery = len(g_codes)
        R = np.bincount(g_codes, minlength=len(codes))[q_codes]
    R = R.astype(np.int64)
    keep = R > 0
    n_kept = int(keep.sum())
    recall_at = tuple(int(k) for k in recall_at)
    out_keys = [f"R@{k}" for k in recall_at]
    if map_at_r:
        out_keys.append("mAP@R")
    if r_precision:
        out_keys.append("RP")

    result = {}
    if n_kept == 0:
        result.update({key: float("nan") for key in out_keys})
        result.update(n_queries=0, n_lone=n)
        return result

    max_r = int(R[keep].max()) if (map_at_r or r_precision) else 0
    k_search = max([*recall_at, max_r, 1])
    k_search = min(k_search, n_gallery - (1 if same_set else 0))

    sums = {key: 0.0 for key in out_keys}
    for start, _, idx in knn_chunks(
        embeddings,
        k_search,
        gallery,
        exclude_self=True,
        chunk_size=chunk_size,
        device=device,
    ):
        stop = start + idx.shape[0]
        kp = keep[start:stop]
        if not kp.any():
            continue
        idx = idx[kp]
        r = R[start:stop][kp]
        rel = g_codes[idx] == q_codes[start:stop][kp][:, None]  # [b, K] bool
        K = rel.shape[1]
        for k, key in zip(recall_at, out_keys):
            sums[key] += float(rel[:, : min(k, K)].any(axis=1).sum())
        if map_at_r or r_precision:
            kr = min(max_r, K)
            cols = np.arange(1, kr + 1)
            hits = rel[:, :kr] & (cols[None, :] <= r[:, None])
            if map_at_r:
                prec = np.cumsum(hits, axis=1, dtype=np.float64) / cols
                sums["mAP@R"] += float(((prec * hits).sum(axis=1) / r).sum())
            if r_precision:
                sums["RP"] += float((hits.sum(axis=1, dtype=np.float64) / r).sum())

    for key in out_keys:
        result[key] = sums[key] / n_kept
    result.update(n_queries=n_kept, n_lone=int(n - n_kept))
    return result
