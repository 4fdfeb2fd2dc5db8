"""The training batches of :class:`~rankrepro.plan.targets.WorkflowTargets` (``runtime.runs_per_job`` > 1:
:mod:`rankrepro.plan.batches`; ``workflow/rules/train.smk``): several runs of one dataset trained by one job,
which writes its runs' files itself (one rule per batch, ``train_batch_<batch>``; no job per run)."""

from __future__ import annotations

from types import SimpleNamespace

from rankrepro.record.run_folder import run_files
from rankrepro.plan.model import manifest_path
from rankrepro.plan.targets.common import TargetError, run_dir


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
    def batch_wildcards(batch: str) -> SimpleNamespace:
        """The wildcards of batch ``batch``'s rule (``train_batch_<batch>``, one rule per batch: its outputs are
        its runs' files), for the methods below that take ``wildcards``."""
        return SimpleNamespace(batch=batch)

    def batch_plan_files(self, wildcards) -> list[str]:
        """The plan file of each run of the batch (results/plan/runs/<id>.json), which its run.json is written
        from, in the batch's order."""
        return [str(self.files.run(rid)) for rid in self.batch_runs(wildcards)]

    def batch_outputs(self, wildcards) -> list[str]:
        """What the batch job writes: each run's run.json, history.csv, metrics.json, and model.pt unless
        runtime.keep_model is false (:func:`rankrepro.record.run_folder.run_files`)."""
        names = run_files(self.runtime["keep_model"])
        return [f"{run_dir(rid)}/{name}" for rid in self.batch_runs(wildcards) for name in names]

    def batch_flags(self, wildcards) -> list[str]:
        """``--no-model`` with runtime.keep_model false, as a list."""
        return [] if self.runtime["keep_model"] else ["--no-model"]

    def batch_manifest(self, wildcards) -> list[str]:
        """The manifest of the batch's dataset (its runs share it; first: the rule passes its folder), and those of
        its runs' ``eval.datasets``."""
        runs = [self.run(rid) for rid in self.batch_runs(wildcards)]
        extra = sorted({manifest_path(name) for run in runs for name in run["eval"].get("datasets", [])})
        return [manifest_path(runs[0]["dataset"]), *extra]

    def batch_cache_inputs(self, wildcards) -> list[str]:
        """The cache.json files a batch waits for (its runs share them)."""
        first = self.batch_runs(wildcards)[0]
        return self._cache_inputs(first, "train") + self._cache_inputs(first, "evaluate")

    def batch_cache_args(self, wildcards) -> list[str]:
        """``--image-cache`` / ``--eval-image-cache`` of a batch (its runs share them), as a list."""
        first = self.batch_runs(wildcards)[0]
        return self._cache_args(first, "train", "--image-cache") + self._cache_args(first, "evaluate",
                                                                                   "--eval-image-cache")
