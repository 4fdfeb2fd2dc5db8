"""Stopping a training anywhere and resuming it at the same step: timed checkpoints and SIGTERM.

A GLDv2 epoch lasts hours, longer than a job may run, so besides the checkpoint after every epoch the
training loop (:func:`rankrepro.engine.loop.train`) saves one inside an epoch

- every ``runtime.checkpoint_minutes`` of wall clock (:class:`CheckpointTimer`; 0: after each epoch only),
  so a job killed without warning loses at most that much training (and the step, or the scoring of a
  test curve, in progress);
- at the step after a SIGTERM (:class:`StopSignal`): SLURM sends SIGTERM to every process of a job at its
  time limit, then SIGKILL ``KillWait`` seconds later (30 by default). The trainer then exits with
  :class:`TrainingStopped` (status 1, a message naming the checkpoint), so Snakemake's retry resumes it.
  The loader's workers ignore SIGTERM (:func:`ignore_stop_signal`): they keep serving batches until the
  trainer has saved, and stop with it.

The position inside the epoch is an :class:`EpochProgress`, stored under the checkpoint's ``partial`` key:
the epoch's generator seed (its workers' seeds, :mod:`rankrepro.engine.loader`) and how many of the
sampler's batches are done (a sampler's epoch is fixed by its seed and the epoch,
:mod:`rankrepro.data.samplers`, so a resumed epoch skips them without loading their images), with the
running loss sum and image count of the epoch's history row. With the checkpoint's model, loss, optimizer,
schedule, scaler and RNG states, a resumed run continues exactly where it stopped: on CPU its weights are
bit for bit those of a run trained straight through (tests/test_train_preemption.py).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["CheckpointTimer", "EpochProgress", "StopSignal", "TrainingStopped", "ignore_stop_signal"]


class TrainingStopped(SystemExit):
    """The training stopped on a SIGTERM after saving its checkpoint. A ``SystemExit``: the process exits
    with status 1 and the message, and a training batch (:mod:`rankrepro.engine.batch`) does not go on to
    its next run."""


class CheckpointTimer:
    """Whether a timed checkpoint is due: ``minutes`` of ``clock`` (seconds, monotonic) have passed since
    the timer started or was last :meth:`restart`-ed. ``minutes`` 0: never due."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = minutes * 60.0
        self.clock = clock
        self.last = clock()

    def due(self) -> bool:
        return self.seconds > 0 and self.clock() - self.last >= self.seconds

    def restart(self) -> None:
        """A checkpoint was just written: the next is due ``minutes`` from now."""
        self.last = self.clock()


class StopSignal:
    """Within ``with StopSignal() as stop:``, a SIGTERM sets ``stop.requested`` instead of ending the
    process; the previous handler is back afterwards. Outside the main thread (where Python cannot
    handle signals) it installs nothing and ``requested`` stays False."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.requested = True  # nothing printed here: the handler may interrupt a write to stderr

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


def ignore_stop_signal(worker_id: int) -> None:
    """A loader worker's ``worker_init_fn``: ignore SIGTERM, which SLURM sends to the whole job, so the
    trainer can finish its step and save; the worker stops when the trainer does."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@dataclass
class EpochProgress:
    """How far epoch ``epoch`` (0-based) has trained: its first ``batches`` batches are done, on ``seen``
    images with losses summing to ``loss_sum`` (each batch's mean loss times its images), in ``seconds``
    of earlier attempts. ``seed``: the epoch's generator seed, drawn from torch's RNG at its start."""

    epoch: int
    seed: int
    batches: int = 0
    seen: int = 0
    loss_sum: float = 0.0
    seconds: float = 0.0

    def add(self, images: int, loss: float) -> None:
        """One more batch done: ``images`` images with mean loss ``loss``."""
        self.batches += 1
        self.seen += images
        self.loss_sum += loss * images

    def state(self) -> dict:
        """Plain data for the checkpoint's ``partial`` key."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> EpochProgress:
        return cls(**state)
