# Helpers only (no rules): config validation, the planned runs, input functions.
import json
from importlib import resources
from pathlib import Path

from snakemake.utils import validate

from rankrepro.data import datasets as DATASETS
from rankrepro.tables.spec import plan

validate(config, schema="../schemas/config.schema.yaml")
for _name, _cfg in config["datasets"].items():
    if _name not in DATASETS.names():
        raise ValueError(f"config datasets.{_name}: unknown dataset; known: {DATASETS.names()}")

DATA_ROOT = config["data_root"]
RUNTIME = config["runtime"]
TRACKING = config["tracking"]
TABLE_RUNS, RUNS = plan(config["tables"], config["run_overrides"])


wildcard_constraints:
    dataset="[a-z0-9_]+",
    run_id="[a-z0-9_]+-[a-z0-9_]+-[0-9a-f]{10}",
    paper="[a-z0-9_]+",
    table="[a-z0-9_]+",
    archive="[^/]+",


def dataset_cfg(name):
    return config["datasets"].get(name, {"replica": False, "extracted": None, "url": None, "checksum": None})


def archive_path(dataset):
    return f"{DATA_ROOT}/downloads/{dataset}/{DATASETS.get(dataset).ARCHIVE}"


def replica_path(dataset):
    return f"{DATA_ROOT}/replicas/{dataset}/{DATASETS.get(dataset).ARCHIVE}"


def download_input(wildcards):
    """The generated replica archive when the dataset is a replica, else nothing."""
    return [replica_path(wildcards.dataset)] if dataset_cfg(wildcards.dataset)["replica"] else []


def download_args(wildcards):
    cfg = dataset_cfg(wildcards.dataset)
    if cfg["replica"]:
        return f"--replica-archive {replica_path(wildcards.dataset)}"
    args = [f"--url '{cfg['url']}'" if cfg["url"] else "", f"--checksum {cfg['checksum']}" if cfg["checksum"] else ""]
    return " ".join(a for a in args if a)


def download_data_root(wildcards, output):
    """data_root, from the download's output path <data_root>/downloads/<dataset>/<archive>."""
    return str(Path(output[0]).parents[2])


def prepare_input(wildcards):
    """The downloaded archive, or nothing when an extracted copy is configured."""
    return [] if dataset_cfg(wildcards.dataset)["extracted"] else [archive_path(wildcards.dataset)]


def prepare_source(wildcards):
    return dataset_cfg(wildcards.dataset)["extracted"] or archive_path(wildcards.dataset)


def prepare_flags(wildcards):
    return "--replica" if dataset_cfg(wildcards.dataset)["replica"] else ""


def manifest_meta(dataset):
    return f"results/manifests/{dataset}/meta.json"


def run_manifest(wildcards):
    return manifest_meta(RUNS[wildcards.run_id]["dataset"])


def run_json(wildcards):
    return json.dumps(RUNS[wildcards.run_id], sort_keys=True)


def table_metrics(wildcards):
    return [f"results/runs/{rid}/metrics.json" for rid in TABLE_RUNS[(wildcards.paper, wildcards.table)]]


def table_spec(wildcards):
    """The spec file inside the installed package (so editing it re-renders the table)."""
    return str(resources.files("rankrepro.tables").joinpath("specs", wildcards.paper, f"{wildcards.table}.yaml"))


def table_outputs():
    return [f"results/tables/{paper}/{table}.{ext}" for (paper, table) in TABLE_RUNS for ext in ("md", "csv", "tex")]


def track_inputs():
    files = []
    for rid in sorted(RUNS):
        files += [f"results/runs/{rid}/{name}" for name in ("run.json", "history.csv", "metrics.json")]
    return files + [f"results/tables/{paper}/{table}.md" for (paper, table) in TABLE_RUNS]


def track_args():
    runs = " ".join(f"results/runs/{rid}" for rid in sorted(RUNS))
    tables = " ".join(f"results/tables/{paper}/{table}" for (paper, table) in TABLE_RUNS)
    return f"--runs {runs} --tables {tables}"
