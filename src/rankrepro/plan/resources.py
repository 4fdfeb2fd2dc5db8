"""What each job asks a cluster scheduler for: a runtime from the run's cost estimate, host memory from its
dataset and batch, and the caps of the config's ``cluster`` block (config.schema.yaml; README "Cluster (SLURM)").

Torch-free: the rules reach it through :attr:`rankrepro.plan.targets.WorkflowTargets.cluster` when Snakemake
parses the workflow and when it schedules a job.

**Work.** A job trains and/or evaluates runs, each a :class:`Work`: a ``train`` job trains its run (scoring its
test curve, ``eval.every``, as it goes) and evaluates it at the end with ``runtime.evaluate_in_train_job``; an
``evaluate`` job evaluates once; a ``train_batch`` job trains and evaluates each of its runs, one after the other.

**Runtime** (minutes)::

    hours   = train_h (when it trains) + one evaluation x (its curve's evaluations when it trains
                                                           + 1 when it evaluates at the end)
    runtime = min(runtime_max, max(runtime_min, ceil(hours x 60 x runtime_safety + runtime_margin_min)))

``train_h`` and one evaluation (``eval_h / evaluations``) are :func:`rankrepro.plan.cost.run_cost`'s, on the
throughput profile of ``cluster.gpu`` (or the file ``cluster.profile`` names: the pilot's measured one) with :func:`~rankrepro.plan.cost.split_images`'s image counts (the prepared
manifest's when it was prepared from the config's source -- never the demo's replicas for real datasets --, else
the declared ones; a manifest without readable counts is a :class:`PlanError` naming it; an epoch counted as
:func:`~rankrepro.plan.cost.epoch_images` counts it, a sampler's per-class cap included): the figures
``python -m rankrepro cost --runs`` prints. A batch sums its
runs' hours. A run without an estimate (no training image count; a backbone the profile lacks: the demo's
``resnet_tiny``) asks for ``runtime_max``, and so does a batch holding one.

**Memory** (MB, of the host: a GPU's own memory is not part of a SLURM memory request)::

    mem = HEADROOM x ( BASE_MB + CUDA_MB (runtime.device not cpu) + workers x WORKER_MB
                       + (workers + 1) x images x ROW_BYTES          the manifest, in the main process and each worker
                       + in flight x batch x 3 x crop^2 x 4 B        float32 batches (training; evaluation)
                       + eval images x embedding size x 4 B x 2      embeddings, and their concatenation
                       + batch x (crop / 224)^2 x CPU_ACTIVATION_MB ) a training's activations, on CPU only
    rounded up to a multiple of 1000, at most cluster.max_mem_mb

with ``workers`` = ``runtime.num_workers``; in flight = workers x prefetch + 2 (the batch in use and its pinned
copy), prefetch being ``runtime.prefetch_factor`` for training and 2 (torch's default) for evaluation; images: every
split of the manifest; the embedding size: ``model.embed_dim`` (2048 when null). A job that trains and evaluates
counts both loaders (its test curve is scored while the training loader's workers live); a batch asks for its
largest run. A split group whose image count is unknown (the training split; the evaluation splits together:
DyML declares a training count only) counts :data:`UNKNOWN_IMAGES`. Not counted: the page cache of the
images read (reclaimable), ``gpu_decode``'s smaller batches (JPEG bytes: the formula is an upper bound there).
What is measured and what is assumed: the constants. Checked on this CPU: training and evaluating SOP's replica
with ResNet-50 (batch 32, 224², 2 workers) peaked at 4,045 MB (the process tree's PSS); the terms sum to 3,905,
the formula gives 5,000.

**Caps.** :meth:`ClusterResources.cap_threads` and :meth:`~ClusterResources.cap_mem` bound every rule's
``threads`` and ``mem_mb`` by ``cluster.max_threads`` and ``cluster.max_mem_mb`` (null: no bound): a job asking
for more than any node has would wait in the queue forever.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

from rankrepro.record.runtime import TrainRuntime
from rankrepro.record.selection import curve_epochs
from rankrepro.data.manifest import ManifestError
from rankrepro.plan.cost import (PROFILES_DIR, ClassSizes, ProfileError, load_profile, load_profile_file, run_cost,
                                 split_images)
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import PlanError, fill_schema_defaults, load_schema, validate

__all__ = ["BASE_MB", "CUDA_MB", "WORKER_MB", "ROW_BYTES", "HEADROOM", "CPU_ACTIVATION_MB", "UNKNOWN_IMAGES",
           "ClusterResources", "Work", "cluster_settings"]

#: measured: the RSS of a process that imported torch 2.14 (CUDA build), torchvision and rankrepro.engine.loop
#: and holds a ResNet-50 with its gradients and Adam state, on this CPU: 1,471 MB
BASE_MB = 1500
#: assumed (not measured: no GPU here): host memory of a CUDA context (driver, cuBLAS, cuDNN workspaces' host side)
CUDA_MB = 2000
#: a loader worker's private memory besides the manifest: 90 MB measured (training SOP's replica, 2 workers);
#: doubled for decoding full-size JPEGs (assumed)
WORKER_MB = 200
#: measured: a 500,000-row manifest (its DataFrame and the dataset's list of Paths) grew the RSS by 488 B per row;
#: every worker ends up with its own copy (reference counts write to the pages it touches)
ROW_BYTES = 500
#: assumed: allocator fragmentation, Pillow's decoding buffers, what the terms leave out
HEADROOM = 1.25
#: measured: training ResNet-50 on CPU at 224², batch 32, the training process's RSS peaked 1,578 MB above BASE_MB
#: (49 MB per image); other backbones are assumed alike (the demo's tiny ones need far less)
CPU_ACTIVATION_MB = 50
#: the images counted for a run's training split, or its evaluation splits, whose count is unknown (DyML's test
#: splits before it is prepared): our choice
UNKNOWN_IMAGES = 1_000_000
#: the embedding size of a model without a projection (model.embed_dim null): ResNet-50's features
FEATURES = 2048
#: batches each evaluation loader worker prepares ahead (rankrepro.engine.evaluate sets none: torch's default)
EVAL_PREFETCH = 2
MIB = 2**20


def cluster_settings(block: dict | None) -> dict:
    """The config's ``cluster`` block checked against config.schema.yaml, its defaults filled in (the schema
    documents them), and ``runtime_min`` <= ``runtime_max``; a :class:`PlanError` naming the key."""
    settings = copy.deepcopy(block or {})
    schema = load_schema("config")["properties"]["cluster"]
    validate(settings, schema, "config", ("cluster",), text_hint=True)
    fill_schema_defaults(settings, schema)
    if settings["runtime_min"] > settings["runtime_max"]:
        raise PlanError(f"cluster.runtime_min ({settings['runtime_min']} minutes) is above cluster.runtime_max "
                        f"({settings['runtime_max']})")
    return settings


@dataclass(frozen=True)
class Work:
    """What a job does with run ``run_id``: ``train`` it (scoring its test curve, ``eval.every``, as it goes)
    and/or ``evaluate`` it once at the end."""

    run_id: str
    train: bool
    evaluate: bool


def _read_manifest(read, *args):
    """``read(*args)``, a prepared manifest that cannot be read a :class:`PlanError` naming it (and why it matters)."""
    try:
        return read(*args)
    except ManifestError as err:
        raise PlanError(f"{err} (its image counts size the jobs' runtime and memory)") from None


class ClusterResources:
    """The runtime and memory of jobs of ``plan``'s runs under ``runtime`` (the config's block) and the config's
    ``cluster`` block (module docstring); ``results``: where prepared manifests give image counts."""

    def __init__(self, plan: Plan, runtime: dict, cluster: dict | None, results: str | Path = "results",
                 profiles_dir: str | Path = PROFILES_DIR):
        self.settings = cluster_settings(cluster)
        self.plan, self.runtime, self.results = plan, runtime, results
        try:
            self.profile = (load_profile_file(self.settings["profile"]) if self.settings["profile"]
                            else load_profile(self.settings["gpu"], profiles_dir))
        except ProfileError as err:
            raise PlanError(f"cluster.{'profile' if self.settings['profile'] else 'gpu'}: {err}") from None
        self._counts: dict[tuple[str, bool], dict[str, int]] = {}
        self._class_sizes: dict[bool, ClassSizes] = {}

    # -- caps ----------------------------------------------------------------------------------------

    def cap_threads(self, threads: int) -> int:
        """``threads``, at most ``cluster.max_threads``."""
        cap = self.settings["max_threads"]
        return threads if cap is None else min(threads, cap)

    def cap_mem(self, mem_mb: int) -> int:
        """``mem_mb``, at most ``cluster.max_mem_mb``."""
        cap = self.settings["max_mem_mb"]
        return mem_mb if cap is None else min(mem_mb, cap)

    # -- estimates -----------------------------------------------------------------------------------

    def _prepared(self, dataset: str) -> bool:
        """Whether ``dataset``'s manifest is prepared (what it counts is read again once it is)."""
        return (Path(self.results) / "manifests" / dataset / "meta.json").is_file()

    def counts(self, dataset: str) -> dict[str, int]:
        """``{split: images}`` of ``dataset`` (:func:`~rankrepro.plan.cost.split_images`), read again once its
        manifest is prepared."""
        key = (dataset, self._prepared(dataset))
        if key not in self._counts:
            self._counts[key] = _read_manifest(split_images, dataset, self.plan.datasets, self.results)[0]
        return self._counts[key]

    def estimate(self, run_id: str) -> dict | None:
        """The run's :func:`~rankrepro.plan.cost.run_cost`, or None when it has no estimate (no image count, or a
        backbone or amp the profile lacks)."""
        run = self.plan.runs[run_id]
        prepared = self._prepared(run["dataset"])
        if prepared not in self._class_sizes:
            self._class_sizes[prepared] = ClassSizes(self.plan.datasets, self.results)
        try:
            cost = run_cost(run, self.profile, self.counts(run["dataset"]),
                            class_sizes=_read_manifest(self._class_sizes[prepared], run))
        except ProfileError:
            return None
        return cost if cost["gpu_h"] is not None else None

    def hours(self, work: Work) -> float | None:
        """GPU-hours of ``work`` (module docstring), or None without an estimate."""
        cost = self.estimate(work.run_id)
        if cost is None:
            return None
        one_evaluation = cost["eval_h"] / cost["evaluations"]
        evaluations = (cost["evaluations"] - 1 if work.train else 0) + int(work.evaluate)
        return (cost["train_h"] if work.train else 0.0) + one_evaluation * evaluations

    def runtime_minutes(self, works: list[Work]) -> int:
        """The runtime resource of a job doing ``works`` (module docstring)."""
        s = self.settings
        hours = [self.hours(work) for work in works]
        if not works or None in hours:
            return s["runtime_max"]
        minutes = math.ceil(sum(hours) * 60 * s["runtime_safety"] + s["runtime_margin_min"])
        return min(s["runtime_max"], max(s["runtime_min"], minutes))

    def mem_mb(self, works: list[Work]) -> int:
        """The mem_mb resource of a job doing ``works``: its largest run's (module docstring), capped."""
        largest = max(sum(self.mem_terms(work).values()) for work in works)
        return self.cap_mem(math.ceil(largest * HEADROOM / 1000) * 1000)

    def mem_terms(self, work: Work) -> dict[str, float]:
        """The terms (MB) of ``work``'s memory before the headroom (module docstring), by name."""
        run = self.plan.runs[work.run_id]
        counts = self.counts(run["dataset"])
        split = run.get("train_split", "train")
        eval_images = sum(n for s, n in counts.items() if s != split) if len(counts) > 1 else UNKNOWN_IMAGES
        images = counts.get(split, UNKNOWN_IMAGES) + eval_images
        workers = self.runtime["num_workers"]
        terms = {"base": BASE_MB, "cuda": CUDA_MB if self.runtime["device"] != "cpu" else 0,
                 "workers": workers * WORKER_MB, "manifest": (workers + 1) * images * ROW_BYTES / MIB,
                 "train batches": 0.0, "eval batches": 0.0, "embeddings": 0.0, "cpu activations": 0.0}
        if work.train:
            prefetch = self.runtime.get("prefetch_factor", TrainRuntime.prefetch_factor)
            batch, crop = run["sampler"]["batch_size"], run["images"]["train_crop"]
            terms["train batches"] = _batches_mb(batch, crop, workers, prefetch)
            if self.runtime["device"] == "cpu":
                terms["cpu activations"] = batch * (crop / 224) ** 2 * CPU_ACTIVATION_MB
        if work.evaluate or (work.train and curve_epochs(run["epochs"], run["eval"].get("every"))):
            terms["eval batches"] = _batches_mb(self.runtime["eval_batch_size"], run["images"]["test_crop"], workers,
                                                EVAL_PREFETCH)
            terms["embeddings"] = eval_images * (run["model"].get("embed_dim") or FEATURES) * 4 * 2 / MIB
        return terms


def _batches_mb(batch_size: int, crop: int, workers: int, prefetch: int) -> float:
    """MB of the float32 batches a loader holds at once: workers x prefetch, the one in use and its pinned copy."""
    return (workers * prefetch + 2) * batch_size * 3 * crop**2 * 4 / MIB
