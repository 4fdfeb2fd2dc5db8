"""The files of a run's folder ``results/runs/<id>/``, named once for the planner (which declares them as a batch
job's outputs: :mod:`rankrepro.plan.targets.batches`) and the trainer (which stages and publishes them:
:mod:`rankrepro.engine.batch`)."""

from __future__ import annotations

from rankrepro.record.selection import CURVE_FILE

__all__ = ["OPTIONAL_STAGED_FILES", "STAGED_FILES", "run_files"]

#: what a written, trained and evaluated run's folder holds (``train --evaluate-out``), metrics.json written last
STAGED_FILES = ("run.json", "model.pt", "history.csv", "metrics.json")
#: what it also holds when the run has one: its test curve (eval.every, rankrepro.engine.curve)
OPTIONAL_STAGED_FILES = (CURVE_FILE,)


def run_files(keep_model: bool = True) -> tuple[str, ...]:
    """The files of :data:`STAGED_FILES` a batched run publishes into ``results/runs/<id>/``: all of them,
    without ``model.pt`` unless ``keep_model`` (the order they are published in; metrics.json last)."""
    return tuple(name for name in STAGED_FILES if keep_model or name != "model.pt")
