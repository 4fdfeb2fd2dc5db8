"""What the planner, the cost estimate and the benchmarks know of a task, without importing it.

A task (:mod:`rankrepro.engine.tasks`) declares its :class:`TaskFacts` beside its code, as its class
attribute ``facts``; the catalog (:mod:`rankrepro.catalog`) records them under the task's entry
(``catalog["task"][<name>]["facts"]``), and the planner (:func:`rankrepro.plan.complete.check_task`),
:mod:`rankrepro.plan.cost` and ``bench train`` read them there. No task name is compared as a string
outside its own module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["DEFAULT_TASK", "TaskFacts", "facts_of", "throughput_network"]

#: the task of a run record without ``task`` (written before runs named their task; its run id is the same:
#: :func:`rankrepro.plan.complete.run_id` leaves the default task out of the hash)
DEFAULT_TASK = "retrieval"


@dataclass(frozen=True)
class TaskFacts:
    """The facts a task declares.

    - ``metrics``: the metric names a run of the task may list in ``eval.metrics``; None: any name of the
      retrieval metric grammar (:func:`rankrepro.metrics.names.parse_metric`);
    - ``backbones``: the backbones its model takes (``model.backbone``); None: every registered backbone;
    - ``refused``: run keys (dotted) the task does not implement, each with the only value it accepts
      (its default): the plan fails naming the key when a run sets another;
    - ``throughput_key``: the row of a throughput profile (``profiles/throughput/<gpu>.yaml``) its runs are
      costed by, a format string over the run's ``model`` block (``"{backbone}"``, ``"{name}/{backbone}"``);
    - ``bench_dataset``: the registered dataset on whose generated replica ``python -m rankrepro bench train`` times
      the task's runs (None: the bench does not time them; their profile rows come from elsewhere).
    """

    metrics: tuple[str, ...] | None = None
    backbones: tuple[str, ...] | None = None
    refused: dict = field(default_factory=dict)
    throughput_key: str = "{backbone}"
    bench_dataset: str | None = None

    def as_json(self) -> dict:
        """The facts as the catalog stores them (lists for tuples)."""
        out = asdict(self)
        for key in ("metrics", "backbones"):
            if out[key] is not None:
                out[key] = list(out[key])
        return out


def facts_of(run: dict, catalog: dict) -> dict:
    """The catalog's facts (:meth:`TaskFacts.as_json`) of the task of ``run`` (:data:`DEFAULT_TASK` when it names
    none)."""
    return catalog["task"][run.get("task", DEFAULT_TASK)]["facts"]


def throughput_network(run: dict, catalog: dict) -> str:
    """The throughput profile's row that costs ``run`` (its task's :attr:`TaskFacts.throughput_key` filled in
    with its ``model`` block)."""
    return facts_of(run, catalog)["throughput_key"].format(**run["model"])
