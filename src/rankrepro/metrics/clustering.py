"""Clustering and embedding-geometry metrics: NMI, clustering F1, dists@intra / dists@inter.

NMI
    k-means of the query embeddings with k = number of distinct labels (faiss ``Kmeans``, L2,
    ``niter=20``, fixed ``seed=1234``; faiss GPU when the embeddings are on CUDA), each point assigned
    to its nearest centroid, then scikit-learn's ``normalized_mutual_info_score`` (arithmetic mean).
    This is PML's AccuracyCalculator "NMI" (same faiss call and defaults) and Roth et al.'s
    (whose ``min_points_per_centroid=1`` only silences a warning). Roth et al.'s PNP codebase uses
    k = number of *training* classes on SOP; pass ``n_clusters`` to reproduce that.

F1 (clustering)
    Pair-counting F1 (Song et al. 2016): over all pairs of points, TP = same class and same
    cluster, P = TP / #pairs in the same cluster, R = TP / #pairs in the same class,
    F1 = 2PR / (P + R). Roth et al. label each cluster by its medoid (the point nearest its
    centroid); clusters sharing a medoid are thereby merged (``medoid=True``, their code).

dists (PNP / Roth et al. ``metrics/dists.py``; cosine distance = 1 − cos)
    intra = mean over classes of the mean pairwise cosine distance between distinct members;
    inter = mean pairwise cosine distance between the L2-normalised class means (distinct classes);
    intra_over_inter = intra / inter. Classes with a single member have no pair and are left out
    (the original replaces their NaN through a buggy index, ``1 - isnan`` used as an index array).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["kmeans", "nmi", "clustering_f1", "dists", "faiss_gpus"]


def _np32(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def faiss_gpus() -> int:
    """Number of GPUs faiss can use (0 with faiss-cpu)."""
    try:
        import faiss

        return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0
    except Exception:  # pragma: no cover - faiss missing or broken CUDA runtime
        return 0


def kmeans(x, n_clusters: int, *, niter: int = 20, seed: int = 1234, gpu: bool = False):
    """faiss k-means: ``(assignments [N] int64, centroids [k, D] float32)``."""
    import faiss

    xs = _np32(x)
    if n_clusters < 1 or n_clusters > len(xs):
        raise ValueError(f"n_clusters must be in [1, {len(xs)}], got {n_clusters}")
    km = faiss.Kmeans(xs.shape[1], int(n_clusters), niter=niter, seed=seed, gpu=gpu, verbose=False)
    km.train(xs)
    _, idx = km.index.search(xs, 1)
    return idx[:, 0].astype(np.int64), np.asarray(km.centroids)


def nmi(labels, assignments) -> float:
    """scikit-learn normalized mutual information between labels and cluster assignments."""
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(np.asarray(labels), np.asarray(assignments)))


def _pairs(counts: np.ndarray) -> float:
    counts = counts.astype(np.float64)
    return float((counts * (counts - 1) / 2).sum())


def clustering_f1(labels, assignments, x=None, centroids=None, *, medoid: bool = True) -> float:
    """Pair-counting F1 of a clustering against the labels (see the module docstring)."""
    lab = np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1)
    cl = np.asarray(assignments).reshape(-1)
    if medoid:
        if x is None or centroids is None:
            raise ValueError("medoid=True needs the embeddings and the centroids")
        import faiss

        xs = _np32(x)
        index = faiss.IndexFlatL2(xs.shape[1])
        index.add(xs)
        _, med = index.search(np.ascontiguousarray(centroids, dtype=np.float32), 1)
        cl = med[cl, 0]
    cl = np.unique(cl, return_inverse=True)[1].reshape(-1)
    pair = lab.astype(np.int64) * (cl.max() + 1) + cl
    tp = _pairs(np.unique(pair, return_counts=True)[1])
    same_cluster = _pairs(np.bincount(cl))
    same_class = _pairs(np.bincount(lab))
    if tp == 0:
        return 0.0
    p, r = tp / same_cluster, tp / same_class
    return float(2 * p * r / (p + r))


def dists(x, labels) -> dict:
    """``{"dists@intra", "dists@inter", "dists@intra_over_inter"}`` (cosine distances)."""
    xs = _np32(x).astype(np.float64)
    xs = xs / np.linalg.norm(xs, axis=1, keepdims=True).clip(min=1e-12)
    lab = np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1)
    k = int(lab.max()) + 1
    counts = np.bincount(lab, minlength=k).astype(np.float64)
    sums = np.zeros((k, xs.shape[1]))
    np.add.at(sums, lab, xs)
    # Σ_{i≠j} cos(x_i, x_j) = ||Σ x_i||² − Σ ||x_i||² = ||Σ x_i||² − n   (unit vectors)
    multi = counts > 1
    cos_pairs = (sums[multi] ** 2).sum(1) - counts[multi]
    intra_c = 1.0 - cos_pairs / (counts[multi] * (counts[multi] - 1))
    intra = float(intra_c.mean()) if len(intra_c) else float("nan")
    means = sums / counts.clip(min=1)[:, None]
    means = means / np.linalg.norm(means, axis=1, keepdims=True).clip(min=1e-12)
    if k > 1:
        total = means.sum(0)
        inter = float(1.0 - ((total**2).sum() - k) / (k * (k - 1)))
    else:
        inter = float("nan")
    return {
        "dists@intra": intra,
        "dists@inter": inter,
        "dists@intra_over_inter": intra / max(inter, 1e-8) if np.isfinite(inter) else float("nan"),
    }
