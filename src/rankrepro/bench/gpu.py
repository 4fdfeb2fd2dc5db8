"""The GPU benchmark in one command: ``python -m rankrepro bench gpu`` writes ``<out>/gpu.md`` and ``.json``.

Each part is its own function of a :class:`Size` (``full`` on CUDA, under 8 minutes on one GPU; ``tiny`` on CPU,
seconds: a check that the code runs, every GPU figure "not measured"), each timed:

- **a** the trainer's real step (:class:`~rankrepro.bench.pipeline.TaskBench`: the run's task, loader, model,
  loss and the loop's optimisation step) for ResNet-50 at 224² (:func:`trainer_case`, AMP fp16, channels-last,
  batch 256) on a generated SOP replica read from the image cache (S = 256), with loading, and its model step
  alone;
- **b** a bare PyTorch loop on the same batch: torchvision's ``resnet50`` (its ``fc`` the run's embedding),
  the run's loss, ``torch.optim.Adam``, ``torch.amp`` autocast and GradScaler, the batch preloaded on the device,
  no project code in the step. a / b is the **trainer's efficiency** (goal: >= 70 %);
- **c** the other networks' rows (:func:`rankrepro.bench.train.measure` over :func:`~rankrepro.bench.train.cases`,
  ResNet-50 224² first) within the time left of :attr:`Size.budget_s`: a case that does not fit is skipped, and
  the page says so; on CUDA they and f's rows become the GPU's throughput profile
  (:func:`~rankrepro.bench.train.write_profile`);
- **d** exact evaluation at SOP size (60,502 x 512, 11,316 classes): the matrix-product floor and R@1/10/100/1000 +
  mAP@R (:func:`rankrepro.bench.metrics.time_stage`);
- **e** RaMBO Table 6 at 100k and 1M on the device (:func:`rankrepro.synthetic.rambo_table6.time_lengths`);
- **f** the detector's step (Faster R-CNN ResNet-50, the detection task through ``measure``);
- **g** the per-epoch costs that may dominate a short epoch on a GPU, each as a share of an epoch of CUB at batch
  256 (:data:`CUB_BATCHES` steps at a's step time): the checkpoint write (model, loss, Adam state, scaler:
  :func:`rankrepro.engine.checkpoint.save_checkpoint`), the test curve (:class:`rankrepro.engine.curve.TestCurve`
  on the replica's test split, scaled linearly to CUB's :data:`CUB_TEST` test images), the loader refilling at
  an epoch's start (the wait for its first batch), the host sync per step (one ``loss.item()`` before the
  backward pass, as the loop does; beside it the former three) and the non-fused Adam step (``foreach``) against the fused one.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

#: CUB-200-2011's retrieval split (classes 1-100 train, 101-200 test): 5,864 training images -> 23 batches of 256
#: (the last one partial), 5,924 test images (Wah et al. 2011; the dataset's ``images.txt``)
CUB_TRAIN, CUB_TEST, CUB_BATCH = 5864, 5924, 256
CUB_BATCHES = -(-CUB_TRAIN // CUB_BATCH)
#: SOP's test set (Oh Song et al. 2016): 60,502 images of 11,316 products in 12 super-classes
SOP_TEST = (60502, 11316, 12)


@dataclass(frozen=True)
class Size:
    """How big each part runs. ``crop``/``batch``: None keeps the case's own (224², the setup's batch); ``replica``:
    the SOP replica of a, b and g (``make_replica`` options); ``steps``: (warm-up, timed) steps; ``backbone``: the
    trainer's backbone in a, c and g (None: the case's); ``bare``: b's torchvision model; ``c_cases``: how many
    cases part c may time (None: every one); ``detector``: model options of f's detector; ``sop``: d's
    (images, classes, super-classes); ``rambo``: e's list lengths; ``budget_s``: the whole run's time, part c
    taking what is left."""

    name: str
    crop: int | None
    batch: int | None
    replica: dict
    replica_kind: str
    steps: tuple[int, int]
    workers: int
    backbone: str | None
    bare: str
    c_cases: int | None
    detector: dict = field(default_factory=dict)
    sop: tuple = SOP_TEST
    rambo: tuple = (100_000, 1_000_000)
    budget_s: float = 450.0


SIZES = {
    "full": Size("full", crop=None, batch=None, replica={"classes_per_super": 40, "image_size": 256},
                 replica_kind="cuda", steps=(5, 20), workers=min(8, len(os.sched_getaffinity(0))), backbone=None, bare="resnet50",
                 c_cases=None),
    "tiny": Size("tiny", crop=32, batch=4, replica={"classes_per_super": 1, "image_size": 48}, replica_kind="cpu",
                 steps=(2, 5), workers=0, backbone="resnet_tiny", bare="resnet18", c_cases=2,
                 detector={"min_size": 64, "max_size": 96}, sop=(3000, 600, 12), rambo=(10_000,), budget_s=600.0),
}


def sized(run: dict, size: Size) -> dict:
    """``run`` at ``size``'s crop (None: as it is; the resize 8/7 of the crop, as 256 is of 224) and backbone."""
    if size.backbone is not None:
        run = {**run, "model": {**run["model"], "backbone": size.backbone}}
    if size.crop is None:
        return run
    c, resize = size.crop, size.crop * 8 // 7

    def scaled(value):  # a resize as the run writes it: None (none), a side, or [height, width]
        return None if value is None else [resize] * 2 if isinstance(value, list) else resize

    images = run["images"]
    return {**run, "images": dict(images, train_crop=c, test_crop=c, train_resize=scaled(images["train_resize"]),
                                  test_resize=scaled(images["test_resize"]))}


