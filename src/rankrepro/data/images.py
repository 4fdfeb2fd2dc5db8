"""A torch Dataset over one split of a manifest (read from a resized image cache when one matches)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from rankrepro.data.face_align import FaceCrop
from rankrepro.data.image_files import naming_image, read_rgb
from rankrepro.data.manifest import Manifest


def contiguous_labels(labels: np.ndarray) -> np.ndarray:
    """Each level's labels renumbered 0..C_l-1 (in sorted order of the original ids)."""
    return np.stack([np.unique(col, return_inverse=True)[1] for col in labels.T], axis=1)


class ImageDataset(Dataset):
    """Yields (image tensor, labels [L], index) for each row of a manifest split.

    ``contiguous=True`` renumbers each level 0..C_l-1 (what proxy losses need). An unreadable image
    raises :class:`~rankrepro.data.image_files.ImageReadError` naming the file and its manifest row.

    ``cache``: a resized image cache folder (:mod:`rankrepro.data.cache`,
    ``results/cache/<dataset>/s<S>``; ``python -m rankrepro train/evaluate --image-cache DIR``
    hands it down; None: the originals). It is read only when its ``cache.json`` matches this manifest and
    ``transform`` starts with a compatible resize (:func:`rankrepro.data.cache.check_cache`);
    otherwise the originals are read and an :class:`~rankrepro.data.cache.ImageCacheWarning`
    says why. ``source`` tells which: ``"cache"`` or ``"originals"``.

    ``face``: the run's ``images.face`` (None: the whole image): each image is cropped to its face
    (:class:`rankrepro.data.face_align.FaceCrop`, from the manifest row's box and landmark columns) before
    ``transform``. The boxes are in the originals' pixels, so such a dataset never reads a cache. A crop
    that fails (landmarks that :meth:`FaceCrop.crop` refuses) raises the same error, naming the file and row.
    """

    def __init__(self, manifest: Manifest, transform, contiguous: bool = False, cache: str | Path | None = None,
                 face: dict | None = None):
        self.manifest = manifest
        self.paths = manifest.paths()
        self.source = "originals"
        #: the per-image face crop (images.face), or None
        self.face = None if face is None else FaceCrop(face, manifest)
        if cache is not None:
            from rankrepro.data.cache import ImageCacheWarning, check_cache

            reason = (check_cache(cache, manifest, transform) if self.face is None
                      else "images.face crops with boxes in the originals' pixels")
            if reason is None:
                self.paths = [Path(cache) / p for p in manifest.table["path"]]
                self.source = "cache"
                print(f"reading {len(self.paths)} images from the image cache {cache}", file=sys.stderr)
            else:
                warnings.warn(f"image cache {cache} not used, reading the originals: {reason}", ImageCacheWarning,
                              stacklevel=2)
        labels = manifest.labels()
        self.labels = torch.as_tensor(contiguous_labels(labels) if contiguous else labels)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path, where = self.paths[index], self.manifest.describe_row(index)
        image = read_rgb(path, where)
        if self.face is not None:
            with naming_image(path, where, doing="crop the face of"):
                image = self.face.crop(image, index)
        return self.transform(image), self.labels[index], index
