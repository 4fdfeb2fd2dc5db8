"""The training batches of each epoch, on the device: :class:`TrainLoader`.

Without persistent workers (``runtime.persistent_workers`` off, or ``num_workers`` 0) each epoch gets a fresh
``DataLoader`` over the run's batch sampler with the epoch's generator: its workers are seeded from that
generator (``base_seed + worker_id`` for ``random`` and torch, ``_generate_state(base_seed, worker_id)`` for
NumPy) and batch k goes to worker k mod ``num_workers``.

With persistent workers one ``DataLoader`` serves every epoch. Its batches carry the epoch's ``base_seed`` (drawn
from the epoch's generator exactly as a fresh ``DataLoader`` draws it), and a worker that sees a new one reseeds
``random``, torch and NumPy as a fresh worker would before loading the item. The ``DataLoader`` still hands batch k
of every epoch to worker k mod ``num_workers``, and finishes the previous epoch's prefetched batches before it sends
the next epoch's, so every image is augmented with the same random numbers as without persistent workers, and
a run resumed from a checkpoint equals one trained straight through.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data._utils.worker import _generate_state

from rankrepro.engine.gpu_decode import EncodedImages, collate_encoded, decode_batch, tensor_train_transform
from rankrepro.engine.runtime import TrainRuntime

__all__ = ["TrainLoader", "epoch_base_seed"]


def epoch_base_seed(generator: torch.Generator) -> int:
    """The workers' base seed a ``DataLoader`` with ``generator`` draws when an iteration starts."""
    return torch.empty((), dtype=torch.int64).random_(generator=generator).item()


class _SeededItems(Dataset):
    """``dataset[index]`` for items ``(index, base_seed)``; on a new ``base_seed`` the worker first reseeds
    itself as a fresh ``DataLoader`` worker would."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.base_seed: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item):
        index, base_seed = item
        if base_seed != self.base_seed:
            worker = get_worker_info().id
            random.seed(base_seed + worker)
            torch.manual_seed(base_seed + worker)
            np.random.seed(_generate_state(base_seed, worker))
            self.base_seed = base_seed
        return self.dataset[index]


class _SeededBatches:
    """The batch sampler's batches as lists of ``(index, base_seed)`` with the current epoch's ``base_seed``."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.base_seed: int | None = None

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        for batch in self.sampler:
            yield [(index, self.base_seed) for index in batch]


class TrainLoader:
    """The batches of ``dataset`` drawn by ``sampler`` (a batch sampler), moved to ``device`` (module docstring).

    ``runtime``: persistent workers and ``prefetch_factor`` (with ``num_workers`` > 0), pinned memory and
    channels-last (CUDA), ``gpu_decode`` (the workers read bytes, :mod:`rankrepro.engine.gpu_decode` decodes
    and transforms each batch on the device with ``images_cfg``, the run's ``images`` block)."""

    def __init__(self, dataset, sampler, *, num_workers: int, device: torch.device, runtime: TrainRuntime,
                 images_cfg: dict | None = None):
        self.device = device
        self.memory_format = runtime.memory_format(device)
        if runtime.gpu_decode and images_cfg is None:
            raise ValueError("TrainLoader: gpu_decode needs the run's images block (images_cfg)")
        #: the train transform applied on the device after decoding there (gpu_decode), else None
        self.gpu_transform = tensor_train_transform(images_cfg) if runtime.gpu_decode else None
        self.persistent = runtime.persistent_workers and num_workers > 0
        items = EncodedImages(dataset) if runtime.gpu_decode else dataset
        self.options = {"num_workers": num_workers, "pin_memory": runtime.pin(device) and not runtime.gpu_decode,
                        "collate_fn": collate_encoded if runtime.gpu_decode else None}
        if num_workers:
            self.options["prefetch_factor"] = runtime.prefetch_factor
        if self.persistent:
            self.batches = _SeededBatches(sampler)
            self.loader = DataLoader(_SeededItems(items), batch_sampler=self.batches, persistent_workers=True,
                                     generator=torch.Generator(), **self.options)
        else:
            self.items, self.sampler = items, sampler

    def epoch(self, generator: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's (images, labels) on the device; ``generator`` seeds the workers (module docstring)."""
        if self.persistent:
            self.batches.base_seed = epoch_base_seed(generator)
            loader = self.loader
        else:
            loader = DataLoader(self.items, batch_sampler=self.sampler, generator=generator, **self.options)
        for images, labels, _ in loader:
            if self.gpu_transform is not None:
                images = decode_batch(images, self.gpu_transform, self.device)
            else:
                images = images.to(self.device, non_blocking=True)
            yield images.contiguous(memory_format=self.memory_format), labels.to(self.device, non_blocking=True)

    def close(self) -> None:
        """Stop the persistent workers."""
        if self.persistent:
            self.loader = None
