"""Exact inner-product k-nearest-neighbour search.

Backends, in order of preference:

* CPU inputs: faiss ``IndexFlatIP`` (exact), queries searched in fixed-size chunks.
* CUDA torch inputs (or ``device="cuda"``): faiss GPU ``GpuIndexFlatIP`` when
  ``faiss.get_num_gpus() > 0`` and the searched k is <= 2048 (faiss'
  ``GPU_MAX_SELECTION_K``); otherwise torch ``topk`` on ``q @ g.T`` computed in the
  same fixed-size chunks on the GPU.
* No faiss importable: torch ``topk`` on the input's device.

Self-retrieval (no gallery): every query is searched against the whole set with
k+1 neighbours and its own entry is removed **by index** (the column whose id equals
the query's row index; if that id is not among the k+1 results, e.g. under many exact
ties, the last column is dropped). It never assumes that column 0 is the query, so
exact duplicates of the query stay in its list.

Reproducibility: queries are always processed in chunks of ``chunk_size`` rows (default
4096), so a given (data, chunk_size, backend) gives the same scores and order. Changing
the chunk size or backend may perturb scores by ~1e-7 and reorder exact ties.
"""

from __future__ import annotations

import logging
import warnings
from typing import Iterator

import numpy as np
import torch

__all__ = ["knn", "knn_chunks", "GPU_MAX_K"]

log = logging.getLogger(__name__)

GPU_MAX_K = 2048  # faiss GPU_MAX_SELECTION_K (gpu/utils/DeviceDefs.cuh)

try:  # faiss is optional: the torch fallback covers its absence
    import faiss  # type: ignore
except Exception:  # pragma: no cover - depends on the environment
    faiss = None

_GPU_RES = {}


def _as_2d(x, name):
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    elif not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(x.shape)}")
    return x.detach().to(torch.float32)


def _resolve_device(query: torch.Tensor, device) -> torch.device:
    if device is None:
        return query.device
    return torch.device(device)


def _faiss_gpu_available() -> bool:
    if faiss is None or not hasattr(faiss, "StandardGpuResources"):
        return False
    try:
        return faiss.get_num_gpus() > 0
    except Exception:  # pragma: no cover
        return False


def _gpu_resources(dev_id: int):
    if dev_id not in _GPU_RES:
        _GPU_RES[dev_id] = faiss.StandardGpuResources()
    return _GPU_RES[dev_id]


def _make_searcher(gallery: torch.Tensor, k: int, device: torch.device):
    """Return (search(q_chunk_tensor) -> (scores np, ids np), backend name)."""
    d = gallery.shape[1]
    if device.type == "cuda":
        if _faiss_gpu_available() and k <= GPU_MAX_K:
            try:
                dev_id = device.index if device.index is not None else torch.cuda.current_device()
                cfg = faiss.GpuIndexFlatConfig()
                cfg.device = dev_id
                index = faiss.GpuIndexFlatIP(_gpu_resources(dev_id), d, cfg)
                index.add(np.ascontiguousarray(gallery.cpu().numpy()))

                def search(q):
                    s, i = index.search(np.ascontiguousarray(q.cpu().numpy()), k)
                    return s, i

                return search, "faiss-gpu"
            except Exception as e:  # e.g. CUDA runtime mismatch: fall back to torch
                warnings.warn(f"faiss GPU search failed ({e!r}); using torch topk on GPU")
        g = gallery.to(device)

        def search(q):
            sims = q.to(device) @ g.T
            s, i = torch.topk(sims, k, dim=1, largest=True, sorted=True)
            return s.cpu().numpy(), i.cpu().numpy()

        return search, "torch-cuda"

    if faiss is not None:
        index = faiss.IndexFlatIP(d)
        index.add(np.ascontiguousarray(gallery.cpu().numpy()))

        def search(q):
            return index.search(np.ascontiguousarray(q.cpu().numpy()), k)

        return search, "faiss-cpu"

    g = gallery.to(device)  # pragma: no cover - only without faiss

    def search(q):  # pragma: no cover
        s, i = torch.topk(q.to(device) @ g.T, k, dim=1, largest=True, sorted=True)
        return s.cpu().numpy(), i.cpu().numpy()

    return search, "torch-cpu"  # pragma: no cover


def _drop_self(scores: np.ndarray, ids: np.ndarray, start: int):
    """Remove, per row, the column whose id equals the row's global index.

    Rows where the own id is absent drop their last column (PML's convention)."""
    n = ids.shape[0]
    self_ids = np.arange(start, start + n, dtype=ids.dtype)[:, None]
    mask = ids == self_ids
    missing = ~mask.any(axis=1)
    mask[missing, -1] = True
    keep = ~mask
    k = ids.shape[1] - 1
    return scores[keep].reshape(n, k), ids[keep].reshape(n, k)


def knn_chunks(
    query,
    k: int,
    gallery=None,
    *,
    exclude_self: bool = True,
    chunk_size: int = 4096,
    device=None,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(start, scores [b, k'], indices [b, k'])`` for consecutive query chunks.

    Same semantics as :func:`knn`; ``k' = min(k, available)``.
    """
    q = _as_2d(query, "query")
    same_set = gallery is None
    g = q if same_set else _as_2d(gallery, "gallery")
    if g.shape[1] != q.shape[1]:
        raise ValueError(f"dimension mismatch: query {q.shape[1]} vs gallery {g.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    drop = same_set and exclude_self
    available = g.shape[0] - (1 if drop else 0)
    k_eff = min(int(k), available)
    if k_eff < 1:
        raise ValueError("gallery has no item to retrieve")
    k_search = k_eff + 1 if drop else k_eff
    dev = _resolve_device(q, device)
    search, backend = _make_searcher(g, k_search, dev)
    log.debug("knn backend=%s k=%d n_query=%d n_gallery=%d", backend, k_eff, q.shape[0], g.shape[0])
    for start in range(0, q.shape[0], chunk_size):
        s, i = search(q[start : start + chunk_size])
        s = np.asarray(s, dtype=np.float32)
        i = np.asarray(i, dtype=np.int64)
        if drop:
            s, i = _drop_self(s, i, start)
        yield start, s, i


def knn(
    query,
    k: int,
    gallery=None,
    *,
    exclude_self: bool = True,
    chunk_size: int = 4096,
    device=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product k-NN: ``(scores [N, k] float32, indices [N, k] int64)``.

    Rows are sorted by decreasing inner product ``<query_n, gallery_m>`` (cosine when the
    inputs are L2-normalised; nothing is normalised here).

    Args:
        query: [N, D] numpy array or torch tensor (any float dtype; searched in float32).
        k: neighbours per query; capped at the number of retrievable items.
        gallery: [M, D] reference set. ``None`` searches ``query`` against itself.
        exclude_self: only used when ``gallery is None``: remove each query from its own
            list by index (search k+1, drop the column equal to the row index, or the
            last column if the row index is absent). Ignored with an explicit gallery.
        chunk_size: fixed number of queries per search call (reproducible results).
        device: ``None`` = the query's device; ``"cuda"`` uses faiss GPU (k <= 2048) or a
            torch ``topk`` fallback; ``"cpu"`` uses faiss CPU.
    """
    q = _as_2d(query, "query")
    parts_s, parts_i = [], []
    for _, s, i in knn_chunks(
        q, k, gallery, exclude_self=exclude_self, chunk_size=chunk_size, device=device
    ):
        parts_s.append(s)
        parts_i.append(i)
    if not parts_s:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
    return np.concatenate(parts_s, 0), np.concatenate(parts_i, 0)