def cache_side(run: dict) -> int:
    """The image cache's shorter side for ``run``: its test resize (256 for SOP), read by a, g and the test curve."""
    resize = run["images"]["test_resize"]
    return resize[0] if isinstance(resize, list) else resize


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _seconds_per_call(fn, device: torch.device, warmup: int, steps: int) -> float:
    """Mean seconds of ``steps`` calls of ``fn()`` after ``warmup``, the device synchronised around them."""
    for _ in range(warmup):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / steps


# -- a: the trainer's step ---------------------------------------------------------------------------


def trainer_case(size: Size) -> dict:
    """a, b and g's case at ``size``: RaMBO's CUB setup with Smooth-AP (ResNet-50; ``Resize(256)`` then a 224² crop,
    so it reads the image cache, as SOP's ``RandomResizedCrop`` on the originals does not), at CUB's batch 256."""
    from rankrepro.plan.planner import resolve_run

    return sized({**resolve_run("rambo_cub", {"name": "smooth_ap"}), "setup_batch": CUB_BATCH}, size)


def trainer_bench(case: dict, size: Size, manifest_dir: Path, cache_dir: Path, device: str):
    """The trainer's parts for ``case`` at ``size`` (fp16, ``size.batch`` or the setup's) on the replica, reading
    the image cache: a :class:`~rankrepro.bench.pipeline.TaskBench` (close it)."""
    from rankrepro.bench.pipeline import TaskBench, bench_run

    run = bench_run(sized(case, size), size.batch or case["setup_batch"], "fp16")
    return TaskBench(run, manifest_dir, device, workers=size.workers, image_cache=cache_dir)


def part_a(bench, size: Size) -> dict:
    """a: images/s of the trainer's step with loading from the cache, and of its model step alone."""
    warmup, steps = size.steps
    full = bench.train(warmup, steps)
    model_only = bench.train(warmup, steps, synthetic=True)
    out = {"batch": bench.run["sampler"]["batch_size"], "crop": bench.run["images"]["train_crop"],
           "backbone": bench.run["model"]["backbone"], "workers": size.workers, "steps": steps, "warmup": warmup,
           "full_ips": full, "model_ips": model_only}
    if bench.device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated(bench.device) / 2**30
    return out


