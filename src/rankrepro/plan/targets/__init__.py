"""The workflow's files and arguments, from the plan: what the rules' input, params and output functions return.

``workflow/rules/common.smk`` builds one :class:`WorkflowTargets` from the
:class:`~rankrepro.plan.model.Plan` and the config, and the rules use its methods. A method that takes
``wildcards`` is called by Snakemake with the job's wildcards (any object with those attributes will
do); the others give the lists of targets (``rule all``). It imports neither torch nor Snakemake:
``snakemake -n`` stays fast, and the paths are tested without Snakemake (tests/test_targets.py). An
unknown dataset, source, run, table or batch is a :class:`TargetError` naming it and what is planned.

:class:`WorkflowTargets` is composed of one part per group of rules, each in its own module:

- :mod:`~rankrepro.plan.targets.data`: the datasets, replica -> download -> prepare (``data.smk``);
- :mod:`~rankrepro.plan.targets.runs`: run.json, the image caches, train and evaluate (``train.smk``,
  ``evaluate.smk``, ``cache.smk``);
- :mod:`~rankrepro.plan.targets.batches`: training batches (``runtime.runs_per_job`` > 1; ``train.smk``);
- :mod:`~rankrepro.plan.targets.cluster`: the jobs' cluster resources (:mod:`rankrepro.plan.resources`)
  and their per-attempt logs;
- :mod:`~rankrepro.plan.targets.tables`: tables, tracking, the index and the report (``tables.smk``,
  ``sweeps.smk``);
- :mod:`~rankrepro.plan.targets.hgldv2`: H-GLDv2 rebuilt (``hgldv2.smk``);

and :mod:`~rankrepro.plan.targets.common` holds what they share (:class:`TargetError`, the fixed folders).

Paths are relative to the workflow's folder:

- ``<data_root>/replicas/<source>/replica.json``, ``<data_root>/downloads/<source>/download.json``;
- ``results/manifests/<dataset>/``, ``results/cache/<dataset>/s<S>/cache.json``;
- ``results/runs/<id>/``: run.json, model.pt (unless ``runtime.keep_model`` is false), history.csv
  (:meth:`WorkflowTargets.train_files`), metrics.json (:meth:`WorkflowTargets.evaluate_files`), curve.png
  (:meth:`WorkflowTargets.curve_file`, drawn per paper unless ``runtime.curves`` is false); with ``eval.every``
  the train job also writes the test curve curve.csv there, not a declared output (a run without one has none;
  the evaluate step reads it beside model.pt, :mod:`rankrepro.record.selection`);
- ``results/batches/staged/<id>/``: where a training batch trains its runs before it writes their folders
  (``runtime.runs_per_job`` > 1; :mod:`rankrepro.plan.batches`, :mod:`rankrepro.engine.batch`);
- ``results/plan/``, ``results/tables/<paper>/<table>.*``, ``results/synthetic/``, ``results/hgldv2/``;
- ``results/recipes.md`` and ``results/recipes.html``: every run's recipe card (:mod:`rankrepro.recipe`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rankrepro.record.runtime import runtime_flags
from rankrepro.plan.batches import BatchError, train_batches
from rankrepro.plan.model import Plan
from rankrepro.plan.resources import ClusterResources
from rankrepro.plan.schema import PlanError
from rankrepro.plan.targets.batches import BatchTargets
from rankrepro.plan.targets.cluster import ClusterTargets
from rankrepro.plan.targets.common import (BATCHES_DIR, HGLDV2_DIR, RECIPES_HTML, RECIPES_MD, STAGED_DIR, TargetError,
                                           run_cache_size, run_dir)  # noqa: F401 (run_cache_size, run_dir: re-exported)
from rankrepro.plan.targets.data import DatasetTargets
from rankrepro.plan.targets.hgldv2 import HGLDv2Targets
from rankrepro.plan.targets.runs import RunTargets
from rankrepro.plan.targets.tables import TableTargets

if TYPE_CHECKING:
    from rankrepro.plan.build import PlanFiles

__all__ = ["TargetError", "WorkflowTargets", "BATCHES_DIR", "STAGED_DIR", "HGLDV2_DIR", "RECIPES_MD", "RECIPES_HTML"]


class WorkflowTargets(DatasetTargets, RunTargets, BatchTargets, ClusterTargets, TableTargets, HGLDv2Targets):
    """The paths and arguments of the workflow's jobs for ``plan``, written as ``files``
    (:func:`rankrepro.plan.build.write_plan`), under ``config`` (its ``data_root`` and ``runtime``
    blocks, as the config schema completes them, and its ``cluster`` block: :attr:`cluster`)."""

    def __init__(self, plan: Plan, config: dict, files: PlanFiles):
        self.plan, self.files, self.plan_file = plan, files, str(files.plan)
        self.data_root, self.runtime = config["data_root"], config["runtime"]
        self.hgldv2 = plan.hgldv2
        #: {source: the planned datasets that use its files}; the download rule runs once per source
        self.sources: dict[str, list[str]] = {}
        for name, entry in sorted(plan.datasets.items()):
            if entry["facts"]["source"]:
                self.sources.setdefault(entry["facts"]["source"], []).append(name)
        #: the trainer's runtime settings (channels-last, workers, ...) as train / train-batch flags
        self.runtime_flags = runtime_flags(self.runtime)
        self.runs_per_job = self.runtime["runs_per_job"]
        #: {batch name: [run id, ...]} (none when runtime.runs_per_job is 1: one job per run)
        self.batches: dict[str, list[str]] = {}
        if self.runs_per_job != 1:
            try:
                self.batches = train_batches(plan.runs, self.runs_per_job, key=self._batch_key)
            except BatchError as err:
                raise TargetError(str(err)) from None
            if not self.runtime["evaluate_in_train_job"]:
                raise TargetError(f"runtime.runs_per_job is {self.runs_per_job} but runtime.evaluate_in_train_job "
                                  "is false: a batch job trains and evaluates its runs; set evaluate_in_train_job: "
                                  "true or runs_per_job: 1")
        if not self.runtime["keep_model"] and not self.runtime["evaluate_in_train_job"]:
            raise TargetError("runtime.keep_model is false but runtime.evaluate_in_train_job is false: the evaluate "
                              "job reads model.pt; set evaluate_in_train_job: true or keep_model: true")
        self._batch_of = {rid: name for name, ids in self.batches.items() for rid in ids}
        #: the jobs' runtime and memory, and the caps every rule's threads and mem_mb go through
        try:
            self.cluster = ClusterResources(plan, self.runtime, config.get("cluster"))
        except PlanError as err:
            raise TargetError(str(err)) from None
