import json
import os
from pathlib import Path
from types import SimpleNamespace
# Helpers only (no rules): config validation, the plan, input functions. Imports no torch:
# the planner reads the config, the setups, the table specs and the catalog (data), and
# writes results/plan/ (files named by their content); everything below reads that plan.
from snakemake.exceptions import WorkflowError

import rankrepro.hgldv2
from rankrepro.plan.batches import BatchError, train_batches
from rankrepro.plan.build import plan_from_config, write_plan
from rankrepro.plan.model import Plan, manifest_path
from rankrepro.plan.schema import PlanError, check_yaml_files

try:  # validates config (the schema, its defaults filled in) as `python -m rankrepro plan` does
    check_yaml_files(workflow.configfiles)  # Snakemake's own loader keeps the last of a key given twice
    _PLAN_JSON = plan_from_config(config)
except PlanError as err:
    raise WorkflowError(f"invalid plan: {err}") from None

# content-addressed (results/plan/plan.<hash>.json, tables/<paper>/<table>.<hash>.json): another snakemake
# planning in this folder, even -n, never rewrites the files this workflow's jobs read
PLAN_FILES = write_plan(_PLAN_JSON, "results/plan")
PLAN_FILE = str(PLAN_FILES.plan)
PLAN = Plan.from_json(_PLAN_JSON)
DATA_ROOT = config["data_root"]
RUNTIME = config["runtime"]
TRACKING = config["tracking"]
RUNS = PLAN.runs
DATASETS = PLAN.datasets


wildcard_constraints:
    dataset="[a-z0-9_]+",
    run_id="[a-z0-9_]+-[a-z0-9_]+-[0-9a-f]{10}",
    paper="[a-z0-9_]+",
    table="[a-z0-9_]+",
    source="[a-z0-9_]+",


