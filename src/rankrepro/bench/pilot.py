"""A pilot at real size before the first GPU-hour: ``python -m rankrepro pilot`` writes ``<out>/report.md``,
``report.json`` and the measured throughput profile ``<out>/throughput.yaml``.

**Signatures.** Runs that train alike share a *training signature* (:func:`signature`): task, backbone (the
throughput profile's row, :func:`~rankrepro.record.tasks.throughput_network`), input size (``train_crop``),
batch size, loss (its name: its parameters, a margin or a temperature, do not change a step's cost), ``amp`` and
sampler (its name): ``config.yaml``'s 303 runs have 124. The pilot measures one run of each (the
first by run id) and lists the runs behind it.

**Data.** The representative run's prepared manifest (``<results>/manifests/<dataset>``) when it was prepared from
the config's source (:func:`rankrepro.plan.cost.config_manifest`), read with the run's own sampler; when it is
absent, a generated replica of the dataset at :data:`REPLICA_IMAGE_SIZE` px (the page says so), its training rows
repeated, each copy with classes of its own (:func:`fill_replica`), so that the run's sampler finds the classes and
images a batch at its size needs.

**Per signature** (:func:`measure`): the task's real step (:class:`rankrepro.bench.pipeline.TaskBench`, as
``bench_run(..., own_sampler=True)`` builds the run: random weights), the first step timed alone (loader start,
cuDNN autotuning, allocation), then ``warmup`` steps, then ``steps`` timed steps, each synchronised, the time spent
waiting for the loader's batch apart (the loader's share of the step); then a slice of the evaluation: the task's
evaluation forward pass on ``eval_steps`` batches of the training batch's size (inference images/s) and, for
retrieval tasks, the exact metrics (:func:`rankrepro.metrics.compute`, R@1 and mAP@R) of :data:`EVAL_SLICE`
embeddings of the model's real size.
Peak memory: ``torch.cuda.max_memory_allocated`` on CUDA (reset per signature), the process's peak RSS on CPU
(``VmHWM``, reset per signature through ``/proc/self/clear_refs``). An error (an out-of-memory included) is the
row's, not the pilot's end.

**CPU.** The real image size, the batch reduced to what the machine's memory holds (:func:`cpu_batch`), said on
the page; an estimate for the GPU's memory is then not known (``fits`` says so).

**Profile.** ``throughput.yaml`` (:func:`profile_of`) has the form of ``profiles/throughput/<gpu>.yaml``
(:func:`rankrepro.plan.cost.load_profile_file`) with ``measured: true``, the device and the date: per backbone and
crop the *lowest* images/s of the signatures that share them (a runtime must not be short), under the
precision's table (``train`` / ``inference`` for mixed precision, ``_fp32`` for ``amp: none``). ``python -m
rankrepro cost --profile <out>/throughput.yaml`` and the SLURM runtimes (config ``cluster.profile``) price the plan
with it.
"""

from __future__ import annotations

import datetime
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

__all__ = ["REPLICA_IMAGE_SIZE", "EVAL_SLICE", "signature", "signatures", "cpu_batch", "fill_replica",
           "measure", "profile_of", "run", "render"]

#: px, the longer side of the generated replicas' images when the data is absent: SOP's and VOC's photos are about
#: 500 px on a side (as ``bench train``'s CUDA replicas); a choice of ours for the other datasets
REPLICA_IMAGE_SIZE = 500
#: embeddings whose exact metrics the evaluation slice computes (all against all), per device kind
EVAL_SLICE = {"cuda": 20_000, "cpu": 2_000}
#: the share of the machine's available memory a CPU pilot's batch may take (the rest: the model, the loader,
#: other processes); a choice of ours
CPU_MEMORY_SHARE = 0.5
MIB = 2**20


def signature(run: dict, catalog: dict) -> tuple:
    """The training signature of ``run`` (module docstring): ``(task, backbone, input size, batch size, loss name,
    amp, sampler name)``."""
    from rankrepro.record.tasks import DEFAULT_TASK, throughput_network

    return (run.get("task", DEFAULT_TASK), throughput_network(run, catalog), run["images"]["train_crop"],
            run["sampler"]["batch_size"], run["loss"]["name"], run["amp"], run["sampler"]["name"])


