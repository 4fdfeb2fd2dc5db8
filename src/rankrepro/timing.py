"""Timing a loss: forward + backward time and peak memory, with the labels and build context the
loss benchmark (:mod:`rankrepro.bench.losses`) and Smooth-AP's Table S1
(:mod:`rankrepro.synthetic.smooth_ap_table_s1`) share.

Time: median of ``repeats`` forward + backward passes after ``warmup`` untimed ones (the device
synchronised around each); a loss whose first pass takes longer than ``slow_s`` is timed once.
Peak memory: the largest amount of memory held above the inputs during one forward + backward --
``torch.profiler`` with ``profile_memory=True`` on CPU, ``torch.cuda.max_memory_allocated`` on GPU.
"""

from __future__ import annotations

import statistics
import time

import torch

__all__ = ["build_with_sizes", "bench_labels", "sync", "loss_step", "cpu_peak_bytes", "cuda_peak_bytes", "measure"]


def build_with_sizes(name: str, num_classes_per_level: list[int], embedding_size: int, **hparams):
    """``losses.build(name, **hparams)`` with the data sizes as context (given to the losses that take them)."""
    from rankrepro import losses
    from rankrepro.losses.registry import data_context

    return losses.build(name, context=data_context(num_classes_per_level, embedding_size), **hparams)


def bench_labels(batch_size: int, m: int, num_classes: int, num_coarse: int, seed: int = 0) -> torch.Tensor:
    """[B, 2] labels: B/m distinct fine classes (contiguous blocks of m), coarse = fine // (C/num_coarse)."""
    if batch_size % m:
        raise ValueError(f"batch size {batch_size} is not a multiple of m={m}")
    n = batch_size // m
    if n > num_classes:
        raise ValueError(f"{n} classes per batch > num_classes={num_classes}")
    g = torch.Generator().manual_seed(seed)
    fine = torch.randperm(num_classes, generator=g)[:n].repeat_interleave(m)
    per_coarse = -(-num_classes // num_coarse)
    return torch.stack([fine, fine // per_coarse], dim=1)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that a wall-clock time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_step(fn, emb, labels):
    """One forward + backward of loss ``fn`` on ``emb`` (a leaf tensor); a non-finite loss raises."""
    emb.grad = None
    out = fn(emb, labels)
    out.backward()
    if not torch.isfinite(out.detach()).all():
        raise FloatingPointError(f"non-finite loss {out.item()}")


def cpu_peak_bytes(fn, emb, labels) -> int:
    """Peak bytes held above the inputs during one :func:`loss_step` on CPU (profiler events in time order)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss_step(fn, emb, labels)
    deltas = [(e.time_range.start, e.self_cpu_memory_usage) for e in prof.events() if e.self_cpu_memory_usage]
    deltas.sort(key=lambda t: t[0])
    cur = peak = 0
    for _, d in deltas:
        cur += d
        peak = max(peak, cur)
    return peak


def cuda_peak_bytes(fn, emb, labels) -> int:
    """Peak bytes allocated above the inputs during one :func:`loss_step` on CUDA."""
    sync(emb.device)
    base = torch.cuda.memory_allocated(emb.device)
    torch.cuda.reset_peak_memory_stats(emb.device)
    loss_step(fn, emb, labels)
    sync(emb.device)
    return torch.cuda.max_memory_allocated(emb.device) - base


def measure(fn, emb, labels, repeats: int, warmup: int, slow_s: float) -> tuple[float, float, bool]:
    """(median ms, peak MB, slow) of ``fn(emb, labels).backward()``."""
    device = emb.device
    t0 = time.perf_counter()
    loss_step(fn, emb, labels)
    sync(device)
    first = time.perf_counter() - t0
    slow = first > slow_s
    times = []
    if slow:
        times.append(first)
    else:
        for _ in range(max(0, warmup - 1)):
            loss_step(fn, emb, labels)
        for _ in range(repeats):
            sync(device)
            t0 = time.perf_counter()
            loss_step(fn, emb, labels)
            sync(device)
            times.append(time.perf_counter() - t0)
    peak = cuda_peak_bytes(fn, emb, labels) if device.type == "cuda" else cpu_peak_bytes(fn, emb, labels)
    return 1e3 * statistics.median(times), peak / 2**20, slow