def dataset_plan(name):
    if name not in DATASETS:
        raise WorkflowError(f"dataset {name!r} is not in the plan; planned: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def dataset_cfg(name):
    return dataset_plan(name)["config"]


def source_of(dataset):
    """The folder of the dataset's downloads (shared by datasets with the same files)."""
    return dataset_plan(dataset)["facts"]["source"]


# {source: the planned datasets that use its files}; the download rule runs once per source.
SOURCES = {}
for _name, _entry in sorted(DATASETS.items()):
    if _entry["facts"]["source"]:
        SOURCES.setdefault(_entry["facts"]["source"], []).append(_name)


def source_dataset(wildcards):
    """A planned dataset that uses the files of ``wildcards.source`` (they all declare the same files)."""
    if wildcards.source not in SOURCES:
        raise WorkflowError(f"no planned dataset downloads into {wildcards.source!r}; sources: {', '.join(SOURCES)}")
    return SOURCES[wildcards.source][0]


def download_record(dataset):
    return f"{DATA_ROOT}/downloads/{source_of(dataset)}/download.json"


def replica_record(source):
    return f"{DATA_ROOT}/replicas/{source}/replica.json"


def download_input(wildcards):
    """The generated replica when the source's datasets are replicas, else nothing."""
    return [replica_record(wildcards.source)] if dataset_cfg(source_dataset(wildcards))["replica"] else []


def download_data_root(wildcards, output):
    """data_root, from the download's output path <data_root>/downloads/<source>/download.json."""
    return str(Path(output[0]).parents[2])


def download_args(wildcards):
    """The download's options as a list (each element quoted by the rule): the replica folder, or the
    config's url/checksum overrides (none: the dataset's official sources)."""
    cfg = dataset_cfg(source_dataset(wildcards))
    if cfg["replica"]:
        return ["--replica-dir", str(Path(replica_record(wildcards.source)).parent)]
    return [arg for key in ("url", "checksum") if cfg[key] for arg in (f"--{key}", cfg[key])]


def prepare_input(wildcards):
    """The base manifest (derived datasets) with the other files they read, the download record, or
    nothing (an extracted copy)."""
    plan = dataset_plan(wildcards.dataset)
    if plan["facts"]["derived_from"]:
        # and the files derive() reads besides it (gldv2_hier_rebuilt: the curated H-GLDv2 labels)
        return [manifest_meta(plan["facts"]["derived_from"]), *plan["facts"]["derive_inputs"]]
    return [] if plan["config"]["extracted"] else [download_record(wildcards.dataset)]


def prepare_source(wildcards):
    plan = dataset_plan(wildcards.dataset)
    if plan["facts"]["derived_from"]:
        return f"results/manifests/{plan['facts']['derived_from']}"
    return plan["config"]["extracted"] or download_record(wildcards.dataset)


def prepare_flags(wildcards):
    plan = dataset_plan(wildcards.dataset)
    base = plan["facts"]["derived_from"]
    replica = dataset_cfg(base)["replica"] if base else plan["config"]["replica"]
    return ["--replica"] if replica else []


def manifest_outputs():
    """Every planned dataset's manifest: `snakemake` prepares the datasets the config lists even
    before a table trains on them."""
    return [manifest_meta(name) for name in DATASETS]


def manifest_meta(dataset):
    return manifest_path(dataset)


def run_of(wildcards):
    if wildcards.run_id not in RUNS:
        raise WorkflowError(f"run {wildcards.run_id} is not in the plan ({PLAN_FILE})")
    return RUNS[wildcards.run_id]


def run_manifest(wildcards):
    return manifest_meta(run_of(wildcards)["dataset"])


def run_manifest_dir(wildcards):
    return f"results/manifests/{run_of(wildcards)['dataset']}"


def run_json(wildcards):
    return json.dumps(run_of(wildcards), sort_keys=True)


def table_plan(wildcards):
    """The plan file of table {paper}/{table} (results/plan/tables/<paper>/<table>.<hash>.json)."""
    return str(PLAN_FILES.tables[planned_table(wildcards).key])


def planned_table(wildcards):
    """The plan of table {paper}/{table} (rankrepro.plan.model.TablePlan)."""
    try:
        return PLAN.table(f"{wildcards.paper}/{wildcards.table}")
    except PlanError as err:
        raise WorkflowError(str(err)) from None


def table_inputs(wildcards):
    """What the table reads: its runs' metrics.json, the manifests a dataset statistics table counts."""
    return planned_table(wildcards).inputs()


def table_outputs():
    return PLAN.table_outputs()


def synthetic_outputs():
    return [f"results/synthetic/{name}.{ext}" for name in PLAN.synthetic["names"] for ext in ("md", "json")]


def track_inputs():
    files = []
    for rid in RUNS:
        files += [f"results/runs/{rid}/{name}" for name in ("run.json", "history.csv", "metrics.json")]
    return files + [f"results/tables/{key}.md" for key in PLAN.tables]


# -- the resized image cache (workflow/rules/cache.smk; src/rankrepro/data/cache.py) ---------------


def run_cache_size(run):
    """The shorter side S of the run's image cache: its images.train_resize when that is an int
    (a squash pair or null: no cache, the run reads the originals)."""
    size = run["images"]["train_resize"]
    if isinstance(size, list) and len(size) == 1:
        size = size[0]
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def run_image_cache_dir(wildcards, stage):
    """results/cache/<dataset>/s<S> when runtime.image_cache is on and the run's ``stage`` (train or
    evaluate) transform reads that cache (its first resize: rankrepro.data.cache.resize_uses_cache), else None."""
    from rankrepro.data.cache import resize_uses_cache

    run = run_of(wildcards)
    size = run_cache_size(run)
    if not RUNTIME.get("image_cache", True) or size is None:
        return None
    resize = run["images"]["train_resize" if stage == "train" else "test_resize"]
    return f"results/cache/{run['dataset']}/s{size}" if resize_uses_cache(resize, size) else None


def run_train_cache(wildcards):
    """The cache.json the training job waits for (none: it reads the originals)."""
    folder = run_image_cache_dir(wildcards, "train")
    return [f"{folder}/cache.json"] if folder else []


def run_eval_cache(wildcards):
    folder = run_image_cache_dir(wildcards, "evaluate")
    return [f"{folder}/cache.json"] if folder else []


def run_train_cache_args(wildcards):
    """``--image-cache <folder>`` for the training command, as a list (each element quoted by the rule)."""
    folder = run_image_cache_dir(wildcards, "train")
    return ["--image-cache", folder] if folder else []


def run_eval_cache_args(wildcards):
    folder = run_image_cache_dir(wildcards, "evaluate")
    return ["--image-cache", folder] if folder else []


# -- the train and evaluate jobs' outputs (train.smk, evaluate.smk) --------------------------------


def evaluate_outputs(run_id=None):
    """What evaluating a run writes: metrics.json and the training curve for the report. With
    ``run_id``: that run's files (a training batch's rule has no wildcards), else the pattern."""
    folder = f"results/runs/{run_id or '{run_id}'}"
    wildcards = run_wildcards(run_id) if run_id else None
    return {
        "metrics": f"{folder}/metrics.json",
        "curve": report(f"{folder}/curve.png", caption="../report/curve.rst", subcategory="training curves",
                        category=run_paper(wildcards) if run_id else run_paper,
                        labels=run_labels(wildcards) if run_id else run_labels),
    }


def train_outputs(run_id=None):
    """model.pt and history.csv, and evaluate_outputs() too with runtime.evaluate_in_train_job
    (``run_id``: as for evaluate_outputs)."""
    folder = f"results/runs/{run_id or '{run_id}'}"
    outputs = {"model": f"{folder}/model.pt", "history": f"{folder}/history.csv"}
    return {**outputs, **evaluate_outputs(run_id)} if RUNTIME["evaluate_in_train_job"] else outputs


# -- training batches (runtime.runs_per_job > 1: rankrepro.plan.batches; train.smk) -------------------


def run_wildcards(run_id):
    """What an input function receives for run ``run_id`` (for calling them outside a job)."""
    return SimpleNamespace(run_id=run_id)


def run_image_caches(run_id):
    """(train cache folder or None, evaluation cache folder or None) of a run."""
    return tuple(run_image_cache_dir(run_wildcards(run_id), stage) for stage in ("train", "evaluate"))


RUNS_PER_JOB = RUNTIME["runs_per_job"]
if RUNS_PER_JOB > 1 and not RUNTIME["evaluate_in_train_job"]:
    raise WorkflowError(f"config: runtime.runs_per_job is {RUNS_PER_JOB} but runtime.evaluate_in_train_job is "
                        "false: a batch job trains and evaluates its runs; set evaluate_in_train_job: true or "
                        "runs_per_job: 1")
try:
    TRAIN_BATCHES = (train_batches(RUNS, RUNS_PER_JOB, key=lambda rid: (RUNS[rid]["dataset"], run_image_caches(rid)))
                     if RUNS_PER_JOB > 1 else {})
except BatchError as err:
    raise WorkflowError(f"config: {err}") from None


def batch_outputs(run_ids):
    """The files a training batch writes: each run's train_outputs() (evaluation included)."""
    return {f"{name}_{k}": path for k, rid in enumerate(run_ids) for name, path in train_outputs(rid).items()}


def batch_cache_args(run_ids):
    """``--image-cache`` / ``--eval-image-cache`` of a batch (its runs share them), as a list."""
    train_cache, eval_cache = run_image_caches(run_ids[0])
    return (["--image-cache", train_cache] if train_cache else []) + (
        ["--eval-image-cache", eval_cache] if eval_cache else [])


def batch_cache_inputs(run_ids):
    """The cache.json files a batch waits for (its runs share them)."""
    return run_train_cache(run_wildcards(run_ids[0])) + run_eval_cache(run_wildcards(run_ids[0]))


def run_fused_eval_cache(wildcards):
    """The evaluation's cache.json when the train job evaluates too (else nothing)."""
    return run_eval_cache(wildcards) if RUNTIME["evaluate_in_train_job"] else []


def run_fused_evaluate_args(wildcards):
    """The train command's evaluation arguments with runtime.evaluate_in_train_job (else none)."""
    if not RUNTIME["evaluate_in_train_job"]:
        return []
    folder = run_image_cache_dir(wildcards, "evaluate")
    run_dir = f"results/runs/{wildcards.run_id}"
    return (["--evaluate-out", f"{run_dir}/metrics.json", "--curve", f"{run_dir}/curve.png",
             "--batch-size", str(RUNTIME["eval_batch_size"])] + (["--eval-image-cache", folder] if folder else []))


# H-GLDv2 rebuilt (workflow/rules/hgldv2.smk).
HGLDV2 = PLAN.hgldv2
HGLDV2_DIR = "results/hgldv2"
HGLDV2_PACKAGE = Path(rankrepro.hgldv2.__file__).parent


def hgldv2_outputs():
    """The compare table when hgldv2.build is set (the planner checked that gldv2 is planned)."""
    return [f"{HGLDV2_DIR}/compare.json"] if HGLDV2["build"] else []


def gldv2_input(wildcards):
    """The GLDv2 download record, or nothing when datasets.gldv2 is an extracted copy."""
    return [] if dataset_cfg("gldv2")["extracted"] else [download_record("gldv2")]


def gldv2_metadata():
    """The folder holding the GLDv2 metadata CSVs: <extracted>/metadata or downloads/gldv2/metadata."""
    extracted = dataset_cfg("gldv2")["extracted"]
    return f"{extracted}/metadata" if extracted else f"{DATA_ROOT}/downloads/{source_of('gldv2')}/metadata"


def hgldv2_scrape_args(wildcards):
    api = HGLDV2["api"]
    args = ["--commons-url", api["commons_url"], "--wikidata-url", api["wikidata_url"],
            "--maxlag", str(api["maxlag"]), "--min-interval", str(api["min_interval_s"]),
            "--max-retries", str(api["max_retries"])]
    if api["contact"]:
        args += ["--contact", api["contact"]]
    if api["fake_world"]:
        args += ["--fake-world", api["fake_world"]]
    return args


def hgldv2_curation():
    return HGLDV2["curation"] or str(HGLDV2_PACKAGE / "curation.yaml")


# Results index and report (workflow/rules/tables.smk).


def run_paper(wildcards):
    """The report category of a run's training curve: the first paper whose tables use it."""
    tables = PLAN.tables_using(wildcards.run_id)
    return PLAN.tables[tables[0]].paper if tables else "other runs"


def run_labels(wildcards):
    """The report labels of a run's training curve (a run shared by several tables names them all)."""
    run = run_of(wildcards)
    return {"run": wildcards.run_id, "dataset": run["dataset"], "loss": run["loss"]["name"],
            "tables": ", ".join(PLAN.tables_using(wildcards.run_id)) or "none"}


def table_labels(wildcards):
    return {"table": wildcards.table, "kind": planned_table(wildcards).kind.name}


def paper_table_csvs(wildcards):
    """The CSVs of a paper's planned tables."""
    tables = PLAN.tables_of_paper(wildcards.paper)
    if not tables:
        raise WorkflowError(f"no table of paper {wildcards.paper!r} is in config.yaml's tables")
    return [f"results/tables/{key}.csv" for key in tables]


def report_outputs():
    """What the report shows, besides the index: an HTML page per table, a training curve per run
    of a table, a paper-vs-ours scatter per paper, the plot of each sweep."""
    return ([f"results/tables/{key}.html" for key in PLAN.tables]
            + [f"results/runs/{rid}/curve.png" for rid in PLAN.table_runs()]
            + [f"results/tables/{paper}/scatter.png" for paper in PLAN.papers()]
            + sweep_outputs())


def index_inputs():
    """Everything results/README.md summarises or links: every table's CSV, the runs' records, the
    synthetic results, the H-GLDv2 comparison, and the figures it links."""
    return (table_outputs()
            + [f"results/runs/{rid}/{name}" for rid in PLAN.table_runs() for name in ("history.csv", "metrics.json")]
            + synthetic_outputs() + hgldv2_outputs() + report_outputs())


# Sweeps (workflow/rules/sweeps.smk).


def sweep_tables():
    """The planned tables of kind sweep ("<paper>/<table>": paper figures, one row per point)."""
    return PLAN.tables_of_kind("sweep")


def sweep_outputs():
    """The plots of the planned sweeps (results/tables/<paper>/<table>.png); their md/csv/tex are
    table_outputs()."""
    return [path for key in sweep_tables() for path in PLAN.tables[key].figures()]


def sweep_table_pattern():
    """The sweep plot's {table} wildcard: the planned sweeps' names only (never scatter.png)."""
    return "|".join(sorted({PLAN.tables[key].table for key in sweep_tables()})) or "(?!)"


def sweep_inputs(wildcards):
    """A sweep's runs' metrics.json (its reference runs included); fails for a table that is not a sweep."""
    key = f"{wildcards.paper}/{wildcards.table}"
    if key not in sweep_tables():
        raise WorkflowError(f"{key} is not a planned sweep (kind: sweep in config.yaml's tables)")
    return table_inputs(wildcards)


def sweep_labels(wildcards):
    return {"figure": wildcards.table, "paper": wildcards.paper}
