"""Input handling shared by the losses: shape checks, label levels, the reference set.

Every loss takes ``(embeddings [B, D], labels [B] or [B, L], ref_embeddings=None,
ref_labels=None)``. :func:`check_batch` validates that and returns float32 embeddings,
int64 labels of one level (column 0 = finest by default) and the reference set
(detached, float32, on the embeddings' device); losses call it under
:func:`no_autocast`. When the reference set comes from
:class:`~rankrepro.losses.memory.MemoryLoss` it starts with the current batch (indices
0..B-1): :func:`ref_starts_with_batch` detects that, :func:`query_lists` takes it as
given (``ref_includes_batch``), and :func:`clear_self_pairs` / :func:`drop_self` remove
each query's own entry.
"""

from __future__ import annotations

import torch

__all__ = [
    "no_autocast",
    "check_embeddings",
    "check_lengths",
    "as_label_matrix",
    "level_labels",
    "hierarchical_labels",
    "check_class_range",
    "check_batch",
    "query_lists",
    "ref_starts_with_batch",
    "self_mask",
    "drop_self",
    "clear_self_pairs",
    "attached_zero",
    "keep_in_graph",
]


def no_autocast(embeddings: torch.Tensor):
    """Context manager disabling autocast on the embeddings' device (losses compute in float32)."""
    return torch.autocast(device_type=embeddings.device.type, enabled=False)


# ------------------------------------------------------------------------ batch shapes


def check_embeddings(embeddings: torch.Tensor, dim: int | None = None) -> None:
    """Raise ValueError unless ``embeddings`` is [B, D] (with D = ``dim`` when given)."""
    if embeddings.ndim != 2 or (dim is not None and embeddings.shape[1] != dim):
        raise ValueError(f"embeddings must be [B, {'D' if dim is None else dim}], got {tuple(embeddings.shape)}")


def check_lengths(embeddings: torch.Tensor, labels: torch.Tensor) -> None:
    """Raise ValueError unless there is one label (row) per embedding."""
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError("embeddings and labels have different lengths")


# ----------------------------------------------------------------------------- labels


def as_label_matrix(labels, device=None) -> torch.Tensor:
    """Labels as a [B, L] int64 tensor (a [B] vector becomes one level)."""
    y = torch.as_tensor(labels, device=device)
    if y.ndim == 1:
        y = y.unsqueeze(1)
    if y.ndim != 2:
        raise ValueError(f"labels must be [B] or [B, L], got shape {tuple(y.shape)}")
    return y.long()


def level_labels(labels, level: int = 0, device=None) -> torch.Tensor:
    """Column ``level`` (0 = finest) of [B, L] labels, or the [B] labels (level 0), as int64."""
    y = torch.as_tensor(labels, device=device)
    if y.ndim not in (1, 2):
        raise ValueError(f"labels must be [B] or [B, L], got shape {tuple(y.shape)}")
    n_levels = y.shape[1] if y.ndim == 2 else 1
    if not 0 <= level < n_levels:
        hint = " (labels are [B]: pass [B, L] labels for a coarser level)" if y.ndim == 1 else ""
        raise ValueError(f"hierarchy_level {level} out of range for labels with {n_levels} level(s){hint}")
    return (y[:, level] if y.ndim == 2 else y).long()


def _labels(labels, level: int | None, device) -> torch.Tensor:
    """[B] labels of ``level``, or every column ([B, L]) when ``level`` is None; int64."""
    return as_label_matrix(labels, device) if level is None else level_labels(labels, level, device)


def hierarchical_labels(labels, need: int, name: str) -> torch.Tensor:
    """``labels`` as a tensor, which must be [B, L] with L >= ``need`` (``name``: the loss, for the error)."""
    labels = torch.as_tensor(labels)
    if labels.ndim != 2 or labels.shape[1] < need:
        raise ValueError(f"{name} needs hierarchical labels [B, L] with L >= {need} (finest first), "
                         f"got shape {tuple(labels.shape)}")
    return labels


def check_class_range(y: torch.Tensor, num_classes: int, what: str = "labels", hint: str = "") -> None:
    """Raise ValueError unless every label of ``y`` is in [0, num_classes) (proxy indices).

    The message reads ``{what} must be in [0, num_classes){hint}, got range [min, max]``."""
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"{what} must be in [0, {num_classes}){hint}, got range [{int(y.min())}, {int(y.max())}]")


# ------------------------------------------------------------------ batch + reference set


