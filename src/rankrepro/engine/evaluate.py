"""Embed the evaluation splits with a trained model and compute their retrieval metrics."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import Manifest, read_manifest
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

#: VehicleID test list (manifest split) -> the papers' subset name (Smooth-AP §5, FastAP, BIER:
#: small / medium / large = 800 / 1,600 / 2,400 vehicles); metric keys are ``"<subset>/<metric>"``
VEHICLEID_SUBSETS = {"test_800": "small", "test_1600": "medium", "test_2400": "large"}

#: every protocol :func:`evaluate` runs: the plain ones and the named ones of :func:`protocol_inputs`
SUPPORTED_PROTOCOLS = (*PROTOCOL_SPLITS, "vehicleid", "dyml", "gldv2-suprank")


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


def _column(rows: Manifest, column: str) -> np.ndarray:
    return rows.table[column].to_numpy(dtype=np.int64)


def _file_names(rows: Manifest, what: str, unique: bool = False) -> np.ndarray:
    names = np.array([Path(p).name for p in rows.table["path"]], dtype=object)
    if unique and len(set(names.tolist())) != len(names):
        dup = pd.Series(names).duplicated().to_numpy().nonzero()[0][0]
        raise ValueError(f"{what}: file name {names[dup]!r} appears twice ({rows.describe_row(int(dup))}), so a "
                         "query's own image cannot be told apart by name")
    return names


def gldv2_ground_truth(manifest: Manifest, query: Manifest, gallery: Manifest) -> list[np.ndarray]:
    """Per query row, the gallery positions of its ground-truth index images, in the order of
    ``retrieval_solution_v2.1.csv`` (``meta["ground_truth"]``, relative to ``meta["root"]``).

    A query row is matched to the csv's ``id`` by the file stem of its path, and an index image
    id to the gallery row whose path has that stem. A query missing from the csv, or whose
    *first* ground-truth image (the one that gives its label) is not in the gallery, is an
    error naming it; other ground-truth ids missing from the gallery are left out (the
    ``gldv2-suprank`` protocol reads only the first)."""
    if not manifest.meta.get("ground_truth"):
        raise ValueError(f"{manifest.directory}: meta.json has no 'ground_truth' (the path of "
                         "retrieval_solution_v2.1.csv relative to 'root'), which protocol gldv2-suprank needs")
    file = manifest.root / manifest.meta["ground_truth"]
    table = pd.read_csv(file, dtype=str, keep_default_na=False, na_filter=False)
    missing = [c for c in ("id", "images") if c not in table.columns]
    if missing:
        raise ValueError(f"{file}: header {list(table.columns)} lacks {missing}")
    solution = dict(zip(table["id"].str.strip(), table["images"].str.strip()))
    stems = [Path(p).stem for p in gallery.table["path"]]
    position = {stem: i for i, stem in enumerate(stems)}
    if len(position) != len(stems):
        dup = pd.Series(stems).duplicated().to_numpy().nonzero()[0][0]
        raise ValueError(f"gallery image id {stems[dup]!r} appears twice ({gallery.describe_row(int(dup))})")
    out = []
    for i, path in enumerate(query.table["path"]):
        image_id = Path(path).stem
        if image_id not in solution:
            raise ValueError(f"query image {image_id} ({query.describe_row(i)}) is not in {file}")
        ids = solution[image_id].split()
        if not ids or ids == ["None"]:
            out.append(np.empty(0, np.int64))
            continue
        if ids[0] not in position:
            raise ValueError(f"{file}: the first ground-truth image {ids[0]} of query {image_id} is not in the "
                             "gallery split")
        out.append(np.array([position[g] for g in ids if g in position], np.int64))
    return out


def protocol_inputs(manifest: Manifest) -> tuple[dict[str, Manifest], Callable[[dict], tuple[tuple, dict]]]:
    """What a named protocol embeds and how it is scored.

    Returns ``(parts, inputs)``: ``parts`` {split: its rows} (the splits to embed, in order) and
    ``inputs(embeddings)`` ({split: [rows, D] embeddings}) -> the positional and keyword arguments
    of :func:`rankrepro.metrics.compute` besides ``metrics``, ``protocol`` and ``device``.
    Everything read from the manifest (labels, ids, ground truth) is read here, before any
    image is embedded, so a malformed manifest fails fast.

    - ``vehicleid``: the lists ``test_800`` / ``test_1600`` / ``test_2400`` as the subsets
      ``small`` / ``medium`` / ``large`` (:data:`VEHICLEID_SUBSETS`), all-vs-all within each,
      every label level (vehicle, model; an unknown model is -1).
    - ``dyml`` with ``meta["benchmarks"]`` (Vehicle, Animal): per level, its query and gallery
      splits with that level's column as labels; ``query_ids`` / ``gallery_ids`` are the file
      names (the query and gallery folders differ, ``bmk_<level>/query/`` vs ``.../gallery/``, so
      relative paths never match), which removes each query's own image from its gallery.
      Without (Product): the ``test`` split, same-set, its three label columns.
    - ``gldv2-suprank``: ``query`` against ``gallery`` (the index) with every label level of the
      gallery (H-GLDv2: -1 = no hierarchy, dropped by the protocol) and the ground-truth
      positions of :func:`gldv2_ground_truth`.
    """
    protocol = manifest.meta["protocol"]
    if protocol == "vehicleid":
        parts = {split: manifest.split(split) for split in VEHICLEID_SUBSETS}
        labels = np.concatenate([rows.labels() for rows in parts.values()])
        bounds = np.cumsum([0] + [len(rows.table) for rows in parts.values()])
        subsets = {VEHICLEID_SUBSETS[s]: np.arange(a, b) for s, a, b in zip(parts, bounds[:-1], bounds[1:])}

        def inputs(emb):
            return (np.concatenate([emb[s] for s in parts]), labels), {"subsets": subsets}
        return parts, inputs
    if protocol == "dyml" and not manifest.meta.get("benchmarks"):
        parts = {"test": manifest.split("test")}
        labels = parts["test"].labels()
        return parts, lambda emb: ((emb["test"], labels), {})
    if protocol == "dyml":
        levels = manifest.meta["levels"]  # meta.json sorts its keys: benchmarks in level order, finest first
        benchmarks = dict(sorted(manifest.meta["benchmarks"].items(),
                                 key=lambda item: levels.index(item[0]) if item[0] in levels else len(levels)))
        parts, spec = {}, {}
        for level, bmk in benchmarks.items():
            query, gallery = manifest.split(bmk["query"]), manifest.split(bmk["gallery"])
            parts[bmk["query"]], parts[bmk["gallery"]] = query, gallery
            spec[level] = {"query_labels": _column(query, bmk["column"]),
                           "gallery_labels": _column(gallery, bmk["column"]),
                           "query_ids": _file_names(query, f"split {bmk['query']}"),
                           "gallery_ids": _file_names(gallery, f"split {bmk['gallery']}", unique=True)}

        def inputs(emb):
            return (None, None), {"benchmarks": {level: dict(s, query=emb[benchmarks[level]["query"]],
                                                             gallery=emb[benchmarks[level]["gallery"]])
                                                 for level, s in spec.items()}}
        return parts, inputs
    if protocol == "gldv2-suprank":
        parts = {"query": manifest.split("query"), "gallery": manifest.split("gallery")}
        ground_truth = gldv2_ground_truth(manifest, parts["query"], parts["gallery"])
        query_labels, index_labels = parts["query"].labels(), parts["gallery"].labels()

        def inputs(emb):
            return (emb["query"], query_labels, emb["gallery"], index_labels), {"ground_truth": ground_truth}
        return parts, inputs
    raise NotImplementedError(f"{manifest.directory / 'meta.json' if manifest.directory else 'manifest'}: "
                              f"evaluation of protocol {protocol!r} is not wired into training runs yet "
                              f"(supported: {', '.join(SUPPORTED_PROTOCOLS)})")


def evaluate(run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path, *,
             device: str = "auto", num_workers: int = 0, batch_size: int = 256, run_id: str = "",
             progress: bool = True, image_cache: str | Path | None = None) -> dict:
    """Write ``metrics.json``: the run's ``eval.metrics`` under the dataset's protocol.

    The protocol comes from the manifest (``meta["protocol"]``, e.g. ``same-set``: every test
    image queries the rest of the test set; ``query-gallery``: the query split against the
    gallery split); embeddings and metrics are computed on ``device`` (the job's GPU when it
    holds one). Metric names are those of :func:`rankrepro.metrics.compute` (hierarchical
    metrics use every label level of the manifest).

    Named protocols (:func:`protocol_inputs`): ``vehicleid``, ``dyml``, ``gldv2-suprank``. Each
    distinct image (path) of their splits is embedded once. ``eval.metrics`` are the metrics
    computed per subset / benchmark / level (the protocol's own
    :data:`~rankrepro.metrics.protocols.DEFAULT_METRICS` only when the list is empty); the keys
    of ``metrics`` are the protocol's: ``"small/R@1"`` ... ``"large/<m>"`` (VehicleID),
    ``"fine/<m>"``, ``"middle/<m>"``, ``"coarse/<m>"``, ``"overall/<m>"`` (DyML Vehicle /
    Animal), ``"level0/<m>"`` ... ``"overall/<m>"`` (DyML Product), the bare names plus
    ``n_scored`` (GLDv2), with the protocol's counts (``.../n_queries`` ...). ``splits`` lists the
    splits embedded; ``n_images`` counts the distinct images embedded. ``image_cache``: the resized
    image cache the embedded datasets read (None: the originals)."""
    dev = resolve_device(device)
    manifest = read_manifest(manifest_dir)
    protocol = manifest.meta["protocol"]
    if protocol not in SUPPORTED_PROTOCOLS:
        raise NotImplementedError(f"{Path(manifest_dir) / 'meta.json'}: evaluation of protocol {protocol!r} is not "
                                  f"wired into training runs yet (supported: {', '.join(SUPPORTED_PROTOCOLS)})")
    if protocol not in PROTOCOL_SPLITS:
        return _evaluate_named(run, manifest, model_path, out_path, dev=dev, num_workers=num_workers,
                               batch_size=batch_size, run_id=run_id, progress=progress, image_cache=image_cache)
    model = load_model(model_path, dev)
    t0 = time.perf_counter()
    parts = []
    for split in PROTOCOL_SPLITS[protocol]:
        rows = manifest.split(split)
        emb = embed(model, ImageDataset(rows, test_transform(run["images"]), cache=image_cache), dev, run["amp"],
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


def _evaluate_named(run: dict, manifest: Manifest, model_path, out_path, *, dev, num_workers: int,
                    batch_size: int, run_id: str, progress: bool, image_cache: str | Path | None) -> dict:
    """:func:`evaluate` for the protocols of :func:`protocol_inputs`."""
    protocol = manifest.meta["protocol"]
    parts, inputs = protocol_inputs(manifest)
    distinct, where = distinct_images(parts)
    model = load_model(model_path, dev)
    t0 = time.perf_counter()
    emb = embed(model, ImageDataset(distinct, test_transform(run["images"]), cache=image_cache), dev, run["amp"],
                batch_size=batch_size, num_workers=num_workers, progress=progress)
    t_embed = time.perf_counter() - t0
    args, kwargs = inputs({split: emb[where[split]] for split in parts})
    names = list(run["eval"].get("metrics") or ()) or None  # None: the protocol's DEFAULT_METRICS
    metrics = compute(*args, metrics=names, protocol=protocol, device=dev, **kwargs)
    result = {
        "run_id": run_id,
        "dataset": run["dataset"],
        "protocol": protocol,
        "splits": list(parts),
        "replica": bool(manifest.meta.get("replica", False)),
        "n_images": len(distinct.table),
        "metrics": metrics,
        "seconds": {"embed": round(t_embed, 3), "metrics": round(time.perf_counter() - t0 - t_embed, 3)},
    }
    atomic_write_json(out_path, result)
    return result
