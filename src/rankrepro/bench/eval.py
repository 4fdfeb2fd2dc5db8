"""Evaluation at full size: ``python -m rankrepro bench eval`` writes ``<out>/eval.md`` and ``eval.json``.

The exact metrics (:func:`rankrepro.metrics.compute`) on synthetic embeddings of the real sizes and
label structures (:data:`SIZES`):

- **iNat-full**: the 136,093 test images of iNaturalist 2018 (Smooth-AP's split), all-vs-all (same-set),
  512-d, 7 levels (species ... kingdom): R@1, mAP@R, AP at every level, H-AP, ASI, NDCG;
- **GLDv2**: the 1,129 GLDv2 test queries with ground truth against the 761,757-image index
  (``gldv2-suprank``), 2048-d (SupRank's H-GLDv2 model), 3 levels (landmark, cluster,
  natural / human-made): mAP@100, H-AP, ASI, NDCG.

Each measurement runs in a fresh process: it draws the data, warms up (numba kernels, CUDA context) on
256 items, then times one ``compute`` call. Peak memory is the process's max RSS on CPU (Python, numpy,
torch, numba and the data: everything) and ``torch.cuda.max_memory_allocated`` on a GPU. A fraction of
the queries (:data:`CPU_FRACTIONS`) is a random subset searched against the whole gallery (the same lists
and per-query work as in the full run): two fractions give the time per query, which predicts the full
run's time (a check of the straight-line model when the full run is measured too; the estimate where it is
not). Memory does not grow with the number of queries (below).

Memory model (:mod:`rankrepro.metrics.ranking`, ``memory_budget``): resident are the embeddings
(N x D x 4 bytes) and the label index (a few int64 arrays of N per level). What scales with chunk x N:
a chunk's scores, b x Ng x 4 bytes on CPU (24 x Ng on a GPU: scores plus the row sort's outputs), and the
per-item arrays of its relevant items, ~250 bytes per item, b x P with P the query's relevant set at the
coarsest level (up to Ng). ``compute`` sizes chunks so that both together stay within ``memory_budget``
(half each, split between the CPU worker threads). :func:`choose_budget` takes ``compute``'s default
(1 GiB on CPU, 3 GiB on a GPU) and shrinks it only where resident + :data:`BUDGET_FACTOR` x budget would
exceed the device (RAM here; on a GPU its memory, at most 80 GB).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import gpu_not_measured, write_record
from .metrics import long_tail_sizes


@dataclass(frozen=True)
class Size:
    """One evaluation size. ``taxonomy``: classes per level, finest first, of the tree the labels are drawn
    from; ``drawn``: finest classes present (a random subset of the taxonomy's); ``labels``: the name of the
    label generator in :data:`LABELS`; ``source``: where the numbers come from."""

    name: str
    protocol: str
    images: int
    queries: int
    dim: int
    taxonomy: tuple
    drawn: int
    metrics: tuple
    labels: str
    source: str


INAT_METRICS = ("R@1", "mAP@R") + tuple(f"mAP_level{c}" for c in range(7)) + ("H-AP", "ASI", "NDCG")
SIZES = (
    Size("iNat-full", "same-set", 136093, 136093, 512, (8142, 3438, 961, 249, 54, 23, 5), 2452, INAT_METRICS,
         "taxonomy",
         "test 136,093 images / 2,452 species (datasets.md: PML tests, Smooth-AP Table 1), drawn at random from "
         "8,142 species (iNat 2018) under a tree with the train split's genus ... kingdom counts 3,438 / 961 / "
         "249 / 54 / 23 / 5 (SupRank inat_full.yaml); embed_dim 512 (setup suprank_inat_full)"),
    Size("GLDv2", "gldv2-suprank", 761757, 1129, 2048, (101297, 78, 2), 101297, ("mAP@100", "H-AP", "ASI", "NDCG"),
         "landmarks",
         "index 761,757 images (GLDv2 README), ~101k index landmarks (ids 0..101,296), 78 clusters, 60 "
         "human-made / 18 natural, 1,129 scored queries (hgldv2.md §1, §3); every index image labelled (no "
         "remove_nan drop: the most work); embed_dim 2048 (setup suprank_hgldv2: SupRank resnet_101_LM.yaml)"),
)
#: fractions of the queries measured on CPU (all queries on a GPU): iNat-full's two small fractions check
#: that the full all-vs-all's time is linear in the queries (:func:`full_size`)
CPU_FRACTIONS = {"iNat-full": (1 / 32, 1 / 8, 1.0), "GLDv2": (1.0,)}
#: peak memory above the resident data per byte of ``memory_budget``, with a margin: CPU 0.93 measured at
#: both sizes (results/bench/eval.md: peak minus the RSS before the call), GPU 2 from an H100 run of the
#: counting path (metrics/core.py)
BUDGET_FACTOR = {"cpu": 1.5, "cuda": 2.0}
GPU_LIMIT = 80 * 10**9
HUMAN_MADE = 60 / 78  # GLDv2: clusters that are human-made (hgldv2.md §1.2)


def unit_embeddings(n: int, dim: int, seed: int, block: int = 65536) -> torch.Tensor:
    """[n, dim] float32 rows uniform on the unit sphere (normalised Gaussians), drawn block by block in place
    so that the peak memory is the result's."""
    x = torch.empty(n, dim)
    gen = torch.Generator().manual_seed(seed)
    for a in range(0, n, block):
        b = x[a : a + block]
        b.normal_(generator=gen)
        b.div_(b.norm(dim=1, keepdim=True))
    return x


def attach(n_child: int, n_parent: int, rng: np.random.Generator, skew: float = 0.8) -> np.ndarray:
    """The parent of each of ``n_child`` nodes: every parent gets one child, the others go to parent i with
    probability ∝ 1 / (i + 1)^skew (a few large taxa, many small ones), in random order."""
    w = 1.0 / (np.arange(n_parent) + 1.0) ** skew
    parent = np.concatenate([np.arange(n_parent), rng.choice(n_parent, n_child - n_parent, p=w / w.sum())])
    return rng.permutation(parent)


def _tree(finest: np.ndarray, parents: list) -> np.ndarray:
    """[n, levels] labels: the finest column, then each coarser one through ``parents`` (child -> parent)."""
    cols = [finest]
    for p in parents:
        cols.append(p[cols[-1]])
    return np.stack(cols, 1)


def taxonomy_labels(size: Size, rng: np.random.Generator) -> np.ndarray:
    """[images, levels] labels (iNat-full): a random tree with ``size.taxonomy`` classes per level, ``drawn``
    of its finest classes at random, long-tailed images per class (:func:`long_tail_sizes`)."""
    t = size.taxonomy
    parents = [attach(t[c], t[c + 1], rng) for c in range(len(t) - 1)]
    classes = rng.choice(t[0], size.drawn, replace=False)
    finest = rng.permutation(np.repeat(classes, long_tail_sizes(size.images, size.drawn, rng)))
    return _tree(finest, parents)


def landmark_labels(size: Size, rng: np.random.Generator) -> np.ndarray:
    """[images, 3] labels (GLDv2): long-tailed images per landmark, landmarks attached to clusters
    (:func:`attach`), clusters split human-made / natural as H-GLDv2's 60 / 18 (group 0 / 1)."""
    n_landmarks, n_clusters, _ = size.taxonomy
    cluster = attach(n_landmarks, n_clusters, rng)
    n_human = round(n_clusters * HUMAN_MADE)
    group = rng.permutation(np.r_[np.zeros(n_human, np.int64), np.ones(n_clusters - n_human, np.int64)])
    finest = rng.permutation(np.repeat(np.arange(n_landmarks), long_tail_sizes(size.images, n_landmarks, rng)))
    return _tree(finest, [cluster, group])


LABELS = {"taxonomy": taxonomy_labels, "landmarks": landmark_labels}


def choose_budget(resident: int, limit: int, device: str) -> int:
    """``compute``'s default ``memory_budget`` for ``device`` (1 GiB on CPU, 3 GiB on a GPU), shrunk so that
    ``resident + BUDGET_FACTOR[device] * budget <= limit`` (at least 64 MiB)."""
    default = (1 << 30) if device == "cpu" else (3 << 30)
    room = (limit - resident) / BUDGET_FACTOR[device]
    return int(max(64 << 20, min(default, room)))


def device_limit(device: str) -> int:
    """Bytes the evaluation may use: this machine's RAM (MemTotal) on CPU; on a GPU its memory, at most 80 GB."""
    if device == "cpu":
        line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
        return int(line.split()[1]) * 1024
    return min(GPU_LIMIT, torch.cuda.get_device_properties(0).total_memory)


class _ChunkLog:
    """Records the rows of the chunks ``compute`` really uses, by wrapping ``chunk_rows`` where the engine
    calls it: score chunks (``metrics.chunks.for_chunks``) and per-item sub-chunks (``metrics.core``)."""

    def __init__(self):
        from rankrepro.metrics import chunks, core

        self.modules = {"scores": chunks, "items": core}
        self.rows = {"scores": 0, "items": 0}
        self.saved = {}

    def __enter__(self):
        for key, mod in self.modules.items():
            inner = self.saved[key] = mod.chunk_rows

            def wrapped(*a, _inner=inner, _key=key, **k):
                for piece in _inner(*a, **k):
                    self.rows[_key] = max(self.rows[_key], len(piece))
                    yield piece
            mod.chunk_rows = wrapped
        return self

    def __exit__(self, *exc):
        for key, mod in self.modules.items():
            mod.chunk_rows = self.saved[key]


def _inputs(size: Size, n_queries: int, x: torch.Tensor, labels: np.ndarray, rng: np.random.Generator):
    """``compute``'s arguments for ``n_queries`` of the size's queries (a random subset below all)."""
    if size.protocol == "same-set":
        if n_queries == size.images:
            return (x, labels), {}
        sel = np.sort(rng.permutation(size.images)[:n_queries])  # the same lists as same-set's
        return (x[torch.from_numpy(sel)], labels[sel], x, labels), {"exclude": sel}
    q = unit_embeddings(size.queries, size.dim, seed=1)[:n_queries]
    ground_truth = [[int(i)] for i in rng.choice(size.images, size.queries)[:n_queries]]
    return (q, None, x, labels), {"protocol": size.protocol, "ground_truth": ground_truth}


def measure(size: Size, n_queries: int, device: str = "cpu", seed: int = 0) -> dict:
    """Time one ``compute`` call of ``n_queries`` queries at ``size`` on ``device``; see the module docstring."""
    from rankrepro.metrics import compute

    cuda = device != "cpu"
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    labels = LABELS[size.labels](size, rng)
    x = unit_embeddings(size.images, size.dim, seed)
    data_s = time.perf_counter() - t0
    resident = x.numel() * 4
    budget = choose_budget(resident, device_limit(device), device)
    if cuda:
        x = x.to(device)
    args, kw = _inputs(size, n_queries, x, labels, rng)
    compute(x[:256], labels[:256], metrics=list(size.metrics), device=device)  # kernels, CUDA context
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = _peak_mib(cuda)
    load0, cpu0 = os.getloadavg()[0], _cpu_s()
    t1 = time.perf_counter()
    with _ChunkLog() as chunks:
        values = compute(*args, metrics=list(size.metrics), device=device, memory_budget=budget, **kw)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t1
    return {"size": size.name, "device": device, "queries": n_queries, "seconds": seconds,
            "cpu_s": _cpu_s() - cpu0, "data_s": data_s,
            "peak_mib": _peak_mib(cuda), "start_mib": start, "resident_mib": resident / 2**20,
            "budget_mib": budget / 2**20, "score_rows": chunks.rows["scores"], "item_rows": chunks.rows["items"],
            "threads": torch.get_num_threads(), "load": (load0 + os.getloadavg()[0]) / 2,
            "classes": [int(len(np.unique(labels[:, c]))) for c in range(labels.shape[1])],
            "largest": [int(np.bincount(np.unique(labels[:, c], return_inverse=True)[1]).max())
                        for c in range(labels.shape[1])],
            "values": {k: float(v) for k, v in values.items() if k in size.metrics}}


def _cpu_s() -> float:
    """CPU seconds of this process, all threads (steadier than wall time on a shared machine)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_mib(cuda: bool) -> float:
    if cuda:
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _isolated(*args) -> dict:
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure, args)


def full_size(size: Size, runs: list[dict]) -> dict:
    """The (size, device) row: the run with the most queries; its time for all queries measured when it
    searched them all, else extrapolated. ``predicted_seconds``: the straight line through the two largest
    fractions below all queries, evaluated at all queries, for wall and CPU seconds (the CPU time is the
    steadier on a shared machine); the peak memory is the largest run's."""
    runs = sorted(runs, key=lambda r: r["queries"])
    last = runs[-1]
    row = {**last, "runs": runs, "extrapolated": last["queries"] < size.queries}
    partial = [r for r in runs if r["queries"] < size.queries]
    if len(partial) >= 2:
        a, b = partial[-2:]
        row["per_query_s"] = (b["seconds"] - a["seconds"]) / (b["queries"] - a["queries"])
        row["predicted_seconds"] = b["seconds"] + row["per_query_s"] * (size.queries - b["queries"])
        per_query_cpu = (b["cpu_s"] - a["cpu_s"]) / (b["queries"] - a["queries"])
        row["predicted_cpu_s"] = b["cpu_s"] + per_query_cpu * (size.queries - b["queries"])
    if row["extrapolated"] and "predicted_seconds" not in row:
        raise ValueError(f"{size.name}: extrapolating needs two fractions, got {len(runs)}")
    row["full_seconds"] = row["predicted_seconds"] if row["extrapolated"] else last["seconds"]
    return row


def run(out_dir="results/bench", sizes=SIZES, devices=("cpu",), fractions=None, isolate: bool = True) -> dict:
    """Measure every size on every device and write ``<out_dir>/eval.md`` and ``eval.json``.

    ``fractions``: {size name: fractions of its queries}, default :data:`CPU_FRACTIONS` on CPU and all
    queries on a GPU; ``isolate``: one spawned process per measurement (peak RSS needs it; tests turn it off).
    Without ``"cuda"`` in ``devices`` the GPU rows say why they were not measured."""
    from .pipeline import machine

    record: dict = {"machine": machine(), "sizes": [asdict(s) for s in sizes], "rows": []}
    for device in devices:
        for size in sizes:
            frac = (fractions or (CPU_FRACTIONS if device == "cpu" else {})).get(size.name, (1.0,))
            runs = []
            for f in frac:
                n = max(1, round(f * size.queries))
                r = _isolated(size, n, device) if isolate else measure(size, n, device)
                print(f"[bench eval] {size.name} {device} {n:,} queries: {r['seconds']:.1f} s, "
                      f"peak {r['peak_mib']:.0f} MiB", flush=True)
                runs.append(r)
            record["rows"].append(full_size(size, runs))
    if "cuda" not in devices:
        record["gpu"] = gpu_not_measured()
    return write_record(out_dir, "eval", record, render(record))


def _levels(row: dict) -> str:
    return " / ".join(f"{c:,}" for c in row["classes"])


def render(record: dict) -> str:
    """The Markdown of ``eval.md``."""
    m = record["machine"]
    sizes = {s["name"]: s for s in record["sizes"]}
    lines = ["# Exact evaluation at full size", "",
             "`python -m rankrepro bench eval` (src/rankrepro/bench/eval.py): `rankrepro.metrics.compute` on random "
             "unit embeddings with the real sizes and label structures, one measurement per fresh process, "
             "timed after a warm-up (numba kernels, CUDA context); data generation is not timed. Peak memory: "
             "the process's max RSS on CPU (everything: interpreter, torch, numba, data), "
             "`torch.cuda.max_memory_allocated` on a GPU.", "",
             f"Machine: {m['cpu']}, {m['cpus_usable']} usable CPUs, torch {m['torch']}; 'load' is the 1-minute "
             "load average during the run (the machine is shared).", "",
             "| size | device | images | queries (measured) | levels (classes per level) | metrics | chunk: "
             "budget, score rows, item rows | wall s, measured | wall s, all queries | peak MiB | resident MiB "
             "| load |",
             "|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|"]
    for r in record["rows"]:
        s = sizes[r["size"]]
        full = f"{r['full_seconds']:,.0f}" + (" (extrapolated)" if r["extrapolated"] else "")
        lines.append(
            f"| {s['name']} ({s['protocol']}, {s['dim']}-d) | {r['device']} | {s['images']:,} | "
            f"{s['queries']:,} ({r['queries']:,}) | {len(r['classes'])}: {_levels(r)} | {len(s['metrics'])}: "
            f"{', '.join(s['metrics'])} | {r['budget_mib']:,.0f} MiB, {r['score_rows']}, {r['item_rows']} | "
            f"{r['seconds']:,.1f} | {full} | {r['peak_mib']:,.0f} | {r['resident_mib']:,.0f} | {r['load']:.1f} |")
    if "gpu" in record:
        for s in record["sizes"]:
            lines.append(f"| {s['name']} ({s['protocol']}, {s['dim']}-d) | GPU | {s['images']:,} | "
                         f"{s['queries']:,} | — | — | — | {record['gpu']} | — | — | — | — |")
    lines += ["", "## How each row was measured", ""]
    for r in record["rows"]:
        s = sizes[r["size"]]
        runs = "; ".join(f"{x['queries']:,} queries {x['seconds']:,.1f} s ({x['cpu_s']:,.0f} CPU s), "
                         f"peak {x['peak_mib']:,.0f} MiB "
                         f"(before the call {x['start_mib']:,.0f})" for x in r["runs"])
        if r["extrapolated"]:
            how = (f"time per query {r['per_query_s'] * 1e3:.2f} ms from the two runs, × {s['queries']:,} "
                   f"queries (CPU time: {r['predicted_cpu_s']:,.0f} s)")
        elif "predicted_seconds" in r:
            how = (f"every query measured; the two fractions predicted {r['predicted_seconds']:,.0f} s "
                   f"({r['per_query_s'] * 1e3:.2f} ms per query) and {r['predicted_cpu_s']:,.0f} CPU s for all "
                   f"queries, measured {r['seconds']:,.0f} s and {r['cpu_s']:,.0f} CPU s (wall times vary with "
                   "the load of this shared machine; CPU time much less)")
        else:
            how = "every query measured"
        largest = ", ".join(f"{n:,}" for n in r["largest"])
        lines.append(f"- {s['name']} on {r['device']}: {runs}; {how}. Largest class per level (images): "
                     f"{largest}. Labels: {s['source']}.")
    lines += ["", "## Memory model", "",
              "Resident: the embeddings (N × D × 4 bytes; 'resident MiB') and the label index. Per chunk of b "
              "queries, what scales with chunk × N: the scores, b × Ng × 4 bytes on CPU (24 × Ng on a GPU: the "
              "scores plus the row sort's outputs), and the per-item arrays of the relevant items, ~250 bytes × "
              "b × P, P a query's relevant set at the coarsest level (up to Ng). `compute(memory_budget=B)` "
              "sizes its chunks to keep both within B (half each, split between the CPU worker threads): "
              "'score rows' and 'item rows' are the largest chunks it used. The benchmark passes compute's "
              "default B (1 GiB on CPU, 3 GiB on a GPU), shrunk only where resident + k × B would exceed the "
              f"device (this machine's RAM; a GPU's memory, at most 80 GB), k = {BUDGET_FACTOR['cpu']} on CPU, "
              f"{BUDGET_FACTOR['cuda']} on a GPU (core.py: 6.2 GB peak for a 3 GiB budget on an H100). On an 80 GB "
              "GPU both sizes fit with the default budget: GLDv2's index takes 5.8 GiB, so the predicted peak "
              "is about 5.8 + 2 × 3 ≈ 12 GiB. The peak does not grow with the number of queries (only their "
              "results, 8 bytes per query and metric), so a fraction's peak is the full run's. Measured on CPU: peak "
              "minus the RSS before the call (data, interpreter, torch, numba, warm-up) is at most the budget "
              "(see above).", ""]
    return "\n".join(lines)


def main(out_dir="results/bench", device: str | None = None) -> None:
    """CPU rows always; GPU rows with ``--device cuda`` or, without ``--device``, when CUDA is present."""
    cuda = device == "cuda" or (device is None and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    record = run(out_dir, devices=("cpu", "cuda") if cuda else ("cpu",))
    print(render(record))
