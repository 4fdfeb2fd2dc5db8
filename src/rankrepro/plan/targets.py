"""The workflow's files and arguments, from the plan: what the rules' input, params and output functions return.

``workflow/rules/common.smk`` builds one :class:`WorkflowTargets` from the
:class:`~rankrepro.plan.model.Plan` and the config, and the rules use its methods. A method that takes
``wildcards`` is called by Snakemake with the job's wildcards (any object with those attributes will
do); the others give the lists of targets (``rule all``). It imports neither torch nor Snakemake:
``snakemake -n`` stays fast, and the paths are tested without Snakemake (tests/test_targets.py). An
unknown dataset, source, run, table or batch is a :class:`TargetError` naming it and what is planned.

Paths are relative to the workflow's folder:

- ``<data_root>/replicas/<source>/replica.json``, ``<data_root>/downloads/<source>/download.json``;
- ``results/manifests/<dataset>/``, ``results/cache/<dataset>/s<S>/cache.json``;
- ``results/runs/<id>/``: run.json, model.pt, history.csv (:meth:`WorkflowTargets.train_files`),
  metrics.json, curve.png (:meth:`WorkflowTargets.evaluate_files`); with ``eval.every`` the train job also
  writes the test curve curve.csv there, not a declared output (a run without one has none; the evaluate
  step reads it beside model.pt, :mod:`rankrepro.record.selection`);
- ``results/batches/<batch>/batch.json`` and ``results/batches/staged/<id>/``: training batches
  (``runtime.runs_per_job`` > 1; :mod:`rankrepro.plan.batches`, :mod:`rankrepro.engine.batch`);
- ``results/plan/``, ``results/tables/<paper>/<table>.*``, ``results/synthetic/``, ``results/hgldv2/``;
- ``results/recipes.md`` and ``results/recipes.html``: every run's recipe card (:mod:`rankrepro.recipe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import rankrepro.hgldv2
from rankrepro.data.cache import resize_uses_cache
from rankrepro.record.runtime import runtime_flags
from rankrepro.plan.batches import BatchError, train_batches
from rankrepro.plan.model import Plan, manifest_path
from rankrepro.plan.resources import ClusterResources, Work
from rankrepro.plan.schema import PlanError

if TYPE_CHECKING:
    from rankrepro.plan.build import PlanFiles

__all__ = ["TargetError", "WorkflowTargets", "BATCHES_DIR", "STAGED_DIR", "HGLDV2_DIR", "RECIPES_MD", "RECIPES_HTML"]

#: where training batches keep their records (``<batch>/batch.json``) and their staged runs
BATCHES_DIR = "results/batches"
STAGED_DIR = f"{BATCHES_DIR}/staged"
HGLDV2_DIR = "results/hgldv2"
#: every run's recipe card, grouped by paper and table, and its HTML copy shown in the report
RECIPES_MD, RECIPES_HTML = "results/recipes.md", "results/recipes.html"


class TargetError(LookupError):
    """An unknown name asked of the plan, or a runtime setting the workflow cannot run with; the
    message names it (and what is planned, or the config key)."""


def run_dir(run_id: str) -> str:
    return f"results/runs/{run_id}"


def run_cache_size(run: dict) -> int | None:
    """The shorter side S of the run's image cache: its images.train_resize when that is an int
    (a squash pair or null: no cache, the run reads the originals; nor with images.face, whose boxes are
    in the originals' pixels)."""
    if run["images"].get("face") is not None:
        return None
    size = run["images"]["train_resize"]
    if isinstance(size, list) and len(size) == 1:
        size = size[0]
    return size if isinstance(size, int) and not isinstance(size, bool) else None


class WorkflowTargets:
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
        self._batch_of = {rid: name for name, ids in self.batches.items() for rid in ids}
        #: the jobs' runtime and memory, and the caps every rule's threads and mem_mb go through
        try:
            self.cluster = ClusterResources(plan, self.runtime, config.get("cluster"))
        except PlanError as err:
            raise TargetError(str(err)) from None

    # -- datasets: replica -> download -> prepare (workflow/rules/data.smk) ------------------------

    def dataset(self, name: str) -> dict:
        """The planned dataset ``name`` (``{"facts", "config"}``)."""
        if name not in self.plan.datasets:
            raise TargetError(f"dataset {name!r} is not in the plan; planned: {', '.join(sorted(self.plan.datasets))}")
        return self.plan.datasets[name]

    def source_of(self, dataset: str) -> str:
        """The folder of the dataset's downloads (shared by datasets with the same files)."""
        return self.dataset(dataset)["facts"]["source"]

    def source_dataset(self, wildcards) -> str:
        """The planned dataset that downloads the files of ``wildcards.source``: of those using them, the
        first declaring the most files (``voc0712``'s three archives hold ``voc07``'s two; others declare
        the same files)."""
        if wildcards.source not in self.sources:
            raise TargetError(f"no planned dataset downloads into {wildcards.source!r}; sources: "
                              f"{', '.join(self.sources) or '(none)'}")
        return max(self.sources[wildcards.source], key=lambda name: self.dataset(name)["facts"]["files"])

    def download_record(self, dataset: str) -> str:
        return f"{self.data_root}/downloads/{self.source_of(dataset)}/download.json"

    def replica_record(self, source: str) -> str:
        return f"{self.data_root}/replicas/{source}/replica.json"

    def replica_dir(self, wildcards) -> str:
        return f"{self.data_root}/replicas/{wildcards.source}"

    def download_input(self, wildcards) -> list[str]:
        """The generated replica when the source's datasets are replicas, else nothing."""
        replica = self.dataset(self.source_dataset(wildcards))["config"]["replica"]
        return [self.replica_record(wildcards.source)] if replica else []

    @staticmethod
    def download_data_root(wildcards, output) -> str:
        """data_root, from the download's output path <data_root>/downloads/<source>/download.json."""
        return str(Path(output[0]).parents[2])

    def download_args(self, wildcards) -> list[str]:
        """The download's options as a list (each element quoted by the rule): the replica folder, or the
        config's url/checksum overrides (none: the dataset's official sources)."""
        cfg = self.dataset(self.source_dataset(wildcards))["config"]
        if cfg["replica"]:
            return ["--replica-dir", self.replica_dir(wildcards)]
        return [arg for key in ("url", "checksum") if cfg[key] for arg in (f"--{key}", cfg[key])]

    def prepare_input(self, wildcards) -> list[str]:
        """The base manifest (derived datasets) with the other files they read, the download record, or
        nothing (an extracted copy)."""
        entry = self.dataset(wildcards.dataset)
        if entry["facts"]["derived_from"]:
            # and the files derive() reads besides it (gldv2_hier_rebuilt: the curated H-GLDv2 labels)
            return [manifest_path(entry["facts"]["derived_from"]), *entry["facts"]["derive_inputs"]]
        return [] if entry["config"]["extracted"] else [self.download_record(wildcards.dataset)]

    def prepare_source(self, wildcards) -> str:
        """What prepare reads: the base manifest's folder, the extracted copy or the download record."""
        entry = self.dataset(wildcards.dataset)
        if entry["facts"]["derived_from"]:
            return f"results/manifests/{entry['facts']['derived_from']}"
        return entry["config"]["extracted"] or self.download_record(wildcards.dataset)

    def prepare_flags(self, wildcards) -> list[str]:
        """``--replica`` when the dataset (or the base of a derived one) is a replica."""
        entry = self.dataset(wildcards.dataset)
        base = entry["facts"]["derived_from"]
        replica = self.dataset(base)["config"]["replica"] if base else entry["config"]["replica"]
        return ["--replica"] if replica else []

    def manifest_outputs(self) -> list[str]:
        """Every planned dataset's manifest: `snakemake` prepares the datasets the config lists even
        before a table trains on them."""
        return [manifest_path(name) for name in self.plan.datasets]

    # -- runs: run.json, the image caches, train and evaluate (train.smk, evaluate.smk, cache.smk) ----

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
        """The manifest the train job reads (none with runtime.runs_per_job > 1: its batch job read it)."""
        if self.batched:
            return []
        extra = self.eval_manifests(wildcards) if self.evaluates_in_train_job(wildcards.run_id) else []
        return [self.run_manifest(wildcards), *extra]

    def evaluates_in_train_job(self, run_id: str) -> bool:
        """Whether the run's train job evaluates: with runtime.evaluate_in_train_job, or for its test curve
        (the run's eval.every)."""
        return self.runtime["evaluate_in_train_job"] or self.run(run_id)["eval"].get("every") is not None

    def train_caches(self, wildcards) -> list[str]:
        """The cache.json files the train job reads: its training's, and its evaluation's when it evaluates
        (:meth:`evaluates_in_train_job`; none with runtime.runs_per_job > 1: its batch job read them)."""
        if self.batched:
            return []
        evaluation = self.run_eval_cache(wildcards) if self.evaluates_in_train_job(wildcards.run_id) else []
        return self.run_train_cache(wildcards) + evaluation

    def run_eval_cache_args(self, wildcards) -> list[str]:
        """``--image-cache <folder>`` for the evaluate command, as a list (each element quoted by the rule)."""
        return self._cache_args(wildcards.run_id, "evaluate", "--image-cache")

    def train_files(self, run_id: str = "{run_id}") -> dict[str, str]:
        """What the train job of a run writes: model.pt and history.csv, and evaluate_files() too with
        runtime.evaluate_in_train_job (``run_id``: a run's, or the rule's pattern)."""
        folder = run_dir(run_id)
        files = {"model": f"{folder}/model.pt", "history": f"{folder}/history.csv"}
        return {**files, **self.evaluate_files(run_id)} if self.runtime["evaluate_in_train_job"] else files

    @staticmethod
    def evaluate_files(run_id: str = "{run_id}") -> dict[str, str]:
        """What evaluating a run writes: metrics.json, and the training curve for the report."""
        return {"metrics": f"{run_dir(run_id)}/metrics.json", "curve": f"{run_dir(run_id)}/curve.png"}

    def train_command(self, wildcards, threads) -> list[str]:
        """The train job's ``python -m rankrepro`` arguments (each quoted by the rule): ``train`` the run,
        evaluating it too with runtime.evaluate_in_train_job (and scoring its test curve, eval.every, with the
        evaluation's batch size and image cache); with runtime.runs_per_job > 1, ``adopt`` the files its
        training batch staged (:mod:`rankrepro.engine.batch`)."""
        rid = wildcards.run_id
        if self.batched:
            return ["adopt", "--batch", self.batch_record(self.batch_of(rid)), "--run-id", rid, "--out", run_dir(rid)]
        command = ["train", "--run", f"{run_dir(rid)}/run.json", "--manifest", self.run_manifest_dir(wildcards),
                   "--device", self.runtime["device"], "--num-workers", str(self.runtime["num_workers"]),
                   "--threads", str(threads), *self._cache_args(rid, "train", "--image-cache"),
                   *self.runtime_flags]
        if self.runtime["evaluate_in_train_job"]:
            files = self.evaluate_files(rid)
            command += ["--evaluate-out", files["metrics"], "--curve", files["curve"]]
        if self.evaluates_in_train_job(rid):
            command += ["--batch-size", str(self.runtime["eval_batch_size"]),
                        *self._cache_args(rid, "evaluate", "--eval-image-cache")]
        return command

    # -- training batches (runtime.runs_per_job > 1: rankrepro.plan.batches; train.smk) -------------

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


    # -- cluster resources of the training and evaluation jobs (rankrepro.plan.resources) -------------

    def _train_work(self, wildcards) -> list[Work]:
        return [Work(wildcards.run_id, train=True, evaluate=self.runtime["evaluate_in_train_job"])]

    def train_runtime(self, wildcards) -> int:
        """The train job's runtime (minutes): its run's estimate (:mod:`rankrepro.plan.resources`); 5 for a
        batched run's (it only adopts its batch's files)."""
        return 5 if self.batched else self.cluster.runtime_minutes(self._train_work(wildcards))

    def train_mem_mb(self, wildcards) -> int:
        """The train job's memory (MB): from its run's dataset and batch; 1000 for a batched run's."""
        return self.cluster.cap_mem(1000) if self.batched else self.cluster.mem_mb(self._train_work(wildcards))

    def evaluate_runtime(self, wildcards) -> int:
        """The evaluate job's runtime (minutes): one evaluation of its run, estimated."""
        return self.cluster.runtime_minutes([Work(wildcards.run_id, train=False, evaluate=True)])

    def evaluate_mem_mb(self, wildcards) -> int:
        return self.cluster.mem_mb([Work(wildcards.run_id, train=False, evaluate=True)])

    def _batch_work(self, wildcards) -> list[Work]:
        return [Work(rid, train=True, evaluate=True) for rid in self.batch_runs(wildcards)]

    def batch_runtime(self, wildcards) -> int:
        """The batch job's runtime (minutes): the sum of its runs' estimates."""
        return self.cluster.runtime_minutes(self._batch_work(wildcards))

    def batch_mem_mb(self, wildcards) -> int:
        """The batch job's memory (MB): its largest run's (they run one after the other)."""
        return self.cluster.mem_mb(self._batch_work(wildcards))

    def all_cores(self, cores: int | None) -> int:
        """The threads of a rule that takes every core it is given (timing results): ``--cores`` when given
        (``workflow.resource_settings.cores``), else 8 (a cluster executor gives none), at most cluster.max_threads."""
        return self.cluster.cap_threads(cores or 8)

    @staticmethod
    def attempt_number(wildcards, attempt: int) -> int:
        """The job's attempt (1, then 2, ... when Snakemake retries it), as the ``attempt`` resource the shell reads."""
        return attempt

    @staticmethod
    def attempt_logged(command: str) -> str:
        """The shell text of a rule running ``command`` (a shell template) with one log per attempt (its
        ``attempt`` resource: :meth:`attempt_number`). Snakemake deletes a job's ``log:`` file when an attempt
        starts, so a retried job would lose the stopped attempt's lines. This writes a header to ``{log}`` (the
        attempt, the UTC time, the host, the SLURM job id), hard-links ``{log}`` to
        ``<log minus .log>.attempt<N>-<UTC time>.log`` (one file under two names: Snakemake deletes only the
        first), then appends the command's output. Where hard links fail the log says so and keeps the last
        attempt only."""
        return ('l={log:q}; a="${{l%.log}}.attempt{resources.attempt}-$(date -u +%Y%m%dT%H%M%SZ).log"; '
                'printf "== attempt %s: started %s on %s, SLURM job %s ==\\n" {resources.attempt} '
                '"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -n)" "${{SLURM_JOB_ID:-none}}" > "$l"; '
                'ln -f "$l" "$a" 2>/dev/null || echo "(no hard link here: only the last attempt is kept)" >> "$l"; '
                '{{ ' + command + '; }} >> "$l" 2>&1')

    # -- tables, tracking, the index and the report (tables.smk, sweeps.smk) -------------------------

    def table_plan(self, wildcards) -> str:
        """The plan file of table {paper}/{table} (what the table rule renders)."""
        return str(self.files.tables[self.planned_table(wildcards).key])

    def planned_table(self, wildcards):
        """The plan of table {paper}/{table} (rankrepro.plan.model.TablePlan)."""
        try:
            return self.plan.table(f"{wildcards.paper}/{wildcards.table}")
        except PlanError as err:
            raise TargetError(str(err)) from None

    def table_inputs(self, wildcards) -> list[str]:
        """What the table reads: its runs' metrics.json, the manifests a dataset statistics table counts."""
        return self.planned_table(wildcards).inputs()

    def table_outputs(self) -> list[str]:
        return self.plan.table_outputs()

    def table_labels(self, wildcards) -> dict:
        return {"table": wildcards.table, "kind": self.planned_table(wildcards).kind.name}

    def synthetic_outputs(self) -> list[str]:
        return [f"results/synthetic/{name}.{ext}" for name in self.plan.synthetic["names"] for ext in ("md", "json")]

    def track_inputs(self) -> list[str]:
        """What the MLflow import reads: every run's records, every table."""
        files = [f"{run_dir(rid)}/{name}" for rid in self.plan.runs for name in ("run.json", "history.csv",
                                                                                   "metrics.json")]
        return files + [f"results/tables/{key}.md" for key in self.plan.tables]

    def run_paper(self, wildcards) -> str:
        """The report category of a run's training curve: the first paper whose tables use it."""
        tables = self.plan.tables_using(wildcards.run_id)
        return self.plan.tables[tables[0]].paper if tables else "other runs"

    def run_labels(self, wildcards) -> dict:
        """The report labels of a run's training curve (a run shared by several tables names them all)."""
        run = self.run(wildcards.run_id)
        return {"run": wildcards.run_id, "dataset": run["dataset"], "loss": run["loss"]["name"],
                "tables": ", ".join(self.plan.tables_using(wildcards.run_id)) or "none"}

    def paper_table_csvs(self, wildcards) -> list[str]:
        """The CSVs of a paper's planned tables."""
        tables = self.plan.tables_of_paper(wildcards.paper)
        if not tables:
            raise TargetError(f"no table of paper {wildcards.paper!r} is in config.yaml's tables")
        return [f"results/tables/{key}.csv" for key in tables]

    @staticmethod
    def recipes_files() -> dict[str, str]:
        """What the recipes rule writes from the plan: ``md`` (linked from the index) and ``html`` (the report's)."""
        return {"md": RECIPES_MD, "html": RECIPES_HTML}

    def report_outputs(self) -> list[str]:
        """What the report shows, besides the index: an HTML page per table, a training curve per run
        of a table, a paper-vs-ours scatter per paper, the plot of each sweep, the recipe cards."""
        return ([f"results/tables/{key}.html" for key in self.plan.tables]
                + [self.evaluate_files(rid)["curve"] for rid in self.plan.table_runs()]
                + [f"results/tables/{paper}/scatter.png" for paper in self.plan.papers()]
                + self.sweep_outputs() + [RECIPES_HTML])

    def index_inputs(self) -> list[str]:
        """Everything results/README.md summarises or links: every table's CSV, the runs' records, the
        synthetic results, the H-GLDv2 comparison, the recipe cards, and the figures it links."""
        return (self.table_outputs()
                + [f"{run_dir(rid)}/{name}" for rid in self.plan.table_runs()
                   for name in ("history.csv", "metrics.json")]
                + self.synthetic_outputs() + self.hgldv2_outputs() + [RECIPES_MD] + self.report_outputs())

    def sweep_tables(self) -> list[str]:
        """The planned tables of kind sweep ("<paper>/<table>": paper figures, one row per point)."""
        return self.plan.tables_of_kind("sweep")

    def sweep_outputs(self) -> list[str]:
        """The plots of the planned sweeps (results/tables/<paper>/<table>.png); their md/csv/tex are
        table_outputs()."""
        return [path for key in self.sweep_tables() for path in self.plan.tables[key].figures()]

    def sweep_table_pattern(self) -> str:
        """The sweep plot's {table} wildcard: the planned sweeps' names only (never scatter.png)."""
        return "|".join(sorted({self.plan.tables[key].table for key in self.sweep_tables()})) or "(?!)"

    def sweep_inputs(self, wildcards) -> list[str]:
        """A sweep's runs' metrics.json (its reference runs included); fails for a table that is not a sweep."""
        key = f"{wildcards.paper}/{wildcards.table}"
        if key not in self.sweep_tables():
            raise TargetError(f"{key} is not a planned sweep (kind: sweep in config.yaml's tables)")
        return self.table_inputs(wildcards)

    @staticmethod
    def sweep_labels(wildcards) -> dict:
        return {"figure": wildcards.table, "paper": wildcards.paper}

    # -- H-GLDv2 rebuilt (hgldv2.smk) ---------------------------------------------------------------

    def hgldv2_outputs(self) -> list[str]:
        """The compare table when hgldv2.build is set (the planner checked that gldv2 is planned)."""
        return [f"{HGLDV2_DIR}/compare.json"] if self.hgldv2["build"] else []

    def gldv2_input(self, wildcards) -> list[str]:
        """The GLDv2 download record, or nothing when datasets.gldv2 is an extracted copy."""
        return [] if self.dataset("gldv2")["config"]["extracted"] else [self.download_record("gldv2")]

    def gldv2_metadata(self, wildcards=None) -> str:
        """The folder holding the GLDv2 metadata CSVs: <extracted>/metadata or downloads/<source>/metadata."""
        extracted = self.dataset("gldv2")["config"]["extracted"]
        downloads = f"{self.data_root}/downloads/{self.source_of('gldv2')}"
        return f"{extracted}/metadata" if extracted else f"{downloads}/metadata"

    def hgldv2_scrape_args(self, wildcards) -> list[str]:
        """The scrape's API options (hgldv2.api), as a list."""
        api = self.hgldv2["api"]
        args = ["--commons-url", api["commons_url"], "--wikidata-url", api["wikidata_url"],
                "--maxlag", str(api["maxlag"]), "--min-interval", str(api["min_interval_s"]),
                "--max-retries", str(api["max_retries"])]
        if api["contact"]:
            args += ["--contact", api["contact"]]
        if api["fake_world"]:
            args += ["--fake-world", api["fake_world"]]
        return args

    def hgldv2_curation(self) -> str:
        """hgldv2.curation, or the packaged curation.yaml."""
        return self.hgldv2["curation"] or str(Path(rankrepro.hgldv2.__file__).with_name("curation.yaml"))
