"""The runs' jobs of :class:`~rankrepro.plan.targets.WorkflowTargets`: run.json, the image caches, train and
evaluate (``workflow/rules/train.smk``, ``evaluate.smk``, ``cache.smk``)."""

from __future__ import annotations

from rankrepro.data.cache import resize_uses_cache
from rankrepro.plan.model import manifest_path
from rankrepro.plan.targets.common import TargetError, run_cache_size, run_dir


class RunTargets:
    """The runs' part of :class:`~rankrepro.plan.targets.WorkflowTargets` (one job per run; with
    runtime.runs_per_job > 1 a batch's job writes its runs' files: :class:`~rankrepro.plan.targets.batches.BatchTargets`)."""

    def run(self, run_id: str) -> dict:
        """The planned run ``run_id``."""
        if run_id not in self.plan.runs:
            raise TargetError(f"run {run_id} is not in the plan ({self.plan_file})")
        return self.plan.runs[run_id]

    def run_plan_file(self, wildcards) -> str:
        """The run's plan file, which its run.json is written from (an unplanned run id fails the dry run)."""
        self.run(wildcards.run_id)
        return str(self.files.run(wildcards.run_id))

    def run_manifest(self, wildcards) -> str:
        return manifest_path(self.run(wildcards.run_id)["dataset"])

    def eval_manifests(self, wildcards) -> list[str]:
        """The manifests of the run's ``eval.datasets`` (the other datasets its evaluation scores; read beside
        its own manifest, results/manifests/<name>)."""
        return [manifest_path(name) for name in self.run(wildcards.run_id)["eval"].get("datasets", [])]

    def run_manifest_dir(self, wildcards) -> str:
        return f"results/manifests/{self.run(wildcards.run_id)['dataset']}"

    def run_cache_dir(self, run_id: str, stage: str) -> str | None:
        """results/cache/<dataset>/s<S> when runtime.image_cache is on and the run's ``stage`` (train or
        evaluate) transform reads that cache (its first resize: rankrepro.data.cache.resize_uses_cache), else None."""
        run = self.run(run_id)
        size = run_cache_size(run)
        if not self.runtime.get("image_cache", True) or size is None:
            return None
        resize = run["images"]["train_resize" if stage == "train" else "test_resize"]
        return f"results/cache/{run['dataset']}/s{size}" if resize_uses_cache(resize, size) else None

    def _cache_inputs(self, run_id: str, stage: str) -> list[str]:
        folder = self.run_cache_dir(run_id, stage)
        return [f"{folder}/cache.json"] if folder else []

    def _cache_args(self, run_id: str, stage: str, option: str) -> list[str]:
        folder = self.run_cache_dir(run_id, stage)
        return [option, folder] if folder else []

    def run_train_cache(self, wildcards) -> list[str]:
        """The cache.json the training job waits for (none: it reads the originals)."""
        return self._cache_inputs(wildcards.run_id, "train")

    def run_eval_cache(self, wildcards) -> list[str]:
        """The cache.json the evaluation waits for (none: it reads the originals)."""
        return self._cache_inputs(wildcards.run_id, "evaluate")

    def train_manifest(self, wildcards) -> list[str]:
        """The manifest the train job reads, and those of the run's ``eval.datasets`` when it evaluates."""
        extra = self.eval_manifests(wildcards) if self.evaluates_in_train_job(wildcards.run_id) else []
        return [self.run_manifest(wildcards), *extra]

    def evaluates_in_train_job(self, run_id: str) -> bool:
        """Whether the run's train job evaluates: with runtime.evaluate_in_train_job, or for its test curve
        (the run's eval.every)."""
        return self.runtime["evaluate_in_train_job"] or self.run(run_id)["eval"].get("every") is not None

    def train_caches(self, wildcards) -> list[str]:
        """The cache.json files the train job reads: its training's, and its evaluation's when it evaluates
        (:meth:`evaluates_in_train_job`)."""
        evaluation = self.run_eval_cache(wildcards) if self.evaluates_in_train_job(wildcards.run_id) else []
        return self.run_train_cache(wildcards) + evaluation

    def run_eval_cache_args(self, wildcards) -> list[str]:
        """``--image-cache <folder>`` for the evaluate command, as a list (each element quoted by the rule)."""
        return self._cache_args(wildcards.run_id, "evaluate", "--image-cache")

    def train_files(self, run_id: str = "{run_id}") -> dict[str, str]:
        """What the train job of a run writes: model.pt (not with runtime.keep_model false) and history.csv,
        and evaluate_files() too with runtime.evaluate_in_train_job (``run_id``: a run's, or the rule's pattern)."""
        folder = run_dir(run_id)
        files = {"model": f"{folder}/model.pt"} if self.runtime["keep_model"] else {}
        files["history"] = f"{folder}/history.csv"
        return {**files, **self.evaluate_files(run_id)} if self.runtime["evaluate_in_train_job"] else files

    @staticmethod
    def evaluate_files(run_id: str = "{run_id}") -> dict[str, str]:
        """What evaluating a run writes: metrics.json."""
        return {"metrics": f"{run_dir(run_id)}/metrics.json"}

    @staticmethod
    def curve_file(run_id: str) -> str:
        """A run's training curve (drawn by its paper's curves job: :meth:`curve_runs`)."""
        return f"{run_dir(run_id)}/curve.png"

    def train_command(self, wildcards, threads) -> list[str]:
        """The train job's ``python -m rankrepro`` arguments (each quoted by the rule): ``train`` the run,
        evaluating it too with runtime.evaluate_in_train_job (and scoring its test curve, eval.every, with the
        evaluation's batch size and image cache), then removing its model.pt with runtime.keep_model false."""
        rid = wildcards.run_id
        command = ["train", "--run", f"{run_dir(rid)}/run.json", "--manifest", self.run_manifest_dir(wildcards),
                   "--device", self.runtime["device"], "--num-workers", str(self.runtime["num_workers"]),
                   "--threads", str(threads), *self._cache_args(rid, "train", "--image-cache"),
                   *self.runtime_flags]
        if self.runtime["evaluate_in_train_job"]:
            command += ["--evaluate-out", self.evaluate_files(rid)["metrics"]]
        if self.evaluates_in_train_job(rid):
            command += ["--batch-size", str(self.runtime["eval_batch_size"]),
                        *self._cache_args(rid, "evaluate", "--eval-image-cache")]
        if not self.runtime["keep_model"]:
            command.append("--no-model")
        return command
