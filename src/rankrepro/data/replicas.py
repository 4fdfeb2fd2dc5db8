"""Generated replicas of datasets in their exact raw format, with tiny synthetic images.

A replica has the real archive layout and split files, so the real
download -> verify -> extract -> parse code runs on it; only the images and the
counts differ. An image of a class is a two-colour stripe pattern fixed by the
class (and its group) plus per-image phase and noise, so a model can learn it.
Everything is deterministic given the seed, archives included (fixed timestamps).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

from rankrepro.data import sources
from rankrepro.data.datasets import sop
from rankrepro.io import atomic_path, atomic_write_text

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


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

    Folder entries are added for every parent folder. Returns ``"sha256:<hex>"``
    and writes it to ``<out_archive>.sha256``.
    """
    out_archive = Path(out_archive)
    folders = sorted({str(p) + "/" for name in members for p in PurePosixPath(name).parents if str(p) != "."})
    with atomic_path(out_archive) as tmp, zipfile.ZipFile(tmp, "w") as zf:
        for folder in folders:
            zf.writestr(_zipinfo(folder, 0o40755), b"")
        for name, data in members.items():
            stored = name.lower().endswith((".jpg", ".jpeg", ".png"))
            zf.writestr(_zipinfo(name, 0o100644), data,
                        compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
    checksum = "sha256:" + sources.file_digest(out_archive, "sha256")
    atomic_write_text(f"{out_archive}.sha256", checksum + "\n")
    return checksum


def _zipinfo(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
    info.external_attr = mode << 16
    return info


def split_file(rows: list[tuple[int, int, str]]) -> bytes:
    """An SOP split file: the header, then ``image_id class_id super_class_id path`` rows."""
    lines = [" ".join(sop.HEADER)] + [f"{i} {c} {s} {p}" for i, (c, s, p) in enumerate(rows, 1)]
    return ("\n".join(lines) + "\n").encode()


def make_sop_replica(out_archive: str | Path, *, classes_per_super: int = 4,
                     images_per_class: tuple[int, int] = (2, 5), image_size: int = 32, seed: int = 0) -> str:
    """Write a Stanford Online Products replica zip; return its ``"sha256:<hex>"``.

    Each of the 12 super-classes gets ``classes_per_super`` products in train and
    as many in test; each product has between ``images_per_class[0]`` and
    ``images_per_class[1]`` images (inclusive). Class ids are 1-based and
    contiguous, train first, grouped by super-class as in the real data.
    """
    rng = np.random.default_rng(seed)
    rows: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
    images: dict[str, bytes] = {}
    class_id = 0
    for split in rows:
        for super_id, kind in enumerate(sop.SUPER_CLASS_NAMES, 1):
            for _ in range(classes_per_super):
                class_id += 1
                product = 110_000_000_000 + class_id * 1_000_000 + int(rng.integers(1_000_000))
                for n in range(int(rng.integers(images_per_class[0], images_per_class[1] + 1))):
                    path = f"{kind}{sop.FOLDER_SUFFIX}/{product}_{n}.JPG"
                    rows[split].append((class_id, super_id, path))
                    images[f"{sop.TOP}/{path}"] = tiny_jpeg(rng, class_id, image_size, group_key=super_id)
    note = b"Generated replica of Stanford Online Products for rankrepro; synthetic images, no real data.\n"
    members = {
        f"{sop.TOP}/{sop.SPLIT_FILES['train']}": split_file(rows["train"]),
        f"{sop.TOP}/{sop.SPLIT_FILES['test']}": split_file(rows["test"]),
        f"{sop.TOP}/{sop.INFO_FILE}": split_file(rows["train"] + rows["test"]),
        f"{sop.TOP}/README": note,
        f"{sop.TOP}/LICENSE": note,
        **images,
    }
    return write_zip(out_archive, members)
