"""Data-pipeline throughput: ``python -m rankrepro bench pipeline`` writes ``<out>/pipeline.md`` and ``.json``.

On a generated SOP replica with real-photo-sized images (``image_size`` x ``image_size`` JPEGs, 500 px
by default: SOP's photos are about 500 px on a side; the replica's striped images with pixel noise
are harder to compress than product photos, so decoding them is, if anything, slower), prepared
through the real ``write_replica`` -> ``prepare`` path, it measures:

1. the resized image cache build (``rankrepro.data.cache.build_cache`` at S = 256): images/s, MB;
2. CPU: images/s of the training data pipeline of SupRank's SOP setup (decode, ``Resize(256)``,
   ``RandomResizedCrop(224, scale=(0.16, 1), ratio=(0.75, 1.33))``, flip, ``ToTensor``, ``Normalize``:
   the run's own ``train_transform``, through :class:`~rankrepro.data.images.ImageDataset` and a
   ``DataLoader`` of batch 64, shuffled) from the originals and from the cache, with
   ``num_workers`` 0 and 2: the median of ``repeats`` timed passes over the training split after an
   untimed one (the files are then in the page cache, as on a node after the first epoch;
   workers persist, so their start-up is not timed: a real epoch of 330 batches amortises it);
3. where the time goes, per image in the main process: decode (+ RGB), ``Resize(256)``, the rest;
4. the cache format: decode time and size of the cached images re-encoded as JPEG q95 (the
   cache's format), JPEG q90, PNG, WebP q95, and raw uint8 pixels (``.npy``);
5. GPU (only where CUDA is available): ResNet-50 training images/s (SupRank's SOP model, randomly
   initialised, Smooth-AP loss, Adam; batch 256, fp16 autocast with a GradScaler, channels-last,
   ``cudnn.benchmark``) on the real pipeline, from the originals and from the cache, with
   ``gpu_workers`` loader workers, and on a synthetic batch already on the GPU (the ceiling without
   data loading). Goal: 2,000 images/s on an H100 with data loading. Without CUDA the table says
   "not measured: no GPU on this machine".

The machine (CPU count, the CPUs this process may use, torch threads, load average, Pillow and
libjpeg-turbo) is recorded with the numbers. ``run(...)`` takes the sizes as parameters (the tests
use a tiny replica).
"""

from __future__ import annotations

import io
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

GOAL = 2000  # ResNet-50 training images/s on an H100, data loading included
CACHE_SIZE = 256
CPU_BATCH = 64


def sop_run() -> dict:
    """SupRank's SOP run (Smooth-AP loss), as the planner resolves it."""
    from rankrepro.plan.planner import resolve_run

    return resolve_run("suprank_sop", {"name": "smooth_ap"})


def machine() -> dict:
    import torchvision
    from PIL import __version__ as pil_version
    from PIL import features

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else \
        platform.processor()
    return {
        "cpu": model, "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(), "load_average": round(os.getloadavg()[0], 2),
        "python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
        "pillow": pil_version, "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def replica_manifest(dataset: str, dest: Path, **options) -> Path:
    """A prepared replica of ``dataset`` under ``dest`` (written with those of ``options`` its ``make_replica``
    takes, e.g. SOP's ``classes_per_super`` and ``image_size``; downloaded from it as the pipeline does, checksums
    verified); returns its manifest folder."""
    import inspect

    from rankrepro.data import datasets

    data = datasets.load(dataset)
    taken = inspect.signature(data.make_replica).parameters
    data.write_replica(dest / "replica", **{k: v for k, v in options.items() if k in taken})
    record = data.download(dest / "data", replica_dir=dest / "replica")
    data.prepare(record, dest / "manifest", data_root=dest / "data", replica=True)
    return dest / "manifest"


def make_replica(dest: Path, classes_per_super: int, image_size: int, seed: int = 0) -> Path:
    """A prepared SOP replica (12 super-classes x ``classes_per_super`` products per split, 2-5 images
    each) of ``image_size`` px images under ``dest``; returns its manifest folder."""
    return replica_manifest("sop", dest, classes_per_super=classes_per_super, image_size=image_size, seed=seed)


def _dims(path) -> list[int]:
    from PIL import Image

    with Image.open(path) as image:
        return list(image.size)


def _folder_mb(paths) -> float:
    return sum(Path(p).stat().st_size for p in paths) / 1e6


# -- CPU: the DataLoader ----------------------------------------------------------------------------


def loader_throughput(dataset, num_workers: int, repeats: int = 3, batch_size: int = CPU_BATCH,
                      seed: int = 0) -> dict:
    """Images/s of full shuffled passes over ``dataset`` (median and best of ``repeats`` timed passes,
    after an untimed one)."""
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                        persistent_workers=num_workers > 0, generator=torch.Generator().manual_seed(seed))
    rates = []
    for rep in range(repeats + 1):
        t0, seen = time.perf_counter(), 0
        for images, _, _ in loader:
            seen += len(images)
        if rep:
            rates.append(seen / (time.perf_counter() - t0))
    del loader
    return {"images_per_s": statistics.median(rates), "best": max(rates), "images": len(dataset)}


