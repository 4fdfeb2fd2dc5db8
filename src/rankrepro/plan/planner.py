"""The planner: resolves runs against one catalog, one set of setups and schemas, and the config's overrides.

A **run** is a fully resolved experiment (``schemas/run.schema.yaml``). For table cell (row,
column) it is the merge (:mod:`rankrepro.plan.merge`), in this order, of

1. the column's setup and every setup it ``extends`` (:mod:`rankrepro.plan.setups`),
   then the entries of every layer's ``per_loss`` for the run's final loss (their ``loss`` keys again under a
   later layer that names that loss over another loss's block: :func:`~rankrepro.plan.setups.apply_per_loss`),
2. the spec's layers (for a runs table: the column's ``run`` block, the row's ``loss``, the
   row's ``run`` block; each table kind says which: :mod:`rankrepro.tables.kinds`),
3. the config's ``run_overrides`` (or, for a run whose task has an entry in their ``per_task`` block, that
   entry instead: :meth:`Planner.overrides_for`),
4. the seed, when the spec lists ``seeds``,

then completed and validated (:mod:`rankrepro.plan.complete`). :attr:`Planner.provenance` keeps,
per run id, where each of its values came from (the first cell that resolved it). :attr:`Planner.specs_dir` is
the plan's folder of table specs (a leaderboard reads the papers' numbers from it:
:mod:`rankrepro.tables.reported`) and :attr:`Planner.memo` what a kind computes once per plan.
"""

from __future__ import annotations

import copy
from pathlib import Path

from rankrepro import catalog as catalog_mod
from rankrepro.catalog import COMPONENTS
from rankrepro.plan.complete import canonical_json, complete_run, provenance, run_id
from rankrepro.plan.merge import get_path, merge_layers
from rankrepro.plan.planned import dataset_pending, load_planned, run_pending
from rankrepro.plan.schema import PlanError, Schemas, dotted, validate
from rankrepro.record.tasks import DEFAULT_TASK
from rankrepro.plan.setups import Setup, apply_per_loss, check_per_loss, load_setups, setup_layers
from rankrepro.plan.specs import SPECS_DIR

__all__ = ["Planner", "resolve_run", "PER_TASK"]

PER_TASK = "per_task"


class Planner:
    """Resolves runs against one catalog, one set of setups and schemas, and the config's overrides."""

    def __init__(self, overrides: dict | None = None, *, catalog: dict | None = None,
                 setups: dict[str, Setup] | None = None, schemas: Schemas | None = None,
                 planned: dict | None = None, overrides_label: str = "config run_overrides",
                 specs_dir: str | Path = SPECS_DIR):
        self.schemas = schemas or Schemas()
        self.specs_dir = Path(specs_dir)  # the table specs of this plan (a leaderboard reads the papers' numbers)
        self.memo: dict = {}  # what depends on the planner's inputs alone, computed once per plan
        self.catalog = catalog if catalog is not None else catalog_mod.load()
        self.setups = setups if setups is not None else load_setups(schemas=self.schemas)
        self.planned = planned if planned is not None else load_planned()
        self.overrides = overrides or {}
        self.overrides_label = overrides_label
        self._resolved: dict = {}  # the same layers give the same run: complete it once
        self.provenance: dict[str, dict[str, str]] = {}  # run id -> {dotted key: origin}
        validate(self.overrides, self.schemas.partial_run, overrides_label, text_hint=True)
        check_per_loss(self.overrides, self.schemas, overrides_label, losses=self.catalog["loss"])
        for task, entry in (self.overrides.get(PER_TASK) or {}).items():
            if task not in self.catalog["task"]:
                raise PlanError(f"{overrides_label}: {PER_TASK}.{task}: unknown task {task!r}; registered: "
                                f"{', '.join(sorted(self.catalog['task']))}")
            validate(entry, self.schemas.partial_run, f"{overrides_label}: {PER_TASK}.{task}", text_hint=True)
            check_per_loss(entry, self.schemas, f"{overrides_label}: {PER_TASK}.{task}", losses=self.catalog["loss"])
            if PER_TASK in entry:
                raise PlanError(f"{overrides_label}: {PER_TASK}.{task}: {PER_TASK} inside {PER_TASK}")
        for setup in self.setups.values():
            check_per_loss(setup.data, self.schemas, setup.label, losses=self.catalog["loss"])
        for path, (kind, _) in COMPONENTS.items():  # a name in the overrides must exist
            name = get_path(self.overrides, (*path, "name"))
            if name is not None and name not in self.catalog[kind]:
                raise PlanError(f"{overrides_label}: {dotted((*path, 'name'))}: unknown {kind} {name!r}; "
                                f"registered: {', '.join(sorted(self.catalog[kind]))}")

    def overrides_for(self, layers: list[tuple[str, dict]]) -> tuple[str, dict]:
        """The overrides layer of a run made of ``layers``: the config's ``run_overrides``, or, for a run whose task
        (the last ``task`` a layer gives; retrieval when none) has an entry in its ``per_task`` block, that entry
        alone (a task's runs need other overrides: the demo's tiny retrieval network is no detector)."""
        per_task = self.overrides.get(PER_TASK) or {}
        task = next((data["task"] for _, data in reversed(layers) if "task" in (data or {})), DEFAULT_TASK)
        if task in per_task:
            return f"{self.overrides_label}: {PER_TASK}.{task}", per_task[task]
        return self.overrides_label, {k: v for k, v in self.overrides.items() if k != PER_TASK}

    def resolve(self, setup: str, layers: list[tuple[str, dict]] = (), seed: int | None = None,
                context: str = "") -> dict:
        """The complete run of ``setup`` with the spec's ``layers`` and the overrides (and ``seed``)."""
        chain = setup_layers(setup, self.setups)
        all_layers = [*chain, *layers, self.overrides_for([*chain, *layers])]
        if seed is not None:
            all_layers.append(("spec seeds", {"seed": seed}))
        # the layers' data decide the run (their labels and ``context`` only word the messages of a run that
        # fails, and a run that completed once completes again): cells that describe one run share its key
        key = canonical_json([data for _, data in all_layers])
        if key not in self._resolved:
            merged, origins = merge_layers(apply_per_loss(all_layers, len(chain), self.catalog["loss"]))
            run = complete_run(merged, origins, self.catalog, self.schemas, context)
            self._resolved[key] = (run, run_id(run), provenance(run, origins))
        run, rid, origins = self._resolved[key]
        self.provenance.setdefault(rid, origins)
        return copy.deepcopy(run)

    def pending(self, setup: str, loss: str, where: str) -> str | None:
        """Why a cell has no run yet (planned names), None when it has one; unknown names fail."""
        return run_pending(setup, loss, where, setups=self.setups, catalog=self.catalog, planned=self.planned)

    def dataset_pending(self, dataset: str, where: str) -> str | None:
        """Why ``dataset`` has no manifest yet (planned), None when it is registered; unknown names fail."""
        return dataset_pending(dataset, where, catalog=self.catalog, planned=self.planned)


def resolve_run(setup: str, loss: dict, overrides: dict | None = None, **planner_kw) -> dict:
    """The complete run of ``loss`` in ``setup`` with ``overrides`` on top (a convenience for tests and notebooks)."""
    return Planner(overrides, **planner_kw).resolve(setup, [("loss", {"loss": loss})])
