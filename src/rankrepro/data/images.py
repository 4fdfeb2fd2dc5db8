"""A torch Dataset over one split of a manifest."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from rankrepro.data.manifest import Manifest

# what PIL raises on a truncated, corrupt or unidentifiable file (UnidentifiedImageError is an OSError)
READ_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


class ImageReadError(OSError):
    """An image of a manifest could not be read; the message names the file and the manifest row."""


def contiguous_labels(labels: np.ndarray) -> np.ndarray:
    """Each level's labels renumbered 0..C_l-1 (in sorted order of the original ids)."""
    return np.stack([np.unique(col, return_inverse=True)[1] for col in labels.T], axis=1)


class ImageDataset(Dataset):
    """Yields (image tensor, labels [L], index) for each row of a manifest split.

    ``contiguous=True`` renumbers each level 0..C_l-1 (what proxy losses need). An
    unreadable image raises :class:`ImageReadError` naming the file and its manifest row.
    """

    def __init__(self, manifest: Manifest, transform, contiguous: bool = False):
        self.manifest = manifest
        self.paths = manifest.paths()
        labels = manifest.labels()
        self.labels = torch.as_tensor(contiguous_labels(labels) if contiguous else labels)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path = self.paths[index]
        try:
            with Image.open(path) as image:
                image = image.convert("RGB")  # decodes every byte: a truncated file fails here
        except READ_ERRORS as err:
            raise ImageReadError(f"cannot read image {path} ({self.manifest.describe_row(index)}): "
                                 f"{type(err).__name__}: {err}") from err
        return self.transform(image), self.labels[index], index