def stage_times(paths: list[Path], images_cfg: dict, limit: int = 64) -> dict:
    """Milliseconds per image in this process: decode (+ RGB), the leading Resize, the rest of the
    train transform (RandomResizedCrop, flip, ToTensor, Normalize)."""
    from PIL import Image

    from rankrepro.data.transforms import train_transform

    steps = train_transform(images_cfg).transforms
    resize, rest = steps[0], steps[1:]
    paths = list(paths)[:limit]
    t = {"decode": 0.0, "resize": 0.0, "rest": 0.0}
    for rep, path in enumerate(paths[:8] + paths):  # the first 8: untimed warm-up
        t0 = time.perf_counter()
        with Image.open(path) as image:
            image = image.convert("RGB")
        t1 = time.perf_counter()
        image = resize(image)
        t2 = time.perf_counter()
        for step in rest:
            image = step(image)
        t3 = time.perf_counter()
        if rep >= min(8, len(paths)):
            t["decode"] += t1 - t0
            t["resize"] += t2 - t1
            t["rest"] += t3 - t2
    return {k: 1e3 * v / len(paths) for k, v in t.items()}


def format_table(paths: list[Path], limit: int = 64, repeats: int = 3) -> list[dict]:
    """Decode (+ RGB) and encode milliseconds per image and kB per image of the cached images
    re-encoded in each candidate format."""
    from PIL import Image

    images = []
    for path in list(paths)[:limit]:
        with Image.open(path) as image:
            images.append(image.convert("RGB"))
    formats = [("JPEG q95 (the cache)", "JPEG", {"quality": 95}), ("JPEG q90", "JPEG", {"quality": 90}),
               ("PNG (level 1)", "PNG", {"compress_level": 1}), ("WebP q95", "WEBP", {"quality": 95}),
               ("raw uint8 (.npy)", "npy", {})]
    rows = []
    for label, fmt, options in formats:
        t0 = time.perf_counter()
        blobs = []
        for image in images:
            buffer = io.BytesIO()
            if fmt == "npy":
                np.save(buffer, np.asarray(image))
            else:
                image.save(buffer, format=fmt, **options)
            blobs.append(buffer.getvalue())
        encode = (time.perf_counter() - t0) / len(images)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for blob in blobs:
                if fmt == "npy":
                    Image.fromarray(np.load(io.BytesIO(blob)))
                else:
                    with Image.open(io.BytesIO(blob)) as image:
                        image.convert("RGB")
            times.append((time.perf_counter() - t0) / len(blobs))
        rows.append({"format": label, "decode_ms": 1e3 * min(times), "encode_ms": 1e3 * encode,
                     "kb": sum(map(len, blobs)) / len(blobs) / 1e3})
    return rows


# -- GPU: ResNet-50 training steps ------------------------------------------------------------------


def bench_run(run: dict, batch_size: int, amp: str | None = None, backbone: str | None = None,
              own_sampler: bool = False) -> dict:
    """``run`` as the benchmarks train it: random weights (``pretrained: none``), no PCA start, batches of
    ``batch_size`` from the ``shuffle`` sampler (every image of the replica once per epoch: a replica lacks the
    classes a setup's own sampler needs at its batch size) or, with ``own_sampler``, from the run's own sampler
    at that batch size; ``amp`` and ``backbone`` (None: the run's)."""
    model = dict(run["model"], **({"backbone": backbone} if backbone else {}))
    if "pretrained" in model:
        model["pretrained"] = "none"
    if model.get("projection_init") == "pca":
        model["projection_init"] = "random"
    sampler = (dict(run["sampler"], batch_size=batch_size) if own_sampler
               else {"name": "shuffle", "batch_size": batch_size, "drop_last": False})
    return {**run, "model": model, "amp": amp or run["amp"], "sampler": sampler}


