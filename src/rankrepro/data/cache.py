"""A resized image cache: a manifest's images with the shorter side resized to ``S``.

``build_cache(manifest_dir, S, out_dir)`` writes every image of the manifest (``meta["root"]`` +
its relative ``path``) to ``out_dir/<path>`` (the same relative paths):

* an image whose shorter side is larger than ``S`` is decoded, converted to RGB and resized
  exactly as the training pipeline does it (:func:`resize_shorter_side`: what
  ``torchvision.transforms.functional.resize(image, S)`` does to a PIL image, Pillow's bilinear
  resampling, antialiased, to the shorter side ``S`` and the longer side ``int(S * long / short)``,
  without importing torch), then saved as JPEG quality 95 (Pillow's default 4:2:0 chroma subsampling, no EXIF). The bytes are
  JPEG whatever the file's suffix (Pillow reads the format from the bytes, not the name);
* an image whose shorter side is already ``<= S`` is copied byte for byte (no upscaling: the
  pipeline's ``Resize(S)`` then does to the copy exactly what it does to the original).

Why JPEG q95 (measured by ``python -m rankrepro bench pipeline``, "cache format" table, on 256 px
images): it decodes in ~0.4 ms, ~5x faster than PNG and ~3x faster than WebP, at a fifth of PNG's
size (WebP also encodes ~20x slower); raw uint8 pixels decode ~3x faster still but take ~10x the
disk (SOP at S = 256: ~30 GB instead of ~3 GB), and decoding is no longer the bottleneck (the
crop, ToTensor and Normalize cost more). q90 saves a quarter of the size for more error and no
clear speed gain. The re-encoding error (mean |difference| ~0.01 of the pixel range) is the only
difference from the originals for a compatible transform (below).

Interruptions: each image is written to a temporary file and renamed (a finished image is whole);
``.partial.json`` (the build's settings) is written before the first image and ``cache.json``
after the last one, so a half-built cache never has ``cache.json``. A rerun with the same settings
skips the images already there; a cache folder built for other settings (another manifest, size,
quality) is emptied first.

``cache.json``: ``version``, ``manifest`` (sha256 of ``manifest.csv``'s bytes and ``meta["root"]``),
``root``, ``size``, ``format``, ``quality``, ``resample``, ``count`` (images), ``resized``,
``copied``, ``skipped`` (already there on a resume), ``seconds``. Each S has its own folder
(``results/cache/<dataset>/s256``, ``s288`` for the "big" setups). The images themselves are not
hashed: the cache trusts that the files under ``root`` do not change while ``manifest.csv`` and
``root`` stay the same (the archives are checksum-verified; the workflow rebuilds the cache when
the manifest is prepared again). The loader (:class:`rankrepro.data.images.ImageDataset`) uses a cache only when that
record matches the manifest it reads and the transform is compatible (:func:`resize_uses_cache`);
otherwise it reads the originals and warns (:class:`ImageCacheWarning`): a stale cache costs
speed, never correctness, so it does not stop a job.

Compatible transforms (the transform's first step must be a ``Resize``, bilinear, no ``max_size``):

* ``Resize(S)`` (an int equal to ``S``: SupRank's SOP training ``Resize(256)``): the cached image
  already has the output size, and torchvision returns it unchanged, so the result equals the
  originals' up to JPEG re-encoding;
* a squash ``Resize((h, w))`` with ``h, w <= S`` (SOP's test ``Resize((256, 256))``): the same
  output geometry; the axes the cache shrank are resampled twice (``L -> L' -> w`` instead of
  ``L -> w``), a difference ~4x smaller than the JPEG error (~0.003 of the pixel range);
* anything else reads the originals: ``Resize(t)`` with ``t != S`` (the longer side's rounding
  could differ by a pixel, and ``t > S`` would upscale the cache), a squash larger than ``S``, or
  no leading ``Resize`` (``train_resize: null``: RandomResizedCrop on the full image, for which no
  cache is built at all).

This module imports only the standard library at import time (the workflow's targets,
:mod:`rankrepro.plan.targets`, use :func:`resize_uses_cache`); Pillow and pandas are imported where
needed, torchvision only to check a loader's transform (:func:`transform_uses_cache`): building a
cache (the ``image_cache`` job) imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shutil
import sys
import time
from pathlib import Path

CACHE_JSON = "cache.json"
PARTIAL_JSON = ".partial.json"
VERSION = 1
QUALITY = 95
FORMAT = "JPEG"
RESAMPLE = "torchvision.transforms.functional.resize (PIL bilinear, antialiased)"  # what resize_shorter_side equals


class ImageCacheWarning(UserWarning):
    """An image cache was asked for but cannot be used; the originals are read instead."""


# -- what a cache is built from ---------------------------------------------------------------------


def manifest_fingerprint(manifest_dir: str | Path) -> str:
    """``sha256:<hex>`` of ``manifest.csv``'s bytes and ``meta.json``'s ``root``."""
    manifest_dir = Path(manifest_dir)
    root = json.loads((manifest_dir / "meta.json").read_text())["root"]
    digest = hashlib.sha256((manifest_dir / "manifest.csv").read_bytes())
    digest.update(b"\0root=" + str(root).encode())
    return "sha256:" + digest.hexdigest()


def cache_settings(manifest_dir: str | Path, size: int, quality: int = QUALITY) -> dict:
    """What a cache built from ``manifest_dir`` at ``size`` records (``cache.json`` less the counts)."""
    root = json.loads((Path(manifest_dir) / "meta.json").read_text())["root"]
    return {"version": VERSION, "manifest": manifest_fingerprint(manifest_dir), "root": str(root),
            "size": int(size), "format": FORMAT, "quality": int(quality), "resample": RESAMPLE}


def read_record(cache_dir: str | Path) -> dict | None:
    """The cache's ``cache.json``, or None when there is none (not built, or interrupted)."""
    return _read_json(Path(cache_dir) / CACHE_JSON)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def _matches(record: dict | None, settings: dict) -> bool:
    return record is not None and all(record.get(k) == v for k, v in settings.items())


