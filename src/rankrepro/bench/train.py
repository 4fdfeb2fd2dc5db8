"""Training throughput per network: ``python -m rankrepro bench train`` writes ``<out>/train.md`` and ``.json``.

For every (network, pooling, crop size) the runs of ``config.yaml``'s plan and the setups use (:func:`cases`:
ResNet-34/50/101 with their poolings, DenseNet-201, BN-Inception, DeiT-S, ViT-B/16, the Faster R-CNN detectors;
a network is the row of the throughput profile its task's facts name, :class:`~rankrepro.record.tasks.TaskFacts`),
of every task the bench times (its ``bench_dataset``), at the setup's crop size and its most common batch size, it measures
images/s of

- the **full training step**: the trainer's own, on a generated replica of the task's ``bench_dataset`` (SOP for
  retrieval, Pascal VOC 2007 for detection): the run's task builds its data (the setup's own train transform, its
  loader), model and loss, and each step is the task's step and the training loop's optimisation step
  (:class:`rankrepro.bench.pipeline.TaskBench`; randomly initialised weights, the ``shuffle`` sampler, the default
  runtime: channels-last, ``cudnn.benchmark``, pinned memory and persistent workers on CUDA; fp16 autocast and a
  GradScaler on CUDA);
- the **model step alone**: the same on one batch already loaded;
- **inference**: the task's evaluation forward pass (no gradient) on one loaded batch (what evaluation costs).

On CPU (always measured; 2 cores here) a small batch, ``cpu_steps`` timed steps after one warm-up step and
small originals: enough to compare networks, not to plan a GPU. On CUDA (when present) the setup's batch size,
20 timed steps after 5, 500 px originals (SOP-like photos), ``min(8, CPUs)`` loader workers, and the goal:
**ResNet-50 at 224², fp16, with loading, >= 2,000 images/s on one H100 and >= 70 % of its model-only step**. A
run on CUDA also writes the GPU's throughput profile for ``python -m rankrepro cost``
(``profiles/throughput/<kind>.yaml``, ``measured: true``; its float32 tables ``train_fp32`` / ``inference_fp32``,
for ``amp: none`` runs, are each row's fp16 figure times ResNet-50's fp32 / fp16 model-step ratio).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path

import torch

GOAL_IPS = 2000
GOAL_RATIO = 0.70
CPU_BATCH = 4


def cases(config: str | Path = "config.yaml") -> list[dict]:
    """One run per (network, pooling, train crop) of the config's plan and of the setups whose task the bench times,
    with that group's most common batch size, sorted by network (the run's own blocks; its loss replaced by Smooth-AP
    where that is a loss of its task: the bench times networks, not losses). ``network``: the profile row (its
    task's ``throughput_key``); ``bench_dataset``: the dataset whose replica it trains on."""
    from rankrepro.catalog import load as load_catalog
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.planner import resolve_run
    from rankrepro.plan.schema import PlanError, load_yaml_mapping
    from rankrepro.plan.setups import load_setups
    from rankrepro.record.tasks import DEFAULT_TASK, facts_of, throughput_network

    smooth_ap = resolve_run("suprank_sop", {"name": "smooth_ap"})["loss"]
    runs = list(plan_from_config(load_yaml_mapping(Path(config)))["runs"].values())
    for name in load_setups():
        try:
            runs.append(resolve_run(name, {"name": "smooth_ap"}))
        except PlanError:  # an abstract base setup (no dataset), or one of a task whose loss is its own
            try:
                runs.append(resolve_run(name, {}))
            except PlanError:
                continue
    catalog = load_catalog()
    smooth_ap_task = catalog["loss"]["smooth_ap"].get("task") or DEFAULT_TASK
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        dataset = facts_of(run, catalog)["bench_dataset"]
        if dataset is None:  # a task whose profile rows come from elsewhere
            continue
        pooling = (run["model"].get("pooling") or {}).get("name", "-")
        key = (throughput_network(run, catalog), pooling, run["images"]["train_crop"])
        loss = smooth_ap if run["task"] == smooth_ap_task else run["loss"]
        groups.setdefault(key, []).append({**run, "loss": loss, "bench_dataset": dataset})
    out = []
    for (network, pooling, _), group in sorted(groups.items()):
        batch = Counter(r["sampler"]["batch_size"] for r in group).most_common(1)[0][0]
        run = next(r for r in group if r["sampler"]["batch_size"] == batch)
        out.append({**run, "network": network, "pooling_name": pooling, "setup_batch": batch})
    return out


def measure(device: str, runs: list[dict], replicas: dict[str, Path], *, batch: int | None, warmup: int, steps: int,
            workers: int) -> list[dict]:
    """The rows of one device: full step, model step and inference images/s of each case, each on the replica of
    its ``bench_dataset`` (``replicas``: dataset -> manifest folder)."""
    from rankrepro.bench.pipeline import TaskBench, bench_run

    rows = []
    for run in runs:
        b = batch or run["setup_batch"]
        bench = TaskBench(bench_run(run, b, "fp16"), replicas[run["bench_dataset"]], device, workers=workers)
        try:
            full = bench.train(warmup, steps)
            model_only = bench.train(warmup, steps, synthetic=True)
            infer = bench.infer(warmup, steps)
        finally:
            bench.close()
        rows.append({"device": device, "backbone": run["network"], "pooling": run["pooling_name"],
                     "crop": run["images"]["train_crop"], "setup_batch": run["setup_batch"], "batch": b,
                     "full_ips": full, "model_ips": model_only, "inference_ips": infer, "workers": workers,
                     "steps": steps, "warmup": warmup})
        print(f"{device} {rows[-1]['backbone']} {rows[-1]['crop']}: {full:.1f} / {model_only:.1f} / {infer:.1f} img/s",
              flush=True)
    return rows


def gpu_kind(name: str) -> str:
    """A profile name for a CUDA device name: ``h100``, ``h200``, ``a100``, ... (else the name, slugged)."""
    found = re.search(r"\b([A-Z]\d{2,3})\b", name)
    return found.group(1).lower() if found else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def write_profile(rows: list[dict], none_factor: float, gpu: str, profiles_dir: Path) -> Path:
    """``<profiles_dir>/<kind>.yaml`` from the CUDA rows (measured: true): their fp16 figures, and as the float32
    ones the same times ``none_factor`` (ResNet-50's fp32 / fp16 model step)."""
    import yaml

    from rankrepro.io import atomic_write_text

    train: dict = {}
    infer: dict = {}
    for r in rows:
        train.setdefault(r["backbone"], {})[r["crop"]] = round(r["full_ips"], 1)
        infer.setdefault(r["backbone"], {})[r["crop"]] = round(r["inference_ips"], 1)
    def fp32(table: dict) -> dict:
        return {b: {crop: round(ips * none_factor, 1) for crop, ips in sizes.items()} for b, sizes in table.items()}

    profile = {"gpu": gpu, "measured": True, "scaling": "pixels", "fp32_factor": round(none_factor, 3),
               "train": train, "train_fp32": fp32(train), "inference": infer, "inference_fp32": fp32(infer)}
    path = profiles_dir / f"{gpu_kind(gpu)}.yaml"
    atomic_write_text(path, "# written by python -m rankrepro bench train (src/rankrepro/bench/train.py)\n"
                      + yaml.safe_dump(profile, sort_keys=False))
    return path


#: the replicas the bench trains on, per device: options of their ``make_replica`` (SOP's; others take theirs)
REPLICA_OPTIONS = {"cpu": {"classes_per_super": 1, "image_size": 256}, "cuda": {"classes_per_super": 10, "image_size": 500}}


def replicas(runs: list[dict], root: Path, kind: str) -> dict[str, Path]:
    """A prepared replica of each ``bench_dataset`` of ``runs`` under ``root/<kind>/`` (``REPLICA_OPTIONS[kind]``):
    dataset -> manifest folder."""
    from rankrepro.bench.pipeline import replica_manifest

    return {name: replica_manifest(name, root / kind / name, **REPLICA_OPTIONS[kind])
            for name in sorted({r["bench_dataset"] for r in runs})}


def is_resnet50_224(row_or_run: dict) -> bool:
    """A case (or a row of :func:`measure`) of ResNet-50 at 224², the figure the goal and the fp32 factor use."""
    crop = row_or_run["crop"] if "crop" in row_or_run else row_or_run["images"]["train_crop"]
    return row_or_run.get("network", row_or_run.get("backbone")) == "resnet50" and crop == 224


def fp32_factor(runs: list[dict], rows: list[dict], replicas: dict[str, Path], device: str, *, workers: int,
                warmup: int, steps: int) -> float:
    """ResNet-50 224²'s model step in fp32 (``amp: none``) over its fp16 one (``rows``' ``model_ips``): the factor
    :func:`write_profile` gives the float32 tables."""
    from rankrepro.bench.pipeline import TaskBench, bench_run

    r50 = next(r for r in runs if is_resnet50_224(r))
    bench = TaskBench(bench_run(r50, r50["setup_batch"], "none"), replicas[r50["bench_dataset"]], device,
                      workers=workers)
    try:
        fp32 = bench.train(warmup, steps, synthetic=True)
    finally:
        bench.close()
    return fp32 / next(r["model_ips"] for r in rows if is_resnet50_224(r))


def run(out_dir="results/bench", device: str | None = None, cpu_steps: int = 2, config="config.yaml") -> dict:
    from rankrepro.bench import gpu_not_measured, write_record
    from rankrepro.bench.pipeline import machine
    from rankrepro.plan.cost import PROFILES_DIR

    cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    runs = cases(config)
    record: dict = {"machine": machine(), "cases": len(runs)}
    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-train-") as tmp:
        record["cpu"] = measure("cpu", runs, replicas(runs, Path(tmp), "cpu"), batch=CPU_BATCH, warmup=1,
                                steps=cpu_steps, workers=0)
        if cuda:
            gpu_replicas = replicas(runs, Path(tmp), "cuda")
            workers = min(8, len(os.sched_getaffinity(0)))
            record["gpu"] = measure("cuda", runs, gpu_replicas, batch=None, warmup=5, steps=20, workers=workers)
            factor = fp32_factor(runs, record["gpu"], gpu_replicas, "cuda", workers=workers, warmup=5, steps=20)
            record["profile"] = str(write_profile(record["gpu"], factor, torch.cuda.get_device_name(0),
                                                  PROFILES_DIR))
        else:
            record["gpu"] = gpu_not_measured()
    return write_record(out_dir, "train", record, render(record))


def table_rows(rows: list[dict]) -> list[str]:
    lines = ["| backbone | pooling | crop | batch (setup's) | full step img/s | model step img/s | full / model | "
             "inference img/s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['backbone']} | {r['pooling']} | {r['crop']}² | {r['batch']} ({r['setup_batch']}) | "
                     f"{r['full_ips']:.1f} | {r['model_ips']:.1f} | {r['full_ips'] / r['model_ips']:.0%} | "
                     f"{r['inference_ips']:.1f} |")
    return lines


def render(record: dict) -> str:
    m = record["machine"]
    cpu = record["cpu"]
    lines = ["# Training throughput per network", "",
             ("`python -m rankrepro bench train` (src/rankrepro/bench/train.py). Full step: the trainer's own (the "
              "run's task's data, loader, model, loss and step, the training loop's optimisation step) on a "
              "generated replica of the task's bench dataset (SOP for retrieval, with Smooth-AP; VOC 2007 for the "
              "detectors), the shuffle sampler; model step: the same on one loaded batch; inference: the task's "
              "evaluation forward pass on one loaded batch. Randomly initialised weights."), "",
             (f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['cpus_usable']} usable), torch threads "
              f"{m['torch_threads']}, load average {m['load_average']} at the start; torch {m['torch']}."), "",
             f"Goal: ResNet-50 at 224², fp16, with loading, >= {GOAL_IPS:,} images/s on one H100 and >= "
             f"{GOAL_RATIO:.0%} of its model-only step.", "",
             "## CPU", "",
             (f"Batch {cpu[0]['batch']} instead of the setup's (in brackets), {cpu[0]['warmup']} warm-up and "
              f"{cpu[0]['steps']} timed steps, main-process loading (num_workers 0), the replicas' originals (SOP: 256 px), fp32: "
              "a comparison of networks on this machine, not a GPU forecast."), ""]
    lines += table_rows(cpu)
    lines += ["", "## GPU", ""]
    if isinstance(record["gpu"], str):
        lines.append(record["gpu"] + ".")
    else:
        g = record["gpu"]
        lines += [(f"Device: {m['cuda']}; the setup's batch, {g[0]['warmup']} warm-up and {g[0]['steps']} timed "
                   f"steps, {g[0]['workers']} loader workers, 500 px originals, fp16 autocast, channels-last, "
                   f"cudnn.benchmark. Profile written: `{record['profile']}`."), ""]
        lines += table_rows(g)
        r50 = next((r for r in g if is_resnet50_224(r)), None)
        if r50:
            met = r50["full_ips"] >= GOAL_IPS and r50["full_ips"] >= GOAL_RATIO * r50["model_ips"]
            lines += ["", f"Goal ({m['cuda']}): ResNet-50 224² with loading {r50['full_ips']:.0f} images/s "
                      f"({r50['full_ips'] / r50['model_ips']:.0%} of the model step): {'met' if met else 'not met'}."]
    return "\n".join(lines) + "\n"


def main(out_dir="results/bench", device: str | None = None) -> None:
    record = run(out_dir, device=device)
    print(render(record))
