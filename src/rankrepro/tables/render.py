"""Render a table spec with the paper's numbers beside ours, to Markdown, CSV and LaTeX.

Ours is the mean over the cell's runs (seeds) of the metric in percent, with
``± std`` when there are several; the difference is ours − paper.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

from rankrepro.io import atomic_write_text

REPLICA_NOTE = ("Numbers under 'ours' come from generated replicas of the datasets (demo profile: tiny images, "
                "tiny backbone, random initialisation); they are meaningless as results.")


def cell_values(cells: list[dict], runs_dir: str | Path) -> tuple[dict, bool]:
    """{(row, column): (mean, std or None, n)} in percent, and whether any run used replica data."""
    values, replica = {}, False
    for cell in cells:
        found = []
        for rid in cell["run_ids"]:
            path = Path(runs_dir) / rid / "metrics.json"
            result = json.loads(path.read_text())
            replica |= bool(result.get("replica"))
            if cell["metric"] not in result["metrics"]:
                raise KeyError(f"{path} has no metric {cell['metric']!r} (it has {sorted(result['metrics'])}); "
                               "add it to the setup's eval.metrics")
            found.append(100.0 * result["metrics"][cell["metric"]])
        if found:
            std = statistics.stdev(found) if len(found) > 1 else None
            values[(cell["row"], cell["column"])] = (statistics.fmean(found), std, len(found))
    return values, replica


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def table_rows(spec: dict, cells: list[dict], values: dict) -> list[dict]:
    """One dict per (row, column): method, column, paper, ours, std, diff, status."""
    out = []
    by_pos = {(c["row"], c["column"]): c for c in cells}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            paper = row["paper"][c]
            mean, std, n = values.get((r, c), (None, None, 0))
            cell = by_pos[(r, c)]
            status = "cited" if row.get("cited") else ("ours" if mean is not None else (cell["pending"] or "missing"))
            out.append({
                "method": row["method"], "column": f"{column['group']} {column['header']}", "metric": column["metric"],
                "paper": paper, "ours": None if mean is None else round(mean, 2),
                "std": None if std is None else round(std, 2), "seeds": n,
                "diff": None if mean is None or paper is None else round(mean - paper, 2), "status": status,
            })
    return out


def _ours(entry: dict) -> str:
    if entry["ours"] is None:
        return "—"
    return f"{entry['ours']:.1f}" + (f" ± {entry['std']:.1f}" if entry["std"] is not None else "")


def _diff(entry: dict) -> str:
    return "" if entry["diff"] is None else f"{entry['diff']:+.1f}"


def to_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    header = ["Method"] + [f"{c['group']} {c['header']} {part}" for c in spec["columns"]
                           for part in ("paper", "ours", "Δ")]
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "",
             f"Source: {spec['source']}. Paper numbers beside ours (percent); Δ = ours − paper; "
             "— = no run yet (see notes).", ""]
    if replica:
        lines += [f"> **Replica data.** {REPLICA_NOTE}", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        method = row["method"] + (" (cited)" if row.get("cited") else "")
        cells = [method] + [part for e in entries for part in (_fmt(e["paper"]), _ours(e), _diff(e))]
        lines.append("| " + " | ".join(cells) + " |")
        notes += sorted({e["status"] for e in entries if e["status"] not in ("ours", "cited")})
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict], replica: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*rows[0].keys(), "replica"])
    writer.writeheader()
    for entry in rows:
        writer.writerow({**entry, "replica": replica})
    return buffer.getvalue()


def _tex_escape(text: str) -> str:
    return text.replace("&", r"\&").replace("%", r"\%").replace("_", r"\_").replace("#", r"\#")


def to_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    groups: list[tuple[str, int]] = []
    for column in spec["columns"]:
        if groups and groups[-1][0] == column["group"]:
            groups[-1] = (column["group"], groups[-1][1] + 3)
        else:
            groups.append((column["group"], 3))
    caption = _tex_escape(spec["caption"]) + (r" \emph{Replica data: ours is meaningless.}" if replica else "")
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}",
             r"\begin{tabular}{l" + "rrr" * ncol + "}", r"\toprule",
             "Method & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{_tex_escape(g)}}}" for g, n in groups) + r" \\",
             " & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{_tex_escape(c['header'])}}}" for c in spec["columns"])
             + r" \\",
             " & " + " & ".join(["paper & ours & $\\Delta$"] * ncol) + r" \\", r"\midrule"]
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        parts = [_tex_escape(row["method"])]
        for e in entries:
            ours = "--" if e["ours"] is None else f"{e['ours']:.1f}" + (
                f" $\\pm$ {e['std']:.1f}" if e["std"] is not None else "")
            parts += [_fmt(e["paper"]), ours, _diff(e)]
        lines.append(" & ".join(parts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def render(table_plan: dict, runs_dir: str | Path, out_prefix: str | Path) -> list[dict]:
    """Write ``<out_prefix>.md``, ``.csv`` and ``.tex`` from a table's plan (``results/plan/tables/<paper>/<table>.json``:
    the spec and its cells, see :func:`rankrepro.experiments.plan.make_plan`); return the table's entries."""
    spec, cells = table_plan["spec"], table_plan["cells"]
    values, replica = cell_values(cells, runs_dir)
    rows = table_rows(spec, cells, values)
    out_prefix = Path(out_prefix)
    atomic_write_text(out_prefix.with_suffix(".md"), to_markdown(spec, rows, replica))
    atomic_write_text(out_prefix.with_suffix(".csv"), to_csv(rows, replica))
    atomic_write_text(out_prefix.with_suffix(".tex"), to_latex(spec, rows, replica))
    return rows
