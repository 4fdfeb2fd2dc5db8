"""Input handling shared by the losses: shape checks, label levels, the reference set.

Every loss takes ``(embeddings [B, D], labels [B] or [B, L], ref_embeddings=None,
ref_labels=None, self_index=None)``. :func:`check_batch` validates that and returns float32
embeddings, int64 labels of one level (column 0 = finest by default) and the reference set
(detached, float32, on the embeddings' device); losses call it under :func:`no_autocast`.
:func:`retrieval_lists` is the one place that builds a batch's retrieval lists: queries,
reference set (the batch itself without one) and ``self_index``, the column of each
query's own entry in the reference set -- given by the caller
(:class:`~rankrepro.losses.memory.MemoryLoss` passes ``arange(B)``: the batch at the
front), never guessed from labels or values. :func:`clear_self_pairs` / :func:`drop_self`
remove each query's own entry.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    "Lists",
    "retrieval_lists",
    "prefix_self_index",
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


@dataclass
class Lists:
    """The retrieval lists of a batch (see :func:`retrieval_lists`).

    ``emb`` [B, D] float32 queries (in the graph); ``y`` their labels; ``ref`` [N, D] / ``yr``
    the reference set and its labels -- the batch itself (``ref is emb``) when no reference
    set is given; ``self_index`` [B] long: the column of each query's own entry in ``ref``,
    or None when the reference set holds no query."""

    emb: torch.Tensor
    y: torch.Tensor
    ref: torch.Tensor
    yr: torch.Tensor
    self_index: torch.Tensor | None

    @property
    def in_batch(self) -> bool:
        """The reference set is the batch itself (the gradient flows through both sides)."""
        return self.ref is self.emb

    @property
    def n_self(self) -> int:
        """B when each query's own entry is column q (the batch at the front), 0 when there is none."""
        return 0 if self.self_index is None else self.emb.shape[0]

    def scores(self) -> torch.Tensor:
        """[B, N] similarities ``emb @ ref.T``."""
        return self.emb @ self.ref.T

    def same(self) -> torch.Tensor:
        """[B, N] bool, True where the reference item has the query's label ([B, L] labels: every level)."""
        if self.y.ndim == 2:
            return (self.y.unsqueeze(1) == self.yr.unsqueeze(0)).all(-1)
        return self.y.unsqueeze(1) == self.yr.unsqueeze(0)

    def self_mask(self) -> torch.Tensor | None:
        """[B, N] bool, True at each query's own entry (None if the reference set holds no query)."""
        return self_mask((self.emb.shape[0], self.ref.shape[0]), self.self_index, self.emb.device)


def retrieval_lists(embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None,
                    level: int | None = 0, ignore_ref: bool = False) -> Lists:
    """The one place that builds the retrieval lists of a batch.

    :func:`check_batch` (``level``: the label column, None = every column), then: without a
    reference set the list of every query is the batch (``ref is emb``, own entry q); with
    one, the list is the (detached) reference set, and ``self_index`` [B] says where each
    query's own entry is in it (what :class:`~rankrepro.losses.memory.MemoryLoss` passes:
    ``arange(B)``, the batch at the front of the reference set); None = the reference set
    holds no query. ``self_index`` is checked (length B, in range, the labels there equal
    the queries' labels). ``ignore_ref``: a loss that accepts a reference set and does not
    use it (checked, then dropped). Call it with autocast disabled.
    """
    emb, y, ref, yr = check_batch(embeddings, labels, ref_embeddings, ref_labels, level, ignore_ref)
    B = emb.shape[0]
    if ref is None:
        if self_index is not None and ref_embeddings is None:
            raise ValueError("self_index is the position of each query in the reference set: "
                             "it needs ref_embeddings / ref_labels")
        return Lists(emb, y, emb, y, torch.arange(B, device=emb.device))
    if self_index is None:
        return Lists(emb, y, ref, yr, None)
    idx = torch.as_tensor(self_index, device=emb.device).long()
    if idx.shape != (B,) or (B and (int(idx.min()) < 0 or int(idx.max()) >= ref.shape[0])):
        raise ValueError(f"self_index must be [B] = [{B}] column indices into the reference set of "
                         f"{ref.shape[0]} items, got shape {tuple(idx.shape)}")
    if not bool((yr[idx] == y).all()):
        raise ValueError("self_index points at reference items whose labels differ from the queries'")
    return Lists(emb, y, ref, yr, idx)


def prefix_self_index(lists: Lists, what: str) -> int:
    """``lists.n_self``, after checking that each own entry is column q (the batch at the front)."""
    idx = lists.self_index
    if idx is not None and not lists.in_batch and not torch.equal(idx, torch.arange(idx.shape[0], device=idx.device)):
        raise ValueError(f"{what} needs the batch at the front of the reference set (self_index = arange(B))")
    return lists.n_self


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


def clear_self_pairs(mask: torch.Tensor, self_idx) -> torch.Tensor:
    """A copy of ``mask`` [B, N] with each query's own entry set to 0/False.

    ``self_idx``: [B] columns, or an int n (entries (i, i), i < n: the batch at the front);
    ``mask`` itself when there is none (None or 0)."""
    if self_idx is None or (isinstance(self_idx, int) and not self_idx):
        return mask
    out = mask.clone()
    if isinstance(self_idx, int):
        ar = torch.arange(self_idx, device=mask.device)
        out[ar, ar] = 0
    else:
        out[torch.arange(mask.shape[0], device=mask.device), self_idx] = 0
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
