"""JPEG decoding on the GPU (``runtime.gpu_decode``): the loader workers read file bytes, the main process
decodes a whole batch with nvJPEG and applies the run's train transform to the decoded tensors.

:class:`EncodedImages` yields ``(bytes as a uint8 tensor, labels, index)`` for each item of an
:class:`~rankrepro.data.images.ImageDataset` (its files: the resized image cache when it reads one);
:func:`collate_encoded` keeps a batch's byte tensors as a list; :func:`decode_batch` decodes them
(``torchvision.io.decode_jpeg(..., device=device)``, RGB; a file that is not a JPEG is decoded on the CPU by
``torchvision.io.decode_image`` and moved) and applies :func:`tensor_train_transform`: the run's
:func:`~rankrepro.data.transforms.train_transform` with ``ToTensor`` replaced by a conversion of the uint8
tensor to float in [0, 1]. Its random crop and flip are drawn from torch's global generator in the main
process (saved in checkpoints), its resize is torchvision's antialiased tensor resize.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset, default_collate
from torchvision import io as tvio
from torchvision import transforms as T

from rankrepro.data.transforms import train_transform

__all__ = ["EncodedImages", "collate_encoded", "decode_batch", "tensor_train_transform"]

JPEG_MAGIC = b"\xff\xd8"


class EncodedImages(Dataset):
    """The files of an :class:`~rankrepro.data.images.ImageDataset` as undecoded byte tensors."""

    def __init__(self, dataset):
        if getattr(dataset, "face", None) is not None:
            raise ValueError("runtime.gpu_decode cannot crop faces (images.face): the decoded images go straight to "
                             "the train transform; turn gpu_decode off for this run")
        self.paths, self.labels = dataset.paths, dataset.labels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        data = torch.frombuffer(bytearray(Path(self.paths[index]).read_bytes()), dtype=torch.uint8)
        return data, self.labels[index], index


def collate_encoded(items):
    """A batch of :class:`EncodedImages` items: (list of byte tensors, labels [B, L], indices [B])."""
    data, labels, index = zip(*items)
    return list(data), default_collate(labels), torch.as_tensor(index)


def tensor_train_transform(images_cfg: dict) -> T.Compose:
    """The run's train transform for uint8 CHW tensors (``ToTensor`` -> ``ConvertImageDtype(float32)``)."""
    steps = [T.ConvertImageDtype(torch.float32) if isinstance(step, T.ToTensor) else step
             for step in train_transform(images_cfg).transforms]
    return T.Compose(steps)


def _decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    jpeg = [k for k, d in enumerate(data) if bytes(d[:2].tolist()) == JPEG_MAGIC]
    out: list[torch.Tensor | None] = [None] * len(data)
    if jpeg:
        decoded = tvio.decode_jpeg([data[k] for k in jpeg], mode=tvio.ImageReadMode.RGB, device=device)
        for k, image in zip(jpeg, decoded):
            out[k] = image
    for k, image in enumerate(out):
        if image is None:
            out[k] = tvio.decode_image(data[k], mode=tvio.ImageReadMode.RGB).to(device)
    return out


def decode_batch(data: list[torch.Tensor], transform: T.Compose, device: torch.device) -> torch.Tensor:
    """The batch's images decoded on ``device`` and transformed by ``transform`` (the run's
    :func:`tensor_train_transform`, built once per loader): [B, 3, H, W]."""
    return torch.stack([transform(image) for image in _decode(data, torch.device(device))])