def check_batch(embeddings, labels, ref_embeddings=None, ref_labels=None, level: int | None = 0,
                ignore_ref: bool = False):
    """Validate the loss inputs; return ``(emb, y, ref, yr)``.

    ``emb``: the embeddings in float32 (still in the graph); ``y``: int64 labels of
    ``level`` on the embeddings' device ([B]; ``level=None`` keeps every column, [B, L]);
    ``ref`` / ``yr``: the reference set detached, in float32, on the same device, and its
    labels taken the same way -- both None when no reference set is given. With
    ``ignore_ref`` (losses that accept a reference set and do not use it) the pair is
    still checked to be given together, then dropped (None, None).
    """
    check_embeddings(embeddings)
    dev = embeddings.device
    y = _labels(labels, level, dev)
    check_lengths(embeddings, y)
    if (ref_embeddings is None) != (ref_labels is None):
        raise ValueError("ref_embeddings and ref_labels must be given together")
    emb = embeddings.float()
    if ref_embeddings is None or ignore_ref:
        return emb, y, None, None
    ref = ref_embeddings.detach().to(device=dev, dtype=torch.float32)
    yr = _labels(ref_labels, level, dev)
    if ref.ndim != 2 or ref.shape[0] != yr.shape[0] or ref.shape[1] != emb.shape[1]:
        raise ValueError(f"ref_embeddings/ref_labels shapes do not match the batch: ref_embeddings "
                         f"{tuple(ref.shape)}, ref_labels {tuple(yr.shape)}, embeddings {tuple(emb.shape)}")
    return emb, y, ref, yr


def query_lists(embeddings, labels, ref_embeddings, ref_labels, ref_includes_batch: bool):
    """:func:`check_batch` (finest level) plus where each query's own entry is: ``(emb, y, ref, yr, self_idx)``.

    Without a reference set the retrieval set is the batch itself (``ref is emb``, so the
    gradient flows through both sides of every similarity) and ``self_idx = arange(B)``.
    With one, ``ref`` is detached; if ``ref_includes_batch`` (what
    :class:`~rankrepro.losses.memory.MemoryLoss` passes: the current batch at indices
    0..B-1, then the memory) each query's own entry is column ``self_idx[q] = q``;
    otherwise the reference set holds no query and ``self_idx`` is None.
    Call it with autocast disabled.
    """
    emb, y, ref, yr = check_batch(embeddings, labels, ref_embeddings, ref_labels)
    B = emb.shape[0]
    if ref is None:
        return emb, y, emb, y, torch.arange(B, device=emb.device)
    if not ref_includes_batch:
        return emb, y, ref, yr, None
    if ref.shape[0] < B or not bool((yr[:B] == y).all()):
        raise ValueError(
            "ref_includes_batch=True but the reference set does not start with the batch "
            "(its first B labels differ); pass ref_includes_batch=False for a reference set "
            "that holds no query"
        )
    return emb, y, ref, yr, torch.arange(B, device=emb.device)


def ref_starts_with_batch(embeddings: torch.Tensor, ref: torch.Tensor | None) -> bool:
    """True when ref rows 0..B-1 are the batch itself (the MemoryLoss convention)."""
    if ref is None:
        return False
    B = embeddings.shape[0]
    if ref.shape[0] < B or ref.shape[1] != embeddings.shape[1]:
        return False
    a = embeddings.detach().float()
    return bool(torch.allclose(ref[:B].float(), a, rtol=0.0, atol=1e-6))


# ------------------------------------------------------------------- self entries


def self_mask(shape, self_idx: torch.Tensor | None, device) -> torch.Tensor | None:
    """Bool [Q, N] with True at (q, self_idx[q]) (None if ``self_idx`` is None)."""
    if self_idx is None:
        return None
    m = torch.zeros(shape, dtype=torch.bool, device=device)
    m[torch.arange(shape[0], device=device), self_idx] = True
    return m


def drop_self(mat: torch.Tensor, self_idx: torch.Tensor | None) -> torch.Tensor:
    """Remove column ``self_idx[q]`` from row q of ``mat`` [Q, N] -> [Q, N-1] (differentiable)."""
    if self_idx is None:
        return mat
    Q, N = mat.shape
    keep = ~self_mask((Q, N), self_idx, mat.device)
    return mat[keep].view(Q, N - 1)


def clear_self_pairs(mask: torch.Tensor, n_self: int) -> torch.Tensor:
    """A copy of ``mask`` [B, N] with the (query i, ref i) entries, i < ``n_self``, set to 0/False.

    ``mask`` itself when ``n_self`` is 0 (the reference set does not start with the batch)."""
    if not n_self:
        return mask
    out = mask.clone()
    ar = torch.arange(n_self, device=mask.device)
    out[ar, ar] = 0
    return out


# ------------------------------------------------------------------------ outputs


def attached_zero(x: torch.Tensor) -> torch.Tensor:
    """A 0 that stays in the graph of ``x`` (the value of a loss with nothing to score)."""
    return x.sum() * 0.0


def keep_in_graph(value, embeddings: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-d tensor in the graph of ``embeddings``.

    PML returns a constant 0 when it finds no pair/triplet: that 0 is attached so that
    ``backward`` still works."""
    if not torch.is_tensor(value):
        value = torch.tensor(float(value), device=embeddings.device)
    if not value.requires_grad and embeddings.requires_grad:
        value = value + attached_zero(embeddings)
    return value.reshape(())
