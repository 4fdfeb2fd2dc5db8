"""Tasks: how a run is trained and evaluated, selected by its record's ``task``.

:data:`TASKS` (a :class:`rankrepro.registry.Registry`) maps a task name to a :class:`Task`, its two
functions given as fixed keywords of the registration::

    TASKS.register("retrieval", train=train, evaluate=evaluate)(Task)
TASKS.register("detection", train=detection.train, evaluate=detection.evaluate)(Task)

- ``train(run, manifest_dir, out_dir, *, device, num_workers, run_id, progress, image_cache, runtime,
  eval_image_cache, eval_batch_size) -> model path`` (``runtime``: a
  :class:`~rankrepro.engine.runtime.TrainRuntime`, the speed settings) writes the trained model (and its
  history, and with ``eval.every`` its test curve, scored with the two ``eval_`` settings) into the run's folder;
- ``evaluate(run, manifest_dir, model_path, out_path, *, device, num_workers, batch_size, run_id,
  progress, image_cache) -> dict`` writes the run's result record (``metrics.json``) and returns it.

``retrieval`` (the default): :func:`rankrepro.engine.train.train` and
:func:`rankrepro.engine.evaluate.evaluate`, scored under the manifest's protocol. ``detection``: a Faster
R-CNN on a VOC manifest and its VOC07 AP50 (:mod:`rankrepro.engine.detection`). Another task is another registration here
and ``python -m rankrepro catalog`` (the planner checks a run's ``task`` against the catalog's
``task`` entries); the CLI's ``train``, ``train-batch`` and ``evaluate`` reach it through :func:`task_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rankrepro.engine import detection
from rankrepro.engine.evaluate import evaluate
from rankrepro.engine.train import train
from rankrepro.registry import Registry, UnknownNameError

__all__ = ["TASKS", "Task", "DEFAULT_TASK", "task_of"]

TASKS = Registry("task")

#: the task of a run record without ``task`` (written before runs named their task; its run id is the
#: same, :func:`rankrepro.plan.complete.run_id` leaves the default task out of the hash)
DEFAULT_TASK = "retrieval"


@dataclass(frozen=True)
class Task:
    """A task's trainer and evaluator (signatures in the module docstring)."""

    train: Callable[..., Path]
    evaluate: Callable[..., dict]


TASKS.register("retrieval", train=train, evaluate=evaluate)(Task)
TASKS.register("detection", train=detection.train, evaluate=detection.evaluate)(Task)


def task_of(run: dict, where: str = "run") -> Task:
    """The task a run record names (``run["task"]``, :data:`DEFAULT_TASK` when absent); an unknown
    one is an :class:`~rankrepro.registry.UnknownNameError` naming ``where`` (e.g. the run.json) and
    the registered tasks."""
    try:
        return TASKS.build(run.get("task", DEFAULT_TASK))
    except UnknownNameError as err:
        raise UnknownNameError(f"{where}: task: {err}") from None
