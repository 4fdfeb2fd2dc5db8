"""MLflow import of finished runs (a single writer, so parallel jobs never race).

Training and evaluation jobs write plain files (``run.json``, ``history.csv``,
``metrics.json``, with ``eval.every`` the test curve ``curve.csv``); one local Snakemake
rule calls :func:`import_runs`, which mirrors them into MLflow: params (the flattened
run), per-epoch training metrics ``train/<name>`` (step = epoch), the test curve
``test/<metric>`` (step = epoch), the final metrics (``<metric>``, step 0) and the best
epoch's on the test set (``best_test/<metric>``, step 0; ``best_test/epoch`` where one epoch
gives them all: :mod:`rankrepro.record.selection`), and the files as artifacts; each
rendered table becomes a run of its own with its files as artifacts. Importing is idempotent: a run whose
files did not change is kept, a changed one is replaced. The content hash that
marks a run up to date is written last, with the FINISHED status, so a run left
by an interrupted import is replaced too.

``tracking_uri`` is any MLflow URI: ``sqlite:///relative/path.db`` (resolved
against the working directory), ``sqlite:////absolute.db`` or ``http://host:port``
of an ``mlflow server``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
from pathlib import Path

from rankrepro.record.selection import CURVE_FILE, read_curve
from rankrepro.io import atomic_write_json

RUN_TAG = "rankrepro.run_id"
HASH_TAG = "rankrepro.content_hash"


def resolve_tracking_uri(uri: str) -> str:
    """Make a relative ``sqlite:///`` path absolute (each job may have another working directory)."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        path = Path(uri[len(prefix):]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return prefix + str(path)
    return uri


def metric_key(name: str) -> str:
    """MLflow metric names cannot hold '@': ``R@1`` -> ``R_at_1``."""
    return re.sub(r"[^0-9A-Za-z_\-. /:]", "_", name.replace("@", "_at_"))


def flatten(obj, prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists become their JSON text."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(obj) if isinstance(obj, (list, tuple)) else str(obj)}


def _content_hash(paths: list[Path]) -> str:
    digest = hashlib.sha1()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _experiment_id(client, name: str, artifact_root: Path | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = artifact_root.resolve().as_uri() if artifact_root is not None else None
    return client.create_experiment(name, artifact_location=location)


def _replace_or_keep(client, exp_id: str, key: str, content_hash: str) -> str | None:
    """The id of a complete, up-to-date MLflow run for ``key``; every other run for ``key`` is deleted.

    Complete means FINISHED and carrying the content hash, which :func:`_mirror` writes last: a run
    left behind by an interrupted import (RUNNING, or without the hash) is never kept."""
    from mlflow.entities import RunStatus

    kept = None
    for existing in client.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG}` = '{key}'"):
        complete = (existing.info.status == RunStatus.to_string(RunStatus.FINISHED)
                    and existing.data.tags.get(HASH_TAG) == content_hash)
        if kept is None and complete:
            kept = existing.info.run_id
        else:
            client.delete_run(existing.info.run_id)
    return kept


def _mirror(client, exp_id: str, key: str, files: list[Path], tags: dict, *, fill=None,
            artifact_path: str | None = None) -> str:
    """The MLflow run of ``key`` holding ``files``: kept if complete and up to date, else created anew.

    A new run gets ``tags``, ``fill(run_id)`` (params, metrics), the files as artifacts, and only
    then the content hash and the FINISHED status: an import killed at any point leaves a run that
    the next import deletes and redoes."""
    content_hash = _content_hash(files)
    kept = _replace_or_keep(client, exp_id, key, content_hash)
    if kept:
        return kept
    rid = client.create_run(exp_id, run_name=key, tags={RUN_TAG: key, **tags}).info.run_id
    if fill is not None:
        fill(rid)
    for path in files:
        client.log_artifact(rid, str(path), artifact_path=artifact_path)
    client.set_tag(rid, HASH_TAG, content_hash)
    client.set_terminated(rid, "FINISHED")
    return rid


def _import_run(client, exp_id: str, run_dir: Path) -> str:
    from mlflow.entities import Metric, Param, RunTag

    files = [run_dir / "run.json", run_dir / "history.csv", run_dir / "metrics.json"]
    run_cfg = json.loads(files[0].read_text())
    result = json.loads(files[2].read_text())
    curve = read_curve(run_dir / CURVE_FILE)
    if curve:
        files.append(run_dir / CURVE_FILE)
    tags = {"dataset": run_cfg["dataset"], "loss": run_cfg["loss"]["name"], "replica": str(result.get("replica", False))}

    def fill(rid: str) -> None:
        now = int(time.time() * 1000)
        params = [Param(k, v[:6000]) for k, v in flatten(run_cfg).items()]
        metrics = []
        with files[1].open() as fh:
            for row in csv.DictReader(fh):
                step = int(row["epoch"])
                for name in ("loss", *(k for k in row if k.startswith("lr_")), "seconds", "images_per_s"):
                    metrics.append(Metric(f"train/{name}", float(row[name]), now, step))
        for row in curve:
            metrics += [Metric(f"test/{metric_key(k)}", float(v), now, row["epoch"]) for k, v in row.items()
                        if k != "epoch"]
        metrics += [Metric(metric_key(k), float(v), now, 0) for k, v in result["metrics"].items()]
        best = result.get("best_test")
        if best:
            metrics += [Metric(f"best_test/{metric_key(k)}", float(v), now, 0) for k, v in best["metrics"].items()]
            if best["epoch"] is not None:
                metrics.append(Metric("best_test/epoch", float(best["epoch"]), now, 0))
        for i in range(0, len(params), 100):
            client.log_batch(rid, params=params[i:i + 100])
        for i in range(0, len(metrics), 1000):
            client.log_batch(rid, metrics=metrics[i:i + 1000], tags=[RunTag("kind", "run")] if i == 0 else [])

    return _mirror(client, exp_id, run_dir.name, files, tags, fill=fill)


def _import_table(client, exp_id: str, prefix: Path) -> str:
    files = [prefix.with_suffix(s) for s in (".md", ".csv", ".tex")]
    key = f"table:{prefix.parent.name}/{prefix.name}"
    return _mirror(client, exp_id, key, files, {"kind": "table"}, artifact_path="table")


def import_runs(run_dirs: list[str | Path], table_prefixes: list[str | Path], tracking_uri: str, experiment: str,
                out_path: str | Path, artifact_root: str | Path | None = None) -> dict:
    """Mirror finished runs and rendered tables into MLflow; write {key: mlflow run id} to ``out_path``."""
    from mlflow.tracking import MlflowClient

    uri = resolve_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri=uri)
    root = Path(artifact_root) if artifact_root and uri.startswith("sqlite:") else None
    exp_id = _experiment_id(client, experiment, root)
    imported = {Path(d).name: _import_run(client, exp_id, Path(d)) for d in run_dirs}
    for prefix in table_prefixes:
        prefix = Path(prefix)
        imported[f"table:{prefix.parent.name}/{prefix.name}"] = _import_table(client, exp_id, prefix)
    atomic_write_json(out_path, {"tracking_uri": uri, "experiment_id": exp_id, "runs": imported})
    return imported
