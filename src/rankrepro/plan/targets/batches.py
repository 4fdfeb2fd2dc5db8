"""The training batches of :class:`~rankrepro.plan.targets.WorkflowTargets` (``runtime.runs_per_job`` > 1:
:mod:`rankrepro.plan.batches`; ``workflow/rules/train.smk``): several runs of one dataset trained by one job."""

from __future__ import annotations

from rankrepro.plan.model import manifest_path
from rankrepro.plan.targets.common import BATCHES_DIR, TargetError, run_dir


class BatchTargets:
    """The training batches' part of :class:`~rankrepro.plan.targets.WorkflowTargets` (its ``batches``,
    grouped by :meth:`_batch_key`)."""

    @property
    def batched(self) -> bool:
        """Whether runs are trained in batches (runtime.runs_per_job > 1): every run then is in one."""
        return self.runs_per_job != 1

    def _batch_key(self, run_id: str) -> tuple:
        """What runs of one batch share: the dataset and the image caches of training and evaluation."""
        caches = (self.run_cache_dir(run_id, "train"), self.run_cache_dir(run_id, "evaluate"))
        return self.run(run_id)["dataset"], caches

    def batch_runs(self, wildcards) -> list[str]:
        """The run ids of training batch ``wildcards.batch``."""
        if wildcards.batch not in self.batches:
            planned = ", ".join(self.batches) if self.batches else "none: runtime.runs_per_job is 1"
            raise TargetError(f"training batch {wildcards.batch!r} is not in the plan ({self.plan_file}); "
                              f"batches: {planned}")
        return self.batches[wildcards.batch]

    def batch_of(self, run_id: str) -> str:
        """The training batch of run ``run_id``."""
        if run_id not in self._batch_of:
            self.run(run_id)
            raise TargetError(f"run {run_id} is in no training batch: runtime.runs_per_job is {self.runs_per_job}")
        return self._batch_of[run_id]

    @staticmethod
    def batch_record(batch: str = "{batch}") -> str:
        """The record a batch job writes last (its only output), once every run of the batch is staged."""
        return f"{BATCHES_DIR}/{batch}/batch.json"

    def run_batch_record(self, wildcards) -> list[str]:
        """The record of the run's training batch, with runtime.runs_per_job > 1 (else nothing)."""
        return [self.batch_record(self.batch_of(wildcards.run_id))] if self.batched else []

    def batch_run_configs(self, wildcards) -> list[str]:
        """The run.json of each run of the batch."""
        return [f"{run_dir(rid)}/run.json" for rid in self.batch_runs(wildcards)]

    def batch_manifest(self, wildcards) -> list[str]:
        """The manifest of the batch's dataset (its runs share it), and those of its runs' ``eval.datasets``."""
        runs = [self.run(rid) for rid in self.batch_runs(wildcards)]
        extra = sorted({manifest_path(name) for run in runs for name in run["eval"].get("datasets", [])})
        return [manifest_path(runs[0]["dataset"]), *extra]

    def batch_manifest_dir(self, wildcards) -> str:
        return f"results/manifests/{self.run(self.batch_runs(wildcards)[0])['dataset']}"

    def batch_cache_inputs(self, wildcards) -> list[str]:
        """The cache.json files a batch waits for (its runs share them)."""
        first = self.batch_runs(wildcards)[0]
        return self._cache_inputs(first, "train") + self._cache_inputs(first, "evaluate")

    def batch_cache_args(self, wildcards) -> list[str]:
        """``--image-cache`` / ``--eval-image-cache`` of a batch (its runs share them), as a list."""
        first = self.batch_runs(wildcards)[0]
        return self._cache_args(first, "train", "--image-cache") + self._cache_args(first, "evaluate",
                                                                                   "--eval-image-cache")
