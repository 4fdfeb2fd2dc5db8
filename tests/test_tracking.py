"""MLflow import: a real SQLite store and a real `mlflow server` on 127.0.0.1."""

import json
import socket
import subprocess
import sys
import time

import pytest
import requests
from mlflow.tracking import MlflowClient

from rankrepro.tracking import HASH_TAG, RUN_TAG, flatten, import_runs, metric_key, resolve_tracking_uri


def _run_dir(root, name, loss=0.5):
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"dataset": "sop", "loss": {"name": "smooth_ap", "tau": 0.01},
                                            "sampler": {"batch_size": 256}, "eval": {"recall_at": [1, 10]}}))
    (d / "history.csv").write_text("epoch,loss,lr_backbone,lr_head,seconds,images_per_s,warmup\n"
                                   f"1,{loss},1e-5,2e-5,3.0,100.0,True\n2,0.4,1e-5,2e-5,3.0,110.0,False\n")
    (d / "metrics.json").write_text(json.dumps({"replica": True, "metrics": {"R@1": 0.8, "mAP@R": 0.5}}))
    return d


def _table(root):
    for ext in ("md", "csv", "tex"):
        (root / "tables" / "suprank").mkdir(parents=True, exist_ok=True)
        (root / "tables" / "suprank" / f"table1.{ext}").write_text(f"table {ext}\n")
    return root / "tables" / "suprank" / "table1"


def _check_store(uri, exp_name, run_name, last_loss=0.4):
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(exp_name)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{RUN_TAG}` = '{run_name}'")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.params["loss.tau"] == "0.01" and run.data.params["eval.recall_at"] == "[1, 10]"
    assert run.data.metrics["R_at_1"] == 0.8 and run.data.metrics["mAP_at_R"] == 0.5
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)][1] == (2, last_loss)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"run.json", "history.csv", "metrics.json"} <= artifacts
    return client, exp


def test_sqlite_import_is_idempotent_and_replaces_changed_runs(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = _run_dir(tmp_path / "runs", "sop-smooth_ap-0123456789")
    table = _table(tmp_path)
    first = import_runs([run], [table], uri, "exp", tmp_path / "imported.json", artifact_root=tmp_path / "art")
    client, exp = _check_store(uri, "exp", run.name)
    second = import_runs([run], [table], uri, "exp", tmp_path / "imported.json", artifact_root=tmp_path / "art")
    assert first == second  # unchanged files: the same MLflow runs are kept
    (run / "history.csv").write_text((run / "history.csv").read_text().replace("0.4", "0.3"))
    third = import_runs([run], [table], uri, "exp", tmp_path / "imported.json", artifact_root=tmp_path / "art")
    assert third[run.name] != first[run.name]
    _check_store(uri, "exp", run.name, last_loss=0.3)
    tables = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'table'")
    assert len(tables) == 1
    assert json.loads((tmp_path / "imported.json").read_text())["runs"] == third


def test_the_test_curve_and_the_best_epoch_are_imported(tmp_path):
    """curve.csv: test/<metric> per epoch (step = epoch); metrics.json's best_test: best_test/<metric>
    and best_test/epoch; the curve is an artifact and part of the content hash."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = _run_dir(tmp_path / "runs", "sop-smooth_ap-c0ffee0123")
    (run / "curve.csv").write_text("epoch,seconds,R@1,mAP@R\n1,2.0,0.7,0.4\n2,2.0,0.8,0.5\n")
    (run / "metrics.json").write_text(json.dumps({
        "replica": True, "metrics": {"R@1": 0.8, "mAP@R": 0.5}, "epoch": 2, "select": "best_test",
        "best_test": {"select_by": "R@1", "source": "curve", "epoch": 2, "epochs": {"R@1": 2, "mAP@R": 2},
                      "metrics": {"R@1": 0.8, "mAP@R": 0.5}}}))
    first = import_runs([run], [], uri, "exp", tmp_path / "imported.json")[run.name]
    client, _ = _check_store(uri, "exp", run.name)
    curve = client.get_metric_history(first, "test/R_at_1")
    assert sorted((m.step, m.value) for m in curve) == [(1, 0.7), (2, 0.8)]
    data = client.get_run(first).data
    assert data.metrics["best_test/mAP_at_R"] == 0.5 and data.metrics["best_test/epoch"] == 2.0
    assert "curve.csv" in {a.path for a in client.list_artifacts(first)}
    (run / "curve.csv").write_text("epoch,seconds,R@1,mAP@R\n1,2.0,0.75,0.4\n2,2.0,0.8,0.5\n")
    assert import_runs([run], [], uri, "exp", tmp_path / "imported.json")[run.name] != first  # a changed curve


def test_relative_sqlite_uri_is_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri("sqlite:///results/x.db") == f"sqlite:///{tmp_path}/results/x.db"
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_metric_keys_and_flatten():
    assert metric_key("R@1") == "R_at_1" and metric_key("mAP@R") == "mAP_at_R"
    assert flatten({"a": {"b": 1, "c": [1, 2]}}) == {"a.b": "1", "a.c": "[1, 2]"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
                             "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                pytest.fail("mlflow server did not start")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_import_into_a_real_mlflow_server(tmp_path, mlflow_server):
    run = _run_dir(tmp_path / "runs", "sop-smooth_ap-abcdef0123")
    import_runs([run], [_table(tmp_path)], mlflow_server, "served", tmp_path / "imported.json")
    _check_store(mlflow_server, "served", run.name)
    assert (tmp_path / "server-artifacts").exists()


# The child imports with MlflowClient.create_run patched to SIGKILL its own process right after the
# n-th run is created (this hook lives only here, not in the package).
_KILLED_IMPORT = """
import os, signal, sys
from mlflow.tracking import MlflowClient
from rankrepro.tracking import import_runs

run_dir, table, uri, out, kill_at = sys.argv[1:]
original, calls = MlflowClient.create_run, []

def create_run(self, *args, **kwargs):
    run = original(self, *args, **kwargs)
    calls.append(run)
    if len(calls) == int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)
    return run

MlflowClient.create_run = create_run
import_runs([run_dir], [table], uri, "exp", out)
"""


def _runs_for(client, exp_id, key, view="active"):
    from mlflow.entities import ViewType

    view_type = {"active": ViewType.ACTIVE_ONLY, "all": ViewType.ALL}[view]
    return client.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG}` = '{key}'", run_view_type=view_type)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [1, 2], ids=["run", "table"])
