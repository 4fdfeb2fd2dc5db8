"""The training batches of each epoch, on the device: :class:`TrainLoader`.

An epoch is the run's batch sampler's batches for that epoch, less the first ``skip`` (done before a
mid-epoch checkpoint, :mod:`rankrepro.engine.preemption`): they are dropped from the index lists, their
images never loaded.

With ``num_workers`` 0 the main process loads every batch, drawing its augmentations from the global RNGs,
whose state a checkpoint holds. With workers, whichever worker loads batch k of an epoch first reseeds
``random`` and torch with ``base_seed + k`` and NumPy with ``_generate_state(base_seed, k)`` -- a fresh
``DataLoader`` worker's seeding, with the batch's number in place of the worker's -- where ``base_seed`` is
drawn from the epoch's generator exactly as a fresh ``DataLoader`` draws it. So every image of a batch is
augmented with the same random numbers whatever the number of workers, whether they persist across
epochs (``runtime.persistent_workers``: one ``DataLoader`` for the whole run, else one per epoch) and
whether the epoch was resumed after its first batches: a resumed run equals one trained straight through.
The workers ignore SIGTERM (:func:`~rankrepro.engine.preemption.ignore_stop_signal`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.worker import _generate_state

from rankrepro.engine.gpu_decode import EncodedImages, collate_encoded, decode_batch, tensor_train_transform
from rankrepro.engine.preemption import ignore_stop_signal
from rankrepro.record.runtime import TrainRuntime

__all__ = ["TrainLoader", "epoch_base_seed", "epoch_loader"]


def epoch_base_seed(generator: torch.Generator) -> int:
    """The workers' base seed a ``DataLoader`` with ``generator`` draws when an iteration starts."""
    return torch.empty((), dtype=torch.int64).random_(generator=generator).item()


def epoch_loader(items, batches, generator: torch.Generator, *, num_workers: int, persistent: bool = False,
                 **options) -> DataLoader:
    """A ``DataLoader`` of ``items`` over ``batches`` (a batch sampler) that draws its workers' base seed from
    ``generator``, never from torch's global RNG: the global state a checkpoint holds is the same whether the
    loader was started before it (a straight run) or after it (a resumed one). Its workers ignore SIGTERM."""
    if num_workers > 0:
        options.update(worker_init_fn=ignore_stop_signal, persistent_workers=persistent)
    return DataLoader(items, batch_sampler=batches, generator=generator, num_workers=num_workers, **options)


class _SeededItems(Dataset):
    """The items of a batch ``[(index, base_seed, k), ...]``: ``dataset[index]`` each, after reseeding the
    worker from ``(base_seed, k)`` (module docstring)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, items):
        _, base_seed, k = items[0]
        random.seed(base_seed + k)
        torch.manual_seed(base_seed + k)
        np.random.seed(_generate_state(base_seed, k))
        return [self.dataset[index] for index, _, _ in items]


class _EpochBatches:
    """The batch sampler's batches from the ``skip``-th on; with ``base_seed`` set (workers), each as
    ``[(index, base_seed, k), ...]``, k its number in the whole epoch."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.skip = 0
        self.base_seed: int | None = None

    def __len__(self) -> int:
        return max(len(self.sampler) - self.skip, 0)

    def __iter__(self):
        batches = itertools.islice(self.sampler, self.skip, None)
        if self.base_seed is None:
            yield from batches
            return
        for k, batch in enumerate(batches, start=self.skip):
            yield [(index, self.base_seed, k) for index in batch]


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
        self.workers = num_workers > 0
        if self.workers:
            self.options.update(prefetch_factor=runtime.prefetch_factor)
            items = _SeededItems(items)
        self.items, self.batches = items, _EpochBatches(sampler)
        if self.persistent:
            self.loader = epoch_loader(items, self.batches, torch.Generator(), persistent=True, **self.options)

    def epoch(self, generator: torch.Generator, skip: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's (images, labels) on the device, its first ``skip`` batches left out; ``generator``
        seeds the workers (module docstring)."""
        self.batches.skip = skip
        if self.workers:
            self.batches.base_seed = epoch_base_seed(generator)
        if self.persistent:
            loader = self.loader
        else:
            loader = epoch_loader(self.items, self.batches, generator, **self.options)
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
