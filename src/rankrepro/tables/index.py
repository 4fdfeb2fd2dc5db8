"""The results index (``results/README.md``) and an HTML rendering of each table for the report.

For every table of every paper in the plan (``results/plan/plan.json``), from its CSV
(:mod:`rankrepro.tables.render`) and its plan cells:

- **cells**: all cells of the table; **cited** cells (rows the paper cites from other work) are
  not counted as to reproduce;
- **reproduced**: cells with a number of ours;
- **within 1 pt**: reproduced cells with a paper number and ``|ours − paper| ≤ 1.0`` (percent
  points; 0.01 in a column printed as a fraction, ``unit: fraction``; for a dataset statistics
  table, counts);
- **pending**: cells with no number of ours, grouped by reason (the plan cell's ``pending``
  string, else the CSV status, e.g. ``missing`` for a run not finished);
- **data**: ``replica`` when any number of ours comes from a generated replica, ``real`` when
  ours come from the real data, ``—`` when nothing is ours yet;
- a **static** table (text transcribed from the paper, e.g. a hyper-parameter table) has nothing
  to reproduce: no cells, no runs; its data column says so;
- **hours**: the wall time recorded by the table's runs, training (``history.csv``: ``seconds``
  per epoch, ``device`` per epoch) plus evaluation (``metrics.json``: ``seconds``; its ``device``
  when recorded, else the training's), summed per device kind: **GPU-hours** (CUDA) and
  **CPU-hours**. A run shared by several tables counts in each of them; the total counts it once.

Links are relative to ``results/`` (the index's folder).
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections import Counter
from pathlib import Path

from rankrepro.io import atomic_write_text
from rankrepro.tables.render import paper_number

WITHIN = 1.0  # points: |ours - paper| <= WITHIN counts as "within one point"
STATIC = "static"  # the spec kind of a table of text (rankrepro.experiments.plan.STATIC)
STATIC_DATA = "static: transcribed, nothing to reproduce"
#: spec kinds with no runs of their own: no run count, no hours in the index
NO_RUNS = ("dataset_statistics", STATIC)

LAYOUT = """\
- `manifests/<dataset>/` — manifest.csv + meta.json per prepared dataset
- `runs/<run_id>/` — run.json, history.csv, model.pt, metrics.json (checkpoint.pt while training), curve.png
- `tables/<paper>/<table>.{md,csv,tex,html}` — paper tables, paper number beside ours; `tables/<paper>/scatter.png`
- `synthetic/<name>.{md,json,png}` — results that need no image dataset
- `hgldv2/` — the H-GLDv2 labels rebuilt, and their comparison with the release
- `logs/<rule>/...` — one log per job
- `mlflow.db`, `mlartifacts/`, `mlflow/imported.json` — the MLflow store and its import record
- `report.html` — `snakemake --report results/report.html`: tables, training curves, paper-vs-ours scatters
- `bench/` — benchmark tables
"""


def _float(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    value = float(text)
    return None if math.isnan(value) else value


def tolerance(row: dict) -> float:
    """One point in a CSV row's unit: WITHIN percent points, WITHIN / 100 for a fraction (0.318)."""
    return WITHIN / 100 if row.get("unit") == "fraction" else WITHIN