# -- building ---------------------------------------------------------------------------------------


def resize_shorter_side(image, size: int):
    """``image`` (a PIL image) with its shorter side resized to ``size`` and its longer side to
    ``int(size * long / short)``, Pillow's bilinear filter (antialiased): exactly what torchvision's
    ``Resize(size)`` (``transforms.functional.resize``) does to a PIL image whose shorter side is not
    already ``size`` (it then returns the image unchanged, as this does)."""
    from PIL import Image

    width, height = image.size
    short, long = min(width, height), max(width, height)
    if short == size:
        return image
    new_long = int(size * long / short)
    new_size = (size, new_long) if width <= height else (new_long, size)
    return image.resize(new_size, Image.BILINEAR)


def _cache_one(task: tuple[str, str, int, int]) -> str:
    """Write one cached image; return ``resized`` or ``copied``."""
    from PIL import Image

    from rankrepro.data.image_files import naming_image
    from rankrepro.io import atomic_path

    src, dst, size, quality = task
    with naming_image(src, doing="cache"), Image.open(src) as image:
        if min(image.size) <= size:
            small = None
        else:
            small = resize_shorter_side(image.convert("RGB"), size)  # what the pipeline's Resize(S) does
    with atomic_path(dst) as tmp:
        if small is None:
            shutil.copyfile(src, tmp)
        else:
            small.save(tmp, format=FORMAT, quality=quality)
    return "copied" if small is None else "resized"


def _empty(out_dir: Path) -> None:
    for entry in out_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _check_inside(manifest, out_dir: Path) -> None:
    """Refuse a manifest path whose cached copy would land outside ``out_dir`` (absolute, ``..``, or
    through a symlink leaving it): prepare refuses such paths, a hand-edited manifest may not."""
    from rankrepro.data.paths import leaves_root

    folder = out_dir.resolve()
    inside: dict[str, bool] = {}  # per parent folder: a symlink leaving out_dir sits in a folder of the path
    for index, rel in enumerate(manifest.table["path"]):
        if not isinstance(rel, str) or leaves_root(rel):
            escapes = True
        else:
            parent = posixpath.dirname(rel)
            if parent not in inside:
                inside[parent] = (folder / parent).resolve().is_relative_to(folder)
            escapes = not inside[parent]
        if escapes:
            raise ValueError(f"image path {rel!r} ({manifest.describe_row(index)}) would be cached outside "
                             f"{out_dir}; refusing to build the cache: prepare the manifest again from the dataset")