# -- b: the bare loop --------------------------------------------------------------------------------


def bare_model(name: str, embed_dim: int) -> torch.nn.Module:
    """torchvision's ``name`` (``resnet50``; random weights), its ``fc`` mapping the pooled features to ``embed_dim``."""
    import torchvision

    return torchvision.models.get_model(name, num_classes=embed_dim)


def part_b(bench, size: Size) -> dict:
    """b: images/s of a bare PyTorch loop on the trainer's first batch (already on the device) with the run's loss
    (module docstring)."""
    import torch.nn.functional as F

    device, run = bench.device, bench.run
    images, labels = next(bench.batches(synthetic=True))
    cuda = device.type == "cuda"
    fmt = torch.channels_last if cuda else torch.contiguous_format
    torch.manual_seed(0)
    model = bare_model(size.bare, run["model"]["embed_dim"]).to(device, memory_format=fmt).train()
    criterion = bench.parts.criterion
    optimizer = torch.optim.Adam(list(model.parameters()) + list(criterion.parameters()), lr=1e-5)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    x = images.contiguous(memory_format=fmt)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.float16, enabled=cuda):
            embeddings = model(x)
        loss = criterion(F.normalize(embeddings.float(), dim=1), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    warmup, steps = size.steps
    seconds = _seconds_per_call(step, device, warmup, steps)
    return {"model": size.bare, "batch": len(x), "crop": x.shape[-1], "model_ips": len(x) / seconds}


# -- c and f: bench train's rows ---------------------------------------------------------------------


def part_rows(cases: list[dict], size: Size, replicas: dict[str, Path], device: str, deadline: float) -> dict:
    """c and f: :func:`rankrepro.bench.train.measure`'s row of each case, in order, while the time left before
    ``deadline`` (``time.monotonic()``) holds the longest case so far; the others are listed as skipped."""
    from rankrepro.bench.train import measure

    rows, skipped, longest = [], [], 0.0
    warmup, steps = size.steps
    for case in cases:
        left = deadline - time.monotonic()
        if left < longest or left <= 0:
            skipped.append({"network": case["network"], "crop": case["images"]["train_crop"],
                            "why": f"{max(left, 0):.0f} s left, the longest case so far took {longest:.0f} s"})
            continue
        t0 = time.monotonic()
        rows += measure(device, [case], replicas, batch=size.batch, warmup=warmup, steps=steps, workers=size.workers)
        longest = max(longest, time.monotonic() - t0)
    return {"rows": rows, "skipped": skipped}


def row_cases(size: Size, config: str | Path = "config.yaml") -> tuple[list[dict], list[dict]]:
    """c's cases (ResNet-50 224² first, then the other retrieval networks) and f's (the Faster R-CNN ResNet-50
    detector), at ``size``."""
    from rankrepro.bench.train import cases, is_resnet50_224

    every = cases(config)
    detector = [dict(c, model={**c["model"], **size.detector}) for c in every if c["network"] == "faster_rcnn/resnet50"]
    others = [c for c in every if c["bench_dataset"] == "sop" and not is_resnet50_224(c)]
    retrieval = [c for c in every if is_resnet50_224(c)] + others
    retrieval = retrieval[:size.c_cases]
    return [sized(c, size) for c in retrieval], detector


# -- d and e: evaluation and RaMBO Table 6 -----------------------------------------------------------


def part_d(size: Size, device: str) -> dict:
    """d: seconds and peak memory of the matrix-product floor and of R@1/10/100/1000 + mAP@R at ``size.sop``."""
    from rankrepro.bench.metrics import time_stage

    n, classes, supers = size.sop
    stages = {stage: time_stage(stage, n, classes, supers, 512, None, device) for stage in ("floor", "ours-ranked")}
    return {"n": n, "classes": classes, "dim": 512,
            "stages": {k: {"seconds": r["seconds"], "peak_mib": r["peak_mib"], "values": r["values"]}
                       for k, r in stages.items()}}


def part_e(size: Size, device: str) -> dict:
    """e: RaMBO Table 6's forward + backward of one list at ``size.rambo``'s lengths, median seconds."""
    from rankrepro.synthetic import rambo_table6 as t6

    setting = {"lengths": list(size.rambo), "repeats": {n: 5 for n in size.rambo}}
    rows = t6.time_lengths(device, torch.get_num_threads(), t6.METHODS, setting, 0, max(size.rambo))
    paper = dict(zip(t6.PAPER["length"], t6.PAPER["gpu_s"]))
    return {"rows": [{k: r[k] for k in ("method", "length", "median_s", "peak_bytes", "skipped")} for r in rows],
            "paper_gpu_s": {n: paper.get(n) for n in size.rambo}}


# -- g: the per-epoch costs --------------------------------------------------------------------------


def part_g(bench, manifest_dir: Path, cache_dir: Path, step_s: float, size: Size) -> dict:
    """g: each per-epoch cost in seconds and as a share of an epoch of CUB (:data:`CUB_BATCHES` steps of
    ``step_s``, a's step with loading)."""
    epoch_s = CUB_BATCHES * step_s
    costs = {"checkpoint": checkpoint_seconds(bench), "test_curve": curve_seconds(bench, manifest_dir, cache_dir, size),
             "loader_refill": refill_seconds(bench)}
    for name, per_step in (("host_syncs", sync_seconds(bench, size)), ("adam_not_fused", adam_seconds(bench, size))):
        costs[name] = {**per_step, "per_step_s": per_step["seconds"], "seconds": CUB_BATCHES * per_step["seconds"]}
    return {"epoch_batches": CUB_BATCHES, "step_s": step_s, "epoch_s": epoch_s,
            "costs": {k: {**v, "share": v["seconds"] / epoch_s} for k, v in costs.items()}}


def checkpoint_seconds(bench) -> dict:
    """Seconds and MB of one checkpoint of the trainer's state (model, loss, Adam's state, scaler)."""
    from rankrepro.engine.checkpoint import save_checkpoint

    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-gpu-") as tmp:
        path = Path(tmp) / "checkpoint.pt"
        t0 = time.perf_counter()
        save_checkpoint(path, run_id="bench", epoch=0, model=bench.parts.model.state_dict(),
                        criterion=bench.parts.criterion.state_dict(), optimizer=bench.optimizer.state_dict(),
                        scheduler={}, scaler=bench.scaler.state_dict(), history=[], partial=None)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "mb": path.stat().st_size / 1e6}


