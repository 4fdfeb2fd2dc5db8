"""Full-state checkpoints: model, optimizer, scheduler, scaler, loss, RNG states, history, test curve,
and where inside an epoch it was written (:mod:`rankrepro.engine.preemption`).

A checkpoint holds tensors and plain Python data only (the numpy RNG state as a tuple of plain
values, not an array), so it is read with :func:`rankrepro.torchfile.load_plain`: a crafted
``checkpoint.pt`` is refused without running anything.

One policy for every checkpoint a run cannot resume from -- unreadable (truncated by a killed copy or
a full disk), refused (a crafted file, or the format of an older rankrepro), not a checkpoint, one of
another run (another run id: a copied folder), or one whose model or loss does not fit the run's (another
architecture, a stale one after a code change): it is moved aside to ``checkpoint.pt.unusable-<n>``
(the first free ``n``; kept for inspection, never overwritten), a warning on stderr names it and says
what is wrong, and the run trains from its start **in the same job**. That is safe because
:func:`load_checkpoint` finds all of these before anything of the checkpoint is loaded: the parts are
still as built from the run's seed, so the run trains exactly as a fresh one; failing the job instead
would cost a retry (or, with none left, a person) and train the same. Should loading fail part-way
all the same (e.g. an optimizer's state that does not match its groups), the parts are no longer as
built: the checkpoint is moved aside and the job fails naming it, and the retry trains from the start.
Either way no retry meets the same checkpoint again.
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
from rankrepro.torchfile import QUOTED_CHARS, TorchFileError, load_plain, state_dict_mismatch

#: the keys the training loop (:mod:`rankrepro.engine.loop`) stores, ``rng`` added by :func:`save_checkpoint`;
#: ``epoch`` is the last finished epoch (0-based, -1: none). Not required: ``scaler`` (the AMP scaler's state;
#: a checkpoint of a detection run written before the loop was shared has none, or None), ``partial`` (None after
#: an epoch, else the position inside the next, :class:`~rankrepro.engine.preemption.EpochProgress`) and the
#: task's own state (the retrieval task's test curve, ``curve``): a checkpoint written before they existed resumes
#: with a fresh scaler and curve, at an epoch's end
CHECKPOINT_KEYS = frozenset({"run_id", "epoch", "model", "criterion", "optimizer", "scheduler", "history", "rng"})
#: the parts :func:`restore` loads when the checkpoint holds them (absent or None: the part stays as built)
OPTIONAL_PARTS = frozenset({"scaler"})
#: the suffix of a checkpoint moved aside, ``checkpoint.pt.unusable-<n>`` (:func:`set_aside`)
UNUSABLE = "unusable"


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


def set_aside(path: Path) -> Path:
    """Rename the checkpoint ``path`` to ``<path>.unusable-<n>``, the first ``n`` (1, 2, ...) not taken; return it."""
    n = 1
    while (aside := path.with_name(f"{path.name}.{UNUSABLE}-{n}")).exists():
        n += 1
    os.replace(path, aside)
    return aside


def load_checkpoint(path: str | Path, run_id: str, **modules) -> dict | None:
    """The state :func:`save_checkpoint` wrote to ``path`` for run ``run_id``, fitting ``modules`` (name: the run's
    ``torch.nn.Module`` the checkpoint's key ``name`` is loaded into, e.g. ``model=``, ``criterion=``); None when
    there is none, or when it cannot be resumed from: unreadable, refused, not a checkpoint's keys, another run's,
    or a module's keys or shapes differ. Such a file is moved aside (:func:`set_aside`) with a warning on stderr
    naming it and what is wrong, and the run trains from its start (module docstring). Nothing is loaded here."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = load_plain(path, remedy="")
        reason = _unusable(state, run_id, modules)
    except TorchFileError as err:
        reason = err.reason
    if reason is None:
        return state
    aside = set_aside(path)
    print(f"warning: {path}: {reason}; moved it to {aside} (kept for inspection): run {run_id} trains from "
          "epoch 1", file=sys.stderr)
    return None


def _unusable(state, run_id: str, modules: dict) -> str | None:
    """Why the checkpoint ``state`` cannot resume run ``run_id`` into ``modules`` (None: it can)."""
    if not isinstance(state, dict) or not CHECKPOINT_KEYS <= state.keys():
        keys = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        return f"not a checkpoint of this version (keys {keys}; expected {sorted(CHECKPOINT_KEYS)})"
    if state["run_id"] != run_id:
        return f"a checkpoint of run {state['run_id']!r}, not of {run_id!r}"
    for name, module in modules.items():
        mismatch = state_dict_mismatch(module, state[name])
        if mismatch:
            return (f"its {name} does not fit the run's (another architecture, or written before a code change): "
                    f"{mismatch}")
    return None


def restore(state: dict, path: str | Path, **parts) -> tuple[list[dict], int, EpochProgress | None]:
    """Load the checkpoint ``state`` (read from ``path`` by :func:`load_checkpoint`) into ``parts`` (name: an object
    with ``load_state_dict``, e.g. ``model=``, ``criterion=``, ``optimizer=``, ``scheduler=``, ``scaler=``; those of
    :data:`OPTIONAL_PARTS` only when the checkpoint holds them) and restore every RNG. Returns the history so far,
    the first epoch to train (0-based) and the position inside it (None: from its start). Should it fail part-way,
    the file is moved aside (:func:`set_aside`) and a :class:`~rankrepro.torchfile.TorchFileError` names both: the
    retry trains from the start."""
    try:
        for name, part in parts.items():
            if state.get(name) is None and name in OPTIONAL_PARTS:
                continue
            part.load_state_dict(state[name])
        set_rng_state(state["rng"])
        resumed = EpochProgress.from_state(state["partial"]) if state.get("partial") else None
        return state["history"], state["epoch"] + 1, resumed
    except Exception as err:
        path = Path(path)
        aside = set_aside(path)
        raise TorchFileError(path, f"cannot be resumed from ({type(err).__name__}: {str(err)[:QUOTED_CHARS]})",
                             f"moved it to {aside} (kept for inspection): the retry (the same command) trains the "
                             "run from epoch 1") from err
