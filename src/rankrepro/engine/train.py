"""The training loop of one run.

The optimizers of the run's parameter groups (backbone, head or the whole net, the loss's proxies:
:mod:`rankrepro.engine.optim`); a per-epoch cosine or multi-step schedule; warm-up epochs during which
the groups marked ``warmup_frozen`` are frozen and the schedules pause (SupRank's ``warmup_step`` and
``warmup_keys``); for ``projection_init: pca``, the projection set to the
PCA of the training features before a fresh run; autocast on CUDA (the run's ``amp``); a checkpoint
after every epoch, every ``runtime.checkpoint_minutes`` inside one and on SIGTERM
(:mod:`rankrepro.engine.preemption`), from which a retried job resumes exactly; a per-epoch history. ``max_batches_per_epoch``
ends an epoch early (smoke runs on replicas; null trains the sampler's whole epoch). How fast it runs on
this machine (channels-last, cuDNN benchmark, persistent workers, pinned memory, ``torch.compile``, GPU
JPEG decoding) is the :class:`~rankrepro.engine.runtime.TrainRuntime`'s, never the run's.
"""

from __future__ import annotations

import csv
import io
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

from rankrepro import losses
from rankrepro.catalog import check_run
from rankrepro.losses.registry import data_context
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.data.transforms import test_transform, train_transform
from rankrepro.engine.checkpoint import load_checkpoint, save_checkpoint, set_rng_state
from rankrepro.engine.curve import TestCurve
from rankrepro.engine.device import autocast, grad_scaler, resolve_device
from rankrepro.engine.loader import TrainLoader
from rankrepro.engine.optim import build_optimizer, build_scheduler
from rankrepro.engine.preemption import CheckpointTimer, EpochProgress, StopSignal, TrainingStopped
from rankrepro.engine.runtime import TrainRuntime
from rankrepro.io import atomic_path, atomic_write_text
from rankrepro.models import build_model
from rankrepro.models.pca import init_projection_pca

# history.csv: epoch, loss, lr_<group> (the rate each parameter group trained at), seconds, batches,
# images_per_s, device (where the epoch ran: "cpu", or "cuda: <GPU name>"; with seconds, what the results index,
# rankrepro.tables.index, sums into GPU-hours and CPU-hours) and warmup (a warm-up epoch: groups frozen, schedule paused)
HISTORY_FIELDS = ["epoch", "loss", "seconds", "batches", "images_per_s", "device", "warmup"]


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_loss(block: dict, labels: np.ndarray, embed_dim: int, base: dict | None = None):
    """The run's loss (``{"name", "memory", **hyper-parameters}``, every one pinned by the plan), with its
    ``base_loss`` block (``base``; None: none) added, given the training set's sizes as context when a
    signature asks for them: ``num_classes`` (finest level), ``num_classes_per_level`` (finest first) and
    ``embedding_size`` (proxy-based losses)."""
    return losses.build(**block, base=base, context=data_context(labels.max(axis=0) + 1, embed_dim))


def _history_csv(history: list[dict]) -> str:
    buffer = io.StringIO()
    rates = [k for k in history[0] if k.startswith("lr_")] if history else []
    writer = csv.DictWriter(buffer, fieldnames=[*HISTORY_FIELDS[:2], *rates, *HISTORY_FIELDS[2:]])
    writer.writeheader()
    writer.writerows(history)
    return buffer.getvalue()