def curve_seconds(bench, manifest_dir: Path, cache_dir: Path, size: Size) -> dict:
    """Seconds of one test-curve point (the run's test protocol on the replica's images outside its training split,
    read from the cache), scaled linearly to :data:`CUB_TEST` images (its fixed start-up scaled too: an upper
    bound)."""
    from rankrepro.data.manifest import read_manifest
    from rankrepro.engine.curve import TestCurve

    run = dict(bench.run, epochs=1, eval=dict(bench.run["eval"], every=1))
    manifest = read_manifest(manifest_dir)
    n_test = len(manifest.table) - len(manifest.split(run["train_split"]).table)
    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-gpu-") as tmp:
        curve = TestCurve(run, manifest_dir, tmp, bench.device, batch_size=run["sampler"]["batch_size"],
                          num_workers=size.workers, image_cache=cache_dir)
        t0 = time.perf_counter()
        curve.after_epoch(bench.parts.model, 1)
        measured = time.perf_counter() - t0
    return {"seconds": measured * CUB_TEST / n_test, "measured_s": measured, "test_images": n_test}


def refill_seconds(bench) -> dict:
    """Seconds from an epoch's start to its first batch (the loader refilling), the mean over two epoch starts."""
    from rankrepro.engine.preemption import EpochProgress

    waits = []
    for epoch in (101, 102):
        bench.parts.sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        batches = iter(bench.task.batches(EpochProgress(epoch, seed=epoch), None))
        next(batches)
        waits.append(time.perf_counter() - t0)
        for _ in batches:  # the rest of the epoch, so the next start is a fresh one
            pass
    return {"seconds": sum(waits) / len(waits)}


