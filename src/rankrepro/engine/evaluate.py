"""Embed a test split with a trained model and compute its retrieval metrics."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data.transforms import test_transform
from rankrepro.engine.device import autocast, resolve_device
from rankrepro.io import atomic_write_json
from rankrepro.metrics import compute
from rankrepro.metrics.retrieval import retrieval_metrics
from rankrepro.models import build_model


@torch.no_grad()
def embed(model, dataset, device: torch.device, amp: str, batch_size: int = 256, num_workers: int = 0,
          progress: bool = True) -> np.ndarray:
    """L2-normalised embeddings of every item of ``dataset``, in order, as float32."""
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda")
    chunks = []
    for images, _, _ in tqdm(loader, desc="embedding", file=sys.stderr, disable=not progress, mininterval=5.0):
        with autocast(device, amp):
            chunks.append(model(images.to(device, non_blocking=True)).float().cpu())
    return torch.cat(chunks).numpy()


def load_model(model_path: str | Path, device: torch.device):
    state = torch.load(model_path, map_location="cpu", weights_only=False)
    cfg = dict(state["model_cfg"], pretrained="none")
    model = build_model(cfg)
    model.load_state_dict(state["state_dict"])
    return model.to(device)


def evaluate(run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path, *,
             device: str = "auto", num_workers: int = 0, batch_size: int = 256, run_id: str = "",
             progress: bool = True) -> dict:
    """Write ``metrics.json``: the run's metrics on its test split (same-set protocol).

    ``run["eval"]``: ``recall_at`` (R@k, mAP@R, RP at the finest level, PML's definitions) or
    ``metrics``: names for :func:`rankrepro.metrics.compute` (e.g. ``["R@1", "mAP@R", "H-AP",
    "ASI", "NDCG"]``; hierarchical metrics use every label level of the manifest)."""
    dev = resolve_device(device)
    eval_cfg = run["eval"]
    manifest = read_manifest(manifest_dir)
    test = manifest.split(eval_cfg.get("split", "test"))
    model = load_model(model_path, dev)
    t0 = time.perf_counter()
    embeddings = embed(model, ImageDataset(test, test_transform(run["images"])), dev, run.get("amp", "fp16"),
                       batch_size=batch_size, num_workers=num_workers, progress=progress)
    t_embed = time.perf_counter() - t0
    if eval_cfg.get("metrics"):  # any metric of rankrepro.metrics.compute, on every label level
        metrics = compute(embeddings, test.labels(), metrics=list(eval_cfg["metrics"]))
    else:
        metrics = retrieval_metrics(embeddings, test.labels(), recall_at=tuple(eval_cfg["recall_at"]))
    result = {
        "run_id": run_id,
        "dataset": run["dataset"],
        "split": eval_cfg.get("split", "test"),
        "replica": bool(manifest.meta.get("replica", False)),
        "n_images": int(len(test.table)),
        "metrics": metrics,
        "seconds": {"embed": round(t_embed, 3), "metrics": round(time.perf_counter() - t0 - t_embed, 3)},
    }
    atomic_write_json(out_path, result)
    return result