class TaskBench:
    """``run``'s parts built by its own task (:mod:`rankrepro.engine.tasks`) on the training split of the manifest
    in ``manifest_dir`` (read from ``image_cache``; None: the originals), with the training loop's optimizer and
    scaler, on ``device`` with ``workers`` loader workers and the default runtime (channels-last, cuDNN benchmark,
    pinned memory, persistent workers on CUDA): what the trainer runs, timed by :meth:`train` and :meth:`infer`."""

    def __init__(self, run: dict, manifest_dir: str | Path, device: str | torch.device, *, workers: int = 0,
                 image_cache: str | Path | None = None):
        from rankrepro.device import grad_scaler
        from rankrepro.engine.loop import seed_everything
        from rankrepro.engine.optim import build_optimizer
        from rankrepro.engine.tasks import task_of
        from rankrepro.record.runtime import JobSettings

        self.run, self.device = run, torch.device(device)
        settings = JobSettings(device=str(self.device), num_workers=workers, progress=False, image_cache=image_cache)
        settings.runtime.apply_backends(self.device)
        self._out = tempfile.TemporaryDirectory(prefix="rankrepro-bench-task-")
        seed_everything(run["seed"])
        self.task = task_of(run)
        self.parts = self.task.build(run, Path(manifest_dir), Path(self._out.name), settings, self.device)
        self.optimizer = build_optimizer(run["optimizer"], self.parts.model, self.parts.criterion)
        self.scaler = grad_scaler(self.device, run["amp"])
        self.task.start(None)

    def batches(self, synthetic: bool):
        """The task's batches, epoch after epoch (``synthetic``: the first one again and again)."""
        from rankrepro.engine.preemption import EpochProgress

        epoch = 0
        while True:
            self.parts.sampler.set_epoch(epoch)
            for batch in self.task.batches(EpochProgress(epoch, seed=epoch), None):
                while synthetic:
                    yield batch
                yield batch
            epoch += 1

    def _timed(self, warmup: int, steps: int, one_step, synthetic: bool) -> float:
        """Images/s of ``steps`` calls of ``one_step(batch) -> images`` after ``warmup``."""
        batches = self.batches(synthetic)
        images, t0 = 0, time.perf_counter()
        for step in range(warmup + steps):
            if step == warmup:
                self._sync()
                images, t0 = 0, time.perf_counter()
            images += one_step(next(batches))
        self._sync()
        return images / (time.perf_counter() - t0)

    def train(self, warmup: int, steps: int, synthetic: bool = False) -> float:
        """Training images/s: the task's step and the loop's optimisation step (:func:`rankrepro.engine.loop.optimise`)
        on its batches (``synthetic``: one batch, already loaded)."""
        self.parts.model.train()
        return self._timed(warmup, steps, self.train_step, synthetic)

    def train_step(self, batch) -> int:
        """One training step on ``batch`` (the task's step, then the loop's optimisation step); its images."""
        from rankrepro.engine.loop import optimise

        loss, images = self.task.step(batch)
        optimise(loss, self.optimizer, self.scaler, self.run.get("grad_clip"))
        return images

    def infer(self, warmup: int, steps: int) -> float:
        """Inference images/s: the task's evaluation forward pass (:meth:`~rankrepro.engine.tasks.Task.infer`, no
        gradient) on one loaded batch."""
        self.parts.model.eval()
        with torch.no_grad():
            return self._timed(warmup, steps, self.task.infer, synthetic=True)

    def close(self) -> None:
        self.task.close()
        self._out.cleanup()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def train_throughput(manifest_dir: str | Path, run: dict, device: str | torch.device, *,
                     image_cache: str | Path | None = None, batch_size: int = 256, workers: int = 8, warmup: int = 5,
                     steps: int = 20, synthetic: bool = False, backbone: str | None = None, amp: str = "fp16") -> float:
    """Training images/s of ``run`` (:func:`bench_run`: random weights, ``backbone`` and ``amp`` replacing its own,
    fp16 by default) through the trainer's own parts and step (:class:`TaskBench`) on the manifest's training
    split, read from ``image_cache`` through ``workers`` loader workers (``synthetic``: one batch kept on the
    device instead). ``steps`` timed steps after ``warmup``."""
    bench = TaskBench(bench_run(run, batch_size, amp, backbone), manifest_dir, device, workers=workers,
                      image_cache=image_cache)
    try:
        return bench.train(warmup, steps, synthetic)
    finally:
        bench.close()


