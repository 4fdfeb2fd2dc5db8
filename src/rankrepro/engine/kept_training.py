"""A run's training kept until the evaluation in the same job succeeds, so a failed evaluation never retrains it.

A job that trains and then evaluates a run (``train --evaluate-out``: ``runtime.evaluate_in_train_job``, and every
run of a ``train-batch`` job) loses its model when the evaluation fails: Snakemake deletes a failed job's
outputs (``model.pt``, ``history.csv``), and the retry would train the run again from scratch. So, once training
ends, :func:`keep` hard-links (or copies) its files (:data:`KEPT_FILES`) into ``<run folder>/trained/``, which no
rule names as an output; the evaluation's success removes it (:func:`discard`). The next attempt finds it
(:func:`restore`): it puts the files back and evaluates without training. The folder is the run's, named by its
id, which hashes everything the training read: the kept model is the one training would make again. Delete
``trained/`` to train anew.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rankrepro.io import link_or_copy

__all__ = ["KEPT_DIR", "KEPT_FILES", "discard", "keep", "restore"]

#: the folder, inside the run's, of a training whose evaluation has not succeeded yet
KEPT_DIR = "trained"
#: the files training writes into the run's folder (the model, its history)
KEPT_FILES = ("model.pt", "history.csv")


def keep(out_dir: str | Path) -> Path:
    """Link (or copy) the trained files of ``out_dir`` into ``<out_dir>/trained/`` (each atomically); returns it."""
    out_dir = Path(out_dir)
    for name in KEPT_FILES:
        link_or_copy(out_dir / name, out_dir / KEPT_DIR / name)
    return out_dir / KEPT_DIR


def restore(out_dir: str | Path) -> Path | None:
    """The model of a training kept in ``<out_dir>/trained/`` (every file of :data:`KEPT_FILES` there) put back
    into ``out_dir`` (each atomically); None when there is none."""
    out_dir, kept = Path(out_dir), Path(out_dir) / KEPT_DIR
    if not all((kept / name).is_file() for name in KEPT_FILES):
        return None
    for name in KEPT_FILES:
        link_or_copy(kept / name, out_dir / name)
    return out_dir / KEPT_FILES[0]


def discard(out_dir: str | Path) -> None:
    """Remove ``<out_dir>/trained/`` (the evaluation succeeded)."""
    shutil.rmtree(Path(out_dir) / KEPT_DIR, ignore_errors=True)