def train(run: dict, manifest_dir: str | Path, out_dir: str | Path, *, device: str = "auto", num_workers: int = 0,
          run_id: str = "", progress: bool = True, image_cache: str | Path | None = None,
          on_epoch_end: Callable[[int], None] | None = None, runtime: TrainRuntime | None = None,
          eval_image_cache: str | Path | None = None, eval_batch_size: int = 256) -> Path:
    """Train ``run`` (a complete record, ``run.json``) and write ``model.pt`` and ``history.csv`` into ``out_dir``.

    Every value comes from ``run``: a component that lacks one of its parameters (a run planned
    with a stale catalog) fails before anything is built. ``checkpoint.pt`` (in ``out_dir``) is
    written after every epoch, every ``runtime.checkpoint_minutes`` inside one, and on SIGTERM (then
    :class:`~rankrepro.engine.preemption.TrainingStopped` is raised), and removed once the final outputs
    exist; a job that finds it resumes from it, at the step where it was written. ``image_cache``: the resized image cache its datasets read (None: the originals;
    :class:`~rankrepro.data.images.ImageDataset`). ``runtime``: the speed settings
    (:class:`~rankrepro.engine.runtime.TrainRuntime`; None: its defaults), none of which changes a CPU run's results.
    With ``eval.every``, the test curve ``curve.csv`` (:mod:`rankrepro.engine.curve`), scored with
    ``eval_batch_size`` from ``eval_image_cache`` (the test transform's cache; None: the originals).
    """
    check_run(run)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "checkpoint.pt"
    dev = resolve_device(device)
    amp = run["amp"]
    runtime = runtime or TrainRuntime()
    runtime.check(dev)
    runtime.apply_backends(dev)

    seed_everything(run["seed"])
    manifest = read_manifest(manifest_dir).split(run["train_split"])
    dataset = ImageDataset(manifest, train_transform(run["images"]), contiguous=True, cache=image_cache,
                           face=run["images"].get("face"))
    sampler = build_sampler(run["sampler"], dataset.labels.numpy(), seed=run["seed"])
    model = build_model(run["model"]).to(dev, memory_format=runtime.memory_format(dev))
    if run["epochs"] == 0:  # an evaluate-only run: the model as built (its pretrained weights), nothing trained
        return _save_model(out_dir, run_id, run, model, criterion_state={}, history=[])
    forward = torch.compile(model) if runtime.compile else model  # the state dict stays the plain module's
    criterion = build_loss(run["loss"], dataset.labels.numpy(), run["model"]["embed_dim"],
                           run.get("base_loss")).to(dev)
    optimizer = build_optimizer(run["optimizer"], model, criterion)
    scheduler = build_scheduler(run["schedule"], optimizer, run["epochs"])
    scaler = grad_scaler(dev, amp)
    history: list[dict] = []
    start, resumed = 0, None

    state = load_checkpoint(ckpt_path)
    if state is not None:
        if state.get("run_id") != run_id:
            raise RuntimeError(f"{ckpt_path} belongs to run {state.get('run_id')!r}, not {run_id!r}; remove it")
        model.load_state_dict(state["model"])
        criterion.load_state_dict(state["criterion"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        history = state["history"]
        start = state["epoch"] + 1
        resumed = EpochProgress.from_state(state["partial"]) if state.get("partial") else None
        set_rng_state(state["rng"])
        where = (f"epoch {resumed.epoch + 1} after its first {resumed.batches} batches" if resumed
                 else f"the end of epoch {start}")
        print(f"resuming {run_id} from {ckpt_path} at {where}", file=sys.stderr)
    elif getattr(model, "projection_init", "random") == "pca":  # a fresh run only: a checkpoint holds the result
        init_projection_pca(model, ImageDataset(manifest, test_transform(run["images"]), contiguous=True,
                                                cache=image_cache, face=run["images"].get("face")), device=dev, amp=amp, max_images=model.pca_images, seed=run["seed"], num_workers=num_workers)

    curve = TestCurve(run, manifest_dir, out_dir, dev, rows=None if state is None else state.get("curve", []),
                      batch_size=eval_batch_size, num_workers=num_workers, image_cache=eval_image_cache)
    loader = TrainLoader(dataset, sampler, num_workers=num_workers, device=dev, runtime=runtime,
                         images_cfg=run["images"])
    timer = CheckpointTimer(runtime.checkpoint_minutes)

    def save(epoch_done: int, partial: EpochProgress | None = None) -> None:
        """The checkpoint after epoch ``epoch_done`` (0-based, -1: none) and ``partial``-ly into the next."""
        save_checkpoint(ckpt_path, run_id=run_id, epoch=epoch_done, model=model.state_dict(),
                        criterion=criterion.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), scaler=scaler.state_dict(), history=history,
                        curve=curve.rows, partial=None if partial is None else partial.state())
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
            generator = torch.Generator().manual_seed(position.seed)
            t0 = time.perf_counter()
            cap = run.get("max_batches_per_epoch")
            epoch_batches = loader.epoch(generator, skip=position.batches)
            bar = tqdm(epoch_batches, desc=f"epoch {epoch + 1}/{run['epochs']}", file=sys.stderr,
                       disable=not progress, mininterval=5.0, initial=position.batches,
                       total=min(len(sampler), cap) if cap else None)
            for images, labels in bar:
                with autocast(dev, amp):
                    embeddings = forward(images)
                loss = criterion(embeddings.float(), labels)
                if not torch.isfinite(loss):
                    kept = f"the last good checkpoint is {ckpt_path}" if ckpt_path.exists() else "no checkpoint yet"
                    raise NonFiniteLossError(f"run {run_id}: loss became {loss.item()} at epoch {epoch + 1}, "
                                             f"step {position.batches}; {kept}")
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                optimizer.step(scaler)
                scaler.update()
                position.add(len(images), loss.item())
                bar.set_postfix(loss=f"{loss.item():.4f}")
                if cap and position.batches >= cap:
                    break
                if stop.requested or timer.due():
                    save(epoch - 1, replace(position, seconds=position.seconds + time.perf_counter() - t0))
                    if stop.requested:
                        raise stopped(f"at epoch {epoch + 1} after {position.batches} batches")
            epoch_batches.close()
            seconds = position.seconds + time.perf_counter() - t0
            history.append({
                "epoch": epoch + 1, "loss": position.loss_sum / max(position.seen, 1),
                **{f"lr_{g['name']}": g["lr"] for g in optimizer.param_groups}, "seconds": round(seconds, 3),
                "batches": position.batches,
                "images_per_s": round(position.seen / seconds, 2) if seconds > 0 else math.nan, "warmup": warmup,
                "device": f"cuda: {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else dev.type,
            })
            if not warmup:
                scheduler.step()
            print(f"epoch {epoch + 1}: loss {history[-1]['loss']:.5f}, {history[-1]['images_per_s']} images/s",
                  file=sys.stderr)
            curve.after_epoch(model, epoch + 1)
            save(epoch)
            if on_epoch_end is not None:
                on_epoch_end(epoch)
            if stop.requested:
                raise stopped(f"after epoch {epoch + 1}")

    loader.close()
    model_path = _save_model(out_dir, run_id, run, model, criterion.state_dict(), history)
    ckpt_path.unlink(missing_ok=True)
    return model_path


def _save_model(out_dir: Path, run_id: str, run: dict, model, criterion_state: dict, history: list[dict]) -> Path:
    """Write the final ``model.pt`` (the model's and the loss's state) and ``history.csv``; return the model's path."""
    model_path = out_dir / "model.pt"
    with atomic_path(model_path) as tmp:
        torch.save({"run_id": run_id, "model_cfg": run["model"], "state_dict": model.state_dict(),
                    "criterion": criterion_state}, tmp)
    atomic_write_text(out_dir / "history.csv", _history_csv(history))
    return model_path