# -- the benchmark ----------------------------------------------------------------------------------


def run(out_dir="results/bench", *, classes_per_super: int = 10, image_size: int = 500, workers=(0, 2),
        repeats: int = 3, device: str | None = None, gpu_workers=None, gpu_steps: int = 20,
        profile_images: int = 64) -> dict:
    """Run the benchmark and write ``<out_dir>/pipeline.md`` and ``pipeline.json``; return the record.

    ``device``: ``cuda`` (fail without it), ``cpu`` (skip the GPU part) or None (CUDA when available).
    ``gpu_workers``: loader workers of the GPU rows (default: 8, the config's num_workers, and every CPU)."""
    from rankrepro.data.cache import build_cache
    from rankrepro.data.images import ImageDataset
    from rankrepro.data.manifest import read_manifest
    from rankrepro.data.transforms import train_transform
    from rankrepro.bench import gpu_not_measured, write_record

    sop = sop_run()
    images_cfg = sop["images"]
    size = images_cfg["train_resize"]
    cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    record: dict = {"machine": machine(), "setup": {"images": images_cfg, "image_size": image_size,
                                                   "cpu_batch": CPU_BATCH, "repeats": repeats}}
    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-pipeline-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        manifest_dir = make_replica(tmp, classes_per_super, image_size)
        record["setup"]["replica_seconds"] = round(time.perf_counter() - t0, 1)
        manifest = read_manifest(manifest_dir)
        train = manifest.split("train")
        build_workers = min(2, len(os.sched_getaffinity(0)))
        cache = build_cache(manifest_dir, size, tmp / "cache" / f"s{size}", workers=build_workers)
        cache_dir = tmp / "cache" / f"s{size}"
        record["cache"] = {"images": cache["count"], "resized": cache["resized"], "copied": cache["copied"],
                           "seconds": cache["seconds"], "workers": build_workers,
                           "images_per_s": cache["count"] / max(cache["seconds"], 1e-9),
                           "originals_mb": _folder_mb(manifest.paths()),
                           "cache_mb": _folder_mb(cache_dir / p for p in manifest.table["path"])}
        record["setup"]["original_dims"] = _dims(train.paths()[0])
        sources = {"originals": None, "cache": cache_dir}
        datasets = {name: ImageDataset(train, train_transform(images_cfg), contiguous=True, cache=folder)
                    for name, folder in sources.items()}
        assert datasets["cache"].source == "cache"
        record["cpu"] = [{"source": name, "num_workers": w, **loader_throughput(datasets[name], w, repeats)}
                         for w in workers for name in sources]
        record["stages"] = {name: stage_times(datasets[name].paths, images_cfg, profile_images) for name in sources}
        record["formats"] = format_table([cache_dir / p for p in train.table["path"]], profile_images)
        if cuda:
            n_cpu = len(os.sched_getaffinity(0))
            chosen = sorted(set(gpu_workers or (min(8, n_cpu), n_cpu)))
            rows = [{"source": "synthetic batch on the GPU (no data loading)", "num_workers": None,
                     "images_per_s": train_throughput(manifest_dir, sop, "cuda", image_cache=cache_dir,
                                                      synthetic=True, steps=gpu_steps)}]
            for w in chosen:
                for name in sources:
                    rows.append({"source": name, "num_workers": w,
                                 "images_per_s": train_throughput(manifest_dir, sop, "cuda", workers=w,
                                                                  image_cache=sources[name], steps=gpu_steps)})
            record["gpu"] = rows
        else:
            record["gpu"] = gpu_not_measured()
    return write_record(out_dir, "pipeline", record, render(record))