def sync_seconds(bench, size: Size) -> dict:
    """Seconds per step that the loop's host sync adds (one ``loss.item()`` before the backward pass is queued:
    :func:`rankrepro.engine.loop.train`) to the model step on one loaded batch; ``before_s``: what the loop's
    former three (``torch.isfinite(loss)`` tested, two ``loss.item()`` after the optimizer step) added."""
    from rankrepro.engine.loop import optimise

    batch = next(bench.batches(synthetic=True))
    bench.parts.model.train()

    def step(syncs: str) -> None:
        loss, _ = bench.task.step(batch)
        if syncs == "loop":
            loss.item()
        elif syncs == "before" and not torch.isfinite(loss):
            raise RuntimeError("non-finite loss")
        optimise(loss, bench.optimizer, bench.scaler, bench.run.get("grad_clip"))
        if syncs == "before":
            loss.item(), loss.item()

    warmup, steps = size.steps
    timed = {mode: _seconds_per_call(lambda: step(mode), bench.device, warmup, steps)
             for mode in ("none", "loop", "before")}
    return {"seconds": max(timed["loop"] - timed["none"], 0.0), "step_s": timed["none"],
            "before_s": max(timed["before"] - timed["none"], 0.0)}


def adam_seconds(bench, size: Size) -> dict:
    """Seconds per step that ``torch.optim.Adam``'s default (``foreach``) implementation costs over the fused one,
    on the model's parameters with gradients."""
    params = [p for p in bench.parts.model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    times = {}
    for fused in (False, True):
        optimizer = torch.optim.Adam(params, lr=0.0, fused=fused)
        times[fused] = _seconds_per_call(optimizer.step, bench.device, *size.steps)
    for p in params:
        p.grad = None
    return {"seconds": max(times[False] - times[True], 0.0), "not_fused_s": times[False], "fused_s": times[True]}


# -- the benchmark -----------------------------------------------------------------------------------


def run(out_dir="results/bench", device: str | None = None, size: str | None = None, config="config.yaml",
        profiles_dir: Path | None = None) -> dict:
    """Run every part and write ``<out_dir>/gpu.md`` and ``gpu.json``; return the record. ``device``: ``cuda``
    (fail without it), ``cpu``, or None (CUDA when available); ``size``: None for ``full`` on CUDA and ``tiny`` on
    CPU. On CUDA the throughput profile of c's and f's rows goes to ``profiles_dir`` (None: ``profiles/throughput``).
    A part that fails is recorded (its error on the page) and the next one runs."""
    from rankrepro.bench import gpu_not_measured, write_record
    from rankrepro.bench.pipeline import machine
    from rankrepro.bench.pipeline import replica_manifest
    from rankrepro.bench.train import fp32_factor, gpu_kind, is_resnet50_224, replicas, write_profile
    from rankrepro.data.cache import build_cache

    cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    device = "cuda" if cuda else "cpu"
    size_ = SIZES[size or ("full" if cuda else "tiny")]
    deadline = time.monotonic() + size_.budget_s
    record: dict = {"machine": machine(), "device": device, "size": size_.name, "budget_s": size_.budget_s, "sizes": dataclasses.asdict(size_),
                    "gpu": None if cuda else gpu_not_measured(), "parts": {}, "seconds": {}}
    retrieval, detector = row_cases(size_, config)

    def timed(name: str, fn, *args):
        t0 = time.monotonic()
        try:
            record["parts"][name] = fn(*args)
        except Exception as err:  # noqa: BLE001 -- a benchmark part's failure is reported, the next part runs
            record["parts"][name] = {"error": f"{type(err).__name__}: {err}"}
        record["seconds"][name] = round(time.monotonic() - t0, 1)
        print(f"bench gpu: part {name} {record['seconds'][name]} s", flush=True)
        return record["parts"][name]

    with tempfile.TemporaryDirectory(prefix="rankrepro-bench-gpu-") as tmp:
        tmp = Path(tmp)
        case = trainer_case(size_)
        manifest = replica_manifest("sop", tmp / "ab", **size_.replica)
        cache = tmp / "ab-cache"
        build_cache(manifest, cache_side(case), cache, workers=min(8, len(os.sched_getaffinity(0))))
        bench = trainer_bench(case, size_, manifest, cache, device)
        try:
            a = timed("a", part_a, bench, size_)
            timed("b", part_b, bench, size_)
            if "error" not in a:
                step_s = a["batch"] / a["full_ips"]
                timed("g", part_g, bench, manifest, cache, step_s, size_)
        finally:
            bench.close()
        timed("d", part_d, size_, device)
        timed("e", part_e, size_, device)
        kind = replicas(retrieval + detector, tmp, size_.replica_kind)
        timed("f", part_rows, detector, size_, kind, device, float("inf"))
        timed("c", part_rows, retrieval, size_, kind, device, deadline)
        rows = [r for p in ("c", "f") for r in record["parts"][p].get("rows", [])]
        if cuda and any(is_resnet50_224(r) for r in rows):
            from rankrepro.plan.cost import PROFILES_DIR

            factor = fp32_factor(retrieval, rows, kind, device, workers=size_.workers, warmup=size_.steps[0],
                                 steps=size_.steps[1])
            name = torch.cuda.get_device_name(0)
            record["profile"] = str(write_profile(rows, factor, name, profiles_dir or PROFILES_DIR))
            record["gpu"] = f"{name} ({gpu_kind(name)})"
        elif cuda:
            record["profile"] = None  # no ResNet-50 224² row (its part failed or was skipped): no fp32 factor
    record["total_s"] = round(size_.budget_s - (deadline - time.monotonic()), 1)
    return write_record(out_dir, "gpu", record, render(record))


def _ips(value) -> str:
    return f"{value:,.1f}"


def _share(cost: dict) -> str:
    return f"{cost['seconds']:.3f} s ({cost['share']:.1%})"


def render(record: dict) -> str:
    """The page: one table of the headline figures (on CPU a GPU column saying "not measured"), then each part."""
    m, p, cuda = record["machine"], record["parts"], record["device"] == "cuda"
    head = [("a", "trainer's step with loading from the cache (img/s)", lambda a: _ips(a["full_ips"])),
            ("a", "trainer's model step, one loaded batch (img/s)", lambda a: _ips(a["model_ips"])),
            ("b", "bare PyTorch loop, one loaded batch (img/s)", lambda b: _ips(b["model_ips"])),
            ("d", "exact evaluation R@1/10/100/1000 + mAP@R (s)", lambda d: f"{d['stages']['ours-ranked']['seconds']:.2f}"),
            ("e", "RaMBO blackbox AP at the longest length (ms)",
             lambda e: f"{[r for r in e['rows'] if r['method'] == 'blackbox_ap'][-1]['median_s'] * 1e3:.2f}"),
            ("f", "detector's step with loading (img/s)", lambda f: _ips(f["rows"][0]["full_ips"]))]
    lines = ["# GPU benchmark", "",
             ("`python -m rankrepro bench gpu` (src/rankrepro/bench/gpu.py): the trainer's step beside a bare loop, "
              "the other networks, exact evaluation at SOP size, RaMBO Table 6, the detector, the per-epoch costs."), "",
             (f"Device: {record['device']}, size {record['size']} ({record['gpu'] or m['cuda']}); machine: {m['cpu']}, "
              f"{m['cpus_usable']} usable CPUs, torch {m['torch']}; {record['total_s']} s in all "
              f"(budget {record['budget_s']:.0f} s). {_setup(record['sizes'])}"), ""]
    column = "GPU" if cuda else "CPU, tiny sizes (checks the code, not a forecast)"
    lines += [f"| part | figure | {column} |" + ("" if cuda else " GPU |"), "|---|---|---:|" + ("" if cuda else "---|")]
    for part, label, value in head:
        got = p.get(part, {})
        cell = f"failed: {got['error']}" if "error" in got else "-" if not got else _cell(value, got)
        lines.append(f"| {part} | {label} | {cell} |" + ("" if cuda else f" {record['gpu']} |"))
    a, b = p.get("a", {}), p.get("b", {})
    if "full_ips" in a and "model_ips" in b:
        lines += ["", f"Trainer's efficiency a / b: {a['full_ips'] / b['model_ips']:.0%} with loading, "
                  f"{a['model_ips'] / b['model_ips']:.0%} on one loaded batch (goal: >= 70 %)."]
    lines += _per_epoch(p.get("g", {}))
    lines += _rows_section("c: the networks (bench train's rows)", p.get("c", {}))
    lines += _rows_section("f: the detector", p.get("f", {}))
    if cuda:
        lines += ["", f"Throughput profile written: `{record['profile']}`." if record.get("profile") else
                  "No throughput profile: ResNet-50 224² was not measured (no fp32 factor)."]
    if not cuda:
        lines += ["", f"Every GPU figure: {record['gpu']}."]
    return "\n".join(lines) + "\n"


def _setup(sizes: dict) -> str:
    backbone, crop, batch = sizes["backbone"] or "the case's", sizes["crop"] or "the case's", sizes["batch"] or \
        "the setup's"
    return f"Trainer's backbone: {backbone}, crop {crop}, batch {batch}; bare loop: torchvision {sizes['bare']}."


def _cell(value, got) -> str:
    try:
        return value(got)
    except (KeyError, IndexError, TypeError):  # a part's rows without this figure (skipped, or not timed)
        return "not measured"


def _per_epoch(g: dict) -> list[str]:
    if not g:
        return []
    if "error" in g:
        return ["", f"g (per-epoch costs) failed: {g['error']}"]
    c = g["costs"]
    return ["", f"## g: per-epoch costs, as a share of an epoch of CUB ({g['epoch_batches']} batches at "
            f"{g['step_s']:.3f} s each: {g['epoch_s']:.2f} s)", "",
            "| cost | seconds per epoch (share) | detail |", "|---|---:|---|",
            f"| checkpoint write | {_share(c['checkpoint'])} | {c['checkpoint']['mb']:.0f} MB |",
            f"| test curve every epoch | {_share(c['test_curve'])} | {c['test_curve']['measured_s']:.2f} s for "
            f"{c['test_curve']['test_images']} replica images, scaled to CUB's {CUB_TEST:,} |",
            f"| loader refill at the epoch's start | {_share(c['loader_refill'])} | the wait for the first batch |",
            f"| host sync (one loss.item() before the backward) | {_share(c['host_syncs'])} | per step "
            f"{c['host_syncs'].get('per_step_s', 0) * 1e3:.2f} ms (the former isfinite + 2 x loss.item(): "
            f"{c['host_syncs'].get('before_s', 0) * 1e3:.2f} ms) |",
            f"| Adam not fused (foreach) vs fused | {_share(c['adam_not_fused'])} | per step "
            f"{c['adam_not_fused']['not_fused_s'] * 1e3:.2f} vs {c['adam_not_fused']['fused_s'] * 1e3:.2f} ms |"]


def _rows_section(title: str, part: dict) -> list[str]:
    from rankrepro.bench.train import table_rows

    if not part:
        return []
    if "error" in part:
        return ["", f"## {title}", "", f"failed: {part['error']}"]
    lines = ["", f"## {title}", ""]
    lines += table_rows(part["rows"]) if part["rows"] else ["no case fitted the time budget"]
    lines += [f"- skipped {s['network']} {s['crop']}²: {s['why']}" for s in part["skipped"]]
    return lines


def main(out_dir="results/bench", device: str | None = None) -> None:
    record = run(out_dir, device=device)
    print(render(record))
