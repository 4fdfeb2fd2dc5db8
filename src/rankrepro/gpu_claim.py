"""One GPU per job on a box with N GPUs: a job claims a free GPU before torch starts CUDA.

Snakemake's ``gpu`` resource (``snakemake --profile profiles/local --resources gpu=N``) bounds how many GPU jobs
run at once, not which device each uses: without a claim every job sees every GPU and trains on the first.
:func:`claim_gpu` gives the job one GPU of its own:

- **the GPUs**: the ids in ``RANKREPRO_GPUS`` (comma-separated indices or UUIDs, as ``CUDA_VISIBLE_DEVICES`` takes
  them; empty: none) where it is set, else every GPU ``nvidia-smi`` lists (by UUID); no ``nvidia-smi``, or one
  that fails (no driver): no GPU;
- **the claim**: an exclusive ``flock`` on one file per GPU, ``<lock folder>/gpu-<id>.lock`` (the folder:
  ``RANKREPRO_GPU_LOCKS``, default ``<tmp>/rankrepro-gpu-locks-<uid>``: one per user and machine), held for the
  process's life. The kernel releases it when the process ends, however it ends (a crash, SIGKILL): no stale
  lock. The loader's forked workers drop their copy of the lock's file descriptor, so a killed job's workers do not
  hold its GPU; the file holds the claimer's pid, for the waiting message;
- **the device**: ``CUDA_VISIBLE_DEVICES`` set to the claimed id in this process (before torch initialises CUDA,
  which reads it once), so ``auto`` and ``cuda`` mean that GPU;
- **every GPU claimed** (another pipeline on the same box, or ``--resources gpu`` above the number of GPUs): the
  job says so once, naming the lock folder and the holders' pids, and waits until one is free. Our choice: a
  wait starts the job as soon as a GPU frees, where a failure would spend an attempt (and Snakemake's retries)
  on a box that is only busy.

Nothing is claimed, and the environment is left as it is, for ``runtime.device: cpu``, for an explicit
``cuda:N`` (the config pins every job to that GPU), on a machine without GPUs, and under a scheduler that
assigned the GPUs itself: ``CUDA_VISIBLE_DEVICES``, ``SLURM_JOB_GPUS`` or ``SLURM_STEP_GPUS`` already set (SLURM's
assignment wins).

:func:`loader_workers` splits the machine's CPUs between its GPUs: ``runtime.num_workers`` stays the most
loader workers a job uses (per job, as on a cluster, where each job has its own CPUs); a job holding one of N
GPUs uses at most ``cpus // N`` of them (at least 1), so N jobs do not start N x ``num_workers`` workers on
the CPUs of one box. No torch here: the claim comes first.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, MutableMapping, TextIO

from rankrepro.record.runtime import RuntimeSettingError

__all__ = ["GpuClaim", "SCHEDULER_VARIABLES", "claim_gpu", "claim_for_job", "listed_gpus", "loader_workers",
           "lock_folder"]

#: the variables through which a scheduler (SLURM) hands a job its GPUs: any of them set, nothing is claimed
SCHEDULER_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")

#: the devices that claim a GPU (``cuda:N`` pins one, ``cpu`` needs none)
CLAIMING_DEVICES = ("auto", "cuda")

_GPU_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

@dataclass(frozen=True)
class GpuClaim:
    """A GPU this process holds: its ``gpu`` id, the number of GPUs it was claimed among (``of``), its lock file
    ``lock`` and that file's descriptor ``fd`` (never closed: the process holds the lock until it ends)."""

    gpu: str
    of: int
    lock: Path
    fd: int


def listed_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The ids of the GPUs jobs may claim (module docstring): ``RANKREPRO_GPUS``, else ``nvidia-smi``'s UUIDs."""
    if "RANKREPRO_GPUS" in environ:
        text = environ["RANKREPRO_GPUS"].strip()
        gpus = [gpu.strip() for gpu in text.split(",")] if text else []
        bad = [gpu for gpu in gpus if not _GPU_ID.match(gpu)]
        if bad or len(set(gpus)) != len(gpus):
            what = f"{bad[0]!r} is not a GPU index or UUID" if bad else "it lists a GPU twice"
            raise RuntimeSettingError(f"RANKREPRO_GPUS={text[:200]!r}: {what}; give the GPUs jobs may claim as "
                                      "comma-separated indices or UUIDs (e.g. 0,1,2,3), or unset it to claim every GPU "
                                      "nvidia-smi lists")
        return gpus
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=60, env=dict(environ))
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()] if listing.returncode == 0 else []


