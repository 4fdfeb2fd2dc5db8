"""Full-state checkpoints: model, optimizer, scheduler, scaler, loss, RNG states, history, test curve,
and where inside an epoch it was written (:mod:`rankrepro.engine.preemption`).

A checkpoint holds tensors and plain Python data only (the numpy RNG state as a tuple of plain
values, not an array), so it is read with :func:`rankrepro.torchfile.load_plain`: a crafted
``checkpoint.pt`` is refused without running anything, and so is one written in the format of an
older rankrepro (numpy arrays in its RNG state); either must be removed to restart the run from
scratch. A file that cannot be read at all (truncated) is moved aside to
``checkpoint.pt.corrupt`` with a warning, and the run starts over.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import numpy as np
import torch

from rankrepro.engine.preemption import EpochProgress
from rankrepro.io import atomic_path
from rankrepro.torchfile import TorchFileError, UnreadableTorchFileError, load_plain

#: the keys the training loop (:mod:`rankrepro.engine.loop`) stores, ``rng`` added by :func:`save_checkpoint`;
#: ``epoch`` is the last finished epoch (0-based, -1: none). Not required: ``scaler`` (the AMP scaler's state;
#: a checkpoint of a detection run written before the loop was shared has none, or None), ``partial`` (None after
#: an epoch, else the position inside the next, :class:`~rankrepro.engine.preemption.EpochProgress`) and the
#: task's own state (the retrieval task's test curve, ``curve``): a checkpoint written before they existed resumes
#: with a fresh scaler and curve, at an epoch's end
CHECKPOINT_KEYS = frozenset({"run_id", "epoch", "model", "criterion", "optimizer", "scheduler", "history", "rng"})
#: the parts :func:`restore` loads when the checkpoint holds them (absent or None: the part stays as built)
OPTIONAL_PARTS = frozenset({"scaler"})
RESTART = "remove it to restart the run from scratch"


def rng_state() -> dict:
    """Python's, numpy's (legacy ``MT19937`` tuple, its key as a list of ints), torch's and (when
    present) every CUDA device's RNG state, as tensors and plain data."""
    name, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state = {"python": random.getstate(),
             "numpy": (str(name), key.tolist(), int(pos), int(has_gauss), float(cached_gaussian)),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the RNG states :func:`rng_state` returned."""
    random.setstate(state["python"])
    name, key, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, **state) -> None:
    """Write atomically: a job killed while saving keeps the previous checkpoint."""
    with atomic_path(path) as tmp:
        torch.save({**state, "rng": rng_state()}, tmp)


def load_checkpoint(path: str | Path) -> dict | None:
    """The state :func:`save_checkpoint` wrote to ``path``; None when there is none, or when the
    file cannot be read (truncated): it is then moved to ``<path>.corrupt`` with a warning on
    stderr, and the run starts over. A file holding anything but tensors and plain data, or not
    a checkpoint's keys, raises :class:`~rankrepro.torchfile.TorchFileError` (naming it)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = load_plain(path, remedy=RESTART)
    except UnreadableTorchFileError as err:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        print(f"warning: {path}: {err.reason}; moved it to {aside}: the run starts over from epoch 1",
              file=sys.stderr)
        return None
    if not isinstance(state, dict) or not CHECKPOINT_KEYS <= state.keys():
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise TorchFileError(path, f"not a checkpoint of this version (keys {keys}; expected "
                                   f"{sorted(CHECKPOINT_KEYS)})", RESTART)
    return state


def restore(state: dict, path: str | Path, run_id: str, **parts) -> tuple[list[dict], int, EpochProgress | None]:
    """Load the checkpoint ``state`` (read from ``path`` by :func:`load_checkpoint`) into ``parts`` (name: an object
    with ``load_state_dict``, e.g. ``model=``, ``criterion=``, ``optimizer=``, ``scheduler=``, ``scaler=``; those of
    :data:`OPTIONAL_PARTS` only when the checkpoint holds them) and restore every RNG. Returns the history so far,
    the first epoch to train (0-based) and the position inside it (None: from its start). A checkpoint of another
    run is a ``RuntimeError`` naming the file."""
    if state.get("run_id") != run_id:
        raise RuntimeError(f"{path} belongs to run {state.get('run_id')!r}, not {run_id!r}; remove it")
    for name, part in parts.items():
        if state.get(name) is None and name in OPTIONAL_PARTS:
            continue
        part.load_state_dict(state[name])
    set_rng_state(state["rng"])
    resumed = EpochProgress.from_state(state["partial"]) if state.get("partial") else None
    return state["history"], state["epoch"] + 1, resumed
