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
