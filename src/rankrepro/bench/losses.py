"""Loss benchmark: forward+backward time and peak memory of every registered loss.

``python -m rankrepro bench losses --out results/bench`` calls :func:`main`, which writes
``<out>/losses.md`` (Markdown table) and ``<out>/losses.csv``.

Setting (paper batch sizes): B ∈ {112, 256, 384}, D = 512, m = 4 samples per class,
random L2-normalised embeddings (a leaf tensor), hierarchical labels [B, 2] for every
loss (flat losses use column 0; fine classes drawn from 1000, 10 coarse classes), each
loss built with its defaults and the training-set sizes as build context (``num_classes`` =
1000, ``num_classes_per_level`` = [1000, 10], ``embedding_size`` = 512; a loss gets those
its signature takes). Timing and peak memory by :mod:`rankrepro.timing`. Time: median
of ``repeats`` forward+backward passes after ``warmup`` untimed ones. Peak memory: the
largest amount of memory held above the inputs during one forward+backward —
``torch.profiler`` with ``profile_memory=True`` on CPU (allocation events accumulated
in time order), ``torch.cuda.max_memory_allocated`` on GPU. References:
pytorch-metric-learning ``SmoothAPLoss(temperature=0.01)`` and
``PNPLoss(variant="Dq", alpha=α)`` (α = the default of our ``pnp_dq``), each reported
against our ``smooth_ap`` / ``pnp_dq`` at the same B and device.

To stay within a few minutes on 2 CPU cores, a loss whose first pass takes longer than
``slow_s`` is timed once at that B and not run at larger B, and nothing new starts once
``budget_s`` has elapsed; such rows say so in the ``note`` column.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from rankrepro.timing import bench_labels, build_with_sizes, measure

__all__ = ["main", "run", "REFERENCES"]

#: name of the PML reference row -> the registered loss it is compared with
REFERENCES = {
    "pml_smooth_ap": "smooth_ap",
    "pml_pnp_dq": "pnp_dq",
}


def _pml_reference(ref_name: str, ours: torch.nn.Module):
    from pytorch_metric_learning import losses as pml

    if ref_name == "pml_smooth_ap":
        return lambda e, y: pml.SmoothAPLoss(temperature=0.01)(e, y[:, 0])
    alpha = getattr(ours, "alpha", 4) if ours is not None else 4
    loss = pml.PNPLoss(variant="Dq", alpha=alpha, anneal=0.01)
    return lambda e, y: loss(e, y[:, 0])


@dataclass
class Row:
    loss: str
    batch_size: int
    device: str
    ms: float | None = None
    peak_mb: float | None = None
    speedup: float | None = None
    memory_ratio: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def run(out_dir, batch_sizes=(112, 256, 384), dim: int = 512, m: int = 4, devices=None,
        names=None, repeats: int = 5, warmup: int = 1, num_classes: int = 1000, num_coarse: int = 10,
        slow_s: float = 4.0, budget_s: float = 300.0, seed: int = 0, threads: int | None = None) -> list[Row]:
    """Benchmark ``names`` (default: every registered loss + the PML references) and write
    ``losses.md`` / ``losses.csv`` into ``out_dir``. Returns the rows. ``threads`` sets
    torch's CPU threads for the run (restored after)."""
    prev_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run(out_dir, batch_sizes, dim, m, devices, names, repeats, warmup, num_classes, num_coarse,
                    slow_s, budget_s, seed)
    finally:
        torch.set_num_threads(prev_threads)


