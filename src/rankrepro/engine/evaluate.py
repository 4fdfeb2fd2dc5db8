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


#: protocol (the manifest's ``meta.json``) -> the splits it embeds: one same-set split, or query and gallery
PROTOCOL_SPLITS = {"same-set": ("test",), "query-gallery": ("query", "gallery")}


def evaluate(run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path, *,
             device: str = "auto", num_workers: int = 0, batch_size: int = 256, run_id: str = "",
             progress: bool = True) -> dict:
    """Write ``metrics.json``: the run's ``eval.metrics`` under the dataset's protocol.

    The protocol comes from the manifest (``meta["protocol"]``, e.g. ``same-set``: every test
    image queries the rest of the test set; ``query-gallery``: the query split against the
    gallery split); embeddings and metrics are computed on ``device`` (the job's GPU when it
    holds one). Metric names are those of :func:`rankrepro.metrics.compute` (hierarchical
    metrics use every label level of the manifest)."""
    dev = resolve_device(device)
    manifest = read_manifest(manifest_dir)
    protocol = manifest.meta["protocol"]
    if protocol not in PROTOCOL_SPLITS:
        raise NotImplementedError(f"{Path(manifest_dir) / 'meta.json'}: evaluation of protocol {protocol!r} is not "
                                  f"wired into training runs yet (supported: {', '.join(PROTOCOL_SPLITS)})")
    model = load_model(model_path, dev)
    t0 = time.perf_counter()
    parts = []
    for split in PROTOCOL_SPLITS[protocol]:
        rows = manifest.split(split)
        emb = embed(model, ImageDataset(rows, test_transform(run["images"])), dev, run["amp"],
                    batch_size=batch_size, num_workers=num_workers, progress=progress)
        parts += [emb, rows.labels()]
    t_embed = time.perf_counter() - t0
    metrics = compute(*parts, metrics=list(run["eval"]["metrics"]), protocol=protocol, device=dev)
    result = {
        "run_id": run_id,
        "dataset": run["dataset"],
        "protocol": protocol,
        "splits": list(PROTOCOL_SPLITS[protocol]),
        "replica": bool(manifest.meta.get("replica", False)),
        "n_images": int(sum(len(p) for p in parts[::2])),
        "metrics": metrics,
        "seconds": {"embed": round(t_embed, 3), "metrics": round(time.perf_counter() - t0 - t_embed, 3)},
    }
    atomic_write_json(out_path, result)
    return result
