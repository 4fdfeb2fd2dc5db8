"""The training loop of one run.

Adam (or SGD) with one learning rate for the backbone and one for the head (and
one for loss parameters such as proxies); a per-epoch cosine or multi-step
schedule; warm-up epochs during which the backbone is frozen and the schedules
pause (SupRank's ``warmup_step``); autocast on CUDA; a checkpoint after every
epoch from which a retried job resumes exactly; a per-epoch history.
"""

from __future__ import annotations

import csv
import io
import math
import random
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from rankrepro import losses
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.data.transforms import train_transform
from rankrepro.engine.checkpoint import load_checkpoint, save_checkpoint, set_rng_state
from rankrepro.engine.device import autocast, grad_scaler, resolve_device
from rankrepro.io import atomic_path, atomic_write_text
from rankrepro.models import build_model

HISTORY_FIELDS = ["epoch", "loss", "lr_backbone", "lr_head", "seconds", "images_per_s", "backbone_frozen"]


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_loss(cfg: dict, labels: np.ndarray, embed_dim: int):
    """Build the run's loss, giving it the training set's sizes when its signature asks:
    ``num_classes`` (finest level), ``num_classes_per_level`` (finest first) and
    ``embedding_size`` (for proxy-based losses)."""
    sizes = {"num_classes": int(labels[:, 0].max()) + 1,
             "num_classes_per_level": [int(c) + 1 for c in labels.max(axis=0)],
             "embedding_size": embed_dim}
    cfg = dict(cfg)
    accepted = losses.accepted_hparams(cfg["name"])
    cfg.update({k: v for k, v in sizes.items() if k in accepted and k not in cfg})
    return losses.build(**cfg)


def build_optimizer(cfg: dict, model, criterion) -> torch.optim.Optimizer:
    """One optimizer, param groups ``backbone``, ``head`` and (if any) ``loss``."""
    groups = [
        {"name": "backbone", "params": list(model.backbone.parameters()), "lr": cfg["lr_backbone"]},
        {"name": "head", "params": list(model.head.parameters()), "lr": cfg["lr_head"]},
    ]
    loss_params = [p for p in criterion.parameters() if p.requires_grad]
    if loss_params:
        groups.append({"name": "loss", "params": loss_params, "lr": cfg.get("lr_loss", cfg["lr_head"])})
    name, wd = cfg["name"], cfg.get("weight_decay", 0.0)
    if name == "adam":
        return torch.optim.Adam(groups, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(groups, weight_decay=wd)
    if name == "sgd":
        return torch.optim.SGD(groups, weight_decay=wd, momentum=cfg.get("momentum", 0.9),
                               nesterov=cfg.get("nesterov", False))
    raise ValueError(f"unknown optimizer {name!r}; allowed: ['adam', 'adamw', 'sgd']")


def build_scheduler(cfg: dict, optimizer, epochs: int):
    """Per-epoch schedule: ``cosine`` (T_max defaults to the number of epochs, as in
    SupRank's code), ``multistep`` (milestones, gamma) or ``constant``."""
    name = cfg["name"]
    if name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.get("t_max") or epochs,
                                                          eta_min=cfg.get("eta_min", 0.0))
    if name == "multistep":
        return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=cfg["milestones"], gamma=cfg["gamma"])
    if name == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    raise ValueError(f"unknown schedule {name!r}; allowed: ['constant', 'cosine', 'multistep']")


def _lr(optimizer, name: str) -> float:
    return next(g["lr"] for g in optimizer.param_groups if g["name"] == name)


def _history_csv(history: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HISTORY_FIELDS)
    writer.writeheader()
    writer.writerows(history)
    return buffer.getvalue()


def train(run: dict, manifest_dir: str | Path, out_dir: str | Path, *, device: str = "auto", num_workers: int = 0,
          run_id: str = "", progress: bool = True,
          on_epoch_end: Callable[[int], None] | None = None) -> Path:
    """Train ``run`` and write ``model.pt`` and ``history.csv`` into ``out_dir``.

    ``checkpoint.pt`` (in ``out_dir``) is written after every epoch and removed
    once the final outputs exist; a job that finds it resumes from it.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "checkpoint.pt"
    dev = resolve_device(device)
    amp = run.get("amp", "fp16")

    seed_everything(run["seed"])
    manifest = read_manifest(manifest_dir).split(run.get("train_split", "train"))
    dataset = ImageDataset(manifest, train_transform(run["images"]), contiguous=True)
    sampler = build_sampler(run["sampler"], dataset.labels.numpy(), seed=run["seed"])
    model = build_model(run["model"]).to(dev)
    criterion = build_loss(run["loss"], dataset.labels.numpy(), run["model"]["embed_dim"]).to(dev)
    optimizer = build_optimizer(run["optimizer"], model, criterion)
    scheduler = build_scheduler(run["schedule"], optimizer, run["epochs"])
    scaler = grad_scaler(dev, amp)
    history: list[dict] = []
    start = 0

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
        set_rng_state(state["rng"])
        print(f"resuming {run_id} from {ckpt_path} after epoch {state['epoch']}", file=sys.stderr)

    for epoch in range(start, run["epochs"]):
        frozen = epoch < run.get("warmup_epochs", 0)
        model.backbone.requires_grad_(not frozen)
        model.train()
        sampler.set_epoch(epoch)
        if hasattr(criterion, "set_epoch"):
            criterion.set_epoch(epoch)
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
        loader = DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers, generator=generator,
                            pin_memory=dev.type == "cuda", persistent_workers=False)
        t0, seen, total = time.perf_counter(), 0, 0.0
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{run['epochs']}", file=sys.stderr, disable=not progress,
                   mininterval=5.0)
        for step, (images, labels, _) in enumerate(bar):
            images, labels = images.to(dev, non_blocking=True), labels.to(dev, non_blocking=True)
            with autocast(dev, amp):
                embeddings = model(images)
            loss = criterion(embeddings.float(), labels)
            if not torch.isfinite(loss):
                kept = f"the last good checkpoint is {ckpt_path}" if ckpt_path.exists() else "no checkpoint yet"
                raise NonFiniteLossError(f"run {run_id}: loss became {loss.item()} at epoch {epoch + 1}, "
                                         f"step {step}; {kept}")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            seen += len(images)
            total += loss.item() * len(images)
            bar.set_postfix(loss=f"{loss.item():.4f}")
        seconds = time.perf_counter() - t0
        history.append({
            "epoch": epoch + 1, "loss": total / max(seen, 1), "lr_backbone": _lr(optimizer, "backbone"),
            "lr_head": _lr(optimizer, "head"), "seconds": round(seconds, 3),
            "images_per_s": round(seen / seconds, 2) if seconds > 0 else math.nan, "backbone_frozen": frozen,
        })
        if not frozen:
            scheduler.step()
        print(f"epoch {epoch + 1}: loss {history[-1]['loss']:.5f}, {history[-1]['images_per_s']} images/s",
              file=sys.stderr)
        save_checkpoint(ckpt_path, run_id=run_id, epoch=epoch, model=model.state_dict(),
                        criterion=criterion.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), scaler=scaler.state_dict(), history=history)
        if on_epoch_end is not None:
            on_epoch_end(epoch)

    model_path = out_dir / "model.pt"
    with atomic_path(model_path) as tmp:
        torch.save({"run_id": run_id, "model_cfg": run["model"], "state_dict": model.state_dict(),
                    "criterion": criterion.state_dict()}, tmp)
    atomic_write_text(out_dir / "history.csv", _history_csv(history))
    ckpt_path.unlink(missing_ok=True)
    return model_path