def lock_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the GPUs' lock files are: ``RANKREPRO_GPU_LOCKS``, else ``<tmp>/rankrepro-gpu-locks-<uid>``."""
    default = Path(tempfile.gettempdir()) / f"rankrepro-gpu-locks-{os.getuid()}"
    return Path(environ.get("RANKREPRO_GPU_LOCKS") or default)


def loader_workers(num_workers: int, gpus: int, cpus: int | None = None) -> int:
    """The loader workers of a job holding one of ``gpus`` GPUs: ``num_workers`` (``runtime.num_workers``, 0: the
    main process loads) at most, and at most this machine's ``cpus`` (default: those this process may run on)
    divided by ``gpus``, at least 1."""
    if num_workers <= 0 or gpus <= 0:
        return max(num_workers, 0)
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(num_workers, max(1, cpus // gpus))


def claim_gpu(device: str, environ: MutableMapping[str, str] = os.environ, *,
              list_gpus: Callable[[Mapping[str, str]], list[str]] = listed_gpus, poll_s: float = 2.0,
              log: TextIO = sys.stderr) -> GpuClaim | None:
    """Claim a free GPU for this process and set ``CUDA_VISIBLE_DEVICES`` to it in ``environ`` (module
    docstring); None when there is nothing to claim (``device`` ``cpu`` or ``cuda:N``, a scheduler's assignment
    in ``environ``, no GPU listed by ``list_gpus``). Every GPU claimed: waits, trying again every ``poll_s``
    seconds, after saying so once on ``log``."""
    if device not in CLAIMING_DEVICES or any(name in environ for name in SCHEDULER_VARIABLES):
        return None
    gpus = list_gpus(environ)
    if not gpus:
        return None
    folder = lock_folder(environ)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RuntimeSettingError(f"cannot create the GPU lock folder {folder} ({err.strerror}); set "
                                  "RANKREPRO_GPU_LOCKS to a folder this user can write") from None
    waiting = False
    while True:
        for gpu in gpus:
            claim = _try_lock(folder, gpu, len(gpus))
            if claim is not None:
                environ["CUDA_VISIBLE_DEVICES"] = gpu
                return claim
        if not waiting:
            waiting = True
            print(f"rankrepro: all {len(gpus)} GPUs are claimed by other jobs (pids {_holders(folder, gpus)}, locks "
                  f"in {folder}); waiting for one to be free", file=log, flush=True)
        time.sleep(poll_s)


def claim_for_job(device: str, num_workers: int, environ: MutableMapping[str, str] = os.environ,
                  log: TextIO = sys.stderr) -> tuple[GpuClaim | None, int]:
    """What a training or evaluation job does first (``python -m rankrepro train``, ``evaluate``,
    ``train-batch``): :func:`claim_gpu` for its ``device``, and its loader workers (``num_workers``, split by
    :func:`loader_workers` when it claimed one of several GPUs); says on ``log`` which GPU it holds."""
    claim = claim_gpu(device, environ, log=log)
    if claim is None:
        return None, num_workers
    workers = loader_workers(num_workers, claim.of)
    print(f"rankrepro: GPU {claim.gpu} claimed (one of {claim.of}; lock {claim.lock}); CUDA_VISIBLE_DEVICES="
          f"{claim.gpu}; loader workers {workers} (runtime.num_workers {num_workers})", file=log, flush=True)
    return claim, workers


def _try_lock(folder: Path, gpu: str, count: int) -> GpuClaim | None:
    """The claim of ``gpu`` when its lock is free, else None."""
    path = folder / f"gpu-{gpu}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RuntimeSettingError(f"cannot open the GPU lock file {path} ({err.strerror}); set RANKREPRO_GPU_LOCKS "
                                  "to a folder this user can write") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    os.register_at_fork(after_in_child=lambda: _close_quietly(fd))  # a forked loader worker does not hold the GPU
    return GpuClaim(gpu, count, path, fd)


def _close_quietly(fd: int) -> None:
    """Close a forked child's copy of a lock's descriptor (the parent's lock stays)."""
    try:
        os.close(fd)
    except OSError:
        pass


def _holders(folder: Path, gpus: list[str]) -> str:
    """The pids written in the GPUs' lock files, for the waiting message."""
    pids = []
    for gpu in gpus:
        try:
            pids.append((folder / f"gpu-{gpu}.lock").read_text(errors="replace").strip() or "?")
        except OSError:
            pids.append("?")
    return ", ".join(pids)