def build_cache(manifest_dir: str | Path, size: int, out_dir: str | Path, *, quality: int = QUALITY,
                workers: int = 1, progress: bool = False) -> dict:
    """Write the cache of ``manifest_dir``'s images at shorter side ``size`` into ``out_dir``; return
    its ``cache.json`` record. Resumes an interrupted build; returns at once when the cache is complete."""
    from rankrepro.data.manifest import read_manifest
    from rankrepro.io import atomic_write_json

    if size < 1:
        raise ValueError(f"cache size must be a positive integer, got {size}")
    out_dir = Path(out_dir)
    settings = cache_settings(manifest_dir, size, quality)
    manifest = read_manifest(manifest_dir)
    record = read_record(out_dir)
    if _matches(record, settings):  # built from this very manifest, which was checked then
        return record
    _check_inside(manifest, out_dir)  # before anything is written
    partial = _read_json(out_dir / PARTIAL_JSON)
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if record is None and partial is None:
            raise FileExistsError(f"{out_dir} is not empty and holds no {CACHE_JSON} or {PARTIAL_JSON}: "
                                  "not an image cache; choose an empty folder")
        if record is not None or partial != settings:  # built for another manifest/size/quality
            print(f"{out_dir}: built for other settings; rebuilding", file=sys.stderr)
            _empty(out_dir)
        else:  # the same build, interrupted: remove half-written temporary files
            for tmp in out_dir.rglob(".*.tmp"):
                tmp.unlink()
    atomic_write_json(out_dir / PARTIAL_JSON, settings)

    relative = list(dict.fromkeys(manifest.table["path"]))
    tasks = [(str(manifest.root / rel), str(out_dir / rel), int(size), int(quality))
             for rel in relative if not (out_dir / rel).is_file()]
    counts = {"resized": 0, "copied": 0}
    if tasks:
        from PIL import Image  # noqa: F401  imported once, before the workers fork
    t0 = time.perf_counter()
    if tasks:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc=f"cache s{size}", file=sys.stderr, disable=not progress,
                   mininterval=5.0)
        if workers > 1:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(workers) as pool:
                for kind in pool.imap_unordered(_cache_one, tasks, chunksize=16):
                    counts[kind] += 1
                    bar.update()
        else:
            for task in tasks:
                counts[_cache_one(task)] += 1
                bar.update()
        bar.close()
    seconds = time.perf_counter() - t0
    record = {**settings, "count": len(relative), **counts, "skipped": len(relative) - len(tasks),
              "seconds": round(seconds, 3)}
    atomic_write_json(out_dir / CACHE_JSON, record)  # last: marks the cache complete
    (out_dir / PARTIAL_JSON).unlink(missing_ok=True)
    return record


# -- using ------------------------------------------------------------------------------------------


def resize_uses_cache(resize, size: int) -> bool:
    """Whether a leading ``Resize(resize)`` (an int: shorter side; a pair (h, w): squash) can read a
    cache of shorter side ``size`` (see the module docstring). Pure: the workflow's targets use it."""
    if isinstance(resize, (list, tuple)) and len(resize) == 1:
        resize = resize[0]
    if isinstance(resize, bool) or size is None:
        return False
    if isinstance(resize, int):
        return resize == size
    if isinstance(resize, (list, tuple)) and len(resize) == 2 and all(isinstance(v, int) for v in resize):
        return max(resize) <= size
    return False


def transform_uses_cache(transform, size: int) -> str | None:
    """None when ``transform`` (a torchvision ``Compose``) can read a cache of shorter side ``size``,
    else why not."""
    from torchvision import transforms as T

    steps = transform.transforms if isinstance(transform, T.Compose) else [transform]
    first = steps[0] if steps else None
    if not isinstance(first, T.Resize):
        return f"the transform does not start with a Resize (it starts with {type(first).__name__})"
    if first.interpolation != T.InterpolationMode.BILINEAR or first.max_size is not None:
        return f"its {first!r} is not a plain bilinear resize"
    if not resize_uses_cache(list(first.size) if isinstance(first.size, (list, tuple)) else first.size, size):
        return (f"its first step {first!r} needs the originals: only Resize({size}) or a squash Resize((h, w)) "
                f"with h, w <= {size} reads a cache of shorter side {size}")
    return None


def check_cache(cache_dir: str | Path, manifest, transform=None) -> str | None:
    """None when the cache in ``cache_dir`` serves ``manifest`` (a :class:`~rankrepro.data.manifest.Manifest`
    or one of its splits) and ``transform``; else the reason it does not."""
    cache_dir = Path(cache_dir)
    record = read_record(cache_dir)
    if record is None:
        return f"{cache_dir / CACHE_JSON} does not exist (the cache is not built, or its build was interrupted)"
    if manifest.directory is None:
        return "the manifest has no directory, so it cannot be matched to the cache"
    try:
        expected = cache_settings(manifest.directory, record.get("size", 0), record.get("quality", QUALITY))
    except (OSError, ValueError) as err:
        return f"cannot fingerprint the manifest {manifest.directory}: {err}"
    changed = [k for k, v in expected.items() if record.get(k) != v]
    if changed:
        return (f"{cache_dir / CACHE_JSON} was built from another manifest or with other settings "
                f"(differs in {', '.join(changed)} from {manifest.directory}); rebuild it")
    if transform is not None:
        return transform_uses_cache(transform, record["size"])
    return None
