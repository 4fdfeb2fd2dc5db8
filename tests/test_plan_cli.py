"""`python -m rankrepro plan --config` validates exactly as the Snakefile does (issue 23): the config
schema (unknown keys included, defaults filled) and the planner, through one function
(:func:`rankrepro.plan.build.plan_from_config`)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _config(tmp_path, edit) -> Path:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["tables"] = {"smooth_ap": ["table1"]}
    edit(config)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _plan_cli(tmp_path, config: Path):
    return subprocess.run([sys.executable, "-m", "rankrepro", "plan", "--config", str(config), "--out",
                           str(tmp_path / "plan")], capture_output=True, text=True, cwd=tmp_path)


TYPOS = [
    (lambda c: c.update(tabels=c.pop("tables")), r"Additional properties are not allowed \('tabels' was unexpected\)"),
    (lambda c: c["runtime"].update(num_workrs=0),
     r"Additional properties are not allowed \('num_workrs' was unexpected\)"),
]


@pytest.mark.parametrize("edit, message", TYPOS, ids=["top-level", "nested"])
def test_the_plan_command_refuses_a_typo_in_the_config(tmp_path, edit, message):
    import re

    result = _plan_cli(tmp_path, _config(tmp_path, edit))
    assert result.returncode != 0, result.stdout
    assert re.search(message, result.stderr), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "plan").exists()


def test_the_plan_command_fills_the_config_defaults_as_the_snakefile_does(tmp_path):
    """plan_from_config validates the config in place: the schema's defaults are filled in (the
    Snakefile reads runtime and tracking from them)."""
    from rankrepro.plan.build import plan_from_config

    config = yaml.safe_load(_config(tmp_path, lambda c: c.pop("runtime")).read_text())
    plan_from_config(config)
    assert config["runtime"]["runs_per_job"] == 1 and config["run_overrides"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("edit, message", TYPOS, ids=["top-level", "nested"])
def test_snakemake_and_the_plan_command_refuse_the_same_typo(tmp_path, edit, message):
    from rankrepro.bench.plan import workflow_copy

    (tmp_path / "wf").mkdir()
    wf = workflow_copy(tmp_path / "wf")
    config = _config(tmp_path, edit)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(config)],
                         cwd=wf, capture_output=True, text=True, timeout=300, env=env)
    cli = _plan_cli(tmp_path, config)
    assert dry.returncode != 0 and cli.returncode != 0
    first_line = cli.stderr.strip().splitlines()[0]
    assert first_line.startswith(f"invalid plan: {config}: config: "), first_line
    problem = first_line.split(f"{config}: ", 1)[1]  # each names the config's files its own way
    assert re.search(rf"invalid plan of the config from .*{config.name}.*: {re.escape(problem)}", dry.stderr + dry.stdout), \
        (problem, dry.stderr[-2000:])


def test_the_plan_command_names_the_config_file_and_the_key(tmp_path):
    """Issue 33: the config's checkpoint_minutes .nan passed the schema."""
    path = _config(tmp_path, lambda c: c["runtime"].update(checkpoint_minutes=float("nan")))
    result = _plan_cli(tmp_path, path)
    assert result.returncode != 0
    assert f"invalid plan: {path}: config: runtime.checkpoint_minutes: nan is not a finite number" in result.stderr
