"""Manifests: the one format every dataset ends in.

A manifest is a directory holding ``manifest.csv`` and ``meta.json``.

``manifest.csv`` has one row per image with the columns ``path`` (relative to
``meta["root"]``), ``split`` (``train``, ``test``, ``query``, ``gallery`` ...),
``label`` (the finest level, an integer) and, for hierarchical datasets, one
integer column per coarser level: ``level_1`` ... ``level_L`` (finest first:
``label`` is level 0, ``level_1`` the next coarser one).

``meta.json`` holds ``dataset``, ``root`` (absolute image root), ``levels`` (the
level names, finest first), ``protocol`` (``same_set``, ``query_gallery`` ...),
``replica`` (True for generated replicas) and ``counts`` per split.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.io import atomic_write_text

MANIFEST_CSV = "manifest.csv"
META_JSON = "meta.json"


def level_columns(n_levels: int) -> list[str]:
    """Column names of the label levels, finest first: ``label, level_1, ...``."""
    return ["label"] + [f"level_{i}" for i in range(1, n_levels)]


@dataclass
class Manifest:
    table: pd.DataFrame
    meta: dict

    @property
    def root(self) -> Path:
        return Path(self.meta["root"])

    @property
    def n_levels(self) -> int:
        return len(self.meta["levels"])

    def split(self, name: str) -> "Manifest":
        """The rows of one split (a new Manifest sharing the metadata)."""
        rows = self.table[self.table["split"] == name].reset_index(drop=True)
        if rows.empty:
            raise KeyError(f"split {name!r} is empty or absent in {self.meta.get('dataset')}")
        return Manifest(rows, self.meta)

    def labels(self) -> np.ndarray:
        """Integer labels, shape [N, L], finest level in column 0."""
        return self.table[level_columns(self.n_levels)].to_numpy(dtype=np.int64)

    def paths(self) -> list[Path]:
        """Absolute image paths."""
        return [self.root / p for p in self.table["path"]]

    def counts(self) -> dict:
        """Images and finest classes per split."""
        return {
            split: {"images": int(len(rows)), "classes": int(rows["label"].nunique())}
            for split, rows in self.table.groupby("split", sort=True)
        }


def write_manifest(directory: str | Path, table: pd.DataFrame, meta: dict) -> Manifest:
    """Validate and write a manifest atomically (meta.json last, so it marks completion)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    columns = level_columns(len(meta["levels"]))
    missing = [c for c in ["path", "split", *columns] if c not in table.columns]
    if missing:
        raise ValueError(f"manifest table lacks columns {missing}")
    table = table[["path", "split", *columns]].reset_index(drop=True)
    manifest = Manifest(table, dict(meta))
    manifest.meta["counts"] = manifest.counts()
    atomic_write_text(directory / MANIFEST_CSV, table.to_csv(index=False))
    atomic_write_text(directory / META_JSON, json.dumps(manifest.meta, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(directory: str | Path) -> Manifest:
    directory = Path(directory)
    meta = json.loads((directory / META_JSON).read_text())
    table = pd.read_csv(directory / MANIFEST_CSV, dtype={"path": str, "split": str})
    return Manifest(table, meta)