def read_table_csv(path: str | Path) -> list[dict]:
    """The rows of a rendered table's CSV, ``paper`` and ``ours`` as floats (None when empty)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["paper"], row["ours"] = _float(row.get("paper")), _float(row.get("ours"))
    return rows


# ------------------------------------------------------------------------------ hours


def run_hours(run_dir: str | Path) -> dict:
    """``{"device": "cuda: <name>" | "cpu" | None, "train_s", "eval_s", "finished"}`` of one run, from
    its history.csv (seconds and device per epoch) and metrics.json (seconds, device when recorded)."""
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
                seconds = _float(row.get("seconds")) or 0.0
                device = row.get("device") or None
                out["device"] = device or out["device"]
                out["train_s"] += seconds
                add(seconds, device)
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        record = json.loads(metrics.read_text())
        seconds = sum(float(v) for v in (record.get("seconds") or {}).values())
        out["eval_s"] += seconds
        add(seconds, record.get("device") or out["device"])
        out["finished"] = True
    return out


# ----------------------------------------------------------------------------- tables


def table_summary(table_plan: dict, rows: list[dict], hours: dict[str, dict], shared: set[str] | None = None) -> dict:
    """The index entry of one table: its plan (``plan.json``'s ``tables[key]``), its CSV rows
    (:func:`read_table_csv`), every run's :func:`run_hours` and the runs shared with other tables."""
    shared = shared or set()
    pending_of = {(c["row"], c["column"]): c.get("pending") for c in table_plan["cells"]}
    ncol = len(table_plan["spec"]["columns"])
    reasons: Counter = Counter()
    counted = reproduced = within = cited = 0
    replica = None
    for i, row in enumerate(rows):
        if row.get("status") == "cited":
            cited += 1
            continue
        counted += 1
        if row["ours"] is not None:
            reproduced += 1
            replica = (replica or False) or row.get("replica") == "True"
            if row["paper"] is not None and abs(row["ours"] - row["paper"]) <= tolerance(row) + 1e-9:
                within += 1
        else:
            reasons[pending_of.get((i // ncol, i % ncol)) or row.get("status") or "missing"] += 1
    runs = list(table_plan.get("runs", []))
    used = [hours[r] for r in runs if r in hours]
    return {
        "paper": table_plan["paper"], "table": table_plan["table"],
        "kind": table_plan["spec"].get("kind", "runs"), "caption": table_plan["spec"].get("caption", ""),
        "cells": counted, "cited": cited, "reproduced": reproduced, "within": within,
        "pending": sum(reasons.values()), "reasons": dict(reasons.most_common()),
        "data": STATIC_DATA if table_plan["spec"].get("kind") == STATIC else (
            "—" if replica is None else ("replica" if replica else "real")),
        "runs": len(runs), "finished": sum(h["finished"] for h in used), "shared": len(set(runs) & shared),
        "gpu_h": sum(h["cuda_s"] for h in used) / 3600, "cpu_h": sum(h["cpu_s"] for h in used) / 3600,
        "unknown_h": sum(h["unknown_s"] for h in used) / 3600,
    }


def _natural(key: str) -> list:
    """Sort key putting table2 before table10."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def build_index(plan: dict, results_dir: str | Path) -> dict:
    """Every table of ``plan`` summarised from ``<results_dir>/tables`` and ``<results_dir>/runs``,
    the totals (each run counted once), and the synthetic and H-GLDv2 outputs present."""
    results_dir = Path(results_dir)
    users: Counter = Counter(r for t in plan["tables"].values() for r in set(t.get("runs", [])))
    shared = {r for r, n in users.items() if n > 1}
    hours = {rid: run_hours(results_dir / "runs" / rid) for rid in users}
    tables = []
    for key, table_plan in sorted(plan["tables"].items(), key=lambda item: _natural(item[0])):
        csv_path = results_dir / "tables" / f"{key}.csv"
        static = table_plan["spec"].get("kind") == STATIC  # its CSV holds the paper's text, no numbers
        rows = read_table_csv(csv_path) if csv_path.is_file() and not static else []
        entry = table_summary(table_plan, rows, hours, shared)
        entry["built"] = csv_path.is_file()
        if not rows:  # not rendered yet: every cell is pending
            entry["reasons"] = dict(Counter(c.get("pending") or "table not rendered yet" for c in table_plan["cells"]))
            entry["pending"] = entry["cells"] = len(table_plan["cells"])
        tables.append(entry)
    synthetic = [name for name in plan.get("synthetic", {}).get("names", [])]
    return {
        "tables": tables, "shared": sorted(shared),
        "total": {
            "tables": len(tables), "papers": len({t["paper"] for t in tables}),
            "cells": sum(t["cells"] for t in tables), "reproduced": sum(t["reproduced"] for t in tables),
            "within": sum(t["within"] for t in tables), "pending": sum(t["pending"] for t in tables),
            "runs": len(hours), "finished": sum(h["finished"] for h in hours.values()),
            "gpu_h": sum(h["cuda_s"] for h in hours.values()) / 3600,
            "cpu_h": sum(h["cpu_s"] for h in hours.values()) / 3600,
            "unknown_h": sum(h["unknown_s"] for h in hours.values()) / 3600,
        },
        "synthetic": [{"name": n, "md": (results_dir / "synthetic" / f"{n}.md").is_file(),
                       "png": (results_dir / "synthetic" / f"{n}.png").is_file()} for n in synthetic],
        "hgldv2": (results_dir / "hgldv2" / "compare.md").is_file(),
        "scatters": sorted({t["paper"] for t in tables if (results_dir / "tables" / t["paper"] / "scatter.png").is_file()}),
        "curves": sorted(r for r in hours if (results_dir / "runs" / r / "curve.png").is_file()),
        "sweeps": [f"{t['paper']}/{t['table']}" for t in tables
                   if (results_dir / "tables" / t["paper"] / f"{t['table']}.png").is_file()],
    }


def _hours(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.2f}" if value >= 0.01 else "<0.01"


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
                                              if t["unknown_h"] else "") + " (each run counted once).", "",
        "## Tables", "",
        ("Cells: the table's cells less the rows the paper cites from other work; reproduced: cells with a "
        f"number of ours; within 1 pt: |ours − paper| ≤ {WITHIN:g} where both exist (percent points, 0.01 in a "
        "column printed as a fraction; counts "
        "for dataset statistics tables); data: where ours comes "
        f"from (replica: generated replicas, meaningless as results; {STATIC_DATA}: a table of text "
        "the paper prints, e.g. its hyper-parameters, shown as transcribed). Hours: training + evaluation wall time "
        "of the table's runs recorded on a CUDA device (GPU) or on CPU; a run shared by several tables "
        "(runs column, \"shared\") counts in each of them."), "",
        "| paper | table | files | data | cells | reproduced | within 1 pt | pending | runs | GPU h | CPU h |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for e in index["tables"]:
        key = f"{e['paper']}/{e['table']}"
        files = (f"[md](tables/{key}.md) · [csv](tables/{key}.csv) · [tex](tables/{key}.tex)"
                 + (f" · [plot](tables/{key}.png)" if key in index.get("sweeps", ()) else "")
                 if e["built"] else "not built yet")
        runs = "—" if e["kind"] in NO_RUNS else (
            f"{e['finished']}/{e['runs']}" + (f" ({e['shared']} shared)" if e["shared"] else ""))
        hours = ("—", "—") if e["kind"] in NO_RUNS else (_hours(e["gpu_h"]), _hours(e["cpu_h"]))
        lines.append(f"| {e['paper']} | {e['table']}: {e['caption']} | {files} | {e['data']} | {e['cells']} | "
                     f"{e['reproduced']} | {e['within']} | {e['pending']} | {runs} | {hours[0]} | {hours[1]} |")
    pending = [e for e in index["tables"] if e["reasons"]]
    if pending:
        lines += ["", "### Pending cells, by reason", ""]
        for e in pending:
            lines.append(f"- **{e['paper']} {e['table']}**: " + "; ".join(
                f"{n} × {reason}" for reason, n in e["reasons"].items()))
    if index["shared"]:
        lines += ["", "Runs shared by several tables (their hours count in each): "
                  + ", ".join(f"`{r}`" for r in index["shared"]) + "."]
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


def write_index(plan_path: str | Path, results_dir: str | Path, out: str | Path,
                html_out: str | Path | None = None) -> dict:
    """Write the index of ``plan_path``'s tables (see :func:`build_index`) to ``out`` (Markdown) and
    to ``html_out`` (the same as an HTML page, for the report; links relative to the results
    folder); return it."""
    index = build_index(json.loads(Path(plan_path).read_text()), results_dir)
    text = to_markdown(index)
    atomic_write_text(out, text)
    if html_out:
        atomic_write_text(html_out, markdown_html(text, title="results index"))
    return index


# ------------------------------------------------------------------------- table html


def _num(value: float, decimals: int = 1, exact: bool = False) -> str:
    """As the Markdown tables print it: the row's decimals (one, or the CSV's ``decimals``: 2, 3 for a
    fraction), counts (whole numbers of a dataset statistics table) with thousands separators;
    ``exact``: a paper's number (:func:`rankrepro.tables.render.paper_number`: more decimals where its
    transcription has more, 59.55)."""
    if value.is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    return paper_number(value, decimals) if exact else f"{value:.{decimals}f}"


def _mark(text: str, mark: str | None) -> str:
    """A value as the rendered tables mark it (their CSV's ``paper_mark`` / ``ours_mark``)."""
    return {"best": f"<b>{text}</b>", "second": f"<u>{text}</u>"}.get(mark or "", text)


def table_html(table_plan: dict, rows: list[dict]) -> str:
    """A standalone HTML page of a rendered table (its CSV rows): one row per method or dataset,
    paper / ours / Δ per column, Δ green within one point and red beyond, pending cells with their
    reason, best / second best (bold / underlined) where the CSV marks them."""
    spec = table_plan["spec"]
    if spec.get("kind") == STATIC:
        return static_html(table_plan, rows)
    ncol = len(spec["columns"])
    name_key = "method" if spec.get("kind", "runs") != "dataset_statistics" else "name"
    replica = any(r.get("replica") == "True" for r in rows)
    esc = html.escape
    head = "".join(f'<th colspan="3">{esc(r["column"])}</th>' for r in rows[:ncol])
    sub = "".join("<th>paper</th><th>ours</th><th>Δ</th>" for _ in range(ncol))
    body, notes = [], {}
    for i in range(0, len(rows), ncol):
        cells = [f"<td class=name>{esc(rows[i].get(name_key, ''))}</td>"]
        for r in rows[i:i + ncol]:
            diff = _float(r.get("diff"))
            cls = "" if diff is None else (" class=near" if abs(diff) <= tolerance(r) + 1e-9 else " class=far")
            d = int(r["decimals"]) if r.get("decimals") else 1
            if r["ours"] is None and r.get("status") not in ("ours", "cited"):
                mark = notes.setdefault(r["status"], len(notes) + 1)
                ours = f"—<sup>{mark}</sup>"
            else:
                ours = "—" if r["ours"] is None else _num(r["ours"], d) + (
                    f" ± {float(r['std']):.{d}f}" if r.get("std") else "")
            paper = "" if r["paper"] is None else _mark(_num(r["paper"], d, exact=True), r.get("paper_mark"))
            ours = _mark(ours, r.get("ours_mark"))
            delta = "" if diff is None else f"{diff:+.{d}f}"
            cells += [f"<td>{paper}</td>", f"<td>{ours}</td>", f"<td{cls}>{delta}</td>"]
        body.append("<tr>" + "".join(cells) + "</tr>")
    parts = [
        "<!DOCTYPE html><html><head><meta charset=utf-8>",
        (f"<title>{esc(spec['paper'])} {esc(spec['table'])}</title><style>"
        "body{font-family:sans-serif;font-size:14px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.name{text-align:left}"
        ".near{background:#d9f2d9}.far{background:#f9dcdc}.replica{background:#fff3cd;padding:4px}"
        "</style></head><body>"),
        f"<h3>{esc(spec['paper'])} {esc(spec['table'])}: {esc(spec.get('caption', ''))}</h3>",
        f"<p>Source: {esc(str(spec.get('source', '')))}. Δ = ours − paper; green: within {WITHIN:g} point.</p>",
    ]
    if replica:
        parts.append("<p class=replica><b>Replica data.</b> Ours comes from generated replicas of the datasets; "
                     "the numbers are meaningless as results.</p>")
    parts += [f"<table><tr><th></th>{head}</tr><tr><th></th>{sub}</tr>", *body, "</table>"]
    if notes:
        parts.append("<ol>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ol>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def static_html(table_plan: dict, rows: list[dict]) -> str:
    """A standalone HTML page of a static table (its CSV rows: method, column, paper): the paper's
    cells as printed, nothing of ours."""
    spec = table_plan["spec"]
    esc = html.escape
    ncol = len(spec["columns"])
    head = "".join(f"<th>{esc(r['column'])}</th>" for r in rows[:ncol])
    body = ["<tr><td class=name>" + esc(rows[i]["method"]) + "</td>"
            + "".join(f"<td>{esc(r['paper'] or '')}</td>" for r in rows[i:i + ncol]) + "</tr>"
            for i in range(0, len(rows), ncol)]
    return "\n".join([
        "<!DOCTYPE html><html><head><meta charset=utf-8>",
        (f"<title>{esc(spec['paper'])} {esc(spec['table'])}</title><style>"
         "body{font-family:sans-serif;font-size:14px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 6px;text-align:center}td.name{text-align:left}</style></head><body>"),
        f"<h3>{esc(spec['paper'])} {esc(spec['table'])}: {esc(spec.get('caption', ''))}</h3>",
        f"<p>Source: {esc(str(spec.get('source', '')))}. A static table: text transcribed from the paper, "
        "nothing to reproduce.</p>",
        f"<table><tr><th>{esc(spec.get('row_header', 'Method'))}</th>{head}</tr>", *body, "</table>",
        "</body></html>"]) + "\n"


def write_table_html(table_plan_path: str | Path, table_csv: str | Path, out: str | Path) -> None:
    table_plan = json.loads(Path(table_plan_path).read_text())
    if table_plan["spec"].get("kind") == STATIC:  # the paper's text: no numbers to read
        with open(table_csv, newline="") as f:
            rows = list(csv.DictReader(f))
    else:
        rows = read_table_csv(table_csv)
    atomic_write_text(out, table_html(table_plan, rows))


# ----------------------------------------------------------------------- index as html


def _inline(text: str) -> str:
    """Markdown inline markup of the index (code, bold, links) as HTML."""
    import re

    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', out)


def markdown_html(text: str, title: str = "results") -> str:
    """The subset of Markdown :func:`to_markdown` writes (headings, paragraphs, lists, pipe tables,
    code, bold, links) as a standalone HTML page."""
    body, i, lines = [], 0, text.splitlines()
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            head, data = rows[0], [r for r in rows[1:] if not all(set(c) <= set("-:") for c in r)]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in data)
                        + "</table>")
            continue
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = ("body{font-family:sans-serif;font-size:14px;max-width:70em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px}code{background:#f3f3f3}")
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
