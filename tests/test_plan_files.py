"""Planning never changes what a running workflow reads (issue 23): a second `snakemake` in the same
folder (even `snakemake -n`) plans before Snakemake's lock refuses it; its plan files must not
replace the first workflow's. The plan files are content-addressed (``write_plan``): a file's name
carries the hash of its text, so two plans never write the same file with different contents, and
an unchanged plan rewrites nothing (mtimes stay put)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankrepro.plan.build import make_plan, write_plan
from rankrepro.plan.model import Plan, TablePlan

TABLE1 = {"suprank": ["table1"]}


def _snapshot(folder: Path) -> dict:
    """{path: (bytes, mtime_ns)} of every file under ``folder``."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_plan_leaves_the_first_plans_files_alone(tmp_path):
    """Two planning bootstraps with different configs into one folder: the first's files keep their
    bytes and mtimes; the second's differing files are other files."""
    write_plan(make_plan(TABLE1), tmp_path)
    first = _snapshot(tmp_path)
    write_plan(make_plan(TABLE1, {"epochs": 6}), tmp_path)
    assert {p: v for p, v in _snapshot(tmp_path).items() if p in first} == first


def test_plan_files_are_named_by_their_content(tmp_path):
    plan = make_plan(TABLE1)
    files = write_plan(plan, tmp_path)
    assert re.fullmatch(r"plan\.[0-9a-f]{12}\.json", files.plan.name) and files.plan.parent == tmp_path
    table = files.tables["suprank/table1"]
    assert table.parent == tmp_path / "tables" / "suprank" and re.fullmatch(r"table1\.[0-9a-f]{12}\.json", table.name)
    assert Plan.load(files.plan).to_json() == Plan.from_json(plan).to_json()
    assert TablePlan.load(table).to_json() == plan["tables"]["suprank/table1"]
    changed = write_plan(make_plan(TABLE1, {"epochs": 6}), tmp_path)
    assert changed.plan != files.plan and changed.tables["suprank/table1"] != table
    assert write_plan(plan, tmp_path) == files


@pytest.mark.slow
def test_a_dry_run_beside_a_running_workflow_leaves_its_plan_inputs_alone(tmp_path):
    """The race of issue 23, on a copy of the workflow: the plan files the first invocation's jobs read
    (the table and track rules' inputs) keep their bytes and mtimes through a second `snakemake -n`
    with another config; the same config again writes nothing."""
    from rankrepro.bench.plan import workflow_copy

    wf = workflow_copy(tmp_path)
    config = yaml.safe_load((wf / "config.yaml").read_text())
    config["tables"] = TABLE1
    (wf / "config.yaml").write_text(yaml.safe_dump(config))
    (wf / "other.yaml").write_text("run_overrides:\n  epochs: 2\n  warmup_epochs: 0\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

    def dry_run(*args):
        result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", *args, "--",
                                 "results/tables/suprank/table1.md", "results/mlflow/imported.json"],
                                cwd=wf, capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        return sorted(set(re.findall(r"results/plan/[^\s,]+\.json", result.stdout)))

    inputs = dry_run()
    kinds = [path.split("/")[2] for path in inputs]  # the plan (track), the table's plan, the runs' files (run_config)
    assert kinds.count("tables") == 1 and kinds.count("runs") >= 1 and len(kinds) == 2 + kinds.count("runs"), inputs
    first = {path: ((wf / path).read_bytes(), (wf / path).stat().st_mtime_ns) for path in inputs}
    everything = _snapshot(wf / "results" / "plan")
    other = dry_run("--configfile", "other.yaml")
    assert {path: ((wf / path).read_bytes(), (wf / path).stat().st_mtime_ns) for path in inputs} == first
    assert not set(other) & set(inputs), (other, inputs)
    assert dry_run() == inputs
    assert {p: v for p, v in _snapshot(wf / "results" / "plan").items() if p in everything} == everything
