"""``dyml``: DyML-Vehicle / -Animal have one query/gallery benchmark per level (fine, middle, coarse),
binary metrics per benchmark plus their mean ("overall"); DyML-Product has one same-set test set
with three label columns, binary metrics per level plus their mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core import compute_plain
from .base import REGISTRY, Protocol, as_numpy
from .plain import same_set_inputs

__all__ = ["dyml", "DyML", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("mAP", "ASI_level0", "R@1")


def dyml(embeddings=None, labels=None, *, benchmarks: dict | None = None, metrics=None, **kw) -> dict:
    """DyML protocols.

    Vehicle / Animal: ``benchmarks`` = {level name: dict(query=, query_labels=, gallery=,
    gallery_labels=, and optionally query_ids=, gallery_ids=)}. When the gallery holds the query
    images (SupRank's "gallery_distractor" case), pass ``query_ids``/``gallery_ids`` (e.g. file
    names): each query's own image is then removed from its list by identity (SupRank drops the
    top-1 neighbour instead, which differs only on exact ties). Returns ``"<level>/<metric>"`` and
    ``"overall/<metric>"`` (mean over the benchmarks).

    Product: ``embeddings``, ``labels`` [N, 3] (same set); returns ``"level{c}/<metric>"`` (binary
    metrics at column c) and ``"overall/<metric>"`` (mean over levels)."""
    metrics = list(metrics or DEFAULT_METRICS)
    out = {}
    if benchmarks is not None:
        for name, b in benchmarks.items():
            excl = None
            if b.get("query_ids") is not None:
                gid = {v: i for i, v in enumerate(as_numpy(b["gallery_ids"]).tolist())}
                excl = np.array([gid.get(v, -1) for v in as_numpy(b["query_ids"]).tolist()], np.int64)
            res = compute_plain(b["query"], b["query_labels"], b["gallery"], b["gallery_labels"], metrics=metrics,
                                exclude=excl, **kw)
            out.update({f"{name}/{k}": v for k, v in res.items()})
        names = list(benchmarks)
    else:
        if embeddings is None or labels is None:
            raise ValueError("dyml needs either benchmarks=... or embeddings and [N, L] labels")
        lab = as_numpy(labels)
        names = [f"level{c}" for c in range(lab.shape[1])]
        for c, name in enumerate(names):
            per = [m if "_level" not in m else m.split("_level")[0] for m in metrics]
            res = compute_plain(embeddings, lab, metrics=[f"{m}_level{c}" for m in per], **kw)
            out.update({f"{name}/{m}": res[f"{p}_level{c}"] for m, p in zip(metrics, per)})
            out[f"{name}/n_queries"] = res["n_queries"] if c == 0 else None
    for m in metrics:
        vals = [out[f"{n}/{m}"] for n in names]
        out[f"overall/{m}"] = float(np.mean(vals))
    return {k: v for k, v in out.items() if v is not None}


def _column(rows, column: str) -> np.ndarray:
    return rows.table[column].to_numpy(dtype=np.int64)


def _file_names(rows, what: str, unique: bool = False) -> np.ndarray:
    names = np.array([Path(p).name for p in rows.table["path"]], dtype=object)
    if unique and len(set(names.tolist())) != len(names):
        dup = pd.Series(names).duplicated().to_numpy().nonzero()[0][0]
        raise ValueError(f"{what}: file name {names[dup]!r} appears twice ({rows.describe_row(int(dup))}), so a "
                         "query's own image cannot be told apart by name")
    return names


@REGISTRY.register("dyml")
class DyML(Protocol):
    """With ``meta["benchmarks"]`` (Vehicle, Animal): per level, its query and gallery splits with that
    level's column as labels; ``query_ids`` / ``gallery_ids`` are the file names (the query and gallery
    folders differ, ``bmk_<level>/query/`` vs ``.../gallery/``, so relative paths never match), which
    removes each query's own image from its gallery. Without (Product): the ``test`` split, same-set,
    its three label columns."""

    default_metrics = DEFAULT_METRICS

    def manifest_inputs(self, manifest):
        if not manifest.meta.get("benchmarks"):
            return same_set_inputs(manifest)  # Product: same-set's splits, its three label columns
        levels = manifest.meta["levels"]  # meta.json sorts its keys: benchmarks in level order, finest first
        benchmarks = dict(sorted(manifest.meta["benchmarks"].items(),
                                 key=lambda item: levels.index(item[0]) if item[0] in levels else len(levels)))
        parts, spec = {}, {}
        for level, bmk in benchmarks.items():
            query, gallery = manifest.split(bmk["query"]), manifest.split(bmk["gallery"])
            parts[bmk["query"]], parts[bmk["gallery"]] = query, gallery
            spec[level] = {"query_labels": _column(query, bmk["column"]),
                           "gallery_labels": _column(gallery, bmk["column"]),
                           "query_ids": _file_names(query, f"split {bmk['query']}"),
                           "gallery_ids": _file_names(gallery, f"split {bmk['gallery']}", unique=True)}

        def inputs(emb):
            return (None, None), {"benchmarks": {level: dict(s, query=emb[benchmarks[level]["query"]],
                                                             gallery=emb[benchmarks[level]["gallery"]])
                                                 for level, s in spec.items()}}
        return parts, inputs

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        return dyml(query, query_labels, benchmarks=kw.pop("benchmarks", None), metrics=metrics, **kw)