def test_import_killed_after_create_run_is_redone(tmp_path, kill_at):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = _run_dir(tmp_path / "runs", "sop-smooth_ap-feedc0ffee")
    table = _table(tmp_path)
    key = run.name if kill_at == 1 else f"table:{table.parent.name}/{table.name}"
    child = subprocess.run([sys.executable, "-c", _KILLED_IMPORT, str(run), str(table), uri,
                            str(tmp_path / "imported.json"), str(kill_at)], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == -9, child.stderr  # killed by its own SIGKILL, not failed otherwise
    assert not (tmp_path / "imported.json").exists()
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp")
    (left,) = _runs_for(client, exp.experiment_id, key)  # the interrupted import's empty run
    assert left.info.status == "RUNNING" and not left.data.params and not left.data.metrics

    imported = import_runs([run], [table], uri, "exp", tmp_path / "imported.json")
    (done,) = _runs_for(client, exp.experiment_id, key)
    assert done.info.run_id == imported[key] != left.info.run_id
    assert done.info.status == "FINISHED" and done.data.tags[HASH_TAG]
    assert client.get_run(left.info.run_id).info.lifecycle_stage == "deleted"
    assert {r.info.run_id for r in _runs_for(client, exp.experiment_id, key, "all")} == {left.info.run_id,
                                                                                       done.info.run_id}
    if kill_at == 1:
        _check_store(uri, "exp", run.name)
    else:
        assert {a.path for a in client.list_artifacts(done.info.run_id, "table")} == {
            "table/table1.md", "table/table1.csv", "table/table1.tex"}
    # and the completed import is kept as it is by the next one
    assert import_runs([run], [table], uri, "exp", tmp_path / "imported.json") == imported


def test_run_without_hash_or_not_finished_is_not_kept(tmp_path):
    """Runs as an older importer or an interrupted one leaves them: hash tag but RUNNING, or
    FINISHED without the hash tag; both are replaced."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = _run_dir(tmp_path / "runs", "sop-smooth_ap-0badc0ffee")
    first = import_runs([run], [], uri, "exp", tmp_path / "imported.json")[run.name]
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    content_hash = client.get_run(first).data.tags[HASH_TAG]
    stale = client.create_run(exp_id, tags={RUN_TAG: run.name, HASH_TAG: content_hash}).info.run_id  # RUNNING
    client.delete_tag(first, HASH_TAG)  # FINISHED, no hash
    again = import_runs([run], [], uri, "exp", tmp_path / "imported.json")[run.name]
    assert again not in (first, stale)
    assert [r.info.run_id for r in _runs_for(client, exp_id, run.name)] == [again]
    _check_store(uri, "exp", run.name)
