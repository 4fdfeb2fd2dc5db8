"""``face`` and ``ijbc``: face retrieval mAP (Smooth-AP §5.2 "Test protocol"; spec faces.md B.1, B.2).

Every instance is a query against all the other instances (same-set, the query removed by index);
its AP is over the full ranked list (scikit-learn's ``average_precision_score``: ties pessimistic)
and the mAP is their mean over every instance. No TAR@FAR (Tables 4 and 5 report mAP only).

- ``face`` (VGGFace2 test, 169,396 images of 500 identities): every test image is an instance.
- ``ijbc`` (IJB-C, Smooth-AP §5.1): an instance is a still image or a video sighting; the frames'
  embeddings of a sighting are averaged, then L2-normalised; identities with fewer than 5
  instances, counted *after* that averaging, are removed.

Manifest (:meth:`Face.manifest_inputs`): split ``test`` holds the evaluation images, label column 0
is the identity; the optional column ``instance``
(:data:`rankrepro.data.manifest.INSTANCE_COLUMN`, a string; IJB-C: the key (SUBJECT_ID,
SIGHTING_ID) rendered as one value) groups the images of one instance: absent, each image is its
own instance; ``ijbc`` requires it.

Scoring is :func:`~rankrepro.metrics.core.compute_plain`'s same-set full-list path, which already
is the chunked exact path a 169k x 169k evaluation needs: chunks of query rows are scored against
all instances under ``memory_budget`` (default 1 GiB on CPU, 3 GiB on a GPU), each query's own
score set to -inf, and the exact rank of every positive found (on CUDA one stable sort per row, on
CPU a sort-free compiled pass, which the tests check against the sort); ``device=`` picks the GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from rankrepro.data.manifest import INSTANCE_COLUMN, MANIFEST_CSV

from ..core import compute_plain
from .base import REGISTRY, Protocol, as_numpy

__all__ = ["average_templates", "face_map", "Face", "DEFAULT_METRICS", "IJBC_MIN_INSTANCES"]

DEFAULT_METRICS = ("mAP",)
#: IJB-C: identities with fewer instances (images or videos) are removed [Smooth-AP §5.1]
IJBC_MIN_INSTANCES = 5


def identities(labels) -> np.ndarray:
    """The identity of each row: ``labels`` itself [N], or its column 0 when it has several [N, L]."""
    lab = as_numpy(labels)
    return lab[:, 0] if lab.ndim == 2 else lab


def average_templates(embeddings, labels, templates, *, normalize: bool = True):
    """Average the embeddings of each template (IJB-C: the frames of one video sighting; a still
    image is a template of one), in float64, then L2-normalise (``normalize``).

    Returns ``(template_embeddings float32 [T, D], template_labels [T], template_ids [T])``, the
    templates in increasing id order, each labelled by its frames' label; a template whose frames
    carry different labels is an error."""
    x = as_numpy(embeddings)
    lab = as_numpy(labels)
    ids, inv = np.unique(as_numpy(templates), return_inverse=True)
    inv = inv.reshape(-1)
    if len(inv) != len(x) or len(lab) != len(x):
        raise ValueError(f"embeddings ({len(x)}), labels ({len(lab)}) and templates ({len(inv)}) differ in length")
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=len(ids))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    emb = np.add.reduceat(x[order], starts, axis=0, dtype=np.float64) / counts[:, None]
    if normalize:
        emb /= np.linalg.norm(emb, axis=1, keepdims=True).clip(min=1e-12)
    t_lab = lab[order[starts]]  # each template's first frame
    if (t_lab[inv] != lab).any():
        raise ValueError("a template holds frames of different identities")
    return emb.astype(np.float32), t_lab, ids


def face_map(embeddings, labels, *, templates=None, min_instances: int | None = None, metrics=None,
             **kw) -> dict:
    """Face retrieval mAP (Smooth-AP §5.2): same-set, every instance a query, full-list AP.

    ``labels``: the identity of each image ([N], or [N, L] whose column 0 is used).
    ``templates``: per image, its instance (IJB-C: the frames of one video sighting share one;
    still images have their own); the embeddings of an instance are averaged
    (:func:`average_templates`). ``min_instances``: identities with fewer instances (after the
    averaging) are removed (IJB-C: 5). ``kw``: :func:`~rankrepro.metrics.core.compute_plain`'s
    keyword arguments (``device``, ``memory_budget``, ``max_rows``, ``per_query``: then per
    instance, in the order of the instances kept). Adds ``n_instances`` (the instances scored)."""
    metrics = metrics or DEFAULT_METRICS
    x, lab = embeddings, identities(labels)
    if templates is not None:
        x, lab, _ = average_templates(x, lab, templates)
    if min_instances:
        _, inv, cnt = np.unique(lab, return_inverse=True, return_counts=True)
        keep = np.flatnonzero(cnt[inv.reshape(-1)] >= min_instances)
        x = x[torch.from_numpy(keep).to(x.device)] if isinstance(x, torch.Tensor) else np.asarray(x)[keep]
        lab = lab[keep]
    res = compute_plain(x, lab, metrics=metrics, **kw)
    res["n_instances"] = int(len(lab))
    return res


class Face(Protocol):
    """:func:`face_map` on the manifest's ``test`` split. ``templates_required``: the inputs must
    give each image's instance (``templates=``; from a manifest: its ``instance`` column);
    ``min_instances``: the default of ``min_instances=`` (None: keep every identity)."""

    default_metrics = DEFAULT_METRICS

    def __init__(self, templates_required: bool = False, min_instances: int | None = None) -> None:
        self.templates_required = templates_required
        self.min_instances = min_instances

    def manifest_inputs(self, manifest):
        """``test`` against itself, identities from label column 0, ``templates=`` the ``instance``
        column when the manifest has one (required by ``ijbc``). A missing instance value or an
        instance of two identities is a ValueError naming the manifest line."""
        rows = manifest.split("test")
        labels = rows.labels()[:, 0]
        instances = self._instances(rows, labels)
        kwargs = {} if instances is None else {"templates": instances}
        return {"test": rows}, lambda emb: ((emb["test"], labels), dict(kwargs))

    def _instances(self, rows, labels: np.ndarray) -> np.ndarray | None:
        """The ``instance`` column of ``rows`` as strings (None when it has none and may have none)."""
        if INSTANCE_COLUMN not in rows.table.columns:
            if self.templates_required:
                where = rows.directory / MANIFEST_CSV if rows.directory else f"manifest of {rows.meta.get('dataset')!r}"
                raise ValueError(f"{where}: protocol {self.name!r} needs the column {INSTANCE_COLUMN!r} "
                                 "(the video sighting or still image each row belongs to)")
            return None
        column = rows.table[INSTANCE_COLUMN]
        missing = np.flatnonzero(column.isna().to_numpy())
        if len(missing):
            raise ValueError(f"{rows.describe_row(int(missing[0]))}: no {INSTANCE_COLUMN!r} value "
                             f"({len(missing)} row(s) lack one)")
        instances = column.astype(str).to_numpy()
        _, inv = np.unique(instances, return_inverse=True)
        first = np.full(inv.max() + 1, -1)
        first[inv[::-1]] = np.arange(len(inv))[::-1]  # each instance's first row
        mixed = np.flatnonzero(labels != labels[first[inv]])
        if len(mixed):
            raise ValueError(f"{rows.describe_row(int(mixed[0]))}: instance {instances[mixed[0]]!r} holds identity "
                             f"{labels[mixed[0]]} and identity {labels[first[inv[mixed[0]]]]} "
                             f"({rows.describe_row(int(first[inv[mixed[0]]]))})")
        return instances

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        if gallery is not None or gallery_labels is not None:
            raise ValueError(f"protocol {self.name!r} is same-set: it takes no gallery")
        if self.min_instances is not None:
            kw.setdefault("min_instances", self.min_instances)
        if self.templates_required and kw.get("templates") is None:
            raise ValueError(f"protocol {self.name!r} needs templates= (the media / video id of each frame)")
        return face_map(query, query_labels, metrics=metrics, **kw)


REGISTRY.register("face")(Face)
REGISTRY.register("ijbc", templates_required=True, min_instances=IJBC_MIN_INSTANCES)(Face)
