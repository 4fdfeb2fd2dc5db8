"""The retrieval task's evaluation: embed the evaluation splits with a trained model and compute their metrics."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import Manifest, read_manifest
from rankrepro.data.transforms import test_transform
from rankrepro.device import autocast, resolve_device
from rankrepro.record.selection import CURVE_FILE, read_curve, selection_record
from rankrepro.engine.model_file import load_model
from rankrepro.io import atomic_write_json
from rankrepro.record.tasks import DEFAULT_TASK
from rankrepro.metrics import compute, protocols


@torch.no_grad()
def embed(model, dataset, device: torch.device, amp: str, batch_size: int = 256, num_workers: int = 0,
          progress: bool = True, generator: torch.Generator | None = None) -> np.ndarray:
    """L2-normalised embeddings of every item of ``dataset``, in order, as float32. ``generator``: where the
    loader draws its base seed (None: torch's global random state; a fresh ``torch.Generator()`` consumes none)."""
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda", generator=generator)
    chunks = []
    for images, _, _ in tqdm(loader, desc="embedding", file=sys.stderr, disable=not progress, mininterval=5.0):
        with autocast(device, amp):
            chunks.append(model(images.to(device, non_blocking=True)).float().cpu())
    return torch.cat(chunks).numpy()


def distinct_images(parts: dict[str, Manifest]) -> tuple[Manifest, dict[str, np.ndarray]]:
    """The rows of ``parts`` ({split: its rows}) with one row per distinct ``path`` (first
    occurrence, in split order), and per split each row's position in it: what is embedded once
    when an image is listed in several splits (VehicleID's overlapping test lists)."""
    tables = list(parts.values())
    table = pd.concat([t.table for t in tables], ignore_index=True)
    rows = np.concatenate([t.rows if t.rows is not None else np.arange(len(t.table)) for t in tables])
    codes, _ = pd.factorize(table["path"])  # codes numbered in order of first appearance
    first = np.unique(codes, return_index=True)[1]
    distinct = Manifest(table.iloc[first].reset_index(drop=True), tables[0].meta, tables[0].directory, rows[first])
    bounds = np.cumsum([0] + [len(t.table) for t in tables])
    return distinct, {split: codes[a:b] for split, a, b in zip(parts, bounds[:-1], bounds[1:])}


def embed_parts(model, parts: dict[str, Manifest], one_pass: bool, run: dict, device: torch.device,
                image_cache: str | Path | None = None, **loader) -> tuple[dict[str, np.ndarray], int]:
    """``({split: [rows, D] embeddings}, number of images embedded)`` of ``parts`` with the run's
    test transform, read from ``image_cache`` (None: the originals): each distinct image once, in one
    pass (``one_pass``), or each split in its own pass
    (:attr:`rankrepro.metrics.protocols.base.Protocol.one_embedding_pass`)."""
    transform, face = test_transform(run["images"]), run["images"].get("face")
    if not one_pass:
        out = {split: embed(model, ImageDataset(rows, transform, cache=image_cache, face=face), device, run["amp"],
                            **loader)
               for split, rows in parts.items()}
        return out, int(sum(len(e) for e in out.values()))
    distinct, where = distinct_images(parts)
    emb = embed(model, ImageDataset(distinct, transform, cache=image_cache, face=face), device, run["amp"], **loader)
    return {split: emb[where[split]] for split in parts}, len(distinct.table)


def score(model, manifest: Manifest, run: dict, device: torch.device, *, batch_size: int = 256,
          num_workers: int = 0, progress: bool = True, image_cache: str | Path | None = None) -> dict:
    """``model``'s ``{"protocol", "splits", "n_images", "metrics", "seconds": {"embed", "metrics"}}`` on the
    evaluation splits of ``manifest`` under the protocol it names (what :func:`evaluate` records; the
    test curve of :mod:`rankrepro.engine.curve` scores a model in training with it). Leaves ``model``
    in eval mode."""
    protocol = protocols.of_manifest(manifest)
    parts, inputs = protocol.manifest_inputs(manifest)
    t0 = time.perf_counter()
    embeddings, n_images = embed_parts(model, parts, protocol.one_embedding_pass, run, device, image_cache,
                                       batch_size=batch_size, num_workers=num_workers, progress=progress)
    t_embed = time.perf_counter() - t0
    args, kwargs = inputs(embeddings)
    names = list(run["eval"].get("metrics") or ()) or None  # None: the protocol's DEFAULT_METRICS
    metrics = compute(*args, metrics=names, protocol=protocol.name, device=device, **kwargs)
    return {"protocol": protocol.name, "splits": list(parts), "n_images": n_images, "metrics": metrics,
            "seconds": {"embed": round(t_embed, 3), "metrics": round(time.perf_counter() - t0 - t_embed, 3)}}


def evaluate(run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path, *,
             device: str = "auto", num_workers: int = 0, batch_size: int = 256, run_id: str = "",
             progress: bool = True, image_cache: str | Path | None = None) -> dict:
    """Write ``metrics.json``: the run's ``eval.metrics`` under the dataset's protocol.

    The protocol is the one the manifest names (``meta["protocol"]``,
    :func:`rankrepro.metrics.protocols.of_manifest`): it says which splits are embedded and which
    are queries and galleries (e.g. ``same-set``: every test image queries the rest of the test
    set; ``query-gallery``: the query split against the gallery split), and how they are scored.
    Embeddings and metrics are computed on ``device`` (the job's GPU when it holds one). Metric
    names are those of :func:`rankrepro.metrics.compute` (hierarchical metrics use every label
    level of the manifest); an empty ``eval.metrics`` computes the protocol's
    :data:`~rankrepro.metrics.protocols.DEFAULT_METRICS`.

    The keys of ``metrics`` are the protocol's: the bare names (same-set, query-gallery; GLDv2
    adds ``n_scored``), ``"small/R@1"`` ... ``"large/<m>"`` (VehicleID), ``"fine/<m>"``,
    ``"middle/<m>"``, ``"coarse/<m>"``, ``"overall/<m>"`` (DyML Vehicle / Animal),
    ``"level0/<m>"`` ... ``"overall/<m>"`` (DyML Product), with the protocol's counts
    (``n_queries``, ``.../n_queries`` ...). ``splits`` lists the splits embedded; ``n_images``
    counts the images embedded (each distinct image once where splits share images). ``image_cache``:
    the resized image cache the embedded datasets read (None: the originals).

    ``metrics`` are the final model's; ``epoch``, ``select`` and ``best_test`` (the best epoch on the
    test set, from the test curve ``curve.csv`` beside ``model_path`` when the run has one) are
    :func:`rankrepro.record.selection.selection_record`'s.

    The run's ``eval.datasets`` (other datasets, their manifests beside ``manifest_dir``:
    ``<parent>/<name>``) are scored too, each under its own protocol from its original images: their
    metrics join ``metrics`` as ``"<name>/<metric>"`` and ``other_datasets`` records their protocol,
    splits, image count and seconds (the test curve scores the run's own dataset only: the others' best epoch is the last)."""
    dev = resolve_device(device)
    manifest = read_manifest(manifest_dir)
    others = {name: read_manifest(Path(manifest_dir).parent / name) for name in run["eval"].get("datasets", [])}
    for m in (manifest, *others.values()):  # an unknown protocol, or one of another task, fails before the model loads
        protocols.of_manifest(m, task=run.get("task", DEFAULT_TASK))
    model = load_model(model_path, dev)
    options = {"batch_size": batch_size, "num_workers": num_workers, "progress": progress}
    scored = score(model, manifest, run, dev, image_cache=image_cache, **options)
    curve = read_curve(Path(model_path).parent / CURVE_FILE)
    metrics, other_records = dict(scored["metrics"]), {}
    for name, other in others.items():
        extra = score(model, other, run, dev, **options)
        metrics.update({f"{name}/{key}": value for key, value in extra.pop("metrics").items()})
        other_records[name] = {**extra, "replica": bool(other.meta.get("replica", False))}
    result = {
        "run_id": run_id,
        "dataset": run["dataset"],
        "protocol": scored["protocol"],
        "splits": scored["splits"],
        "replica": bool(manifest.meta.get("replica", False)) or any(r["replica"] for r in other_records.values()),
        "n_images": scored["n_images"],
        "metrics": metrics,
        "seconds": scored["seconds"],
        **({"other_datasets": other_records} if other_records else {}),
        **selection_record(run, metrics, curve),
    }
    atomic_write_json(out_path, result)
    return result
