"""What a task gives the training loop: its parts, its batches, its step, a few hooks and its evaluation.

The loop (:func:`rankrepro.engine.loop.train`) seeds, builds the optimizer groups and schedule, restores a
checkpoint, runs the epochs (warm-up, timed and SIGTERM checkpoints, the non-finite guard, the backward pass
through the AMP scaler, gradient clipping, the optimizer step, history) and writes ``model.pt``. A task writes
only what differs, as the methods of a :class:`Task` subclass; the loop builds one instance per run and calls,
in this order:

1. :meth:`Task.build` right after seeding: the :class:`Parts` (model on the device, loss, batch sampler), built
   in the order they draw random numbers;
2. :meth:`Task.start` after the checkpoint, if any, is restored (its state, or None for a fresh run): what must
   come after the restore (the retrieval task's PCA initialisation on a fresh run, its test curve, its loader);
3. per epoch, :meth:`Task.batches` (the epoch's batches from a position, :class:`~rankrepro.engine.preemption.EpochProgress`),
   per batch :meth:`Task.step` (the loss to minimise and the batch's number of images), and after the epoch
   :meth:`Task.after_epoch`;
4. :meth:`Task.checkpoint_state` at every checkpoint (extra keys it restores from in :meth:`Task.start`);
5. :meth:`Task.close` when training ends.

``python -m rankrepro bench train`` times the same parts, batches and step (:class:`rankrepro.bench.pipeline.TaskBench`),
and :meth:`Task.infer` for inference.

The task's ``facts`` (:class:`~rankrepro.record.tasks.TaskFacts`) reach the planner through the catalog, and
``evaluator`` writes a trained run's ``metrics.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from rankrepro.engine.preemption import EpochProgress
from rankrepro.record.runtime import JobSettings
from rankrepro.record.tasks import TaskFacts

__all__ = ["Parts", "Task"]


@dataclass
class Parts:
    """What the loop trains: ``model`` (on the device; its state dict is ``model.pt``'s), ``criterion`` (the loss,
    a module whose state the checkpoint keeps) and ``sampler`` (the batch sampler: ``set_epoch`` and ``len``)."""

    model: torch.nn.Module
    criterion: torch.nn.Module
    sampler: Any


class Task:
    """A task's part of training and evaluation (module docstring); registered in
    :data:`rankrepro.engine.tasks.TASKS`."""

    #: what the planner knows of the task (catalog ``facts``)
    facts: ClassVar[TaskFacts] = TaskFacts()
    #: ``evaluator(run, manifest_dir, model_path, out_path, *, device, num_workers, batch_size, run_id, progress,
    #: image_cache) -> dict``: writes ``metrics.json`` and returns it
    evaluator: ClassVar[Callable[..., dict]]

    def __init__(self) -> None:
        self.run: dict = {}

    def build(self, run: dict, manifest_dir: Path, out_dir: Path, settings: JobSettings,
              device: torch.device) -> Parts:
        """The run's parts, right after the loop seeded every RNG with the run's seed."""
        raise NotImplementedError

    def start(self, state: dict | None) -> None:
        """After the restore (``state``: the checkpoint, None on a fresh start) and before the first epoch."""

    def batches(self, position: EpochProgress, cap: int | None) -> Iterable:
        """The batches of ``position.epoch`` from batch ``position.batches`` on (at most ``cap`` in the epoch,
        None: all), drawn from ``position.seed``. The loop closes the iterable (when it has ``close``)."""
        raise NotImplementedError

    def step(self, batch) -> tuple[torch.Tensor, int]:
        """The loss of one ``batch`` (a scalar tensor, before backward) and its number of images."""
        raise NotImplementedError

    def infer(self, batch) -> int:
        """The evaluation's forward pass on a training ``batch`` (the model in eval mode, no gradient); returns its
        number of images. What ``python -m rankrepro bench train`` times as inference (a task it times gives it)."""
        raise NotImplementedError

    def after_epoch(self, model: torch.nn.Module, epoch: int) -> None:
        """After epoch ``epoch`` (1-based) and its schedule step, before its checkpoint."""

    def checkpoint_state(self) -> dict:
        """Extra keys every checkpoint stores (read back by :meth:`start`)."""
        return {}

    def close(self) -> None:
        """Training ended: release what :meth:`start` holds (loader workers)."""

    def evaluate(self, run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path,
                 settings: JobSettings, run_id: str = "") -> dict:
        """Write ``out_path`` (``metrics.json``) for the model in ``model_path``: the task's ``evaluator`` with the
        job's device, workers, progress, evaluation batch and evaluation image cache."""
        return type(self).evaluator(run, manifest_dir, model_path, out_path, device=settings.device,
                                    num_workers=settings.num_workers, batch_size=settings.eval_batch_size,
                                    run_id=run_id, progress=settings.progress, image_cache=settings.eval_image_cache)
