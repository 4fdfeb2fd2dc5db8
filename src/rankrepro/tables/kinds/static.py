"""``kind: static``: a table of text the paper prints (e.g. RaMBO's complexity table or its
hyper-parameters), nothing to reproduce.

It plans no runs, no cells and no datasets; its plan carries the spec. Rendered: the paper's
cells alone. Markdown keeps the cells as printed (pipes escaped); in LaTeX, ``$...$`` stays math
and the text around it is escaped (:func:`rankrepro.tables.formats.tex_text`); ✓ prints as
amssymb's check mark: the document needs the amssymb package. The index counts no cells and
no runs; its data column says the table is transcribed.
"""

from __future__ import annotations

import csv

from rankrepro.plan.schema import PlanError
from rankrepro.tables.formats import (column_title, csv_text, group_spans, html_text, latex_table, markdown_page,
                                      tex_text, write_outputs)
from rankrepro.tables.kinds import TABLE_KINDS
from rankrepro.tables.kinds.base import KindPlan, TableKind, check_paper_counts

__all__ = ["STATIC_DATA", "STATIC_NOTE", "StaticTable", "static_rows"]

STATIC_NOTE = "A static table: text transcribed from the paper, nothing to reproduce (no runs, no \"ours\")."
#: the index's data column of a static table
STATIC_DATA = "static: transcribed, nothing to reproduce"


def static_rows(spec: dict) -> list[dict]:
    """One dict per (row, column) of a static table: method, column, paper (the cell as printed)."""
    return [{"method": row["method"], "column": column_title(column), "paper": row["cells"][c]}
            for row in spec["rows"] for c, column in enumerate(spec["columns"])]


def static_markdown(spec: dict) -> str:
    """The paper's cells as a Markdown table, as printed, under the note that the table is static."""
    header = [spec.get("row_header", "Method")] + [column_title(c) for c in spec["columns"]]
    notes = [f"{row['method']}: {row['note']}" for row in spec["rows"] if row.get("note")]
    return markdown_page(spec, f"Source: {spec['source']}. {STATIC_NOTE}", None, header,
                         [[row["method"], *row["cells"]] for row in spec["rows"]], notes)


def static_latex(spec: dict) -> str:
    """The paper's cells as a booktabs tabular (math kept, text escaped: :func:`tex_text`)."""
    columns = spec["columns"]
    lines = []
    if any(c.get("group") for c in columns):
        groups = group_spans(columns, 1)
        lines.append(" & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{tex_text(g)}}}" for g, n in groups) + r" \\")
    lines += [" & ".join(tex_text(t) for t in [spec.get("row_header", "Method"), *(c["header"] for c in columns)])
              + r" \\", r"\midrule"]
    for row in spec["rows"]:
        lines.append(" & ".join(tex_text(t) for t in [row["method"], *row["cells"]]) + r" \\")
    return latex_table(tex_text(spec["caption"]), "l" + "c" * len(columns), lines)


@TABLE_KINDS.register("static")
class StaticTable(TableKind):
    """The paper's text as printed (see the module docstring)."""

    has_runs = False
    numeric = False

    def check_before_schema(self, spec: dict, where: str) -> None:
        for key in ("seeds", "best"):
            if key in spec:
                raise PlanError(f"{where}: {key}: a static table has no runs (its cells are the paper's text)")

    def check(self, spec: dict, where: str, schemas) -> None:
        check_paper_counts(spec, where, key="cells")

    def plan(self, spec: dict, planner) -> KindPlan:
        return KindPlan([], {})

    def render(self, table, runs_dir, out_prefix, manifests_dir=None) -> list[dict]:
        spec = table.spec
        rows = static_rows(spec)
        write_outputs(out_prefix, static_markdown(spec), csv_text(rows, ["method", "column", "paper"]),
                      static_latex(spec))
        return rows

    def read_rows(self, csv_path) -> list[dict]:
        with open(csv_path, newline="") as f:
            return list(csv.DictReader(f))

    def data_label(self, replica) -> str:
        return STATIC_DATA

    def html(self, table, rows: list[dict]) -> str:
        """The paper's cells as printed, nothing of ours."""
        spec = table.spec
        esc = html_text
        ncol = len(spec["columns"])
        head = "".join(f"<th>{esc(r['column'])}</th>" for r in rows[:ncol])
        body = ["<tr><td class=name>" + esc(rows[i]["method"]) + "</td>"
                + "".join(f"<td>{esc(r['paper'] or '')}</td>" for r in rows[i:i + ncol]) + "</tr>"
                for i in range(0, len(rows), ncol)]
        return "\n".join([
            "<!DOCTYPE html><html><head><meta charset=utf-8>",
            (f"<title>{esc(spec['paper'])} {esc(spec['table'])}</title><style>"
             "body{font-family:sans-serif;font-size:14px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:center}td.name{text-align:left}</style></head>"
             "<body>"),
            f"<h3>{esc(spec['paper'])} {esc(spec['table'])}: {esc(spec.get('caption', ''))}</h3>",
            f"<p>Source: {esc(str(spec.get('source', '')))}. A static table: text transcribed from the paper, "
            "nothing to reproduce.</p>",
            f"<table><tr><th>{esc(spec.get('row_header', 'Method'))}</th>{head}</tr>", *body, "</table>",
            "</body></html>"]) + "\n"
