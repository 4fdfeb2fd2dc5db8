"""A small target of the demo on a real SLURM through profiles/slurm-demo: replica, download,
prepare, image cache, train, evaluate, one table, each a SLURM job with the resources Snakemake
gave it (partition, CPUs, memory, time limit, GPU), its rule log and its SLURM log where they
belong, and a training job cancelled while it runs (scancel: SIGTERM, then SIGKILL) retried by
Snakemake and resumed from its checkpoint.

Needs a running cluster with partitions ``cpu`` and ``gpu`` (one GPU declared) sharing this
machine's file system: ``sudo tools/local_slurm.sh start``. Skipped when there is none, unless
RANKREPRO_SLURM_REQUIRED=1 (CI): then that is a failure. Run it alone with ``pytest -m slurm``.
The profile's placement of the whole demo is also checked without a cluster, in a dry run.
The SLURM records come from ``squeue --states=all`` polled during the run (no accounting daemon
needed; finished jobs stay in it for MinJobAge, an hour with tools/local_slurm.sh).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rankrepro.bench.plan import workflow_copy


PROFILE = "profiles/slurm-demo"
TARGET = "results/tables/smooth_ap/table2.md"  # one run: sop-smooth_ap-<hash>
EPOCHS = 60        # the run trains long enough (about 0.3 s an epoch on 2 cores) to be caught running
TIMEOUT_S = 900
REQUIRED = os.environ.get("RANKREPRO_SLURM_REQUIRED") == "1"
PARTITIONS = {"cpu", "gpu"}  # profiles/slurm-demo's
FIELDS = ("JobID", "Comment", "State", "Partition", "NumCPUs", "MinMemory", "TimeLimit", "tres-per-job", "WorkDir")
SUBMITTED = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+)\)\.$", re.M)
JOB_BLOCK = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", re.M)


@dataclass
class SlurmJob:
    """One job as ``squeue --states=all`` last showed it."""

    id: str
    comment: str  # the executor plugin's rule_<rule>_wildcards_<wildcards>
    state: str
    partition: str
    cpus: int
    mem: str      # e.g. 4000M
    limit: str    # [D-][HH:]MM:SS
    gres: str     # e.g. gres:gpu:1, N/A
    workdir: str


def _cluster_missing() -> str | None:
    """Why the test cannot run here, or None."""
    if shutil.which("sinfo") is None:
        return "no SLURM on this machine (sinfo not found): sudo tools/local_slurm.sh start"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%R %t"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 30 s: is slurmctld running? (tools/local_slurm.sh status)"
    if out.returncode:
        return f"the SLURM cluster is not up (sinfo: {out.stderr.strip()}): sudo tools/local_slurm.sh start"
    up = {line.split()[0] for line in out.stdout.splitlines()
          if re.fullmatch(r"(idle|mix|alloc|comp)", line.split()[1])}
    if not PARTITIONS <= up:
        return (f"no node takes jobs in partition(s) {', '.join(sorted(PARTITIONS - up))} that {PROFILE} uses "
                f"(sinfo: {out.stdout.strip()!r}): sudo tools/local_slurm.sh start")
    return None


def _jobs_in(workdir: Path) -> list[SlurmJob]:
    """The jobs SLURM knows (pending, running, and finished for MinJobAge) that run in ``workdir``."""
    out = subprocess.run(["squeue", "-h", "--states=all", "-O", ",".join(f"{f}:|" for f in FIELDS)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    jobs = []
    for line in out.splitlines():  # each field ends with its separator
        job_id, comment, state, partition, cpus, mem, limit, gres, wd, _ = line.split("|")
        if wd == str(workdir):
            jobs.append(SlurmJob(job_id, comment, state, partition, int(cpus), mem, limit, gres, wd))
    return jobs


def _mb(mem: str) -> float:
    """SLURM's 4000M / 62.50G / 1T in megabytes."""
    return float(mem[:-1]) * {"M": 1, "G": 1024, "T": 1024**2}[mem[-1]]


def _minutes(limit: str) -> float:
    """SLURM's time limit [D-][HH:]MM:SS in minutes."""
    days, _, clock = limit.rpartition("-")
    hours, minutes, seconds = ([0, 0] + [int(p) for p in clock.split(":")])[-3:]
    return (int(days or 0) * 24 + hours) * 60 + minutes + seconds / 60


def _job_blocks(output: str) -> dict[str, dict]:
    """Snakemake's job descriptions by its job id: rule, log, threads and resources as it printed them."""
    blocks = {}
    for rule, body in JOB_BLOCK.findall(output):
        fields = dict(line.strip().split(": ", 1) for line in body.splitlines() if ": " in line)
        resources = dict(item.split("=", 1) for item in fields.get("resources", "").split(", ") if "=" in item)
        blocks[fields["jobid"]] = {"rule": rule, "rule_log": fields.get("log"), "threads": int(fields.get("threads", 1)),
                                   "resources": resources}
    return blocks


