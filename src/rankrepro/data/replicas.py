"""Generated replicas of datasets in their exact raw format, with tiny synthetic images.

A replica has the real archive layout and split files, so the real
download -> verify -> extract -> parse code runs on it; only the images and the
counts differ. An image of a class is a two-colour stripe pattern fixed by the
class (and its group) plus per-image phase and noise, so a model can learn it.
Everything is deterministic given the seed, archives included (fixed timestamps).

This module holds what every replica generator shares (seeded generators, tiny
JPEGs, deterministic zip and tar writers) and imports no dataset: each dataset
module owns its generator (e.g. :meth:`rankrepro.data.datasets.sop.SOP.make_replica`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

from rankrepro.data import checksums
from rankrepro.io import atomic_path

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")  # stored as they are, not compressed again


def key_rng(key) -> np.random.Generator:
    """A generator seeded by ``repr(key)`` alone (stable across processes)."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def tiny_jpeg(rng: np.random.Generator, class_key, size: int = 32, *, group_key=None, noise: float = 12.0) -> bytes:
    """A ``size``x``size`` JPEG of class ``class_key``.

    The stripe colours come from ``group_key`` (the coarser level; ``class_key``
    when None) with a class tint; stripe angle and frequency come from
    ``class_key``; phase and pixel noise come from ``rng``.
    """
    group = key_rng(("group", class_key if group_key is None else group_key))
    style = key_rng(("class", class_key))
    colours = group.uniform(30, 225, (2, 3)) + style.uniform(-30, 30, 3)
    angle, freq = style.uniform(0, np.pi), style.uniform(1.0, 4.0)
    yy, xx = np.mgrid[0:size, 0:size] / size
    phase = 2 * np.pi * (freq * (xx * np.cos(angle) + yy * np.sin(angle))) + rng.uniform(0, 2 * np.pi)
    wave = (0.5 + 0.5 * np.sin(phase))[..., None]
    pixels = colours[0] * (1 - wave) + colours[1] * wave + rng.normal(0, noise, (size, size, 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def write_zip(out_archive: str | Path, members: dict[str, bytes]) -> str:
    """Write ``members`` (archive path -> bytes, in order) as a deterministic zip, atomically.

    Folder entries are added for every parent folder. Returns ``"sha256:<hex>"``.
    """
    out_archive = Path(out_archive)
    with atomic_path(out_archive) as tmp, zipfile.ZipFile(tmp, "w") as zf:
        for folder in _folders(members):
            zf.writestr(_zipinfo(folder + "/", 0o40755), b"")
        for name, data in members.items():
            stored = name.lower().endswith(IMAGE_SUFFIXES)
            zf.writestr(_zipinfo(name, 0o100644), data,
                        compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
    return _state_checksum(out_archive)


def write_tar(out_archive: str | Path, members: dict[str, bytes]) -> str:
    """Write ``members`` as a deterministic tar, gzip-compressed when the name ends in ``.gz``/``.tgz``.

    Same contract as :func:`write_zip`: folder entries for every parent folder,
    fixed timestamps and owners, atomic; returns ``"sha256:<hex>"``.
    """
    out_archive = Path(out_archive)
    gzipped = out_archive.name.endswith((".gz", ".tgz"))
    with atomic_path(out_archive) as tmp, open(tmp, "wb") as raw:
        stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if gzipped else raw
        with stream, tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for folder in _folders(members):
                tf.addfile(_tarinfo(folder, tarfile.DIRTYPE, 0o755, 0))
            for name, data in members.items():
                tf.addfile(_tarinfo(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return _state_checksum(out_archive)


def _folders(members: dict[str, bytes]) -> list[str]:
    """Every parent folder of the member names (no trailing slash), sorted as ``folder/``."""
    return sorted({str(p) for name in members for p in PurePosixPath(name).parents if str(p) != "."},
                  key=lambda folder: folder + "/")


def _state_checksum(out_archive: Path) -> str:
    """``"sha256:<hex>"`` of the archive."""
    return "sha256:" + checksums.file_digest(out_archive, "sha256")


def write_file(out: str | Path, data: bytes) -> None:
    """Write a non-archive replica file (a CSV, a split list) atomically."""
    with atomic_path(out) as tmp:
        tmp.write_bytes(data)


def _zipinfo(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
    info.external_attr = mode << 16
    return info


def _tarinfo(name: str, kind: bytes, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, 0
    return info