def signatures(runs: dict[str, dict]) -> list[dict]:
    """``runs`` (``{run id: run}``) grouped by :func:`signature`: ``{"signature", "runs" (ids, sorted), "run" (the
    first's)}`` each, in the order of their first run id."""
    from rankrepro.catalog import load as load_catalog

    catalog = load_catalog()
    groups: dict[tuple, list[str]] = {}
    for rid in sorted(runs):
        groups.setdefault(signature(runs[rid], catalog), []).append(rid)
    return [{"signature": key, "runs": ids, "run": runs[ids[0]]} for key, ids in groups.items()]


def available_mb() -> float:
    """The memory this machine can give now (``MemAvailable`` of ``/proc/meminfo``; elsewhere the physical memory)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB


def cpu_batch(run: dict, memory_mb: float) -> int:
    """The batch a CPU pilot of ``run`` trains with: the run's, at most what :data:`CPU_MEMORY_SHARE` of
    ``memory_mb`` holds at :data:`~rankrepro.plan.resources.CPU_ACTIVATION_MB` per 224² image (scaled by pixels)
    after :data:`~rankrepro.plan.resources.BASE_MB`; a multiple of the sampler's ``samples_per_class``, at least
    one class's worth."""
    from rankrepro.plan.resources import BASE_MB, CPU_ACTIVATION_MB

    batch = run["sampler"]["batch_size"]
    per_image = CPU_ACTIVATION_MB * (run["images"]["train_crop"] / 224) ** 2
    holds = int((memory_mb * CPU_MEMORY_SHARE - BASE_MB) // per_image)
    m = run["sampler"].get("samples_per_class") or 1
    reduced = min(batch, holds)
    return max(m, reduced - reduced % m)


def fill_replica(manifest_dir: Path, dest: Path, split: str, images: int, classes: int) -> Path:
    """A copy of the manifest in ``manifest_dir`` under ``dest`` whose ``split`` rows are repeated until it holds
    at least ``images`` images and ``classes`` finest classes, copy ``j`` with every known label (>= 0) of every
    level shifted by ``j`` x (that level's largest label + 1): new classes of the same image files. The other
    splits are kept as they are. Returns ``dest``."""
    import pandas as pd

    from rankrepro.data.manifest import level_columns, read_manifest, write_manifest

    manifest = read_manifest(manifest_dir)
    table = manifest.table
    rows = table[table["split"] == split]
    counts = manifest.counts().get(split, {"images": 0, "classes": 0})
    if counts["images"] == 0:
        raise ValueError(f"{manifest_dir}: the replica has no {split!r} images")
    copies = max(1, math.ceil(images / counts["images"]), math.ceil(classes / max(1, counts["classes"])))
    levels = level_columns(manifest.n_levels)
    parts = [table[table["split"] != split], rows]
    for j in range(1, copies):
        copy = rows.copy()
        for column in levels:
            known = copy[column] >= 0
            copy.loc[known, column] = copy.loc[known, column] + j * (int(table[column].max()) + 1)
        parts.append(copy)
    return write_manifest(dest, pd.concat(parts, ignore_index=True), manifest.meta).directory


def replica_at_size(dataset: str, dest: Path) -> Path:
    """A prepared replica of ``dataset`` (a derived dataset: of its base, then derived) under ``dest``, its images
    :data:`REPLICA_IMAGE_SIZE` px; returns its manifest folder."""
    from rankrepro.bench.pipeline import replica_manifest
    from rankrepro.data import datasets

    data = datasets.load(dataset)
    if data.derived_from:
        base = replica_at_size(data.derived_from, dest / "base")
        data.prepare(base, dest / "manifest", data_root=dest / "data", replica=True)
        return dest / "manifest"
    return replica_manifest(dataset, dest, image_size=REPLICA_IMAGE_SIZE)


def pilot_data(run: dict, datasets: dict, results: Path, scratch: Path, batch: int) -> tuple[Path, str]:
    """``(manifest folder, where from)`` of ``run``'s training data: its prepared manifest when it was prepared from
    the config's source, else a replica at :data:`REPLICA_IMAGE_SIZE` px filled to ``batch`` (module docstring)."""
    from rankrepro.plan.cost import config_manifest

    name = run["dataset"]
    meta, counts, _ = config_manifest(name, datasets, results)
    if counts is not None:
        return meta.parent, f"prepared manifest {meta.parent}"
    made = scratch / "replicas" / name
    if not (made / "manifest" / "meta.json").is_file():
        replica_at_size(name, made)
    filled = fill_replica(made / "manifest", scratch / "filled" / f"{name}-{batch}", run.get("train_split", "train"),
                          images=4 * batch, classes=batch)
    return filled, f"replica at {REPLICA_IMAGE_SIZE} px (data absent)"


# -- measuring ------------------------------------------------------------------------------------------


def reset_peak(device: torch.device) -> None:
    """Start counting the peak memory anew: the CUDA allocator's peak, or the process's peak RSS (Linux)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the lifetime peak (ru_maxrss) then
        pass


def peak_mib(device: torch.device) -> float:
    """MiB: the CUDA allocator's peak since :func:`reset_peak`, or the process's peak RSS (``VmHWM``)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure (CUDA's, or the CPU allocator's)."""
    return isinstance(err, torch.cuda.OutOfMemoryError) or (
        isinstance(err, (RuntimeError, MemoryError)) and ("out of memory" in str(err) or "can't allocate" in str(err)
                                                          or isinstance(err, MemoryError)))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(bench, warmup: int, steps: int) -> dict:
    """The first step's seconds, then after ``warmup`` more steps the images/s of ``steps`` steps and the share of
    their time spent waiting for the loader (each step synchronised)."""
    batches = bench.batches(synthetic=False)
    bench.parts.model.train()
    t0 = time.perf_counter()
    bench.train_step(next(batches))
    _sync(bench.device)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        bench.train_step(next(batches))
    _sync(bench.device)
    wait = total = 0.0
    images = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        images += bench.train_step(batch)
        _sync(bench.device)
        wait, total = wait + t1 - t0, total + time.perf_counter() - t0
    return {"first_step_s": first, "images_per_s": images / total, "loader_share": wait / total}


def eval_slice(bench, run: dict, eval_steps: int, n: int) -> dict:
    """Inference images/s of the task's evaluation forward pass (``eval_steps`` batches after one) and, for a task
    scored by the retrieval metrics, the embedding size and the seconds of R@1 and mAP@R over ``n`` unit embeddings
    of that size with random labels (about 4 images per class)."""
    from rankrepro.catalog import load as load_catalog
    from rankrepro.record.tasks import facts_of

    out = {"inference_images_per_s": bench.infer(1, eval_steps), "embed_dim": None, "metrics_s": None}
    forward = getattr(bench.task, "forward", None)
    if facts_of(run, load_catalog())["metrics"] is not None or forward is None:
        return out
    from rankrepro.bench.eval import unit_embeddings
    from rankrepro.device import autocast
    from rankrepro.metrics import compute

    images = next(bench.batches(synthetic=True))[0]
    with torch.no_grad(), autocast(bench.device, run["amp"]):
        out["embed_dim"] = int(forward(images[:2]).shape[-1])
    x = unit_embeddings(n, out["embed_dim"], seed=0).to(bench.device)
    labels = torch.randint(0, max(1, n // 4), (n,), generator=torch.Generator().manual_seed(0)).numpy()
    t0 = time.perf_counter()
    compute(x, labels, metrics=["R@1", "mAP@R"], device=bench.device)
    out["metrics_s"] = time.perf_counter() - t0
    return out


def measure(entry: dict, manifest_dir: Path, device: torch.device, batch: int, *, warmup: int, steps: int,
            eval_steps: int, workers: int) -> dict:
    """One signature's row (module docstring): its measures, or ``error`` (``out_of_memory`` when it is one)."""
    from rankrepro.bench.pipeline import TaskBench, bench_run

    run = entry["run"]
    row: dict = {"batch": batch, "error": None, "out_of_memory": False}
    reset_peak(device)
    bench = None
    try:
        bench = TaskBench(bench_run(run, batch, own_sampler=True), manifest_dir, device, workers=workers)
        row.update(timed_steps(bench, warmup, steps))
        row.update(eval_slice(bench, run, eval_steps, EVAL_SLICE[device.type]))
    except Exception as err:  # noqa: BLE001 -- a row, not the pilot's end
        row["out_of_memory"] = is_out_of_memory(err)
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    finally:
        if bench is not None:
            bench.close()
    row["peak_mib"] = peak_mib(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


# -- the pilot ------------------------------------------------------------------------------------------


def profile_of(rows: list[dict], device_name: str, date: str, memory_gb: float | None) -> dict:
    """The measured throughput profile of ``rows`` (module docstring): per precision's table, backbone and crop the
    lowest images/s of the rows without an error."""
    from rankrepro.plan.cost import PRECISION_SUFFIX, PROFILE_TABLES

    profile: dict = {"gpu": device_name, "device": device_name, "date": date, "measured": True, "source": "pilot",
                     "scaling": "pixels", "memory_gb": memory_gb, **{key: {} for key in PROFILE_TABLES}}
    for r in rows:
        if r["error"]:
            continue
        suffix = PRECISION_SUFFIX[r["amp"]]
        for phase, figure, crop in (("train", r["images_per_s"], r["train_crop"]),
                                    ("inference", r["inference_images_per_s"], r["test_crop"])):
            table = profile[phase + suffix].setdefault(r["backbone"], {})
            table[crop] = round(min(table.get(crop, math.inf), figure), 2)
    return profile


def fits(row: dict, device: torch.device, memory_gb: float | None) -> str:
    """Whether the row's peak fits ``memory_gb`` (the ``cluster.gpu`` profile's memory)."""
    if row["out_of_memory"]:
        return "does not fit (out of memory here)"
    if device.type != "cuda":
        return f"not known (CPU, batch {row['batch']} of {row['run_batch']})"
    if memory_gb is None or row["error"]:
        return "not known"
    return "fits" if row["peak_mib"] * MIB <= memory_gb * 1e9 else "does not fit"


def run(plan, *, out_dir: str | Path = "results/pilot", results: str | Path = "results", device: str = "auto",
        gpu: str = "h100", gpu_profile: str | Path | None = None, warmup: int = 1, steps: int = 2, eval_steps: int = 2,
        workers: int = 0, max_batch: int | None = None) -> dict:
    """The pilot of ``plan`` (a :class:`~rankrepro.plan.model.Plan` or its JSON): write ``report.md``,
    ``report.json`` and ``throughput.yaml`` under ``out_dir``; return the record. ``gpu`` / ``gpu_profile``: the
    ``cluster.gpu`` kind (or its profile file) whose ``memory_gb`` the peaks are compared with; ``max_batch``: at
    most this batch (besides the CPU's memory cap)."""
    import yaml

    from rankrepro.bench import write_record
    from rankrepro.bench.pipeline import machine
    from rankrepro.device import resolve_device
    from rankrepro.io import atomic_write_text
    from rankrepro.plan.cost import load_profile, load_profile_file
    from rankrepro.plan.model import Plan
    from rankrepro.record.tasks import throughput_network
    from rankrepro.catalog import load as load_catalog

    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    target = load_profile_file(gpu_profile) if gpu_profile else load_profile(gpu)
    dev = resolve_device(device)
    memory = available_mb()
    catalog = load_catalog()
    record: dict = {"machine": machine(), "device": dev.type, "device_name": (torch.cuda.get_device_name(dev)
                    if dev.type == "cuda" else "cpu"), "date": datetime.date.today().isoformat(),
                    "target": {"gpu": target.get("gpu", gpu), "memory_gb": target.get("memory_gb"),
                               "profile": target["path"]},
                    "available_mb": round(memory), "warmup": warmup, "steps": steps, "rows": []}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rankrepro-pilot-") as scratch:
        for entry in signatures(plan.runs):
            r = entry["run"]
            b = r["sampler"]["batch_size"] if dev.type == "cuda" else cpu_batch(r, memory)
            if max_batch:
                m = r["sampler"].get("samples_per_class") or 1
                b = max(m, min(b, max_batch) - min(b, max_batch) % m)
            base = {"task": entry["signature"][0], "backbone": throughput_network(r, catalog),
                    "train_crop": r["images"]["train_crop"], "test_crop": r["images"]["test_crop"],
                    "run_batch": r["sampler"]["batch_size"], "loss": r["loss"]["name"], "amp": r["amp"],
                    "sampler": r["sampler"]["name"], "dataset": r["dataset"], "runs": entry["runs"]}
            t0 = time.perf_counter()
            try:
                manifest_dir, source = pilot_data(r, plan.datasets, Path(results), Path(scratch), b)
            except Exception as err:  # noqa: BLE001 -- a row, not the pilot's end
                row = {"batch": b, "error": f"no data: {type(err).__name__}: {err}"[:300], "out_of_memory": False,
                       "peak_mib": peak_mib(dev), "source": "-"}
            else:
                row = {**measure({**entry, "run": r}, manifest_dir, dev, b, warmup=warmup, steps=steps,
                                 eval_steps=eval_steps, workers=workers), "source": source}
            row = {**base, **row, "seconds": round(time.perf_counter() - t0, 1)}
            row["fits"] = fits(row, dev, record["target"]["memory_gb"])
            record["rows"].append(row)
            print(f"pilot {len(record['rows'])}: {row['backbone']} {row['loss']} b{row['batch']}: "
                  f"{row.get('images_per_s', 0) or 0:.1f} img/s {row['error'] or ''}", file=sys.stderr, flush=True)
    record["seconds"] = round(time.perf_counter() - t_start, 1)
    out_dir = Path(out_dir)
    memory_gb = (torch.cuda.get_device_properties(dev).total_memory / 1e9 if dev.type == "cuda" else None)
    profile = profile_of(record["rows"], record["device_name"], record["date"],
                         round(memory_gb, 1) if memory_gb else None)
    atomic_write_text(out_dir / "throughput.yaml", "# written by python -m rankrepro pilot (src/rankrepro/bench/"
                      "pilot.py); python -m rankrepro cost --profile reads it\n"
                      + yaml.safe_dump(profile, sort_keys=False))
    record["profile"] = str(out_dir / "throughput.yaml")
    return write_record(out_dir, "report", record, render(record))


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(record: dict) -> str:
    """The pilot's page: one row per signature."""
    m, t = record["machine"], record["target"]
    cpu = record["device"] != "cuda"
    lines = ["# Pilot: every training signature of the plan at real size", "",
             (f"`python -m rankrepro pilot` (src/rankrepro/bench/pilot.py) on {record['device_name']}, "
              f"{record['date']}: {len(record['rows'])} signatures in {record['seconds']:.0f} s. Machine: {m['cpu']}, "
              f"{m['cpus_usable']} usable CPUs, torch {m['torch']}."), "",
             (f"Per signature: the first step alone, {record['warmup']} warm-up steps, {record['steps']} timed steps "
              "of the task's real step (random weights, the run's sampler), each synchronised; the loader's share is "
              "the time spent waiting for its batch; then the evaluation forward pass and the exact R@1 / mAP@R of "
              "a slice of embeddings at the model's real size."), ""]
    if cpu:
        lines += [(f"**CPU**: real image size, the batch reduced to what this machine's memory holds "
                   f"({record['available_mb']:,} MB available; the run's batch in brackets): images/s and memory are "
                   "this CPU's, not a GPU's; peak memory is the process's RSS."), ""]
    if any(r["source"].startswith("replica") for r in record["rows"]):
        lines += ["**Data absent** for some signatures (source column): a generated replica at the real image size "
                  "stands in, its training rows repeated (each copy new classes) to fill the batch.", ""]
    lines += [(f"Fits: the peak against {_f(t['memory_gb'], 'g')} GB, the memory of the cluster.gpu profile "
               f"({t['gpu']}, `{t['profile']}`)."), "",
              "| task | backbone | crop | batch | loss | amp | sampler | images/s | first step (s) | loader share | "
              "inference images/s | embedding | metrics slice (s) | peak memory (MiB) | fits | source | error | runs |",
              "|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in record["rows"]:
        batch = f"{r['batch']} ({r['run_batch']})" if r["batch"] != r["run_batch"] else str(r["batch"])
        runs = ", ".join(r["runs"][:3]) + (f" (+{len(r['runs']) - 3})" if len(r["runs"]) > 3 else "")
        lines.append(
            f"| {r['task']} | {r['backbone']} | {r['train_crop']} | {batch} | {r['loss']} | {r['amp']} | "
            f"{r['sampler']} | {_f(r.get('images_per_s'), '.1f')} | {_f(r.get('first_step_s'), '.2f')} | "
            f"{_f(r.get('loader_share'), '.0%')} | {_f(r.get('inference_images_per_s'), '.1f')} | "
            f"{_f(r.get('embed_dim'), 'd')} | {_f(r.get('metrics_s'), '.2f')} | {r['peak_mib']:.0f} | {r['fits']} | "
            f"{r['source']} | {r['error'] or ''} | {runs} |")
    lines += ["", (f"Measured throughput profile: `{record['profile']}` (measured: true, {record['device_name']}, "
                   f"{record['date']}): `python -m rankrepro cost --profile {record['profile']}` prices the plan with "
                   "it, and config `cluster.profile` the SLURM runtimes.")]
    return "\n".join(lines) + "\n"
