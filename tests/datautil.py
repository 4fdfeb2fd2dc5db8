"""Replicas for tests: a dataset's generated files written where a test wants them."""

from __future__ import annotations

import shutil
from pathlib import Path

from rankrepro.data import datasets


def replica_archive(dataset: str, archive: str | Path, **options) -> str:
    """Write the replica of a single-archive dataset at ``archive`` (any name); return its
    ``"sha256:<hex>"``, also written to ``<archive>.sha256`` as a generated replica states it."""
    archive = Path(archive)
    out = archive.parent / f".{archive.name}.replica"
    (name, checksum), = datasets.load(dataset).write_replica(out, **options).items()
    shutil.move(out / name, archive)
    shutil.move(out / f"{name}.sha256", f"{archive}.sha256")
    shutil.rmtree(out)
    return checksum


def sop_manifest(root: str | Path) -> Path:
    """A prepared SOP replica (two classes per super-class, four 16-pixel images per class) under
    ``root``; returns its manifest folder (what the trainer tests train on)."""
    root = Path(root)
    archive = root / "replica.zip"
    replica_archive("sop", archive, classes_per_super=2, images_per_class=(4, 4), image_size=16)
    datasets.load("sop").prepare(archive, root / "manifest", data_root=root / "data", replica=True)
    return root / "manifest"
