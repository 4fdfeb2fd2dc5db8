"""Demo benchmark: the wall time of the whole demo DAG, from nothing, on this machine.

``python -m rankrepro bench demo`` copies this checkout's workflow into a fresh folder, runs
``snakemake --cores <cores> --profile profiles/demo`` there (replicas generated, prepared, every run
of every table trained and evaluated, every table, sweep plot, synthetic result, the H-GLDv2 chain,
the MLflow import and the results index) and writes ``<out>/demo.{md,json}``: the wall time, the
jobs per rule (from the dry run of the same folder), the runs, the tables rendered, the disk the
``results/`` folder takes afterwards (as ``du`` counts it: allocated blocks), and the machine's cores. Goal (issues 14 and 15: every table in the demo): under 15 minutes on 2 cores.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rankrepro.bench.plan import workflow_copy
from rankrepro.io import atomic_write_json, atomic_write_text
from rankrepro.plan.model import Plan
from rankrepro.plan.targets.common import RULE_FAMILIES

GOAL_S = 15 * 60


def job_counts(stdout: str) -> dict[str, int]:
    """The "Job stats" block of a Snakemake dry run as {rule: count} (``total`` included)."""
    jobs, inside = {}, False
    for line in stdout.splitlines():
        parts = line.split()
        if line.startswith("job ") and "count" in line:
            inside = True
        elif inside and len(parts) == 2 and parts[1].isdigit():
            jobs[parts[0]] = int(parts[1])
            if parts[0] == "total":
                break
    return jobs


def rule_rows(jobs: dict[str, int]) -> dict[str, int]:
    """The jobs per rule, without ``total``; the rules of a family (one per batch or paper:
    :data:`~rankrepro.plan.targets.common.RULE_FAMILIES`, ``train_batch_sop_0``) summed under its name."""
    family = re.compile(rf"^({'|'.join(RULE_FAMILIES)})_[a-z0-9_]+$")
    rows: dict[str, int] = {}
    for rule, n in jobs.items():
        if rule != "total":
            name = family.sub(r"\1", rule)
            rows[name] = rows.get(name, 0) + n
    return rows


def disk_bytes(folder: Path) -> int:
    """The bytes the files under ``folder`` occupy on disk (allocated blocks, as ``du`` counts them)."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if not p.is_symlink() and p.is_file())


def _snakemake(wf: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "snakemake", *args], check=False, cwd=wf,
                          capture_output=True, text=True, env=env)


def run(out_dir="results/bench", cores: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wf = workflow_copy(Path(tmp))
        profile = ["--cores", str(cores), "--profile", "profiles/demo"]
        dry = _snakemake(wf, "-n", *profile)
        if dry.returncode != 0:
            raise RuntimeError(f"snakemake -n --profile profiles/demo failed in {wf}:\n{dry.stderr[-3000:]}")
        t0 = time.perf_counter()
        result = _snakemake(wf, *profile)
        seconds = time.perf_counter() - t0
        if result.returncode != 0:
            raise RuntimeError(f"the demo failed after {seconds:.0f} s in {wf}:\n"
                               f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
        # the plan the run used: the track job's input, named by its content
        plan = Plan.load(wf / re.search(r"results/plan/plan\.[0-9a-f]{12}\.json", dry.stdout).group(0))
        tables = sorted(str(p.relative_to(wf / "results" / "tables").with_suffix(""))
                        for p in (wf / "results" / "tables").rglob("*.md"))
        results_bytes = disk_bytes(wf / "results")
    record = {"seconds": round(seconds, 1), "goal_s": GOAL_S, "cores": cores, "cpu_count": os.cpu_count(),
              "machine": platform.platform(), "jobs": job_counts(dry.stdout), "runs": len(plan.runs),
              "tables": tables, "results_bytes": results_bytes}
    atomic_write_json(Path(out_dir) / "demo.json", record)
    jobs = record["jobs"]
    lines = [f"# The whole demo (`snakemake --cores {cores} --profile profiles/demo`)", "",
             ("`python -m rankrepro bench demo`: a fresh copy of the workflow, from nothing (replicas generated) "
              "to the results index. Goal: under 15 minutes on 2 cores."), "",
             "| wall time | goal | jobs | runs | tables rendered | `results/` on disk | cores (machine) |",
             "|---:|---:|---:|---:|---:|---:|---:|",
             (f"| {seconds / 60:.1f} min ({seconds:.0f} s) | {GOAL_S // 60} min | {jobs.get('total', 0)} | "
              f"{record['runs']} | {len(tables)} | {results_bytes / 2**20:.0f} MiB | {cores} ({os.cpu_count()}) |"), "",
             "| rule | jobs |", "|---|---:|"]
    lines += [f"| {rule} | {n} |" for rule, n in rule_rows(jobs).items()]
    lines += ["", "Tables: " + ", ".join(f"`{t}`" for t in tables)]
    atomic_write_text(Path(out_dir) / "demo.md", "\n".join(lines) + "\n")
    return record


def main(out_dir="results/bench", device: str | None = None) -> None:
    record = run(out_dir)
    print(f"demo: {record['seconds']:.0f} s, {record['jobs'].get('total', 0)} jobs, {record['runs']} runs, "
          f"{len(record['tables'])} tables, results/ {record['results_bytes'] / 2**20:.0f} MiB")
