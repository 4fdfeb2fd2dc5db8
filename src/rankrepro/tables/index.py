"""The results index (``results/README.md``, and as HTML: :func:`~rankrepro.tables.formats.markdown_html`) and an
HTML rendering of each table for the report.

For every table of every paper in the plan (``results/plan/plan.json``), its entry from its CSV
(:mod:`rankrepro.tables.render`) and its plan cells, as its kind gives it
(:meth:`rankrepro.tables.kinds.base.TableKind.index_entry`: cells, reproduced, within one point,
pending by reason, where ours come from, runs and their hours), under the table's short title
(the spec's ``title``; the full caption is on the table's own page); the totals count each run
once. **Hours** are the wall time recorded by a table's runs (:func:`run_hours`), training
(``history.csv``: ``seconds`` per epoch, ``device`` per epoch) plus evaluation (``metrics.json``:
``seconds``; its ``device`` when recorded, else the training's), summed per device kind:
**GPU-hours** (CUDA) and **CPU-hours**. A run shared by several tables counts in each of them;
the total counts it once. **est. GPU h** beside them is the estimate before running
(:mod:`rankrepro.plan.cost`, ``python -m rankrepro cost``) on :data:`ESTIMATE_GPU`. **Variant rows** (:mod:`rankrepro.plan.variants`) are counted apart from the paper's
cells, per table and in the total. **best − last**
is the mean gap, in points, between the best epoch on the test set and the last epoch over a table's
cells with a test curve (the total: over every such cell), the optimism of the papers' model selection.
**Leaderboards** (tables of kind ``leaderboard``, :mod:`rankrepro.tables.kinds.leaderboard`: our own benchmark,
not a paper's) have a section of their own, apart from the papers' tables: their cells reproduce no paper (the
number a paper reports beside a loss is under that paper's recipe: context, no target) and count in none of the
papers' totals (cells, reproduced, within one point, pending); their runs count in the runs and hours, each once.

Links are relative to ``results/`` (the index's folder).
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

from rankrepro.record.selection import CURVE_FILE, read_curve
from rankrepro.io import atomic_write_text
from rankrepro.data.manifest import ManifestError
from rankrepro.plan.cost import ProfileError, plan_cost
from rankrepro.plan.model import Plan, TablePlan, as_table_plan
from rankrepro.tables.formats import markdown_html, md_cell, parse_number
from rankrepro.tables.kinds.base import WITHIN
from rankrepro.tables.kinds.leaderboard import SUMMARY
from rankrepro.tables.kinds.static import STATIC_DATA

#: the GPU kind of the index's estimate (profiles/throughput/<kind>.yaml)
ESTIMATE_GPU = "h100"
#: the table kind listed apart from the papers' tables (module docstring)
LEADERBOARD = "leaderboard"

LAYOUT = """\
- `manifests/<dataset>/` — manifest.csv + meta.json per prepared dataset
- `runs/<run_id>/` — run.json, history.csv, model.pt (unless `runtime.keep_model: false`), metrics.json (checkpoint.pt while training), curve.png (`runtime.curves`); curve.csv (the test curve, runs with `eval.every`)
- `tables/<paper>/<table>.{md,csv,tex,html}` — paper tables, paper number beside ours; `tables/<paper>/scatter.png`
- `tables/<benchmark>/<dataset>.{md,csv,tex,html,png}`, `tables/<benchmark>/summary.{md,csv,html}` — the leaderboards (config `benchmarks`), their plots and summary across datasets
- `synthetic/<name>.{md,json,png}` — results that need no image dataset
- `hgldv2/` — the H-GLDv2 labels rebuilt, and their comparison with the release
- `recipes.{md,html}` — every run's recipe card: its resolved values and where each came from
- `logs/<rule>/...` — one log per job (training and evaluation also keep each attempt's, `<log>.attempt<N>-<UTC time>.log`)
- `mlflow.db`, `mlartifacts/`, `mlflow/imported.json` — the MLflow store and its import record
- `report.html` — `snakemake --report results/report.html`: tables, training curves, paper-vs-ours scatters
- `bench/` — benchmark tables
"""


# ------------------------------------------------------------------------------ hours


def run_hours(run_dir: str | Path) -> dict:
    """``{"device": "cuda: <name>" | "cpu" | None, "train_s", "eval_s", "finished"}`` of one run, from
    its history.csv (seconds and device per epoch), its test curve (curve.csv: the seconds of each
    evaluation during training, on the training's device) and metrics.json (seconds, device when recorded)."""
    run_dir = Path(run_dir)
    out = {"device": None, "train_s": 0.0, "eval_s": 0.0, "cuda_s": 0.0, "cpu_s": 0.0, "unknown_s": 0.0,
           "finished": False}

    def add(seconds: float, device: str | None) -> None:
        kind = "unknown" if not device else ("cuda" if device.startswith("cuda") else "cpu")
        out[f"{kind}_s"] += seconds

    history = run_dir / "history.csv"
    if history.is_file():
        with open(history, newline="") as f:
            for row in csv.DictReader(f):
                seconds = parse_number(row.get("seconds")) or 0.0
                device = row.get("device") or None
                out["device"] = device or out["device"]
                out["train_s"] += seconds
                add(seconds, device)
    for row in read_curve(run_dir / CURVE_FILE):
        out["eval_s"] += row["seconds"]
        add(row["seconds"], out["device"])
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        record = json.loads(metrics.read_text())
        seconds = sum(float(v) for v in (record.get("seconds") or {}).values())
        out["eval_s"] += seconds
        add(seconds, record.get("device") or out["device"])
        out["finished"] = True
    return out


# ----------------------------------------------------------------------------- tables


def table_summary(table_plan: TablePlan | dict, rows: list[dict], hours: dict[str, dict],
                  shared: set[str] | None = None) -> dict:
    """The index entry of one table (its plan: a :class:`~rankrepro.plan.model.TablePlan` or its JSON),
    from its CSV rows (its kind's ``read_rows``), every run's :func:`run_hours` and the runs shared
    with other tables, as its kind gives it."""
    table = as_table_plan(table_plan)
    return table.kind.index_entry(table, rows, hours, shared)


def natural_key(key: str) -> list:
    """Sort key putting table2 before table10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def build_index(plan: Plan | dict, results_dir: str | Path) -> dict:
    """Every table of ``plan`` (a :class:`~rankrepro.plan.model.Plan` or its JSON) summarised from
    ``<results_dir>/tables`` and ``<results_dir>/runs``, the totals (each run counted once), and the
    synthetic and H-GLDv2 outputs present."""
    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    results_dir = Path(results_dir)
    users: Counter = Counter(r for t in plan.tables.values() for r in set(t.runs))
    shared = {r for r, n in users.items() if n > 1}
    hours = {rid: run_hours(results_dir / "runs" / rid) for rid in users}
    tables, figures, leaderboards = [], [], []
    for key, table in sorted(plan.tables.items(), key=lambda item: natural_key(item[0])):
        csv_path = results_dir / "tables" / f"{key}.csv"
        kind = table.kind
        rows = kind.read_rows(csv_path) if csv_path.is_file() and kind.numeric else []
        entry = kind.index_entry(table, rows, hours, shared)
        entry["built"] = csv_path.is_file()
        if not rows:  # not rendered yet (or no numbers): every cell is pending
            entry["reasons"] = dict(Counter(c.get("pending") or "table not rendered yet" for c in table.cells))
            entry["pending"] = entry["cells"] = len(table.cells)
        if kind.name == LEADERBOARD:  # apart from the papers' tables (module docstring)
            entry["plot"] = (results_dir / "tables" / f"{key}.png").is_file()
            entry["ncol"] = len(table.spec["columns"])  # a row's cells: one per metric
            leaderboards.append(entry)
            continue
        tables.append(entry)
        if (results_dir / "tables" / f"{key}.png").is_file():  # a sweep's plot
            figures.append(key)
    try:
        estimate = plan_cost(plan, ESTIMATE_GPU, results_dir)
    except ProfileError as err:  # one short line for the header (the demo's resnet_tiny has no row)
        estimate = {"error": err.brief}
    except ManifestError as err:
        estimate = {"error": str(err)}
    for entry in tables + leaderboards:
        entry["est_gpu_h"] = estimate.get("tables", {}).get(f"{entry['paper']}/{entry['table']}")
    synthetic = list(plan.synthetic.get("names", []))
    return {
        "tables": tables, "leaderboards": leaderboards, "shared": sorted(shared),
        "summaries": sorted({e["paper"] for e in leaderboards
                             if (results_dir / "tables" / e["paper"] / f"{SUMMARY}.md").is_file()}),
        "estimate": {k: v for k, v in estimate.items() if k != "runs"},
        "total": {
            "tables": len(tables), "papers": len({t["paper"] for t in tables}),
            "cells": sum(t["cells"] for t in tables), "reproduced": sum(t["reproduced"] for t in tables),
            "within": sum(t["within"] for t in tables), "pending": sum(t["pending"] for t in tables),
            "runs": len(hours), "finished": sum(h["finished"] for h in hours.values()),
            "gpu_h": sum(h["cuda_s"] for h in hours.values()) / 3600,
            "cpu_h": sum(h["cpu_s"] for h in hours.values()) / 3600,
            "unknown_h": sum(h["unknown_s"] for h in hours.values()) / 3600,
            "gap": _mean_gap(tables), "gap_cells": sum(t.get("gap_cells", 0) for t in tables),
            "variant_cells": sum(t.get("variant_cells", 0) for t in tables),
            "variant_reproduced": sum(t.get("variant_reproduced", 0) for t in tables),
        },
        "synthetic": [{"name": n, "md": (results_dir / "synthetic" / f"{n}.md").is_file(),
                       "png": (results_dir / "synthetic" / f"{n}.png").is_file()} for n in synthetic],
        "hgldv2": (results_dir / "hgldv2" / "compare.md").is_file(),
        "recipes": (results_dir / "recipes.md").is_file(),
        "scatters": sorted({t["paper"] for t in tables if (results_dir / "tables" / t["paper"] / "scatter.png").is_file()}),
        "curves": sorted(r for r in hours if (results_dir / "runs" / r / "curve.png").is_file()),
        "sweeps": figures,
    }


def _mean_gap(tables: list[dict]) -> float | None:
    """The mean best − last over every cell of ``tables`` (index entries) that has both."""
    cells = sum(t.get("gap_cells", 0) for t in tables)
    return sum(t["gap"] * t["gap_cells"] for t in tables if t.get("gap_cells")) / cells if cells else None


def _variants(entry: dict) -> str:
    """A table's variant cells beside its cells: `` (+N variant, M reproduced)``; "" without variant rows."""
    n = entry.get("variant_cells")
    return f" (+{n} variant, {entry['variant_reproduced']} reproduced)" if n else ""


def _gap(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def _hours(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.2f}" if value >= 0.01 else "<0.01"


def _estimated(entry: dict | None) -> str:
    """A table's estimated GPU-hours (``—`` without runs or estimate; ``+N?``: runs without an image count)."""
    if not entry or entry["runs"] == entry["not_estimated"]:
        return "—"
    return _hours(entry["gpu_h"]) + (f" (+{entry['not_estimated']}?)" if entry["not_estimated"] else "")


def _estimate_note(estimate: dict) -> str:
    if "error" in estimate:
        return f"est. GPU h: no estimate ({estimate['error']})."
    if not estimate:
        return ""
    how = "measured" if estimate["measured"] else "assumed, not measured"
    return (f"est. GPU h: the estimate before running on one {estimate['gpu']} (`python -m rankrepro cost`; "
            f"throughputs {how}: `profiles/throughput/{ESTIMATE_GPU}.yaml`; \"+N?\": N runs without an image count); "
            f"the plan's total {_hours(estimate['total']['gpu_h'])} GPU-hours, each run once.")


def to_markdown(index: dict) -> str:
    """``results/README.md``: the index (see the module docstring)."""
    t = index["total"]
    lines = [
        "# results/", "",
        ("Generated by the `results_index` rule (`python -m rankrepro results-index`) from the plan "
        "(`plan/plan.json`), every table's CSV and the runs' records; do not edit. Links are relative to "
        "`results/`. The Snakemake report (`snakemake --cores 1 --report results/report.html`) shows the same tables, "
        "a training curve per run and a paper-vs-ours scatter per paper."), "",
        f"**{t['papers']} papers, {t['tables']} tables: {t['reproduced']} of {t['cells']} cells reproduced, "
        f"{t['within']} within {WITHIN:g} point of the paper, {t['pending']} pending.** "
        f"{t['finished']} of {t['runs']} runs finished: {_hours(t['gpu_h'])} GPU-hours, "
        f"{_hours(t['cpu_h'])} CPU-hours" + (f", {_hours(t['unknown_h'])} hours on an unrecorded device"
                                              if t["unknown_h"] else "") + " (each run counted once)."
        + (f" Best epoch on the test set − last epoch: {_gap(t['gap'])} points on average over "
           f"{t['gap_cells']} cells." if t.get("gap_cells") else "")
        + (f" Variant rows (config `variants`: the paper row with the official code's or another reading's "
           f"setting): {t['variant_reproduced']} of {t['variant_cells']} cells reproduced, counted apart from the "
           "paper's cells." if t.get("variant_cells") else ""), "",
        "## Tables", "",
        ("Cells: the table's cells less the rows the paper cites from other work; reproduced: cells with a "
        f"number of ours; within 1 pt: |ours − paper| ≤ {WITHIN:g} where both exist (percent points, 0.01 in a "
        "column printed as a fraction; counts "
        "for dataset statistics tables); data: where ours comes "
        f"from (replica: generated replicas, meaningless as results; {STATIC_DATA}: a table of text "
        "the paper prints, e.g. its hyper-parameters, shown as transcribed). best − last: the mean over the "
        "table's cells (percent columns) of ours at the best epoch on the test set minus ours at the last "
        "epoch, in points: what choosing the epoch on the test set adds, the protocol of Smooth-AP, PNP, RaMBO "
        "and top-k (each table's page says which of the two its ours shows; — without a test curve). "
        "Hours: training + evaluation wall time "
        "of the table's runs recorded on a CUDA device (GPU) or on CPU; a run shared by several tables "
        "(runs column, \"shared\") counts in each of them. " + _estimate_note(index.get("estimate", {}))), "",
        "| paper | table | files | data | cells | reproduced | within 1 pt | best − last | pending | runs | GPU h | CPU h "
        "| est. GPU h |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for e in index["tables"]:
        key = f"{e['paper']}/{e['table']}"
        files = (f"[md](tables/{key}.md) · [csv](tables/{key}.csv) · [tex](tables/{key}.tex)"
                 + (f" · [plot](tables/{key}.png)" if key in index.get("sweeps", ()) else "")
                 if e["built"] else "not built yet")
        runs = "—" if not e["has_runs"] else (
            f"{e['finished']}/{e['runs']}" + (f" ({e['shared']} shared)" if e["shared"] else ""))
        hours = ("—", "—") if not e["has_runs"] else (_hours(e["gpu_h"]), _hours(e["cpu_h"]))
        lines.append(f"| {md_cell(e['paper'])} | {md_cell(e['table'] + ': ' + e['title'])} | {files} | {e['data']} | "
                     f"{e['cells']}{_variants(e)} | {e['reproduced']} | {e['within']} | {_gap(e.get('gap'))} | {e['pending']} | "
                     f"{runs} | {hours[0]} | "
                     f"{hours[1]} | {_estimated(e.get('est_gpu_h'))} |")
    pending = [e for e in index["tables"] if e["reasons"]]
    if pending:
        lines += ["", "### Pending cells, by reason", ""]
        for e in pending:
            lines.append(f"- **{e['paper']} {e['table']}**: " + "; ".join(
                f"{n} × {reason}" for reason, n in e["reasons"].items()))
    lines += _leaderboard_lines(index)
    if index["shared"]:
        lines += ["", "Runs shared by several tables (their hours count in each): "
                  + ", ".join(f"`{r}`" for r in index["shared"]) + "."]
    lines += ["", "## Recipes", "",
              "- [Every run's recipe card](recipes.md), by paper and table: the resolved values and where each came "
              "from (`python -m rankrepro recipe RUN_ID` prints one)" if index.get("recipes") else
              "Not built yet (rule `recipes`; `python -m rankrepro recipe RUN_ID` prints one card from the config)."]
    lines += ["", "## Figures", ""]
    if index["scatters"]:
        lines.append("- Paper vs ours, one point per reproduced cell: " + ", ".join(
            f"[{p}](tables/{p}/scatter.png)" for p in index["scatters"]))
    if index.get("sweeps"):
        lines.append("- Sweeps (ours beside the paper's points): " + ", ".join(
            f"[{key}](tables/{key}.png)" for key in index["sweeps"]))
    if index["curves"]:
        lines.append("- Training curves (loss and learning rates per epoch): " + ", ".join(
            f"[{r}](runs/{r}/curve.png)" for r in index["curves"]))
    if not (index["scatters"] or index["curves"] or index.get("sweeps")):
        lines.append("None yet.")
    lines += ["", "## Results without a dataset", ""]
    if index["synthetic"]:
        for s in index["synthetic"]:
            links = [f"[{s['name']}](synthetic/{s['name']}.md)" if s["md"] else f"{s['name']} (not built yet)"]
            if s["png"]:
                links.append(f"[figure](synthetic/{s['name']}.png)")
            lines.append("- " + " · ".join(links))
    else:
        lines.append("None planned (`synthetic.names` in the config).")
    lines += ["", "## H-GLDv2", "",
              "- [Our labels vs the release](hgldv2/compare.md) (coverage, adjusted Rand index, per-supercategory "
              "precision / recall)" if index["hgldv2"] else "Not built (`hgldv2.build: true` in the config builds it)."]
    lines += ["", "## Layout", "", LAYOUT.rstrip()]
    return "\n".join(lines) + "\n"


def _leaderboard_lines(index: dict) -> list[str]:
    """The index's section of the leaderboards (module docstring); [] without any planned."""
    if not index.get("leaderboards"):
        return []
    lines = ["", "## Leaderboards", "",
             ("Our own benchmark, apart from the papers' tables (config `benchmarks`; docs/planning.md \"Leaderboards: "
              "under one roof\"): every registered retrieval loss on one dataset under one recipe, mean ± std over "
              "seeds, ranked, each loss tested against the best (Welch t-test), beside it the number a paper reports for "
              "the loss under that paper's recipe. Its cells reproduce no paper: they count in none of the totals "
              "above. Losses: the leaderboard's rows; ranked: those with a number."), ""]
    if index.get("summaries"):
        lines += ["Summary across datasets (each loss's rank per dataset, mean rank): " + ", ".join(
            f"[{b}](tables/{b}/{SUMMARY}.md)" for b in index["summaries"]), ""]
    lines += ["| benchmark | dataset | files | data | losses | ranked | pending cells | runs | GPU h | CPU h "
              "| est. GPU h |", "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for e in index["leaderboards"]:
        key = f"{e['paper']}/{e['table']}"
        files = (f"[md](tables/{key}.md) · [csv](tables/{key}.csv) · [tex](tables/{key}.tex)"
                 + (f" · [plot](tables/{key}.png)" if e.get("plot") else "") if e["built"] else "not built yet")
        ncol = e["ncol"]
        runs = f"{e['finished']}/{e['runs']}" + (f" ({e['shared']} shared)" if e["shared"] else "")
        lines.append(f"| {md_cell(e['paper'])} | {md_cell(e['table'] + ': ' + e['title'])} | {files} | {e['data']} | "
                     f"{e['cells'] // ncol} | {e['reproduced'] // ncol} | {e['pending']} | {runs} | "
                     f"{_hours(e['gpu_h'])} | {_hours(e['cpu_h'])} | {_estimated(e.get('est_gpu_h'))} |")
    return lines


def write_index(plan_path: str | Path, results_dir: str | Path, out: str | Path,
                html_out: str | Path | None = None) -> dict:
    """Write the index of ``plan_path``'s tables (see :func:`build_index`) to ``out`` (Markdown) and
    to ``html_out`` (the same as an HTML page, for the report; links relative to the results
    folder); return it."""
    index = build_index(Plan.load(plan_path), results_dir)
    text = to_markdown(index)
    atomic_write_text(out, text)
    if html_out:
        atomic_write_text(html_out, markdown_html(text, title="results index"))
    return index


# ------------------------------------------------------------------------- table html


def table_html(table_plan: TablePlan | dict, rows: list[dict]) -> str:
    """A standalone HTML page of a rendered table (its CSV rows, as its kind reads them), as its kind
    draws it (:meth:`rankrepro.tables.kinds.base.TableKind.html`)."""
    table = as_table_plan(table_plan)
    return table.kind.html(table, rows)


def write_table_html(table_plan_path: str | Path, table_csv: str | Path, out: str | Path) -> None:
    """The HTML page of a table (its plan's JSON file and its rendered CSV) to ``out``."""
    table = TablePlan.load(table_plan_path)
    atomic_write_text(out, table.kind.html(table, table.kind.read_rows(table_csv)))
