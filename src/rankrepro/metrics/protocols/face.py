"""``face`` and ``ijbc``: face retrieval mAP (Smooth-AP §5): same-set, full-list AP averaged over
every instance. IJB-C: the frames of a video (a template / media id) are averaged into one
L2-normalised vector, still images stay single instances, identities with fewer than 5 instances
are removed. No run uses them yet (they read no manifest): the face branch plugs in here."""

from __future__ import annotations

import numpy as np
import torch

from ..core import compute_plain
from .base import REGISTRY, Protocol, as_numpy

__all__ = ["average_templates", "face_map", "Face", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("mAP",)


def average_templates(embeddings, labels, templates, *, normalize: bool = True):
    """Average the embeddings of each template (IJB-C media: the frames of one video).

    Returns ``(template_embeddings [T, D], template_labels [T], template_ids [T])``; a template
    whose frames carry different labels is an error."""
    x = as_numpy(embeddings).astype(np.float64)
    lab = as_numpy(labels)
    ids, inv = np.unique(as_numpy(templates), return_inverse=True)
    inv = inv.reshape(-1)
    sums = np.zeros((len(ids), x.shape[1]))
    np.add.at(sums, inv, x)
    counts = np.bincount(inv, minlength=len(ids))
    emb = sums / counts[:, None]
    if normalize:
        emb = emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(min=1e-12)
    first = np.zeros(len(ids), np.int64)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    t_lab = lab[first]
    if (t_lab[inv] != lab).any():
        raise ValueError("a template holds frames of different identities")
    return emb.astype(np.float32), t_lab, ids


def face_map(embeddings, labels, *, templates=None, min_instances: int | None = None, metrics=None,
             **kw) -> dict:
    """Face retrieval mAP (Smooth-AP §5): same-set, every instance a query, full-list AP.

    ``templates``: per image, its template / media id (IJB-C videos: the frames of one video share
    an id; still images have their own) — frames are averaged per template. ``min_instances``:
    identities with fewer instances (after averaging) are removed (IJB-C: 5)."""
    metrics = metrics or DEFAULT_METRICS
    x, lab = embeddings, as_numpy(labels)
    if templates is not None:
        x, lab, _ = average_templates(x, lab, templates)
    if min_instances:
        _, inv, cnt = np.unique(lab, return_inverse=True, return_counts=True)
        keep = np.flatnonzero(cnt[inv.reshape(-1)] >= min_instances)
        x = x[torch.from_numpy(keep)] if isinstance(x, torch.Tensor) else np.asarray(x)[keep]
        lab = lab[keep]
    res = compute_plain(x, lab, metrics=metrics, **kw)
    res["n_instances"] = int(len(lab))
    return res


class Face(Protocol):
    """:func:`face_map`; ``templates_required``: the inputs must give each frame's template
    (``templates=``); ``min_instances``: the default of ``min_instances=`` (None: keep every identity)."""

    default_metrics = DEFAULT_METRICS

    def __init__(self, templates_required: bool = False, min_instances: int | None = None) -> None:
        self.templates_required = templates_required
        self.min_instances = min_instances

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        if self.min_instances is not None:
            kw.setdefault("min_instances", self.min_instances)
        if self.templates_required and kw.get("templates") is None:
            raise ValueError(f"protocol {self.name!r} needs templates= (the media / video id of each frame)")
        return face_map(query, query_labels, metrics=metrics, **kw)


REGISTRY.register("face")(Face)
REGISTRY.register("ijbc", templates_required=True, min_instances=5)(Face)
