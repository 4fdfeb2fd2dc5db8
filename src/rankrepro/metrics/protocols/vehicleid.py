"""``vehicleid``: VehicleID small / medium / large (800 / 1600 / 2400 IDs), all-vs-all *within* each
test list -- the DML convention (FastAP, BIER, Smooth-AP code), not the original
one-gallery-image-per-ID protocol."""

from __future__ import annotations

import numpy as np
import torch

from ..core import compute_plain
from .base import REGISTRY, Protocol, as_numpy, required

__all__ = ["vehicleid", "VehicleID", "SUBSETS", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("R@1", "R@5")

#: VehicleID test list (manifest split) -> the papers' subset name (Smooth-AP §5, FastAP, BIER:
#: small / medium / large = 800 / 1,600 / 2,400 vehicles); metric keys are ``"<subset>/<metric>"``
SUBSETS = {"test_800": "small", "test_1600": "medium", "test_2400": "large"}


def vehicleid(embeddings, labels, subsets: dict, metrics=None, **kw) -> dict:
    """All-vs-all retrieval within each VehicleID test list.

    ``subsets``: {name: indices into embeddings}, e.g. {"small": ..., "medium": ..., "large": ...}.
    Returns ``{"<name>/<metric>": value}`` plus ``"<name>/n_queries"``."""
    metrics = metrics or DEFAULT_METRICS
    lab = as_numpy(labels)
    out = {}
    for name, idx in subsets.items():
        idx = as_numpy(idx).astype(np.int64)
        sub = embeddings[torch.from_numpy(idx)] if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)[idx]
        res = compute_plain(sub, lab[idx], metrics=metrics, **kw)
        out.update({f"{name}/{k}": v for k, v in res.items() if k != "n_lone"})
    return out


@REGISTRY.register("vehicleid")
class VehicleID(Protocol):
    """The lists ``test_800`` / ``test_1600`` / ``test_2400`` as the subsets ``small`` / ``medium`` /
    ``large`` (:data:`SUBSETS`), every label level (vehicle, model; an unknown model is -1); the lists
    share images, each embedded once."""

    default_metrics = DEFAULT_METRICS

    def manifest_inputs(self, manifest):
        parts = {split: manifest.split(split) for split in SUBSETS}
        labels = np.concatenate([rows.labels() for rows in parts.values()])
        bounds = np.cumsum([0] + [len(rows.table) for rows in parts.values()])
        subsets = {SUBSETS[s]: np.arange(a, b) for s, a, b in zip(parts, bounds[:-1], bounds[1:])}

        def inputs(emb):
            return (np.concatenate([emb[s] for s in parts]), labels), {"subsets": subsets}
        return parts, inputs

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        subsets = required(kw, "subsets", self.name, "{list name: indices}")
        return vehicleid(query, query_labels, subsets, metrics=metrics, **kw)