def render(record: dict) -> str:
    m, s, c = record["machine"], record["setup"], record["cache"]
    img = s["images"]
    machine_line = (
        "`python -m rankrepro bench pipeline` (src/rankrepro/bench/pipeline.py). Machine: "
        f"{m['cpu']}, {m['cpu_count']} CPUs ({m['cpus_usable']} usable), torch threads {m['torch_threads']}, "
        f"load average {m['load_average']} at the start; torch {m['torch']}, torchvision {m['torchvision']}, "
        f"Pillow {m['pillow']} (libjpeg-turbo: {'yes' if m['libjpeg_turbo'] else 'no'}).")
    data_line = (
        f"Data: a generated SOP replica (`write_replica(image_size={s['image_size']})` -> `prepare`), "
        f"{c['images']} images of {s['original_dims'][0]}x{s['original_dims'][1]} px "
        f"(JPEG q90, {1e3 * c['originals_mb'] / c['images']:.0f} kB each), the training split "
        f"{record['cpu'][0]['images']} images. Cache: shorter side {img['train_resize']}, JPEG q95 "
        f"({1e3 * c['cache_mb'] / c['images']:.0f} kB each; {c['resized']} resized, {c['copied']} copied), "
        f"built in {c['seconds']:.1f} s with {c['workers']} processes ({c['images_per_s']:.0f} images/s).")
    cpu_title = (
        f"## CPU: the training data pipeline (SupRank SOP: Resize({img['train_resize']}), "
        f"RandomResizedCrop({img['train_crop']}, scale={tuple(img['rrc_scale'])}, "
        f"ratio={tuple(img['rrc_ratio'])}), flip, ToTensor, Normalize)")
    cpu_line = (
        f"DataLoader batch {s['cpu_batch']}, shuffled; images/s = median of {s['repeats']} timed passes over "
        "the training split after an untimed one (best in brackets).")
    lines = ["# Data pipeline throughput: originals vs the resized image cache", "", machine_line, "", data_line, "",
             cpu_title, "", cpu_line, "", "| source | num_workers | images/s | vs originals |", "|---|---:|---:|---:|"]
    base = {r["num_workers"]: r["images_per_s"] for r in record["cpu"] if r["source"] == "originals"}
    for r in record["cpu"]:
        lines.append(f"| {r['source']} | {r['num_workers']} | {r['images_per_s']:.0f} ({r['best']:.0f}) | "
                     f"{r['images_per_s'] / base[r['num_workers']]:.2f}x |")
    lines += ["", "Per image, one process (ms):", "",
              "| source | decode + RGB | Resize | crop, flip, ToTensor, Normalize | total |",
              "|---|---:|---:|---:|---:|"]
    stages = [(name, record["stages"][name]) for name in ("originals", "cache")]
    for name, t in stages:
        total = sum(t.values())
        lines.append(f"| {name} | {t['decode']:.2f} | {t['resize']:.2f} | {t['rest']:.2f} | {total:.2f} |")
    cores = " vs ".join(f"{GOAL * sum(t.values()) / 1e3:.1f} busy cores from the {name}" for name, t in stages)
    estimate = (f"At these costs, {GOAL:,} images/s of training input takes about {cores} (cores like these; "
                "the GPU rows below measure it).")
    lines += ["", estimate]
    format_line = (f"The cached images (shorter side {img['train_resize']}) re-encoded; decode = open + convert to "
                   "RGB (raw: `np.load` + `Image.fromarray`), best of 3, one process.")
    lines += ["", "## Cache format", "", format_line, "",
              "| format | decode (ms) | encode (ms) | kB per image |", "|---|---:|---:|---:|"]
    for r in record["formats"]:
        lines.append(f"| {r['format']} | {r['decode_ms']:.2f} | {r['encode_ms']:.2f} | {r['kb']:.1f} |")
    gpu_line = (f"Goal: {GOAL:,} images/s on an H100 with data loading. SupRank SOP model (ResNet-50, randomly "
                "initialised), Smooth-AP, Adam; batch 256, fp16 autocast, channels-last, cudnn.benchmark; batches "
                "of the replica drawn with replacement through the pipeline above.")
    lines += ["", "## GPU: ResNet-50 training with data loading", "", gpu_line, ""]
    if isinstance(record["gpu"], str):
        lines.append(record["gpu"] + ".")
    else:
        lines += [f"Device: {m['cuda']}.", "", "| source | num_workers | images/s | goal |", "|---|---:|---:|---:|"]
        for r in record["gpu"]:
            workers = "-" if r["num_workers"] is None else r["num_workers"]
            met = "met" if r["images_per_s"] >= GOAL else "not met"
            lines.append(f"| {r['source']} | {workers} | {r['images_per_s']:.0f} | {met} |")
    return "\n".join(lines) + "\n"


def main(out_dir="results/bench", device: str | None = None) -> None:
    record = run(out_dir, device=device)
    print(render(record))
    print(f"wrote {Path(out_dir) / 'pipeline.md'} and .json", file=sys.stderr)
