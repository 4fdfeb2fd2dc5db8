"""The one training loop: every task (:mod:`rankrepro.engine.tasks`) trains through :func:`train`.

The loop does what every task shares; the task gives its parts, its batches and its step
(:class:`~rankrepro.engine.tasks.base.Task`):

- the run's seed into every RNG (Python, numpy, torch), then the task's parts; ``epochs: 0`` saves the model as
  built (an evaluate-only run: its pretrained weights);
- the optimizers of the run's parameter groups (backbone, head or the whole net, the loss's proxies:
  :mod:`rankrepro.engine.optim`) and their per-epoch schedules (cosine, multi-step, constant); warm-up epochs
  during which the groups marked ``warmup_frozen`` are frozen and the schedules pause (SupRank's
  ``warmup_step`` and ``warmup_keys``);
- the backward pass through the AMP scaler of the run's ``amp`` (CUDA), ``grad_clip`` (the global gradient norm
  of the optimizers' parameters, unscaled first), the optimizer step; a non-finite loss stops the run naming its
  last good checkpoint (:class:`NonFiniteLossError`). A step reads its loss from the device once, before the
  backward pass is queued (the check, the epoch's mean and the progress bar share that value), so the device
  runs the backward pass and the optimizer step while the host fetches the next batch;
- ``checkpoint.pt`` (:mod:`rankrepro.engine.checkpoint`: model, loss, optimizer, schedule, scaler, history, the
  position inside the epoch, every RNG and the task's own state) after every epoch, every
  ``runtime.checkpoint_minutes`` inside one and on SIGTERM (:mod:`rankrepro.engine.preemption`; then
  :class:`~rankrepro.engine.preemption.TrainingStopped`); a job that finds it resumes at the step where it was
  written, exactly (one it cannot resume from is moved aside with a warning and the run starts over:
  :mod:`rankrepro.engine.checkpoint`); it is removed once the final outputs exist;
- ``max_batches_per_epoch`` ends an epoch early (smoke runs on replicas; null: the sampler's whole epoch);
- ``history.csv`` and ``model.pt`` (:mod:`rankrepro.engine.model_file`).

Random numbers are drawn in a fixed order, which an exact resume relies on: the task's parts after the seed;
the task's start (the retrieval task's PCA, on a fresh start only) after the restore check; each epoch's seed
from torch's RNG at the start of the epoch. How fast it runs on this machine (channels-last, cuDNN benchmark,
loader workers, ``torch.compile``, GPU JPEG decoding) is the job's :class:`~rankrepro.record.runtime.JobSettings`,
never the run's.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from rankrepro.catalog import check_run
from rankrepro.device import grad_scaler, resolve_device
from rankrepro.engine.checkpoint import load_checkpoint, restore, save_checkpoint
from rankrepro.engine.model_file import history_row, save_model
from rankrepro.engine.optim import build_optimizer, build_scheduler
from rankrepro.engine.preemption import CheckpointTimer, EpochProgress, StopSignal, TrainingStopped
from rankrepro.engine.tasks import Task, task_of
from rankrepro.messages import ShortMessage
from rankrepro.record.runtime import JobSettings

__all__ = ["NonFiniteLossError", "optimise", "seed_everything", "train"]


class NonFiniteLossError(ShortMessage, RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def optimise(loss: torch.Tensor, optimizer, scaler, grad_clip: float | None = None) -> None:
    """One optimisation step on ``loss``: gradients zeroed, backward through the AMP ``scaler``, the global norm of
    the optimizers' gradients clipped to ``grad_clip`` (unscaled first; None: not clipped), each optimizer that
    received a gradient stepped (:class:`~rankrepro.engine.optim.Optimizers`), the scaler updated."""
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    if grad_clip is not None:
        for opt in optimizer.optimizers:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], grad_clip)
    optimizer.step(scaler)
    scaler.update()


def train(run: dict, manifest_dir: str | Path, out_dir: str | Path, settings: JobSettings | None = None, *,
          run_id: str = "", task: Task | None = None, on_epoch_end: Callable[[int], None] | None = None,
          **setting_values) -> Path:
    """Train ``run`` (a complete record, ``run.json``) on the manifest in ``manifest_dir`` and write ``model.pt``
    and ``history.csv`` into ``out_dir``; return the model's path (module docstring).

    ``settings``: the job's settings (None: the defaults), ``setting_values`` replacing some of its fields
    (``device="cpu"``, ``num_workers=2``, ...: :meth:`JobSettings.of`). ``task``: the task's instance (None: a new
    one of the run's ``task``). ``on_epoch_end(epoch)`` (0-based) runs after each epoch's checkpoint. Every value
    comes from ``run``: a component that lacks one of its parameters (a run planned with a stale catalog) fails
    before anything is built."""
    check_run(run)
    settings = JobSettings.of(settings, **setting_values)
    task = task if task is not None else task_of(run)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "checkpoint.pt"
    dev = resolve_device(settings.device)
    settings.runtime.check(dev)
    settings.runtime.apply_backends(dev)

    seed_everything(run["seed"])
    parts = task.build(run, Path(manifest_dir), out_dir, settings, dev)
    model, criterion, sampler = parts.model, parts.criterion, parts.sampler
    if run["epochs"] == 0:  # an evaluate-only run: the model as built (its pretrained weights), nothing trained
        return save_model(out_dir, run_id, run, model, criterion_state={}, history=[])
    optimizer = build_optimizer(run["optimizer"], model, criterion)
    scheduler = build_scheduler(run["schedule"], optimizer, run["epochs"])
    scaler = grad_scaler(dev, run["amp"])
    history: list[dict] = []
    start, resumed = 0, None

    state = load_checkpoint(ckpt_path, run_id, model=model, criterion=criterion)  # None: none, or one set aside
    if state is not None:
        history, start, resumed = restore(state, ckpt_path, model=model, criterion=criterion, optimizer=optimizer,
                                          scheduler=scheduler, scaler=scaler)
        where = (f"epoch {resumed.epoch + 1} after its first {resumed.batches} batches" if resumed
                 else f"the end of epoch {start}")
        print(f"resuming {run_id} from {ckpt_path} at {where}", file=sys.stderr)
    task.start(state)
    timer = CheckpointTimer(settings.runtime.checkpoint_minutes)
    cap = run.get("max_batches_per_epoch")

    def save(epoch_done: int, partial: EpochProgress | None = None) -> None:
        """The checkpoint after epoch ``epoch_done`` (0-based, -1: none) and ``partial``-ly into the next."""
        save_checkpoint(ckpt_path, run_id=run_id, epoch=epoch_done, model=model.state_dict(),
                        criterion=criterion.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), scaler=scaler.state_dict(), history=history,
                        partial=None if partial is None else partial.state(), **task.checkpoint_state())
        timer.restart()

    def stopped(where: str) -> TrainingStopped:
        return TrainingStopped(f"run {run_id}: stopped by SIGTERM {where}; saved {ckpt_path}, from which the same "
                               "command resumes (Snakemake's retry)")

    with StopSignal() as stop:
        for epoch in range(start, run["epochs"]):
            warmup = epoch < run["warmup_epochs"]
            optimizer.set_warmup(warmup)
            model.train()
            sampler.set_epoch(epoch)
            if hasattr(criterion, "set_epoch"):
                criterion.set_epoch(epoch)
            position = resumed if resumed is not None and resumed.epoch == epoch else \
                EpochProgress(epoch, seed=int(torch.randint(0, 2**62, (1,))))
            t0 = time.perf_counter()
            epoch_batches = task.batches(position, cap)
            bar = tqdm(epoch_batches, desc=f"epoch {epoch + 1}/{run['epochs']}", file=sys.stderr,
                       disable=not settings.progress, mininterval=5.0, initial=position.batches,
                       total=min(len(sampler), cap) if cap else len(sampler))
            for batch in bar:
                loss, images = task.step(batch)
                value = loss.item()  # the step's one host sync: before the backward pass is queued, not after it
                if not math.isfinite(value):
                    kept = f"the last good checkpoint is {ckpt_path}" if ckpt_path.exists() else "no checkpoint yet"
                    raise NonFiniteLossError(f"run {run_id}: loss became {value} at epoch {epoch + 1}, "
                                             f"step {position.batches}; {kept}")
                optimise(loss, optimizer, scaler, run.get("grad_clip"))
                position.add(images, value)
                bar.set_postfix(loss=f"{value:.4f}")
                if cap and position.batches >= cap:
                    break
                if stop.requested or timer.due():
                    save(epoch - 1, replace(position, seconds=position.seconds + time.perf_counter() - t0))
                    if stop.requested:
                        raise stopped(f"at epoch {epoch + 1} after {position.batches} batches")
            if hasattr(epoch_batches, "close"):
                epoch_batches.close()
            history.append(history_row(epoch, position, position.seconds + time.perf_counter() - t0, optimizer, dev,
                                       warmup))
            if not warmup:
                scheduler.step()
            print(f"epoch {epoch + 1}: loss {history[-1]['loss']:.5f}, {history[-1]['images_per_s']} images/s",
                  file=sys.stderr)
            task.after_epoch(model, epoch + 1)
            save(epoch)
            if on_epoch_end is not None:
                on_epoch_end(epoch)
            if stop.requested:
                raise stopped(f"after epoch {epoch + 1}")

    task.close()
    model_path = save_model(out_dir, run_id, run, model, criterion.state_dict(), history)
    ckpt_path.unlink(missing_ok=True)
    return model_path
