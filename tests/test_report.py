"""The results index (rankrepro.tables.index), the figures (rankrepro.tables.plots) and the
Snakemake report: unit tests on hand-made plan, table and run files, and the demo profile on one
table (SupRank Table 1) then ``snakemake --report``."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankrepro.tables import index, plots
from rankrepro.tables.formats import read_table_csv

PNG = b"\x89PNG\r\n\x1a\n"
FIELDS = "method,column,metric,paper,ours,std,seeds,diff,status,replica"
PENDING = "setup suprank_inat not implemented yet"


def _spec(rows, ncol=2):
    return {"paper": "p", "table": "t", "caption": "A caption", "source": "Table 1",
            "columns": [{"group": "SOP", "header": f"h{c}", "metric": "R@1"} for c in range(ncol)],
            "rows": [{"method": m, "paper": [0.0] * ncol} for m in rows]}


def _write_csv(path, rows, replica=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [FIELDS]
    for method, column, paper, ours, status in rows:
        diff = "" if paper is None or ours is None else f"{ours - paper:.2f}"
        lines.append(",".join([method, column, "R@1", "" if paper is None else str(paper),
                               "" if ours is None else str(ours), "", "1" if ours is not None else "0", diff,
                               status, str(replica)]))
    path.write_text("\n".join(lines) + "\n")


def _write_run(runs_dir, rid, epochs, device, eval_seconds, eval_device=None):
    d = runs_dir / rid
    d.mkdir(parents=True)
    header = "epoch,loss,lr_backbone,lr_head,seconds,images_per_s,device,warmup"
    if device is None:  # a history written before the device was recorded
        header = header.replace(",device", "")
    rows = [f"{e + 1},{1.0 / (e + 1)},1e-05,0.0001,{s},100.0" + (f",{device}" if device else "") + ",False"
            for e, s in enumerate(epochs)]
    (d / "history.csv").write_text("\n".join([header, *rows]) + "\n")
    record = {"run_id": rid, "replica": True, "metrics": {"R@1": 0.5, "mAP@R": 0.25},
              "seconds": {"embed": eval_seconds, "metrics": 0.0}}
    if eval_device:
        record["device"] = eval_device
    (d / "metrics.json").write_text(json.dumps(record))


@pytest.fixture
def results(tmp_path):
    """Two tables of paper p: t1 (3 rows x 2 columns, the last row cited) on runs r1 (GPU) and r2
    (CPU), t2 (1 x 2) on r2 alone; plus an unrendered table q/t3 and one synthetic result."""
    res = tmp_path / "results"
    t1_cells = [
        {"row": 0, "column": 0, "pending": None, "run_ids": ["r1"], "metric": "R@1"},
        {"row": 0, "column": 1, "pending": None, "run_ids": ["r2"], "metric": "R@1"},
        {"row": 1, "column": 0, "pending": PENDING, "run_ids": [], "metric": "R@1"},
        {"row": 1, "column": 1, "pending": None, "run_ids": ["r2"], "metric": "R@1"},  # not finished: "missing"
        {"row": 2, "column": 0, "pending": None, "run_ids": [], "metric": "R@1"},
        {"row": 2, "column": 1, "pending": None, "run_ids": [], "metric": "R@1"},
    ]
    spec1 = _spec(["Ours", "Theirs", "Cited"])
    spec1["rows"][2]["cited"] = True
    t2_cells = [{"row": 0, "column": c, "pending": None, "run_ids": ["r2"], "metric": "R@1"} for c in range(2)]
    plan = {"tables": {
        "p/t1": {"paper": "p", "table": "t1", "spec": spec1, "cells": t1_cells, "runs": ["r1", "r2"]},
        "p/t2": {"paper": "p", "table": "t2", "spec": _spec(["Ours"]), "cells": t2_cells, "runs": ["r2"]},
        "q/t3": {"paper": "q", "table": "t3", "spec": _spec(["X"]), "cells": [
            {"row": 0, "column": c, "pending": "dataset z not implemented yet", "run_ids": [], "metric": "R@1"}
            for c in range(2)], "runs": []},
    }, "synthetic": {"names": ["toy"]}}
    (res / "plan").mkdir(parents=True)
    (res / "plan" / "plan.json").write_text(json.dumps(plan))
    _write_csv(res / "tables" / "p" / "t1.csv", [
        ("Ours", "SOP h0", 80.0, 80.5, "ours"), ("Ours", "SOP h1", 70.0, 72.0, "ours"),
        ("Theirs", "SOP h0", 60.0, None, PENDING), ("Theirs", "SOP h1", 61.0, None, "missing"),
        ("Cited", "SOP h0", 50.0, None, "cited"), ("Cited", "SOP h1", 51.0, None, "cited")])
    _write_csv(res / "tables" / "p" / "t2.csv", [("Ours", "SOP h0", 10.0, 9.0, "ours"),
                                                 ("Ours", "SOP h1", None, 5.0, "ours")])
    _write_run(res / "runs", "r1", [3600.0, 1800.0], "cuda: NVIDIA H100 80GB HBM3", 600.0)
    _write_run(res / "runs", "r2", [7200.0], "cpu", 0.0)
    (res / "synthetic").mkdir()
    (res / "synthetic" / "toy.md").write_text("# toy\n")
    return res


def test_tables_in_natural_order(results):
    plan = json.loads((results / "plan" / "plan.json").read_text())
    plan["tables"] = {key: plan["tables"]["p/t2"] | {"table": key.split("/")[1]} for key in ("p/t10", "p/t2", "a/t9")}
    assert [t["table"] for t in index.build_index(plan, results)["tables"]] == ["t9", "t2", "t10"]


def test_run_hours_split_by_device(results, tmp_path):
    r1 = index.run_hours(results / "runs" / "r1")
    assert r1["cuda_s"] == 6000.0 and r1["cpu_s"] == 0.0 and r1["finished"]  # evaluation: the training's device
    assert r1["train_s"] == 5400.0 and r1["eval_s"] == 600.0
    _write_run(tmp_path / "other", "old", [10.0], None, 5.0)  # no device recorded
    old = index.run_hours(tmp_path / "other" / "old")
    assert old["unknown_s"] == 15.0 and old["cuda_s"] == old["cpu_s"] == 0
    _write_run(tmp_path / "other", "mixed", [10.0], "cpu", 5.0, eval_device="cuda:0")
    mixed = index.run_hours(tmp_path / "other" / "mixed")
    assert mixed["cpu_s"] == 10.0 and mixed["cuda_s"] == 5.0
    assert not index.run_hours(tmp_path / "nothing")["finished"]
    # the test curve's evaluations during training count as evaluation, on the training's device
    (results / "runs" / "r1" / "curve.csv").write_text("epoch,seconds,R@1\n1,30.0,0.5\n2,20.0,0.6\n")
    r1 = index.run_hours(results / "runs" / "r1")
    assert r1["eval_s"] == 650.0 and r1["cuda_s"] == 6050.0 and r1["train_s"] == 5400.0


def test_index_counts_cells_pending_reasons_and_hours(results):
    built = index.build_index(json.loads((results / "plan" / "plan.json").read_text()), results)
    t1, t2, t3 = built["tables"]
    assert (t1["cells"], t1["cited"], t1["reproduced"], t1["within"], t1["pending"]) == (4, 2, 2, 1, 2)
    assert t1["reasons"] == {PENDING: 1, "missing": 1}
    assert t1["data"] == "replica" and t1["runs"] == 2 and t1["finished"] == 2 and t1["shared"] == 1
    assert t1["gpu_h"] == pytest.approx(6000 / 3600) and t1["cpu_h"] == pytest.approx(2.0)
    # t2: ours without a paper number is reproduced, not "within"; the shared run r2 counts here too
    assert (t2["cells"], t2["reproduced"], t2["within"], t2["pending"]) == (2, 2, 1, 0)
    assert t2["cpu_h"] == pytest.approx(2.0) and t2["gpu_h"] == 0
    assert not t3["built"] and t3["pending"] == 2 and t3["reasons"] == {"dataset z not implemented yet": 2}
    assert t3["data"] == "—"
    total = built["total"]
    assert total["cpu_h"] == pytest.approx(2.0) and total["gpu_h"] == pytest.approx(6000 / 3600)  # r2 once
    assert (total["cells"], total["reproduced"], total["within"], total["pending"]) == (8, 4, 2, 4)
    assert built["shared"] == ["r2"]


def test_index_markdown_and_html(results):
    out = results / "README.md"
    index.write_index(results / "plan" / "plan.json", results, out, html_out=results / "index.html")
    text = out.read_text()
    assert "**2 papers, 3 tables: 4 of 8 cells reproduced, 2 within 1 point of the paper, 4 pending.**" in text
    assert "| p | t1: A caption | [md](tables/p/t1.md) · [csv](tables/p/t1.csv) · [tex](tables/p/t1.tex) | replica " \
           "| 4 | 2 | 1 | — | 2 | 2/2 (1 shared) | 1.67 | 2.00 |" in text  # — : no test curve, no best epoch
    assert "| q | t3: A caption | not built yet | — | 2 | 0 | 0 | — | 2 | 0/0 | 0 | 0 |" in text
    assert f"- **p t1**: 1 × {PENDING}; 1 × missing" in text
    assert "Runs shared by several tables (their hours count in each): `r2`." in text
    assert "[toy](synthetic/toy.md)" in text and "Not built (`hgldv2.build: true`" in text
    page = (results / "index.html").read_text()
    assert '<a href="tables/p/t1.md">md</a>' in page and "<table>" in page and "<b>2 papers" in page


def test_index_links_the_recipe_cards_when_they_exist(results):
    out = results / "README.md"
    index.write_index(results / "plan" / "plan.json", results, out)
    assert "## Recipes\n\nNot built yet (rule `recipes`;" in out.read_text()
    (results / "recipes.md").write_text("# Recipes\n")
    index.write_index(results / "plan" / "plan.json", results, out, html_out=results / "index.html")
    assert "- [Every run's recipe card](recipes.md), by paper and table" in out.read_text()
    assert '<a href="recipes.md">Every run\'s recipe card</a>' in (results / "index.html").read_text()


def test_index_links_a_sweep_plot_when_it_exists(results):
    out = results / "README.md"
    index.write_index(results / "plan" / "plan.json", results, out)
    assert "[plot](" not in out.read_text() and "Sweeps" not in out.read_text()
    (results / "tables" / "p" / "t2.png").write_bytes(PNG)
    index.write_index(results / "plan" / "plan.json", results, out)
    text = out.read_text()
    assert "[tex](tables/p/t2.tex) · [plot](tables/p/t2.png) |" in text
    assert "- Sweeps (ours beside the paper's points): [p/t2](tables/p/t2.png)" in text


def test_table_html_colours_and_notes(results):
    plan = json.loads((results / "plan" / "plan.json").read_text())["tables"]["p/t1"]
    rows = read_table_csv(results / "tables" / "p" / "t1.csv")
    rows[0]["paper_mark"], rows[1]["ours_mark"] = "best", "second"  # render.py's best / second best marks
    page = index.table_html(plan, rows)
    assert "<td><b>80.0</b></td>" in page and "<td><u>72.0</u></td>" in page
    assert "<td class=near>+0.5</td>" in page and "<td class=far>+2.0</td>" in page
    assert f"<li>{PENDING}</li>" in page and "Replica data" in page and page.count("<tr>") == 5


def test_training_curve_and_scatter_are_pngs(results, tmp_path):
    curve = plots.training_curve(results / "runs" / "r1" / "history.csv", tmp_path / "curve.png",
                                 metrics_json=results / "runs" / "r1" / "metrics.json")
    assert curve.read_bytes()[:8] == PNG and curve.stat().st_size > 5000
    extra = tmp_path / "extra.csv"  # a further numeric column gets the third panel
    extra.write_text("epoch,loss,lr_backbone,lr_head,seconds,val_R@1\n1,0.5,1e-5,1e-4,1.0,0.2\n2,0.4,1e-5,1e-4,1.0,0.3\n")
    assert plots.training_curve(extra, tmp_path / "extra.png").read_bytes()[:8] == PNG
    # a test curve beside the history gets the last panel (VehicleID-like groups, the best starred)
    run = tmp_path / "withcurve"
    run.mkdir()
    (run / "history.csv").write_text(extra.read_text())
    (run / "curve.csv").write_text("epoch,seconds,small/R@1,large/R@1\n1,1.0,0.5,0.4\n2,1.0,0.6,0.3\n")
    (run / "metrics.json").write_text(json.dumps({"metrics": {"small/R@1": 0.6, "large/R@1": 0.3}, "best_test": {
        "select_by": "R@1", "epochs": {"small/R@1": 2, "large/R@1": 1}, "metrics": {"small/R@1": 0.6, "large/R@1": 0.4}}}))
    with_curve = plots.training_curve(run / "history.csv", tmp_path / "with.png", metrics_json=run / "metrics.json")
    assert with_curve.read_bytes()[:8] == PNG and with_curve.stat().st_size > (tmp_path / "extra.png").stat().st_size
    csvs = [results / "tables" / "p" / "t1.csv", results / "tables" / "p" / "t2.csv"]
    assert [p[:2] for p in plots.scatter_points(csvs[0])] == [(80.0, 80.5), (70.0, 72.0)]
    scatter = plots.paper_scatter("p", csvs, tmp_path / "scatter.png")
    assert scatter.read_bytes()[:8] == PNG and scatter.stat().st_size > 5000
    empty = tmp_path / "empty.csv"
    _write_csv(empty, [("X", "SOP h0", 1.0, None, "missing")])
    assert plots.paper_scatter("q", [empty], tmp_path / "none.png").read_bytes()[:8] == PNG


def test_cli_writes_index_table_html_and_plots(results, tmp_path):
    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "rankrepro", *map(str, args)], check=False,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    cli("results-index", "--plan", results / "plan" / "plan.json", "--results-dir", results, "--out", tmp_path / "i.md")
    assert "# results/" in (tmp_path / "i.md").read_text()
    plan = tmp_path / "t1.json"
    plan.write_text(json.dumps(json.loads((results / "plan" / "plan.json").read_text())["tables"]["p/t1"]))
    cli("table-html", "--plan", plan, "--csv", results / "tables" / "p" / "t1.csv", "--out", tmp_path / "t1.html")
    cli("plot", "curve", "--history", results / "runs" / "r2" / "history.csv", "--out", tmp_path / "c.png")
    cli("plot", "scatter", "--paper", "p", "--tables", results / "tables" / "p" / "t1.csv", "--out", tmp_path / "s.png")
    assert all((tmp_path / n).stat().st_size > 0 for n in ("t1.html", "c.png", "s.png"))


def test_plot_curves_draws_each_run_folders_curve(results, tmp_path):
    """Issue 37: a paper's curves job (one process) draws curve.png in each run folder it is given."""
    runs = results / "runs"
    done = subprocess.run([sys.executable, "-m", "rankrepro", "plot", "curves", "--runs", runs / "r1", runs / "r2"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert all((runs / r / "curve.png").read_bytes()[:8] == PNG for r in ("r1", "r2"))
    missing = subprocess.run([sys.executable, "-m", "rankrepro", "plot", "curve", "--history", runs / "r1" / "history.csv"],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "rankrepro plot curve: --out is required" in missing.stderr
    assert "Traceback" not in missing.stderr


def _static(results, built=True):
    """Add a static table p/s (the paper's text: a check mark, math) to the results' plan; render it."""
    from rankrepro.tables.render import render

    spec = {"paper": "p", "table": "s", "kind": "static", "caption": "Complexity", "source": "Table 1",
            "columns": [{"key": "c", "header": "cost"}, {"key": "g", "header": "general"}],
            "rows": [{"method": "RaMBO", "cells": ["$O(n \\log n)$", "✓"]}, {"method": "Yue", "cells": ["$O(n^2)$", "x"]}]}
    table_plan = {"paper": "p", "table": "s", "spec": spec, "cells": [], "runs": []}
    plan = json.loads((results / "plan" / "plan.json").read_text())
    plan["tables"]["p/s"] = table_plan
    (results / "plan" / "plan.json").write_text(json.dumps(plan))
    if built:
        render(table_plan, results / "runs", results / "tables" / "p" / "s")
    return table_plan


@pytest.mark.parametrize("built", [True, False])
def test_a_static_table_is_indexed_as_nothing_to_reproduce(results, built):
    _static(results, built)
    built_index = index.build_index(json.loads((results / "plan" / "plan.json").read_text()), results)
    entry = next(t for t in built_index["tables"] if t["table"] == "s")
    assert (entry["cells"], entry["reproduced"], entry["pending"], entry["runs"]) == (0, 0, 0, 0)
    assert entry["data"] == index.STATIC_DATA and entry["reasons"] == {} and entry["built"] is built
    total = built_index["total"]
    assert (total["cells"], total["reproduced"], total["within"], total["pending"]) == (8, 4, 2, 4)  # unchanged
    index.write_index(results / "plan" / "plan.json", results, results / "README.md")
    text = (results / "README.md").read_text()
    files = "[md](tables/p/s.md) · [csv](tables/p/s.csv) · [tex](tables/p/s.tex)" if built else "not built yet"
    assert f"| p | s: Complexity | {files} | static: transcribed, nothing to reproduce | 0 | 0 | 0 | — | 0 | — | — | — |" \
        in text
    assert "**p s**" not in text  # nothing pending


def test_a_static_tables_html_scatter_and_cli(results, tmp_path):
    table_plan = _static(results)
    csv_path = results / "tables" / "p" / "s.csv"
    (tmp_path / "s.json").write_text(json.dumps(table_plan))
    index.write_table_html(tmp_path / "s.json", csv_path, tmp_path / "s.html")
    page = (tmp_path / "s.html").read_text()
    assert "<th>Method</th><th>cost</th><th>general</th>" in page
    assert "<tr><td class=name>RaMBO</td><td>$O(n \\log n)$</td><td>✓</td></tr>" in page
    assert "nothing to reproduce" in page and page.count("<tr>") == 3
    assert plots.scatter_points(csv_path) == []
    csvs = [results / "tables" / "p" / "t1.csv", csv_path]
    assert plots.paper_scatter("p", csvs, tmp_path / "scatter.png").read_bytes()[:8] == PNG
    assert plots.paper_scatter("p", [csv_path], tmp_path / "only.png").read_bytes()[:8] == PNG
    done = subprocess.run([sys.executable, "-m", "rankrepro", "table-html", "--plan", str(tmp_path / "s.json"),
                           "--csv", str(csv_path), "--out", str(tmp_path / "cli.html")],
                          check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cli.html").read_text() == page


# ----------------------------------------------------------------------- workflow + report

REPO = Path(__file__).resolve().parents[1]


def _smk(cwd, *args, timeout=600):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "snakemake", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_demo_subset_then_snakemake_report(tmp_path):
    """The demo profile on SupRank Table 1 alone (its tiny runs on the replicas), with its training curves
    (runtime.curves, off in the demo): the index, an HTML page per table, a curve per run (the paper's curves
    job), the scatter; then `snakemake --report` shows them."""
    import csv

    from rankrepro.bench.plan import workflow_copy

    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]  # a config file merges into config.yaml
    (wf / "subset.yaml").write_text(yaml.safe_dump({"tables": {**{p: [] for p in papers}, "suprank": ["table1"]},
                                                    "synthetic": {"names": []}, "runtime": {"curves": True}}))
    config = ["--profile", "profiles/demo", "--configfile", "profiles/demo/demo.yaml", "subset.yaml"]
    targets = ["results/README.md", "results/index.html"]
    result = _smk(wf, "--cores", "2", *config, "--", *targets, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    readme = (wf / "results" / "README.md").read_text()
    with open(wf / "results" / "tables" / "suprank" / "table1.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    ours = sum(bool(c["ours"]) for c in cells if c["status"] != "cited")
    counted = sum(c["status"] != "cited" for c in cells)
    assert f"| replica | {counted} | {ours} |" in readme and ours > 0
    assert ("- **suprank table1**: " in readme) == (ours < counted)
    plan_file = re.search(r"results/plan/plan\.[0-9a-f]{12}\.json", result.stdout + result.stderr).group(0)
    plan = json.loads((wf / plan_file).read_text())  # the plan the run used (the results_index job's input)
    runs = plan["tables"]["suprank/table1"]["runs"]
    assert sorted(p.name for p in (wf / "results" / "runs").iterdir()) == sorted(runs)
    assert all((wf / "results" / "runs" / r / "curve.png").stat().st_size > 5000 for r in runs)
    history = (wf / "results" / "runs" / runs[0] / "history.csv").read_text().splitlines()
    device = history[0].split(",").index("device")
    assert history[1].split(",")[device] == "cpu"
    assert "| suprank | table1: " in readme and "0 GPU-hours" in readme
    assert (wf / "results" / "tables" / "suprank" / "scatter.png").read_bytes()[:8] == PNG
    report = _smk(wf, "--cores", "1", *config, "--report", "report.html", "--", *targets)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    page = (wf / "report.html").read_text()
    for name in ("table1.html", "scatter.png", "curve.png", "index.html", "training curves", "paper vs ours",
                 "suprank", *runs):
        assert name in page, name


def test_a_fraction_column_is_within_one_point_at_0_01_and_prints_three_decimals(tmp_path):
    """PNP's Dists@intra (unit: fraction): 0.318 vs 0.325 is within one point (0.01), 0.318 vs 0.04
    is not (a percent tolerance of 1.0 would count both); the page and the scatter follow the unit."""
    spec = _spec(["A", "B"], ncol=1)
    cells = [{"row": r, "column": 0, "pending": None, "run_ids": [f"r{r}"], "metric": "dists@intra"} for r in (0, 1)]
    table_plan = {"paper": "p", "table": "t", "spec": spec, "cells": cells, "runs": ["r0", "r1"]}
    path = tmp_path / "t.csv"
    path.write_text("method,column,metric,unit,decimals,paper,ours,std,seeds,diff,status,replica\n"
                    "A,SOP h0,dists@intra,fraction,3,0.318,0.325,,1,0.007,ours,True\n"
                    "B,SOP h0,dists@intra,fraction,3,0.38,0.04,,1,-0.34,ours,True\n")
    rows = read_table_csv(path)
    assert index.table_summary(table_plan, rows, {})["within"] == 1
    page = index.table_html(table_plan, rows)
    assert "<td>0.380</td><td>0.040</td><td class=far>-0.340</td>" in page
    assert "<td class=near>+0.007</td>" in page
    assert [p[:2] for p in plots.scatter_points(path)] == [(31.8, 32.5), (38.0, 4.0)]


def test_the_index_says_in_one_short_relative_line_why_there_is_no_estimate(results):
    """A run on a backbone the throughput profile lacks (the demo's resnet_tiny): the header names the backbone and
    the profile relative to the project, not the profile's absolute path and its list of backbones."""
    from rankrepro.plan.cost import PROFILES_DIR

    plan = json.loads((results / "plan" / "plan.json").read_text())
    plan["runs"] = {"r1": {"dataset": "toyset", "model": {"backbone": "resnet_tiny"}, "epochs": 1, "amp": "fp16",
                           "images": {"train_crop": 32, "test_crop": 32}, "sampler": {"batch_size": 8},
                           "max_batches_per_epoch": None, "train_split": "train", "eval": {"metrics": ["R@1"]}}}
    plan["datasets"] = {"toyset": {"facts": {}, "config": {"replica": True}}}
    meta = results / "manifests" / "toyset" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"replica": True, "counts": {"train": {"images": 16}, "test": {"images": 8}}}))
    text = index.to_markdown(index.build_index(plan, results))
    assert ("est. GPU h: no estimate (no train throughput for backbone 'resnet_tiny' in "
            "profiles/throughput/h100.yaml).") in text
    assert str(PROFILES_DIR) not in text and "it lists" not in text
