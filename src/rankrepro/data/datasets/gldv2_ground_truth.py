"""GLDv2's ground truth as the ``gldv2-suprank`` protocol reads it
(:class:`rankrepro.metrics.protocols.gldv2.GLDv2SupRank`): per query row of a GLDv2 manifest, the
gallery positions of its ground-truth index images, from ``retrieval_solution_v2.1.csv``
(:mod:`rankrepro.data.datasets.gldv2`, whose manifests name the file in ``meta["ground_truth"]``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.manifest import Manifest
from rankrepro.io import text_stream

__all__ = ["ground_truth_positions"]


def ground_truth_positions(manifest: Manifest, query: Manifest, gallery: Manifest) -> list[np.ndarray]:
    """Per query row, the gallery positions of its ground-truth index images, in the order of
    ``retrieval_solution_v2.1.csv`` (``meta["ground_truth"]``, relative to ``meta["root"]``).

    A query row is matched to the csv's ``id`` by the file stem of its path, and an index image
    id to the gallery row whose path has that stem. A query missing from the csv, or whose
    *first* ground-truth image (the one that gives its label) is not in the gallery, is an
    error naming it; other ground-truth ids missing from the gallery are left out (the
    ``gldv2-suprank`` protocol reads only the first)."""
    if not manifest.meta.get("ground_truth"):
        raise ValueError(f"{manifest.directory}: meta.json has no 'ground_truth' (the path of "
                         "retrieval_solution_v2.1.csv relative to 'root'), which protocol gldv2-suprank needs")
    file = manifest.root / manifest.meta["ground_truth"]
    table = pd.read_csv(text_stream(file), dtype=str, keep_default_na=False, na_filter=False)
    missing = [c for c in ("id", "images") if c not in table.columns]
    if missing:
        raise ValueError(f"{file}: header {list(table.columns)} lacks {missing}")
    solution = dict(zip(table["id"].str.strip(), table["images"].str.strip()))
    stems = [Path(p).stem for p in gallery.table["path"]]
    position = {stem: i for i, stem in enumerate(stems)}
    if len(position) != len(stems):
        dup = pd.Series(stems).duplicated().to_numpy().nonzero()[0][0]
        raise ValueError(f"gallery image id {stems[dup]!r} appears twice ({gallery.describe_row(int(dup))})")
    out = []
    for i, path in enumerate(query.table["path"]):
        image_id = Path(path).stem
        if image_id not in solution:
            raise ValueError(f"query image {image_id} ({query.describe_row(i)}) is not in {file}")
        ids = solution[image_id].split()
        if not ids or ids == ["None"]:
            out.append(np.empty(0, np.int64))
            continue
        if ids[0] not in position:
            raise ValueError(f"{file}: the first ground-truth image {ids[0]} of query {image_id} is not in the "
                             "gallery split")
        out.append(np.array([position[g] for g in ids if g in position], np.int64))
    return out
