"""Manifests: the one format every dataset ends in.

A manifest is a directory holding ``manifest.csv`` and ``meta.json``.

``manifest.csv`` has one row per image with the columns ``path`` (relative to
``meta["root"]`` and inside it: :func:`rankrepro.data.paths.leaves_root`), ``split`` (``train``, ``test``, ``query``, ``gallery`` ...),
``label`` (the finest level, an integer) and, for hierarchical datasets, one
integer column per coarser level: ``level_1`` ... ``level_L`` (finest first:
``label`` is level 0, ``level_1`` the next coarser one).

``meta.json`` holds ``dataset`` (the registered name), ``root`` (absolute image
root), ``levels`` (the level names, finest first), ``protocol`` (the evaluation
protocol, a name of :data:`rankrepro.metrics.protocols.PROTOCOLS`: ``same-set``,
``query-gallery``, ``vehicleid``, ``dyml``, ``gldv2-suprank``, ...; a detection dataset: ``voc07``), ``replica``
(True for generated replicas), ``counts`` per split (``images``, ``classes``) and
any dataset-specific entries (e.g. SOP's ``super_class_names``).

A dataset may add per-row columns after the levels (its
:attr:`~rankrepro.data.datasets.base.Dataset.extra_columns`); ``meta.json`` then lists them,
in order, as ``extra_columns`` (VGGFace2 / IJB-C: face boxes and landmarks; IJB-C's ``instance``,
read as a string, groups the images the evaluation treats as one instance: the frames of one video
sighting, whose embeddings are averaged, :mod:`rankrepro.metrics.protocols.face`; Pascal VOC: the
objects of each image as JSON, its size, year and ``image_id``, read as a string: ``"000005"``,
:mod:`rankrepro.data.datasets.voc`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.io import TextEncodingError, atomic_write_text, read_text
from rankrepro.messages import ShortMessage

MANIFEST_CSV = "manifest.csv"
META_JSON = "meta.json"
#: the extra column that groups the images of one evaluation instance (a string)
INSTANCE_COLUMN = "instance"
#: extra columns read as strings whatever they look like (an id such as VOC's "000005" is no number)
STRING_COLUMNS = (INSTANCE_COLUMN, "image_id")


def level_columns(n_levels: int) -> list[str]:
    """Column names of the label levels, finest first: ``label, level_1, ...``."""
    return ["label"] + [f"level_{i}" for i in range(1, n_levels)]


@dataclass
class Manifest:
    """A manifest's table and metadata.

    ``directory``: where it was read from or written to (None for one built in memory).
    ``rows``: for a :meth:`split`, each row's 0-based data row in ``manifest.csv``
    (None: the rows are the file's, in order).
    """

    table: pd.DataFrame
    meta: dict
    directory: Path | None = None
    rows: np.ndarray | None = None

    @property
    def root(self) -> Path:
        return Path(self.meta["root"])

    @property
    def n_levels(self) -> int:
        return len(self.meta["levels"])

    def split(self, name: str) -> "Manifest":
        """The rows of one split (a new Manifest sharing the metadata)."""
        mask = (self.table["split"] == name).to_numpy()
        if not mask.any():
            raise KeyError(f"split {name!r} is empty or absent in {self.meta.get('dataset')}")
        positions = np.flatnonzero(mask)
        rows = positions if self.rows is None else self.rows[positions]
        return Manifest(self.table[mask].reset_index(drop=True), self.meta, self.directory, rows)

    def describe_row(self, index: int) -> str:
        """Where row ``index`` of this table comes from, for messages: the line of
        ``manifest.csv`` (1-based, the header is line 1), or the dataset when there is no file."""
        row = int(index if self.rows is None else self.rows[index])
        split = self.table["split"].iat[index]
        if self.directory is None:
            return f"row {row} of the manifest of dataset {self.meta.get('dataset')!r} (split {split!r}, index {index})"
        return f"line {row + 2} of {self.directory / MANIFEST_CSV} (split {split!r}, index {index})"

    def labels(self) -> np.ndarray:
        """Integer labels, shape [N, L], finest level in column 0."""
        return self.table[level_columns(self.n_levels)].to_numpy(dtype=np.int64, copy=True)

    def paths(self) -> list[Path]:
        """Absolute image paths."""
        return [self.root / p for p in self.table["path"]]

    def counts(self) -> dict:
        """Images and finest classes per split (a label unknown at the finest level, -1, is no class)."""
        return {
            split: {"images": int(len(rows)), "classes": int(rows.loc[rows["label"] >= 0, "label"].nunique())}
            for split, rows in self.table.groupby("split", sort=True)
        }


def write_manifest(directory: str | Path, table: pd.DataFrame, meta: dict) -> Manifest:
    """Validate and write a manifest atomically (meta.json last, so it marks completion)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    columns = ["path", "split", *level_columns(len(meta["levels"])), *meta.get("extra_columns", [])]
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"manifest table lacks columns {missing}")
    table = table[columns].reset_index(drop=True)
    manifest = Manifest(table, dict(meta), directory)
    manifest.meta["counts"] = manifest.counts()
    atomic_write_text(directory / MANIFEST_CSV, table.to_csv(index=False))
    atomic_write_text(directory / META_JSON, json.dumps(manifest.meta, indent=2, sort_keys=True) + "\n")
    return manifest


class ManifestError(ShortMessage, ValueError):
    """A prepared manifest that cannot be read; the message names the file, what is wrong and what to do."""


def read_meta(directory: str | Path) -> dict:
    """The ``meta.json`` of the manifest in ``directory``: a JSON object, else :class:`ManifestError` naming the
    file (not JSON, not UTF-8, or not an object: a file damaged after prepare wrote it atomically)."""
    path = Path(directory) / META_JSON
    redo = f"delete {path.parent} and prepare the dataset again (snakemake rebuilds it)"
    try:
        meta = json.loads(read_text(path))
    except TextEncodingError as err:
        raise ManifestError(f"{err}; or {redo}") from None
    except json.JSONDecodeError as err:
        raise ManifestError(f"{path}: not valid JSON ({err.msg}, line {err.lineno} column {err.colno}); "
                            f"{redo}") from None
    if not isinstance(meta, dict):
        raise ManifestError(f"{path}: a JSON {type(meta).__name__}, not the object a manifest's meta.json holds; "
                            f"{redo}")
    return meta


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest in ``directory`` (:func:`read_meta` and ``manifest.csv``)."""
    directory = Path(directory)
    meta = read_meta(directory)
    table = pd.read_csv(directory / MANIFEST_CSV, dtype={"path": str, "split": str, **dict.fromkeys(STRING_COLUMNS, str)})
    return Manifest(table, meta, directory)
