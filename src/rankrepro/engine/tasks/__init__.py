"""Tasks: how a run is trained and evaluated, selected by its record's ``task``.

:data:`TASKS` (a :class:`rankrepro.registry.Registry`) maps a task name to a
:class:`~rankrepro.engine.tasks.base.Task` subclass, one module of this package each::

    @TASKS.register("detection")
    class DetectionTask(Task): ...

``retrieval`` (the default, :data:`~rankrepro.record.tasks.DEFAULT_TASK`): an embedding network on a retrieval
manifest, scored under the manifest's protocol (:mod:`.retrieval`). ``detection``: a Faster R-CNN on a VOC
manifest and its VOC07 AP50 (:mod:`.detection`). Every task trains through the one loop,
:func:`rankrepro.engine.loop.train`. Another task is another module here (or a registration anywhere, e.g. a
test's) and ``python -m rankrepro catalog``: the planner checks a run's ``task`` and the task's facts against the
catalog; the CLI's ``train``, ``train-batch`` and ``evaluate`` reach it through :func:`task_of`.
"""

from __future__ import annotations

from rankrepro.engine.tasks.base import Parts, Task
from rankrepro.record.tasks import DEFAULT_TASK
from rankrepro.registry import Registry, UnknownNameError

__all__ = ["TASKS", "Parts", "Task", "task_of"]

TASKS = Registry("task", package="rankrepro.engine.tasks")


def task_of(run: dict, where: str = "run") -> Task:
    """A new instance of the task a run record names (``run["task"]``, :data:`DEFAULT_TASK` when absent); an
    unknown one is an :class:`~rankrepro.registry.UnknownNameError` naming ``where`` (e.g. the run.json) and the
    registered tasks."""
    try:
        return TASKS.build(run.get("task", DEFAULT_TASK))
    except UnknownNameError as err:
        raise UnknownNameError(f"{where}: task: {err}") from None
