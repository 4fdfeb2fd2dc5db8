"""How one metrics computation runs its CPU work: worker threads and the compiled kernels.

A :class:`Workers` is made by the caller of the ranking engine for one computation
(:func:`rankrepro.metrics.core.compute_plain`: ``with Workers.for_device(...) as workers``) and
handed down to every function that splits work over threads or may hand it to the compiled
kernels; nothing of it outlives the computation, so results never depend on what ran before in
the process. Functions that take ``workers=None`` run serially, with the compiled kernels
(``Workers()``).

``threads``: the worker threads (numpy and the compiled kernels release the GIL). A thread pool is
made on first use and shut down when the ``with`` block ends. Work submitted from one of the
workers runs inline (one level of parallelism).

``compiled``: whether CPU work goes to :mod:`rankrepro.metrics.cpu_kernels` where they apply;
False runs the torch code (the CUDA path) on CPU instead, which the tests compare them against.

``scratch``: inside :meth:`reuse_buffers` each worker thread keeps its score buffers from one
chunk of queries to the next.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

__all__ = ["Workers"]


class Workers:
    """Worker threads and kernel choice of one metrics computation (see the module docstring)."""

    def __init__(self, threads: int = 1, compiled: bool = True):
        self.threads = max(1, int(threads))
        self.compiled = bool(compiled)
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()  # .inline: this thread is one of several parallel workers
        self._buffers: dict | None = None  # (thread, name) -> score buffer, inside reuse_buffers

    @classmethod
    def for_device(cls, device: torch.device, compiled: bool = True) -> "Workers":
        """One worker per torch thread (at most one per CPU core) on CPU; one on other devices."""
        if torch.device(device).type != "cpu":
            return cls(1, compiled)
        return cls(min(torch.get_num_threads(), os.cpu_count() or 1), compiled)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> bool:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        return False

    def compiled_on(self, t: torch.Tensor) -> bool:
        """Whether work on tensor ``t`` goes to the compiled kernels: on CPU, when ``compiled``."""
        return self.compiled and t.device.type == "cpu"

    def available(self) -> int:
        """Threads this thread may use: 1 inside a worker (work runs inline), else ``threads``."""
        return 1 if getattr(self._local, "inline", False) else self.threads

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="rankrepro-metrics")
        return self._pool

    def run(self, tasks: list, in_flight: int | None = None) -> None:
        """Run the callables ``tasks`` on the worker threads (each runs nested work inline), at
        most ``in_flight`` at a time (memory), in order of submission."""
        if self.available() == 1 or len(tasks) < 2:
            for f in tasks:
                f()
            return
        pool = self._executor()

        def inline(f):
            self._local.inline = True
            try:
                return f()
            finally:
                self._local.inline = False

        limit = in_flight or len(tasks)
        pending = []
        for f in tasks:
            if len(pending) >= limit:
                pending.pop(0).result()
            pending.append(pool.submit(inline, f))
        for fut in pending:
            fut.result()

    def rows(self, fn, n: int, min_rows: int = 4) -> None:
        """Run ``fn(lo, hi)`` on contiguous ranges of ``n`` rows, one per available thread."""
        t = self.available()
        if t == 1 or n < 2 * min_rows:
            fn(0, n)
            return
        pool = self._executor()
        bounds = np.linspace(0, n, t + 1).astype(int)
        futures = [pool.submit(fn, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        for f in futures:
            f.result()

    @contextmanager
    def reuse_buffers(self):
        """Within the block, :meth:`scratch` on CPU keeps one buffer per thread and name."""
        self._buffers = {}
        try:
            yield self
        finally:
            self._buffers = None

    def scratch(self, name: str, numel: int, device) -> torch.Tensor:
        """An uninitialised flat float32 tensor of ``numel`` elements for a chunk's scores. Inside
        :meth:`reuse_buffers` on CPU each thread reuses its buffer of each ``name`` chunk after
        chunk: a fresh allocation of this size goes back to the OS when freed, and faulting its
        pages in again for every chunk costs several percent of the matrix product."""
        if self._buffers is None or torch.device(device).type != "cpu":
            return torch.empty(numel, dtype=torch.float32, device=device)
        key = (threading.get_ident(), name)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = self._buffers[key] = torch.empty(numel, dtype=torch.float32)
        return buf[:numel]

