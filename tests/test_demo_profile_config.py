"""The demo profile's settings (profiles/demo/demo.yaml: replicas, the fake Wikimedia APIs, tiny
runs) survive a `--configfile` on the command line (issue 23), which replaces a profile's
`configfile:`; the command line's settings still win over the demo's. Dry runs only."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankrepro.bench.plan import workflow_copy


def _dry_run(wf, *args):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-p", *args], cwd=wf,
                          capture_output=True, text=True, timeout=300, env=env)


def _subset(wf) -> dict:
    """SupRank Table 1 alone (a config file merges into config.yaml: the other papers are emptied)."""
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    return {"tables": {**{p: [] for p in papers}, "suprank": ["table1"]}, "synthetic": {"names": []}}


def _assert_demo(stdout):
    """The demo's settings are in effect: generated replicas under data/demo, the fake Wikimedia APIs,
    the tiny runs trained in batches of runs."""
    assert "rule replica:" in stdout and "data/demo/downloads/sop/download.json" in stdout
    assert "data/downloads/" not in stdout
    assert "rule train_batch_sop_0:" in stdout and "--runs-dir results/runs" in stdout
    assert "rule run_config:" not in stdout and "rule train:" not in stdout  # the batch writes its runs' files
    assert "--fake-world demo" in stdout or "fake_world" in stdout or "fake-world" in stdout


@pytest.mark.slow
def test_a_configfile_beside_the_demo_profile_keeps_the_demo_settings(tmp_path):
    wf = workflow_copy(tmp_path)
    (wf / "mine.yaml").write_text(yaml.safe_dump({**_subset(wf), "runtime": {"runs_per_job": 4}}))
    result = _dry_run(wf, "--profile", "profiles/demo", "--configfile", "mine.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_demo(result.stdout)
    assert "results/tables/suprank/table1.md" in result.stdout and "results/tables/pnp/" not in result.stdout
    assert "rule train_batch_sop_1:" in result.stdout  # mine.yaml's runs_per_job (4) over the demo's (32)


@pytest.mark.slow
def test_the_demo_profile_alone_and_with_config_keeps_its_settings(tmp_path):
    wf = workflow_copy(tmp_path)
    (wf / "mine.yaml").write_text(yaml.safe_dump(_subset(wf)))
    alone = _dry_run(wf, "--profile", "profiles/demo", "--", "results/manifests/sop/meta.json")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "rule replica:" in alone.stdout and "data/demo/downloads/sop/download.json" in alone.stdout
    both = _dry_run(wf, "--profile", "profiles/demo", "--configfile", "mine.yaml", "--config", "data_root=data/mine")
    assert both.returncode == 0, both.stderr[-3000:]
    assert "rule replica:" in both.stdout and "data/mine/downloads/sop/download.json" in both.stdout


def test_the_profile_settings_file_comes_from_config_or_the_command_lines_profile(monkeypatch):
    from rankrepro.plan.profile_config import profile_configfile

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    config = {"profile_configfile": "profiles/demo/demo.yaml", "data_root": "x"}
    assert profile_configfile(config, ["snakemake"]) == "profiles/demo/demo.yaml" and config == {"data_root": "x"}
    assert profile_configfile({}, ["snakemake", "--profile", "profiles/demo"]) == "profiles/demo/demo.yaml"
    assert profile_configfile({}, ["snakemake", "--profile=profiles/demo/"]) == "profiles/demo/demo.yaml"
    assert profile_configfile({}, ["snakemake", "--profile", "profiles/slurm"]) is None
    assert profile_configfile({}, ["snakemake"]) is None
    with pytest.raises(ValueError, match=r"config profile_configfile: the profile's settings file nowhere.yaml"):
        profile_configfile({"profile_configfile": "nowhere.yaml"}, [])