def _run(out_dir, batch_sizes, dim, m, devices, names, repeats, warmup, num_classes, num_coarse,
         slow_s, budget_s, seed) -> list[Row]:
    from rankrepro import losses
    from rankrepro.io import atomic_write_text

    if devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if names is None:
        names = losses.names() + list(REFERENCES)
    start = time.perf_counter()
    rows: list[Row] = []
    sizes = [num_classes, num_coarse]
    for dev_name in devices:
        device = torch.device(dev_name)
        for name in names:
            stop_reason = ""
            for B in sorted(batch_sizes):
                row = Row(name, B, dev_name)
                rows.append(row)
                if stop_reason:
                    row.note = stop_reason
                    continue
                if time.perf_counter() - start > budget_s:
                    row.note = f"skipped: time budget {budget_s:.0f} s spent"
                    continue
                torch.manual_seed(seed)
                labels = bench_labels(B, m, num_classes, num_coarse, seed).to(device)
                emb = F.normalize(torch.randn(B, dim, device=device), dim=1).requires_grad_()
                try:
                    if name in REFERENCES:
                        ours = None
                        if REFERENCES[name] in losses.names():
                            ours = build_with_sizes(REFERENCES[name], sizes, dim)
                        fn = _pml_reference(name, ours)
                    else:
                        fn = build_with_sizes(name, sizes, dim).to(device)
                    row.ms, row.peak_mb, slow = measure(fn, emb, labels, repeats, warmup, slow_s)
                except Exception as err:  # one loss failing must not stop the benchmark
                    row.note = f"error: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
                    stop_reason = "skipped: failed at a smaller B"
                    continue
                finally:
                    del emb
                if slow:
                    row.note = f"capped: first pass > {slow_s:g} s, timed once"
                    stop_reason = f"skipped: > {slow_s:g} s at B={B}"
    by_key = {(r.loss, r.batch_size, r.device): r for r in rows}
    for ref, ours in REFERENCES.items():
        for r in rows:
            if r.loss != ours:
                continue
            p = by_key.get((ref, r.batch_size, r.device))
            if p is None or None in (p.ms, r.ms, p.peak_mb, r.peak_mb):
                continue
            r.speedup = p.ms / r.ms if r.ms > 0 else None
            r.memory_ratio = p.peak_mb / r.peak_mb if r.peak_mb > 0 else None
    out = Path(out_dir)
    atomic_write_text(out / "losses.csv", _csv(rows))
    atomic_write_text(out / "losses.md", _markdown(rows, dict(batch_sizes=batch_sizes, dim=dim, m=m,
                                                                 num_classes=num_classes, num_coarse=num_coarse,
                                                                 repeats=repeats, warmup=warmup, slow_s=slow_s,
                                                                 budget_s=budget_s,
                                                                 elapsed=time.perf_counter() - start)))
    return rows


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def _csv(rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["loss", "batch_size", "device", "ms", "peak_mb", "speedup_vs_pml", "memory_ratio_vs_pml", "note"])
    for r in rows:
        w.writerow([r.loss, r.batch_size, r.device, _fmt(r.ms, ".3f"), _fmt(r.peak_mb, ".3f"),
                    _fmt(r.speedup, ".3f"), _fmt(r.memory_ratio, ".3f"), r.note])
    return buf.getvalue()


def _markdown(rows, cfg) -> str:
    threads = torch.get_num_threads()
    lines = [
        "# Loss benchmark: forward + backward",
        "",
        f"B ∈ {list(cfg['batch_sizes'])}, D = {cfg['dim']}, m = {cfg['m']} samples per class, labels [B, 2] "
        f"({cfg['num_classes']} fine / {cfg['num_coarse']} coarse classes), defaults of each loss. "
        f"ms = median of {cfg['repeats']} passes after {cfg['warmup']} warm-up; peak MB = memory held above "
        "the inputs during one pass (CPU: torch.profiler, profile_memory=True; CUDA: max_memory_allocated). "
        f"torch {torch.__version__}, {threads} CPU thread(s). Total {cfg['elapsed']:.0f} s.",
        "",
        "`pml_smooth_ap` = pytorch-metric-learning `SmoothAPLoss(temperature=0.01)`, `pml_pnp_dq` = "
        "`PNPLoss(variant=\"Dq\", alpha=α)` with α = our `pnp_dq` default. For `smooth_ap` and `pnp_dq`, "
        "speed-up = PML ms / ours and memory ratio = PML peak / ours, at the same B and device.",
        "",
        "| loss | B | device | ms | peak MB | speed-up vs PML | memory ratio vs PML | note |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(f"| {r.loss} | {r.batch_size} | {r.device} | {_fmt(r.ms, '.1f')} | {_fmt(r.peak_mb, '.1f')} | "
                     f"{_fmt(r.speedup, '.2f')} | {_fmt(r.memory_ratio, '.2f')} | {r.note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(out_dir="results/bench", device: str | None = None) -> None:
    rows = run(out_dir, devices=[device] if device else None)
    done = sum(r.ms is not None for r in rows)
    print(f"wrote {Path(out_dir) / 'losses.md'} and losses.csv ({done}/{len(rows)} measurements)")
