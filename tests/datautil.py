"""Replicas for tests: a dataset's generated files written where a test wants them."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

from rankrepro.data import datasets


def replica_folder(out: str | Path, dataset: str, **options) -> Path:
    """``out`` holding ``dataset``'s generated replica files (``write_replica(out, **options)``)."""
    datasets.load(dataset).write_replica(out, **options)
    return Path(out)


def unpacked(archive: str | Path, out: str | Path) -> Path:
    """``out`` holding ``archive`` (zip or tar) unpacked as a user would, without the pipeline."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(out)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(out, filter="data")
    return Path(out)


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


def voc07_manifest(root: str | Path) -> Path:
    """The voc07 replica downloaded and prepared under ``root`` (6 training and 4 test images of 64 x 48 pixels);
    returns its manifest folder (what the detection tests train on)."""
    root = Path(root)
    voc07 = datasets.load("voc07")
    voc07.write_replica(root / "replica")
    record = voc07.download(root / "data", replica_dir=root / "replica")
    voc07.prepare(record, root / "manifest", data_root=root / "data", replica=True)
    return root / "manifest"
