"""A torch Dataset over one split of a manifest."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from rankrepro.data.manifest import Manifest


def contiguous_labels(labels: np.ndarray) -> np.ndarray:
    """Each level's labels renumbered 0..C_l-1 (in sorted order of the original ids)."""
    return np.stack([np.unique(col, return_inverse=True)[1] for col in labels.T], axis=1)


class ImageDataset(Dataset):
    """Yields (image tensor, labels [L], index) for each row of a manifest split.

    ``contiguous=True`` renumbers each level 0..C_l-1 (what proxy losses need).
    """

    def __init__(self, manifest: Manifest, transform, contiguous: bool = False):
        self.paths = manifest.paths()
        labels = manifest.labels()
        self.labels = torch.as_tensor(contiguous_labels(labels) if contiguous else labels)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        with Image.open(self.paths[index]) as image:
            image = image.convert("RGB")
        return self.transform(image), self.labels[index], index
