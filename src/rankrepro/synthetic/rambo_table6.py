"""RaMBO (Rolinek et al., CVPR 2020) Table 6: AP forward + backward time against sequence length.

Table 6: "Processing time of Average Precision (using plain PYTORCH implementation) depending on
sequence length for forward/backward computation on a single Tesla V100 GPU and 1 Xeon Gold CPU
core at 2.2GHz." We time our blackbox-rank AP losses on one retrieval list of n scores
(one query against n reference items), forward + backward, with torch on one thread (and on
every core), and on CUDA when a GPU is present.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time

from rankrepro.synthetic import SYNTHETIC, markdown_table, write_result

__all__ = ["PAPER", "SETTINGS", "rambo_table6", "time_call", "make_list"]

SOURCE = "rambo_blackbox_rank_cvpr2020.txt, §5.3 and Table 6 (line 357)"
PAPER = {
    "caption": ("Processing time of Average Precision (using plain PYTORCH implementation) depending on sequence "
                "length for forward/backward computation on a single Tesla V100 GPU and 1 Xeon Gold CPU core at "
                "2.2GHz."),
    "length": [100_000, 1_000_000, 10_000_000, 100_000_000],
    "cpu_s": [0.033, 0.331, 3.86, 36.4],
    "gpu_s": [0.0013, 0.007, 0.061, 0.62],
    "text": ("Computing AP loss for sequences with 320k elements as in the object detection experiments takes less "
             "than 5 ms for the forward/backward pass."),
}
SETTINGS = {
    "paper": {"lengths": PAPER["length"], "repeats": {100_000: 7, 1_000_000: 5, 10_000_000: 3, 100_000_000: 1},
              "all_cores_max": 10_000_000, "profile_length": 1_000_000},
    "demo": {"lengths": [1_000, 10_000, 100_000], "repeats": {1_000: 3, 10_000: 3, 100_000: 3},
             "all_cores_max": 100_000, "profile_length": 100_000},
}
POS_FRACTION = 0.01
MEMORY_BUDGET = 8 * 2**30  # bytes a length may take (CPU RSS, or CUDA memory)
WARMUP_MAX = 1_000_000  # lengths above run without their own warm-up (the shorter ones warmed up)
# peak bytes per list element before any measurement (the list's data included); replaced by what
# the longest length run so far measured (CPU: peak RSS rise; CUDA: max_memory_allocated)
DEFAULT_BYTES = {"blackbox_ap": 128, "rambo_map": 128, "sort floor": 40}
METHODS = ("blackbox_ap", "rambo_map", "sort floor")


def make_list(n: int, seed: int, device="cpu"):
    """One retrieval list of n items: reference 'embeddings' [n, 1] whose scores against the query
    embedding [[1.]] are N(0, 1), labels with a fraction POS_FRACTION of positives (label 1 =
    the query's). Returns (ref [n, 1] float32, ref_labels [n] int64)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, 1, generator=g)
    labels = (torch.rand(n, generator=g) < POS_FRACTION).long()
    labels[0] = 1  # at least one positive
    return ref.to(device), labels.to(device)


def _call(method: str, ref, labels, loss_fn):
    """One forward + backward; returns the gradient (so the work cannot be skipped)."""
    import torch

    if method == "sort floor":  # the two sorts any blackbox-rank AP needs: rk(y), then rk(y + lambda g)
        s = ref.T
        torch.argsort(s, dim=1, descending=True, stable=True)
        return torch.argsort(s + 1e-3, dim=1, descending=True, stable=True)
    q = torch.ones(1, 1, device=ref.device, requires_grad=True)
    loss = loss_fn(q, torch.ones(1, dtype=torch.long, device=ref.device), ref, labels)
    loss.backward()
    return q.grad


def time_call(fn, repeats: int, warmup: bool, cuda: bool) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` (after one untimed call if ``warmup``)."""
    import torch

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if warmup:
        fn()
        sync()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _reset_peak() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak() -> int:
    """The process's peak RSS in bytes: VmHWM (resettable), else ru_maxrss (since the start)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    # Linux: kilobytes; macOS: bytes
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if platform.system() == "Darwin" else 1024)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_lengths(device: str, threads: int, methods, cfg, seed: int, max_length: int) -> list[dict]:
    """Rows {device, threads, method, length, median_s, min_s, times_s, peak_bytes, skipped}."""
    import torch

    from rankrepro import losses

    cuda = device == "cuda"
    # CPU: MEMORY_BUDGET; CUDA: the larger of it and half the free device memory
    budget = max(MEMORY_BUDGET, torch.cuda.mem_get_info()[0] // 2) if cuda else MEMORY_BUDGET
    rows = []
    per_elem = dict(DEFAULT_BYTES)
    loss_fns = {m: None if m == "sort floor" else losses.build(m) for m in methods}
    for n in cfg["lengths"]:  # lengths outer: every method is measured at n before any runs at 10 n
        for method in methods:
            row = {"device": device, "threads": threads, "method": method, "length": n, "median_s": None,
                   "min_s": None, "times_s": [], "peak_bytes": None, "skipped": None}
            rows.append(row)
            if n > max_length:
                row["skipped"] = "not timed with all cores (cost)"
                continue
            predicted = per_elem[method] * n
            if predicted > budget:
                row["skipped"] = f"needs ~{predicted / 2**30:.1f} GiB > {budget / 2**30:.0f} GiB budget"
                continue
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                before = high = torch.cuda.memory_allocated()
            else:
                before, reset = _rss(), _reset_peak()
                high = _peak()
            ref, labels = make_list(n, seed, device)
            torch.manual_seed(seed)  # the random margin of the losses
            try:
                times = time_call(lambda: _call(method, ref, labels, loss_fns[method]), cfg["repeats"][n],
                                  warmup=n <= WARMUP_MAX, cuda=cuda)
            except (RuntimeError, MemoryError) as e:  # CUDA out of memory is a RuntimeError
                row["skipped"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                del ref, labels
                continue
            # the rise of the high-water mark (reset before the call; without a reset, only if it rose)
            top = torch.cuda.max_memory_allocated() if cuda else _peak()
            del ref, labels
            if (cuda or reset or top > high) and top > before:
                row["peak_bytes"] = int(top - before)
                per_elem[method] = (top - before) / n
            row.update(times_s=times, median_s=statistics.median(times), min_s=min(times))
    return rows


def _profile(n: int, seed: int) -> list[dict]:
    """torch.profiler of one blackbox_ap forward + backward on the CPU: the top operators by self time."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # no kineto warnings about a missing GPU
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rankrepro import losses

    loss_fn = losses.build("blackbox_ap")
    ref, labels = make_list(n, seed)
    _call("blackbox_ap", ref, labels, loss_fn)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _call("blackbox_ap", ref, labels, loss_fn)
    ev = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ev)
    return [{"op": e.key, "calls": int(e.count), "self_ms": e.self_cpu_time_total / 1e3,
             "share": e.self_cpu_time_total / total if total else None} for e in ev[:6]]


def _fmt_time(row) -> str:
    if row is None:
        return "—"
    if row["median_s"] is None:
        return f"skipped ({row['skipped']})"
    def one(v):
        return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"

    return one(row["median_s"]) + (f" (min {one(row['min_s'])})" if len(row["times_s"]) > 1 else "")


@SYNTHETIC.register("rambo_table6")
def rambo_table6(out_prefix: str, scale: str, seed: int) -> dict:
    """Table 6 of RaMBO: AP forward + backward time against the list length, beside the paper's CPU / GPU."""
    import torch

    cfg = SETTINGS[scale]
    lengths = cfg["lengths"]
    threads0 = torch.get_num_threads()
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    try:
        torch.set_num_threads(1)
        rows = time_lengths("cpu", 1, METHODS, cfg, seed, max(lengths))
        profile_rows = _profile(cfg["profile_length"], seed)
        torch.set_num_threads(cores)
        if cores > 1:
            rows += time_lengths("cpu", cores, ("blackbox_ap",), cfg, seed, cfg["all_cores_max"])
        gpu = torch.cuda.is_available()
        if gpu:
            rows += time_lengths("cuda", cores, METHODS, cfg, seed, max(lengths))
    finally:
        torch.set_num_threads(threads0)
    gpu_name = torch.cuda.get_device_name(0) if gpu else None

    def get(device, threads, method, n):
        return next((r for r in rows if (r["device"], r["threads"], r["method"], r["length"])
                     == (device, threads, method, n)), None)

    header = ["setting"] + [f"{n:,}" for n in lengths]
    paper_cpu = dict(zip(PAPER["length"], PAPER["cpu_s"]))
    paper_gpu = dict(zip(PAPER["length"], PAPER["gpu_s"]))

    def paper_fmt(d, n):
        return "—" if n not in d else (f"{d[n] * 1e3:.3g} ms" if d[n] < 1 else f"{d[n]:.3g} s")

    table = [["paper, CPU (1 Xeon Gold core, 2.2 GHz)"] + [paper_fmt(paper_cpu, n) for n in lengths],
             ["paper, GPU (Tesla V100)"] + [paper_fmt(paper_gpu, n) for n in lengths]]
    for method in METHODS:
        table.append([f"ours, CPU 1 thread: {method}"] + [_fmt_time(get("cpu", 1, method, n)) for n in lengths])
    if cores > 1:
        table.append([f"ours, CPU {cores} threads: blackbox_ap"]
                     + [_fmt_time(get("cpu", cores, "blackbox_ap", n)) for n in lengths])
    if gpu:
        for method in METHODS:
            table.append([f"ours, CUDA ({gpu_name}): {method}"] + [_fmt_time(get("cuda", cores, method, n))
                                                                    for n in lengths])
    else:
        table.append(["ours, CUDA"] + ["no GPU on this machine"] * len(lengths))
    mem = [[r["method"], f"{r['length']:,}", f"{r['peak_bytes'] / 2**20:.0f}"]
           for r in rows if r["device"] == "cpu" and r["threads"] == 1 and r["peak_bytes"]]
    at_1m = get("cpu", 1, "blackbox_ap", 1_000_000)
    verdict = ""
    if at_1m is not None and at_1m["median_s"] is not None:
        t, goal = at_1m["median_s"], paper_cpu[1_000_000]
        verdict = (f"At 1M, blackbox_ap takes {t * 1e3:.0f} ms on one thread: "
                   f"{'faster' if t < goal else 'slower'} than the paper's {goal * 1e3:.0f} ms CPU "
                   f"({t / goal:.2f}x).")
    prof_table = markdown_table(["operator", "calls", "self ms", "share"],
                                [[p["op"], p["calls"], p["self_ms"], p["share"]] for p in profile_rows])
    machine = f"{_cpu_name()}, {cores} cores, torch {torch.__version__}" + (
        "" if load is None else f", 1-min load average {load:.1f} at the start")
    body = "\n".join([
        f"Paper (Table 6): {PAPER['caption']} §5.3: {PAPER['text']}", "",
        f"Ours ({machine}): median (and least) wall time of forward + backward of one list of n scores "
        f"({POS_FRACTION:.0%} positives).", "",
        markdown_table(header, table), "",
        verdict, "",
        f"Profile of one blackbox_ap forward + backward at n = {cfg['profile_length']:,} (CPU, 1 thread; "
        "torch.profiler, top operators by self time):", "",
        prof_table, "",
        "Peak memory per length (CPU, 1 thread: the process's peak RSS, reset before the list's data was made, "
        "minus the RSS then):", "",
        markdown_table(["method", "length", "peak MiB"], mem),
    ])
    choices = [
        "What is timed: one retrieval list of n items, i.e. one query embedding [[1.]] (requires grad) against "
        "n reference items whose scores are N(0, 1) (embeddings [n, 1]), loss forward + backward (losses.build"
        "(name) with its defaults), wall clock, median over repeats. The paper times 'Average Precision ... "
        "forward/backward' of a sequence of n scores with its own plain-PyTorch code; how its scores and "
        "positives were drawn is not stated.",
        f"Positives: a fraction {POS_FRACTION} of the items (Bernoulli, at least one), label 1 = the query's.",
        "Methods: blackbox_ap (AP over blackbox ranks, no L_APC); rambo_map with its default "
        "interclass_coef = 1/3, which adds L_APC: for one query the concatenated list is the same list, so "
        "it ranks n items twice (about 2x blackbox_ap); 'sort floor' = two stable argsorts of the n scores "
        "(forward ranks, backward perturbed ranks), the least any blackbox-rank AP does.",
        f"Threads: torch.set_num_threads(1) to match the paper's single core; blackbox_ap also with all "
        f"{cores} cores up to n = {cfg['all_cores_max']:,}. The sort of a single row runs on one thread, so more "
        "cores gain little; on cores busy with other processes each parallel element-wise operator waits for "
        "its descheduled thread (a few ms per operator seen here), and these rows then measure that contention.",
        f"Repeats per length: {cfg['repeats']}; one untimed warm-up call per length up to {WARMUP_MAX:,} "
        "(longer lengths run after the shorter ones warmed up; a warm-up there would cost a whole repeat).",
        f"Memory: a length is skipped when its predicted peak (bytes per element measured at the longest "
        f"length run so far, times n; {DEFAULT_BYTES} before any) exceeds {MEMORY_BUDGET / 2**30:.0f} GiB "
        "(on CUDA: that or half the free device memory, the larger).",
        "GPU: the same benchmark on CUDA (synchronised timing) when torch.cuda.is_available(); "
        + ("run here on " + gpu_name + "." if gpu else "no GPU on this machine, so no CUDA rows."),
        f"CPU: {machine}; the paper's is one Xeon Gold core at 2.2 GHz. A load average above the core count "
        "means other processes shared the cores and the times are inflated; min_s in the JSON is the "
        "least disturbed repeat.",
    ]
    record = {
        "title": "RaMBO Table 6: AP forward + backward time against sequence length",
        "source": SOURCE, "scale": scale, "seed": int(seed), "choices": choices,
        "paper": PAPER,
        "ours": {"machine": machine, "cpu_cores": cores, "gpu": gpu_name, "positive_fraction": POS_FRACTION,
                 "memory_budget_bytes": MEMORY_BUDGET, "rows": rows, "profile": profile_rows,
                 "profile_length": cfg["profile_length"]},
    }
    return write_result(out_prefix, record, body)
