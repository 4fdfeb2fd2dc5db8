import json
from pathlib import Path
# Helpers only (no rules): config validation, the plan, input functions. Imports no torch:
# the planner reads the config, the setups, the table specs and the catalog (data), and
# writes results/plan/; everything below reads that plan.
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from rankrepro.experiments.plan import PlanError, plan_from_config, write_plan

validate(config, schema="../schemas/config.schema.yaml")
try:
    PLAN = plan_from_config(config)
except PlanError as err:
    raise WorkflowError(f"invalid plan: {err}") from None

PLAN_DIR = "results/plan"
PLAN_FILE = str(write_plan(PLAN, PLAN_DIR))
DATA_ROOT = config["data_root"]
RUNTIME = config["runtime"]
TRACKING = config["tracking"]
RUNS = PLAN["runs"]
DATASETS = PLAN["datasets"]


wildcard_constraints:
    dataset="[a-z0-9_]+",
    run_id="[a-z0-9_]+-[a-z0-9_]+-[0-9a-f]{10}",
    paper="[a-z0-9_]+",
    table="[a-z0-9_]+",
    archive="[^/]+",


def dataset_plan(name):
    if name not in DATASETS:
        raise WorkflowError(f"dataset {name!r} is not in the plan; planned: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def dataset_cfg(name):
    return dataset_plan(name)["config"]


def archive_path(dataset):
    return f"{DATA_ROOT}/downloads/{dataset}/{dataset_plan(dataset)['facts']['archive']}"


def replica_path(dataset):
    return f"{DATA_ROOT}/replicas/{dataset}/{dataset_plan(dataset)['facts']['archive']}"


def download_input(wildcards):
    """The generated replica archive when the dataset is a replica, else nothing."""
    return [replica_path(wildcards.dataset)] if dataset_cfg(wildcards.dataset)["replica"] else []


def download_data_root(wildcards, output):
    """data_root, from the download's output path <data_root>/downloads/<dataset>/<archive>."""
    return str(Path(output[0]).parents[2])


def download_args(wildcards):
    """The download's options as a list (each element quoted by the rule): the replica archive, or the
    config's url/checksum overrides (none: the dataset's official source)."""
    cfg = dataset_cfg(wildcards.dataset)
    if cfg["replica"]:
        return ["--replica-archive", replica_path(wildcards.dataset)]
    return [arg for key in ("url", "checksum") if cfg[key] for arg in (f"--{key}", cfg[key])]


def prepare_input(wildcards):
    """The downloaded archive, or nothing when an extracted copy is configured."""
    return [] if dataset_cfg(wildcards.dataset)["extracted"] else [archive_path(wildcards.dataset)]


def prepare_source(wildcards):
    return dataset_cfg(wildcards.dataset)["extracted"] or archive_path(wildcards.dataset)


def prepare_flags(wildcards):
    return ["--replica"] if dataset_cfg(wildcards.dataset)["replica"] else []


def manifest_meta(dataset):
    return f"results/manifests/{dataset}/meta.json"


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
    return f"{PLAN_DIR}/tables/{wildcards.paper}/{wildcards.table}.json"


def table_metrics(wildcards):
    table = PLAN["tables"].get(f"{wildcards.paper}/{wildcards.table}")
    if table is None:
        raise WorkflowError(f"table {wildcards.paper}/{wildcards.table} is not in config.yaml's tables")
    return [f"results/runs/{rid}/metrics.json" for rid in table["runs"]]


def table_outputs():
    return [f"results/tables/{key}.{ext}" for key in PLAN["tables"] for ext in ("md", "csv", "tex")]


def synthetic_outputs():
    return [f"results/synthetic/{name}.{ext}" for name in PLAN["synthetic"]["names"] for ext in ("md", "json")]


def track_inputs():
    files = []
    for rid in RUNS:
        files += [f"results/runs/{rid}/{name}" for name in ("run.json", "history.csv", "metrics.json")]
    return files + [f"results/tables/{key}.md" for key in PLAN["tables"]]
