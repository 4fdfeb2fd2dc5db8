"""Training throughput per backbone: ``python -m rankrepro bench train`` writes ``<out>/train.md`` and ``.json``.

For every (backbone, pooling, crop size) the runs of ``config.yaml``'s plan and the setups use
(:func:`cases`: ResNet-34/50/101 with their poolings, DenseNet-201, BN-Inception, DeiT-S, ViT-B/16), at the
setup's crop size and its most common batch size, it measures images/s of

- the **full training step**: a generated SOP replica read from its image files through the setup's own
  :func:`~rankrepro.data.transforms.train_transform` and a ``DataLoader`` (batches drawn with replacement),
  forward, Smooth-AP loss, backward and the setup's optimizer
  (:func:`rankrepro.bench.pipeline.train_throughput`; randomly initialised weights, channels-last,
  ``cudnn.benchmark``, fp16 autocast and a GradScaler on CUDA);
- the **model step alone**: the same on one random batch already on the device;
- **inference**: forward passes (no gradient) of a random batch already on the device (what evaluation costs).

On CPU (always measured; 2 cores here) a small batch, ``cpu_steps`` timed steps after one warm-up step and
4 original images of 256 px: enough to compare backbones, not to plan a GPU. On CUDA (when present) the
setup's batch size, 20 timed steps after 5, 500 px originals (SOP-like photos), ``min(8, CPUs)`` loader
workers, and the goal: **ResNet-50 at 224², fp16, with loading, >= 2,000 images/s on one H100 and >= 70 % of
its model-only step**. A run on CUDA also writes the GPU's throughput profile for
``python -m rankrepro cost`` (``profiles/throughput/<kind>.yaml``, ``measured: true``; the amp factor of
``none`` from a ResNet-50 fp32 model step).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

GOAL_IPS = 2000
GOAL_RATIO = 0.70
CPU_BATCH = 4


def cases(config: str | Path = "config.yaml") -> list[dict]:
    """One run per (backbone, pooling, train crop) of the config's plan and of the setups, with that group's most
    common batch size, sorted by backbone (the run's own model and images blocks; Smooth-AP loss)."""
    from rankrepro.catalog import load as load_catalog
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.planner import resolve_run
    from rankrepro.plan.schema import PlanError, load_yaml
    from rankrepro.plan.setups import load_setups
    from rankrepro.record.tasks import facts_of

    loss = resolve_run("suprank_sop", {"name": "smooth_ap"})["loss"]
    runs = list(plan_from_config(load_yaml(Path(config)))["runs"].values())
    for name, setup in load_setups().items():
        try:
            runs.append(resolve_run(name, {"name": "smooth_ap"}))
        except PlanError:  # an abstract base setup (no dataset): its children are listed
            continue
    tasks_catalog = load_catalog()
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        if not facts_of(run, tasks_catalog)["benched"]:  # a task whose profile rows come from elsewhere
            continue
        key = (run["model"]["backbone"], run["model"]["pooling"]["name"], run["images"]["train_crop"])
        groups.setdefault(key, []).append(run)
    out = []
    for key, group in sorted(groups.items()):
        batch = Counter(r["sampler"]["batch_size"] for r in group).most_common(1)[0][0]
        run = next(r for r in group if r["sampler"]["batch_size"] == batch)
        out.append({**run, "loss": loss, "setup_batch": batch})
    return out


def inference_throughput(run: dict, device: torch.device, batch_size: int, warmup: int, steps: int) -> float:
    """Images/s of forward passes without gradient on one random batch on ``device`` (fp16 autocast on CUDA)."""
    from rankrepro.device import autocast
    from rankrepro.models import build_model

    model = build_model(dict(run["model"], pretrained="none")).to(device).to(memory_format=torch.channels_last).eval()
    crop = run["images"]["test_crop"]
    x = torch.randn(batch_size, 3, crop, crop, device=device).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        for step in range(warmup + steps):
            if step == warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
            with autocast(device, "fp16"):
                model(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return steps * batch_size / (time.perf_counter() - t0)


def measure(device: str, runs: list[dict], manifest_dir: Path, *, batch: int | None, warmup: int, steps: int,
            workers: int) -> list[dict]:
    """The rows of one device: full step, model step and inference images/s of each case."""
    from rankrepro.bench.pipeline import train_throughput
    from rankrepro.data.images import ImageDataset
    from rankrepro.data.manifest import read_manifest
    from rankrepro.data.transforms import train_transform

    dev = torch.device(device)
    train = read_manifest(manifest_dir).split("train")
    rows = []
    for run in runs:
        b = batch or run["setup_batch"]
        dataset = ImageDataset(train, train_transform(run["images"]), contiguous=True)
        common = {"batch_size": b, "warmup": warmup, "steps": steps}
        full = train_throughput(dataset, run, dev, workers=workers, **common)
        model_only = train_throughput(dataset, run, dev, synthetic=True, **common)
        infer = inference_throughput(run, dev, b, warmup, steps)
        rows.append({"device": device, "backbone": run["model"]["backbone"], "pooling": run["model"]["pooling"]["name"],
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
    """``<profiles_dir>/<kind>.yaml`` from the CUDA rows (measured: true)."""
    import yaml

    from rankrepro.io import atomic_write_text

    train: dict = {}
    infer: dict = {}
    for r in rows:
        train.setdefault(r["backbone"], {})[r["crop"]] = round(r["full_ips"], 1)
        infer.setdefault(r["backbone"], {})[r["crop"]] = round(r["inference_ips"], 1)
    profile = {"gpu": gpu, "measured": True, "scaling": "pixels",
               "amp_factor": {"fp16": 1.0, "bf16": 1.0, "none": round(none_factor, 3)},
               "train": train, "inference": infer}
    path = profiles_dir / f"{gpu_kind(gpu)}.yaml"
    atomic_write_text(path, "# written by python -m rankrepro bench train (src/rankrepro/bench/train.py)\n"
                      + yaml.safe_dump(profile, sort_keys=False))
    return path


def run(out_dir="results/bench", device: str | None = None, cpu_steps: int = 2, config="config.yaml") -> dict:
    from rankrepro.bench.pipeline import machine, make_replica, train_throughput
    from rankrepro.data.images import ImageDataset
    from rankrepro.data.manifest import read_manifest
    from rankrepro.data.transforms import train_transform
    from rankrepro.bench import gpu_not_measured, write_record
    from rankrepro.plan.cost import PROFILES_DIR

    cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    runs = cases(config)
    record: dict = {"machine": machine(), "cases": len(runs)}
    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-train-") as tmp:
        cpu_manifest = make_replica(Path(tmp) / "cpu", classes_per_super=1, image_size=256)
        record["cpu"] = measure("cpu", runs, cpu_manifest, batch=CPU_BATCH, warmup=1, steps=cpu_steps, workers=0)
        if cuda:
            gpu_manifest = make_replica(Path(tmp) / "gpu", classes_per_super=10, image_size=500)
            workers = min(8, len(os.sched_getaffinity(0)))
            record["gpu"] = measure("cuda", runs, gpu_manifest, batch=None, warmup=5, steps=20, workers=workers)
            r50 = next(r for r in runs if r["model"]["backbone"] == "resnet50" and r["images"]["train_crop"] == 224)
            dataset = ImageDataset(read_manifest(gpu_manifest).split("train"), train_transform(r50["images"]),
                                   contiguous=True)
            fp32 = train_throughput(dataset, r50, "cuda", batch_size=r50["setup_batch"], synthetic=True, amp="none")
            fp16 = next(r["model_ips"] for r in record["gpu"] if r["backbone"] == "resnet50" and r["crop"] == 224)
            record["profile"] = str(write_profile(record["gpu"], fp32 / fp16, torch.cuda.get_device_name(0),
                                                  PROFILES_DIR))
        else:
            record["gpu"] = gpu_not_measured()
    return write_record(out_dir, "train", record, render(record))


def _rows(rows: list[dict]) -> list[str]:
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
    lines = ["# Training throughput per backbone", "",
             ("`python -m rankrepro bench train` (src/rankrepro/bench/train.py). Full step: images read from a "
              "generated SOP replica through the setup's train transform and a DataLoader, forward, Smooth-AP, "
              "backward, the setup's optimizer; model step: one random batch already on the device; inference: "
              "forward only. Randomly initialised weights."), "",
             (f"Machine: {m['cpu']}, {m['cpu_count']} CPUs ({m['cpus_usable']} usable), torch threads "
              f"{m['torch_threads']}, load average {m['load_average']} at the start; torch {m['torch']}."), "",
             f"Goal: ResNet-50 at 224², fp16, with loading, >= {GOAL_IPS:,} images/s on one H100 and >= "
             f"{GOAL_RATIO:.0%} of its model-only step.", "",
             "## CPU", "",
             (f"Batch {cpu[0]['batch']} instead of the setup's (in brackets), {cpu[0]['warmup']} warm-up and "
              f"{cpu[0]['steps']} timed steps, main-process loading (num_workers 0), 256 px originals, fp32: "
              "a comparison of backbones on this machine, not a GPU forecast."), ""]
    lines += _rows(cpu)
    lines += ["", "## GPU", ""]
    if isinstance(record["gpu"], str):
        lines.append(record["gpu"] + ".")
    else:
        g = record["gpu"]
        lines += [(f"Device: {m['cuda']}; the setup's batch, {g[0]['warmup']} warm-up and {g[0]['steps']} timed "
                   f"steps, {g[0]['workers']} loader workers, 500 px originals, fp16 autocast, channels-last, "
                   f"cudnn.benchmark. Profile written: `{record['profile']}`."), ""]
        lines += _rows(g)
        r50 = next((r for r in g if r["backbone"] == "resnet50" and r["crop"] == 224), None)
        if r50:
            met = r50["full_ips"] >= GOAL_IPS and r50["full_ips"] >= GOAL_RATIO * r50["model_ips"]
            lines += ["", f"Goal ({m['cuda']}): ResNet-50 224² with loading {r50['full_ips']:.0f} images/s "
                      f"({r50['full_ips'] / r50['model_ips']:.0%} of the model step): {'met' if met else 'not met'}."]
    return "\n".join(lines) + "\n"


def main(out_dir="results/bench", device: str | None = None) -> None:
    record = run(out_dir, device=device)
    print(render(record))