def _profile_resources(wf: Path, rule: str) -> dict:
    """The resources profiles/slurm-demo gives ``rule`` (default-resources, then its set-resources)."""
    profile = yaml.safe_load((wf / PROFILE / "config.yaml").read_text())
    return {**profile["default-resources"], **profile["set-resources"].get(rule, {})}


def _cancel_when_checkpointed(jobs: list[SlurmJob], workdir: Path) -> tuple[str, str] | None:
    """scancel the first running train job whose run has written its checkpoint: (job id, run id).
    (A job that ended meanwhile stays COMPLETED: the test of the retry says so.)"""
    for job in jobs:
        if job.state == "RUNNING" and job.comment.startswith("rule_train_wildcards_"):
            run_id = job.comment.removeprefix("rule_train_wildcards_")
            if (workdir / "results" / "runs" / run_id / "checkpoint.pt").exists():
                subprocess.run(["scancel", job.id], timeout=60)
                return job.id, run_id
    return None


@pytest.mark.slow
def test_the_profile_places_the_whole_demo(tmp_path):
    """Without a cluster, a dry run: the demo's GPU rules on partition gpu with one GPU, the other rules
    on cpu, every job on one CPU within 4 GB (a 2-CPU node runs them all)."""
    wf = workflow_copy(tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", PROFILE], cwd=wf,
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    blocks = _job_blocks(result.stdout)
    # one rule per training batch, train_batch_<batch>: the profile's train_batch entry applies to each
    family = {b["rule"]: re.sub(r"^train_batch_\w+$", "train_batch", b["rule"]) for b in blocks.values()}
    assert {"train_batch", "image_cache", "synthetic", "hgldv2_cluster"} <= set(family.values())
    assert "train_batch" not in family  # no rule of that name: the batches'
    for block in blocks.values():
        res, rule = block["resources"], family[block["rule"]]
        assert res["slurm_partition"] == _profile_resources(wf, rule)["slurm_partition"], block
        assert (res["slurm_partition"] == "gpu") == (rule in ("train", "train_batch", "evaluate")), block
        assert res.get("gpu") == ("1" if res["slurm_partition"] == "gpu" else None), block
        assert block["threads"] == int(res.get("cpus_per_task", 1)) == 1 and int(res["mem_mb"]) <= 4000, block


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    """The target built through SLURM, one training job cancelled on the way."""
    missing = _cluster_missing()
    if missing:
        if REQUIRED:
            pytest.fail(f"RANKREPRO_SLURM_REQUIRED=1, but {missing}")
        pytest.skip(missing)
    wf = workflow_copy(tmp_path_factory.mktemp("slurm")).resolve()
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    (wf / "slurm_test.yaml").write_text(yaml.safe_dump({
        "tables": {**{paper: [] for paper in papers}, "smooth_ap": ["table2"]},
        # one SLURM job per training and per evaluation, as profiles/slurm runs them (the demo batches them)
        "runtime": {"runs_per_job": 1, "evaluate_in_train_job": False, "keep_model": True},
        "run_overrides": {"epochs": EPOCHS},
    }))
    # --cores: workflow/rules/synthetic.smk's `threads: workflow.cores` fails the parse without it
    command = [sys.executable, "-m", "snakemake", TARGET, "--cores", "2", "--profile", PROFILE,
               "--configfile", "slurm_test.yaml"]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    records: dict[str, SlurmJob] = {}
    cancelled = None
    start = time.monotonic()
    with open(wf / "snakemake.out", "w") as out:
        proc = subprocess.Popen(command, cwd=wf, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        while proc.poll() is None:
            if time.monotonic() - start > TIMEOUT_S:
                proc.kill()
                pytest.fail(f"snakemake ran over {TIMEOUT_S} s; its output: {wf / 'snakemake.out'}")
            jobs = _jobs_in(wf)
            records.update({job.id: job for job in jobs})
            cancelled = cancelled or _cancel_when_checkpointed(jobs, wf)
            time.sleep(0.3)
        records.update({job.id: job for job in _jobs_in(wf)})
    finally:
        if proc.poll() is None:
            proc.kill()
        left = [job.id for job in _jobs_in(wf) if job.state in ("PENDING", "RUNNING")]
        if left:
            subprocess.run(["scancel", *left], timeout=60)
    output = (wf / "snakemake.out").read_text()
    blocks = _job_blocks(output)
    submitted = [SimpleNamespace(slurm_id=slurm_id, slurm_log=Path(log), **blocks[job_id])
                 for job_id, slurm_id, log in SUBMITTED.findall(output)]
    return SimpleNamespace(wf=wf, returncode=proc.returncode, output=output, records=records, submitted=submitted,
                           cancelled=cancelled)


@pytest.mark.slurm
@pytest.mark.slow
def test_the_table_is_built_through_slurm(slurm_run):
    assert slurm_run.returncode == 0, slurm_run.output[-5000:]
    for ext in ("md", "csv", "tex"):
        assert (slurm_run.wf / TARGET).with_suffix(f".{ext}").exists(), ext
    rules = {job.rule for job in slurm_run.submitted}
    assert rules == {"replica", "download", "prepare", "image_cache", "train", "evaluate"}, rules
    assert set(slurm_run.records) == {job.slurm_id for job in slurm_run.submitted}  # nothing else ran in wf


@pytest.mark.slurm
@pytest.mark.slow
def test_every_job_got_the_resources_snakemake_gave_it(slurm_run):
    """Partition, CPUs, memory, time limit and GPU of each SLURM job are those of its Snakemake job."""
    for job in slurm_run.submitted:
        record = slurm_run.records[job.slurm_id]
        res = job.resources
        where = f"{job.rule} (SLURM job {job.slurm_id}): {record}"
        assert record.comment.startswith(f"rule_{job.rule}"), where
        assert record.partition == res["slurm_partition"], where
        assert record.cpus == int(res.get("cpus_per_task", job.threads)), where
        assert _mb(record.mem) == int(res["mem_mb"]), where
        assert _minutes(record.limit) == int(res["runtime"]), where
        gpus = int(res.get("gpu", 0))
        assert bool(re.search(rf"gpu[:=]{gpus}\b", record.gres)) == (gpus > 0), where


@pytest.mark.slurm
@pytest.mark.slow
def test_the_profile_keeps_its_partitions(slurm_run):
    """profiles/slurm-demo's placement reaches sbatch: the GPU rules on `gpu` with one GPU, the rest on `cpu`."""
    for job in slurm_run.submitted:
        record = slurm_run.records[job.slurm_id]
        assert record.partition == _profile_resources(slurm_run.wf, job.rule)["slurm_partition"], (job.rule, record)
    placed = {job.rule: slurm_run.records[job.slurm_id].partition for job in slurm_run.submitted}
    assert placed["train"] == placed["evaluate"] == "gpu" and placed["prepare"] == "cpu", placed


@pytest.mark.slurm
@pytest.mark.slow
def test_logs_are_where_the_rules_and_the_plugin_put_them(slurm_run):
    """Each job's rule log (its `log:`, under results/logs/<rule>/) and SLURM's own log of it
    (.snakemake/slurm_logs/rule_<rule>/<wildcards>/<jobid>.log, kept: slurm-keep-successful-logs)."""
    slurm_logs = slurm_run.wf / ".snakemake" / "slurm_logs"
    for job in slurm_run.submitted:
        assert job.slurm_log.parent.parent == slurm_logs / f"rule_{job.rule}", job.slurm_log
        assert job.slurm_log.name == f"{job.slurm_id}.log" and job.slurm_log.exists(), job.slurm_log
        assert job.rule_log and Path(job.rule_log).parts[:3] == ("results", "logs", job.rule), job.rule_log
        assert (slurm_run.wf / job.rule_log).exists(), job.rule_log


@pytest.mark.slurm
@pytest.mark.slow
def test_a_cancelled_training_is_retried_and_resumes(slurm_run):
    assert slurm_run.cancelled, ("no running train job with a checkpoint was seen: the training ended too soon "
                                 f"(raise EPOCHS={EPOCHS})")
    cancelled_id, run_id = slurm_run.cancelled
    assert slurm_run.records[cancelled_id].state == "CANCELLED", slurm_run.records[cancelled_id]
    trains = [job for job in slurm_run.submitted if job.rule == "train"]
    assert [job.slurm_id for job in trains][0] == cancelled_id and len(trains) == 2, trains
    retry = trains[1]
    assert slurm_run.records[retry.slurm_id].state == "COMPLETED", slurm_run.records[retry.slurm_id]
    assert "--attempt 2" in retry.slurm_log.read_text()  # Snakemake's retry (profile: retries)
    run_dir = slurm_run.wf / "results" / "runs" / run_id
    log_dir = slurm_run.wf / "results" / "logs" / "train"
    logs = "\n".join(p.read_text() for p in log_dir.glob(f"{run_id}*"))
    assert re.search(rf"resuming {run_id} from results/runs/{run_id}/checkpoint.pt at (the end of epoch \d+|"
                     rf"epoch \d+ after its first \d+ batches)", logs), logs[-3000:]
    # one log per attempt: the cancelled attempt's epochs stay readable beside the retry's
    first, second = (sorted(log_dir.glob(f"{run_id}.attempt{n}-*.log")) for n in (1, 2))
    assert len(first) == 1 and len(second) == 1, sorted(p.name for p in log_dir.iterdir())
    assert "== attempt 1:" in first[0].read_text() and re.search(r"^epoch 1: ", first[0].read_text(), re.M)
    assert "== attempt 2:" in second[0].read_text() and "resuming" in second[0].read_text()
    with open(run_dir / "history.csv") as f:
        epochs = [int(row["epoch"]) for row in csv.DictReader(f)]
    assert epochs == list(range(1, EPOCHS + 1))  # every epoch once: the retry went on where the first attempt stopped
    assert (run_dir / "model.pt").exists() and not (run_dir / "checkpoint.pt").exists()
