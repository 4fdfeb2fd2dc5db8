"""Dry-run benchmark: how long ``snakemake -n`` takes to plan and build the DAG.

``python -m rankrepro bench plan`` writes ``<out>/plan.md``: the wall time of
``snakemake -n --cores 1`` (median of ``repeats`` runs, each a fresh process, as a user
would run it) on a copy of this checkout's workflow for

* ``config.yaml`` as it is (today's tables), and
* config.yaml plus a generated plan of ``tables`` tables (34 with SupRank's Table I) and ``runs`` runs: ``runs / losses`` setups
  extending ``suprank_sop`` (each with its own number of epochs, so every (setup, loss) is
  its own run), and tables of two setup columns x ``losses`` loss rows, the setups taken
  in turn so that every run belongs to some table.

Both include Snakemake's own start-up; the planner's share is timed separately
(``make_plan`` + ``write_plan`` in-process, no torch). Goal: under 5 s on 2 cores.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rankrepro.io import load_yaml

REPO = Path(__file__).resolve().parents[3]


def workflow_copy(dest: Path) -> Path:
    """Copy this checkout's workflow (Snakefile, config, rules, report, profiles, envs) into ``dest``."""
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / name, dest / name)
    for name in ("workflow", "profiles", "envs"):
        shutil.copytree(REPO / name, dest / name)
    return dest


def generate(dest: Path, tables: int = 33, runs: int = 250, losses: int = 10) -> dict:
    """Write generated setups and specs under ``dest``; return the config lines that use them."""
    from rankrepro import catalog
    from rankrepro.plan.setups import SETUPS_DIR
    from rankrepro.plan.specs import SPECS_DIR

    cat = catalog.load()
    usable = [n for n, e in sorted(cat["loss"].items())  # retrieval losses (no declared task) with defaults only
              if "task" not in e and not any(p.get("required") for p in e["parameters"].values())][:losses]
    n_setups = -(-runs // len(usable))
    setups_dir, specs_dir = dest / "setups", dest / "specs" / "gen"
    shutil.copytree(SETUPS_DIR, setups_dir)
    shutil.copytree(SPECS_DIR, dest / "specs")  # config.yaml's own tables stay in the plan
    specs_dir.mkdir(parents=True)
    setups = {f"gen_{i}": {"extends": "suprank_sop", "epochs": 10 + i} for i in range(n_setups)}
    (setups_dir / "gen.yaml").write_text(yaml.safe_dump(setups))
    for t in range(tables):
        pair = [f"gen_{(2 * t) % n_setups}", f"gen_{(2 * t + 1) % n_setups}"]
        spec = {"paper": "gen", "table": f"t{t}", "caption": "generated", "source": "bench",
                "columns": [{"key": f"c{c}", "group": s, "header": "R@1", "setup": s, "metric": "R@1"}
                            for c, s in enumerate(pair)],
                "rows": [{"method": name, "loss": {"name": name}, "paper": [None, None]} for name in usable]}
        (specs_dir / f"t{t}.yaml").write_text(yaml.safe_dump(spec))
    return {"setups_dir": str(setups_dir), "specs_dir": str(dest / "specs"),
            "tables": {"gen": [f"t{t}" for t in range(tables)]}}


def _dry_run(wf: Path, extra: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", *extra], cwd=wf,
                            capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if result.returncode != 0:
        raise RuntimeError(f"snakemake -n failed in {wf}:\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def _jobs(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("total"):
            return int(line.split()[1])
    return 0


def run(out_dir="results/bench", repeats: int = 3, tables: int = 33, runs: int = 250) -> list[dict]:
    from rankrepro.plan.build import plan_from_config, write_plan
    from rankrepro.io import atomic_write_text

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wf = workflow_copy(Path(tmp))
        gen = generate(Path(tmp) / "gen", tables, runs)
        (wf / "gen.yaml").write_text(yaml.safe_dump(gen))
        config = load_yaml(wf / "config.yaml")
        merged = {**config, **gen, "tables": {**config["tables"], **gen["tables"]}}  # as Snakemake merges them
        for label, extra, cfg in (("config.yaml", [], config), ("config.yaml + generated", ["--configfile", "gen.yaml"],
                                                               merged)):
            t0 = time.perf_counter()
            plan = plan_from_config(cfg)
            write_plan(plan, Path(tmp) / "plan-probe")
            planner_s = time.perf_counter() - t0
            times, jobs = [], 0
            for _ in range(repeats):
                seconds, stdout = _dry_run(wf, extra)
                times.append(seconds)
                jobs = _jobs(stdout)
            rows.append({"config": label, "tables": len(plan["tables"]), "runs": len(plan["runs"]), "jobs": jobs,
                         "planner_s": planner_s, "dry_run_s": statistics.median(times), "max_s": max(times)})
    lines = ["# snakemake -n: plan + DAG", "",
             f"`python -m rankrepro bench plan`: median of {repeats} fresh `snakemake -n --cores 1` processes "
             "(Snakemake start-up included) on a copy of this workflow; planner = `make_plan` + `write_plan` "
             "in-process. Goal: under 5 s on 2 cores.", "",
             "| config | tables | runs | jobs | planner (s) | snakemake -n (s) | slowest (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['config']} | {r['tables']} | {r['runs']} | {r['jobs']} | {r['planner_s']:.2f} | "
              f"{r['dry_run_s']:.2f} | {r['max_s']:.2f} |" for r in rows]
    atomic_write_text(Path(out_dir) / "plan.md", "\n".join(lines) + "\n")
    return rows


def main(out_dir="results/bench", device: str | None = None) -> None:
    for row in run(out_dir):
        print(row)
