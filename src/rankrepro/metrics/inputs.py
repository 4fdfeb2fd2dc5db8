"""The ranking engine's inputs: embeddings checked, labels encoded, and the label index.

Labels are [N] or [N, L], finest level in column 0, of any hashable numpy dtype; they are encoded
as integer codes per column, jointly over query and gallery (:func:`encode_labels`). When more than
one column is used they must form a tree (a label at column c determines every coarser label);
:class:`LabelIndex` checks this. Relevance and depth are defined in :mod:`rankrepro.metrics.ranking`.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["as_embeddings", "encode_labels", "LabelIndex"]

#: values per finiteness check of :func:`as_embeddings`: isfinite's temporaries (|x| and two masks, 6
#: bytes a value) on a whole GLDv2 index (761,757 x 2048) at once would add 9 GB to its 6 GB
FINITE_CHECK_VALUES = 1 << 24


def as_embeddings(x, name: str, device=None) -> torch.Tensor:
    """[N, D] float32 tensor on ``device`` (default: the input's device)."""
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        t = torch.as_tensor(np.asarray(x))
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {t.dtype}")
    t = t.to(device=device if device is not None else t.device, dtype=torch.float32)
    step = max(1, FINITE_CHECK_VALUES // max(1, t.shape[1]))
    for a in range(0, t.shape[0], step):
        if not bool(torch.isfinite(t[a : a + step]).all()):
            raise ValueError(f"{name} contains NaN or infinite values")
    return t.contiguous()


def _labels_2d(labels, name: str) -> np.ndarray:
    lab = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if lab.ndim == 1:
        lab = lab[:, None]
    if lab.ndim != 2:
        raise ValueError(f"{name} must be [N] or [N, L], got shape {lab.shape}")
    return lab


def encode_labels(query_labels, gallery_labels=None, n_cols: int | None = None):
    """Integer codes per column, joint over query and gallery: ``(qcodes [Nq, C], gcodes [Ng, C])``.

    Labels may be any hashable numpy dtype (ints, strings). ``n_cols`` limits the columns used."""
    q = _labels_2d(query_labels, "query_labels")
    g = q if gallery_labels is None else _labels_2d(gallery_labels, "gallery_labels")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"query_labels has {q.shape[1]} levels but gallery_labels has {g.shape[1]}")
    c = q.shape[1] if n_cols is None else n_cols
    if c > q.shape[1]:
        raise ValueError(f"metric needs label column {c - 1} but labels have {q.shape[1]} column(s)")
    qc = np.empty((len(q), c), np.int64)
    gc = np.empty((len(g), c), np.int64)
    for j in range(c):
        if gallery_labels is None:
            _, inv = np.unique(q[:, j], return_inverse=True)
            qc[:, j] = inv.reshape(-1)
        else:
            _, inv = np.unique(np.concatenate([q[:, j], g[:, j]]), return_inverse=True)
            inv = inv.reshape(-1)
            qc[:, j], gc[:, j] = inv[: len(q)], inv[len(q) :]
    if gallery_labels is None:
        gc = qc
    return qc, gc


class LabelIndex:
    """Gallery order in which every label block is contiguous, and each query's blocks.

    ``perm`` sorts the gallery by (column C-1, ..., column 0, index). For query i, the gallery items
    sharing its column-c label are ``perm[start[c, i]:stop[c, i]]``; blocks are nested (tree labels).
    ``excl[i]`` is the gallery index removed from query i's list (-1: none).
    """

    def __init__(self, qcodes: np.ndarray, gcodes: np.ndarray, excl: np.ndarray | None = None):
        self.qcodes, self.gcodes = qcodes, gcodes
        self.n_query, self.n_cols = qcodes.shape
        self.n_gallery = len(gcodes)
        if self.n_cols > 1:
            _check_tree(qcodes, gcodes)
        keys = [np.arange(self.n_gallery)] + [gcodes[:, c] for c in range(self.n_cols)]
        self.perm = np.lexsort(keys)
        self.inv_perm = np.empty_like(self.perm)
        self.inv_perm[self.perm] = np.arange(self.n_gallery)
        self.start = np.empty((self.n_cols, self.n_query), np.int64)
        self.stop = np.empty((self.n_cols, self.n_query), np.int64)
        for c in range(self.n_cols):
            sorted_codes = gcodes[self.perm, c]
            k = int(max(qcodes[:, c].max(initial=-1), gcodes[:, c].max(initial=-1))) + 1
            counts = np.bincount(sorted_codes, minlength=k)
            first = np.zeros(k, np.int64)
            present, first_pos = np.unique(sorted_codes, return_index=True)
            first[present] = first_pos
            self.start[c] = first[qcodes[:, c]]
            self.stop[c] = self.start[c] + counts[qcodes[:, c]]
        if excl is None:
            excl = np.full(self.n_query, -1, np.int64)
        excl = np.asarray(excl, np.int64)
        if excl.shape != (self.n_query,):
            raise ValueError(f"exclude must have one entry per query, got shape {excl.shape}")
        if (excl >= self.n_gallery).any() or (excl < -1).any():
            raise ValueError("exclude holds gallery indices out of range")
        self.excl = excl
        self.excl_pos = np.where(excl >= 0, self.inv_perm[np.maximum(excl, 0)], -1)
        qkeys = [np.arange(self.n_query)] + [qcodes[:, c] for c in range(self.n_cols)]
        self.qorder = np.lexsort(qkeys)

    def perm_tensor(self, device) -> torch.Tensor:
        """``perm`` as a tensor on ``device`` (cached)."""
        return self._tensor("perm", device)

    def inv_perm_tensor(self, device) -> torch.Tensor:
        """``inv_perm`` as a tensor on ``device`` (cached)."""
        return self._tensor("inv_perm", device)

    def _tensor(self, name: str, device) -> torch.Tensor:
        cache = self.__dict__.setdefault("_tensors", {})
        key = (name, str(device))
        if key not in cache:
            cache[key] = torch.from_numpy(getattr(self, name)).to(device)
        return cache[key]

    def by_index(self, c: int):
        """``(cols, start, stop, codes)``: the gallery sorted by (column-c label, index), for query i
        the range ``cols[start[i]:stop[i]]`` of the items sharing its column-c label, and the
        gallery's label columns 0..c (contiguous) (cached)."""
        cache = self.__dict__.setdefault("_by_index", {})
        if c not in cache:
            cols = np.argsort(self.gcodes[:, c], kind="stable")
            codes = self.gcodes[cols, c]
            start = np.searchsorted(codes, self.qcodes[:, c], "left")
            stop = np.searchsorted(codes, self.qcodes[:, c], "right")
            cache[c] = (cols.astype(np.int64), start.astype(np.int64), stop.astype(np.int64),
                        np.ascontiguousarray(self.gcodes[:, : c + 1]))
        return cache[c]

    def n_relevant(self, c: int) -> np.ndarray:
        """Number of gallery items with the query's column-c label, the excluded item not counted."""
        inside = (self.excl_pos >= self.start[c]) & (self.excl_pos < self.stop[c])
        return self.stop[c] - self.start[c] - inside

    def depth_counts(self, c_rel: int) -> np.ndarray:
        """[Nq, c_rel + 2]: items at each depth 0..c_rel+1 (depth = shared columns among 0..c_rel); cached."""
        cache = self.__dict__.setdefault("_depth_cache", {})
        if c_rel not in cache:
            cache[c_rel] = self._depth_counts(c_rel)
        return cache[c_rel]

    def _depth_counts(self, c_rel: int) -> np.ndarray:
        n = np.empty((self.n_query, c_rel + 2), np.int64)
        listed = self.n_gallery - (self.excl >= 0)
        cum = [self.n_relevant(c) for c in range(c_rel + 1)]  # cum[c]: depth >= c_rel + 1 - c
        for d in range(c_rel + 1, 0, -1):
            c = c_rel + 1 - d
            n[:, d] = cum[c] - (cum[c - 1] if c > 0 else 0)
        n[:, 0] = listed - cum[c_rel]
        return n


def _check_tree(qcodes: np.ndarray, gcodes: np.ndarray) -> None:
    codes = np.concatenate([qcodes, gcodes]) if gcodes is not qcodes else qcodes
    for c in range(codes.shape[1] - 1):
        pairs = np.unique(codes[:, c : c + 2], axis=0)
        if len(pairs) != len(np.unique(pairs[:, 0])):
            bad = pairs[np.flatnonzero(np.diff(pairs[:, 0]) == 0)[0], 0]
            raise ValueError(
                f"hierarchical labels must form a tree: a label of column {c} (code {bad}) has several "
                f"parents in column {c + 1}; give labels finest first with consistent coarser levels"
            )
