"""What every table kind does (:class:`TableKind`), and what the kinds share.

A kind checks its spec (:meth:`TableKind.check_before_schema`, :meth:`TableKind.check`), plans it
(:meth:`TableKind.plan`: its cells, the runs and datasets they need, :class:`KindPlan`), renders it
(:meth:`TableKind.render`: ``<prefix>.md``, ``.csv``, ``.tex``), and gives its entry in the results
index (:meth:`TableKind.index_entry`) and its HTML page for the report (:meth:`TableKind.html`).
The index entry and HTML page here are those of a table of numbers (its CSV's ``paper``, ``ours``,
``diff``, ``status`` per cell):

- **cells**: all cells of the table; **cited** cells (rows the paper cites from other work) are
  not counted as to reproduce;
- **reproduced**: cells with a number of ours all of whose runs (``run_ids``, a sweep's
  ``reference_run_ids`` too) have finished (a ``metrics.json``): a table rendered before its runs
  changed (new run ids, a run removed) does not count its old numbers, so "reproduced" never
  exceeds what the "runs finished" column allows;
- **within 1 pt**: reproduced cells with a paper number and ``|ours − paper| ≤ 1.0`` (percent
  points; 0.01 in a column printed as a fraction, ``unit: fraction``; for a dataset statistics
  table, counts);
- **pending**: cells with no number of ours, grouped by reason (the plan cell's ``pending``
  string, else the CSV status, e.g. ``missing`` for a run not finished -- also where the CSV has a
  number of ours whose run has not finished);
- **data**: ``replica`` when any number of ours comes from a generated replica, ``real`` when
  ours come from the real data, ``—`` when nothing is ours yet;
- **best − last**: over the reproduced cells of percent columns with both numbers (a test curve:
  :mod:`rankrepro.record.selection`), the mean of the best epoch's on the test set minus the last
  epoch's, in points (``gap``, over ``gap_cells``; None without such a cell): how much choosing the
  epoch on the test set, as Smooth-AP, PNP, RaMBO and top-k report, adds;
- **variant cells**: the cells of variant rows (:mod:`rankrepro.plan.variants`), counted apart (``variant_cells``,
  ``variant_reproduced``) and in none of the counts above; a variant's cell in a column it does not change is none;
- **hours**: the wall time of the table's runs (:func:`rankrepro.tables.index.run_hours`), summed
  per device kind; a run shared by several tables counts in each of them.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from rankrepro.messages import ShortMessage
from rankrepro.plan.schema import PlanError
from rankrepro.plan.variants import SAME_AS_MAIN
from rankrepro.tables.formats import html_mark, html_text, paper_number, parse_number, read_table_csv

__all__ = ["REPLICA_NOTE", "WITHIN", "KindPlan", "TableError", "TableKind", "check_paper_counts", "row_label",
           "tolerance"]

REPLICA_NOTE = ("Numbers under 'ours' come from generated replicas of the datasets (demo profile: tiny images, "
                "tiny backbone, random initialisation); they are meaningless as results.")
WITHIN = 1.0  # points: |ours - paper| <= WITHIN counts as "within one point"


class TableError(ShortMessage, ValueError):
    """A spec that does not fit the files it is rendered from; the message names the spec file and row."""


def tolerance(row: dict) -> float:
    """One point in a CSV row's unit: WITHIN percent points, WITHIN / 100 for a fraction (0.318)."""
    return WITHIN / 100 if row.get("unit") == "fraction" else WITHIN


def row_label(row: dict) -> str:
    """How a row is named in messages and tables: a run row's method, a statistics row's name."""
    return row["method"] if "method" in row else row["name"]


def check_paper_counts(spec: dict, where: str, key: str = "paper") -> None:
    """One paper entry (``key``: numbers, or a static table's cells) per column in every row."""
    for r, row in enumerate(spec["rows"]):
        if len(row[key]) != len(spec["columns"]):
            noun = "cells" if key == "cells" else "numbers"
            raise PlanError(f"{where}: rows[{r}].{key}: {len(row[key])} {noun} for "
                            f"{len(spec['columns'])} columns ({row_label(row)!r})")


class KindPlan(NamedTuple):
    """A table as its kind plans it: its cells (JSON records), the runs ``{run_id: run}`` they need
    and the datasets whose manifests they read (None: the kind reads no manifest)."""

    cells: list[dict]
    runs: dict
    datasets: list[str] | None = None


def _num(value: float, decimals: int = 1, exact: bool = False) -> str:
    """As the Markdown tables print it: the row's decimals (one, or the CSV's ``decimals``: 2, 3 for a
    fraction), counts (whole numbers of a dataset statistics table) with thousands separators;
    ``exact``: a paper's number (:func:`rankrepro.tables.formats.paper_number`: more decimals where its
    transcription has more, 59.55)."""
    if value.is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    return paper_number(value, decimals) if exact else f"{value:.{decimals}f}"


class TableKind:
    """One kind of table spec; subclasses register in :data:`rankrepro.tables.kinds.TABLE_KINDS`."""

    #: the registered name (set when the kind is looked up)
    name = ""
    #: the index shows its runs and their hours (a kind with no runs of its own shows —)
    has_runs = True
    #: its CSV holds numbers (paper, ours) the index counts; a table of text does not
    numeric = True
    #: its plan records the spec file (for errors found when rendering)
    records_spec_file = True
    #: the CSV column naming a row in the HTML page
    row_name_key = "method"
    #: ``cost`` gives its GPU-hours per seed count too (:func:`rankrepro.plan.cost.leaderboard_cost`)
    costs_per_seed = False

    # ------------------------------------------------------------------------- spec and plan

    def check_before_schema(self, spec: dict, where: str) -> None:
        """Fail with a message naming the key where the schema's message would name none."""

    def check(self, spec: dict, where: str, schemas) -> None:
        """What the table schema cannot check (``schemas``: :class:`rankrepro.plan.schema.Schemas`);
        may add to ``spec`` what it expands into."""

    def plan(self, spec: dict, planner) -> KindPlan:
        """The table's cells and the runs and datasets they need (``planner``:
        :class:`rankrepro.plan.planner.Planner`)."""
        raise NotImplementedError

    def figures(self, table, results: str = "results") -> list[str]:
        """The figures drawn besides the table (``table``: a :class:`rankrepro.plan.model.TablePlan`)."""
        return []

    # ------------------------------------------------------------------------------ render

    def render(self, table, runs_dir: str | Path, out_prefix: str | Path,
               manifests_dir: str | Path | None = None) -> list[dict]:
        """Write ``<out_prefix>.md``, ``.csv`` and ``.tex``; return the table's entries (its CSV rows)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------ index, html

    def read_rows(self, csv_path: str | Path) -> list[dict]:
        """The rendered table's CSV rows as the index and the HTML page read them."""
        return read_table_csv(csv_path)

    def data_label(self, replica: bool | None) -> str:
        """The index's data column: where ours come from (None: nothing is ours yet)."""
        return "—" if replica is None else ("replica" if replica else "real")

    def index_entry(self, table, rows: list[dict], hours: dict[str, dict], shared: set[str] | None = None) -> dict:
        """The index entry of a table (a :class:`~rankrepro.plan.model.TablePlan`) from its CSV rows
        (:meth:`read_rows`), every run's hours (:func:`rankrepro.tables.index.run_hours`) and the runs
        shared with other tables (see the module docstring)."""
        shared = shared or set()
        pending_of = {(c["row"], c["column"]): c.get("pending") for c in table.cells}
        unfinished = {(c["row"], c["column"]) for c in table.cells  # runs absent from ``hours`` are not judged
                      if any(r in hours and not hours[r]["finished"] for r in (*c.get("run_ids", ()),
                                                                               *c.get("reference_run_ids", ())))}
        ncol = len(table.spec["columns"])
        reasons: Counter = Counter()
        counted = reproduced = within = cited = variant_cells = variant_reproduced = 0
        replica = None
        gaps = []
        for i, row in enumerate(rows):
            position = (i // ncol, i % ncol)
            if row.get("variant"):  # a variant row's cell (rankrepro.plan.variants): counted apart
                if pending_of.get(position) != SAME_AS_MAIN:
                    variant_cells += 1
                    variant_reproduced += row["ours"] is not None and position not in unfinished
                continue
            if row.get("status") == "cited":
                cited += 1
                continue
            counted += 1
            if row["ours"] is not None and position not in unfinished:
                reproduced += 1
                replica = (replica or False) or row.get("replica") == "True"
                if row["paper"] is not None and abs(row["ours"] - row["paper"]) <= tolerance(row) + 1e-9:
                    within += 1
                best, last = parse_number(row.get("best")), parse_number(row.get("last"))
                if row.get("unit", "percent") == "percent" and best is not None and last is not None:
                    gaps.append(best - last)
            else:
                stale = row["ours"] is not None  # rendered before a run of it was (re)planned
                reasons[pending_of.get(position) or ("missing" if stale else row.get("status")) or "missing"] += 1
        used = [hours[r] for r in table.runs if r in hours]
        return {
            "paper": table.paper, "table": table.table, "kind": self.name, "has_runs": self.has_runs,
            "title": table.title, "cells": counted, "cited": cited, "reproduced": reproduced, "within": within,
            "pending": sum(reasons.values()), "reasons": dict(reasons.most_common()),
            "data": self.data_label(replica),
            "gap": statistics.fmean(gaps) if gaps else None, "gap_cells": len(gaps),
            "variant_cells": variant_cells, "variant_reproduced": variant_reproduced,
            "runs": len(table.runs), "finished": sum(h["finished"] for h in used),
            "shared": len(set(table.runs) & shared),
            "gpu_h": sum(h["cuda_s"] for h in used) / 3600, "cpu_h": sum(h["cpu_s"] for h in used) / 3600,
            "unknown_h": sum(h["unknown_s"] for h in used) / 3600,
        }

    def other_number(self, rows: list[dict]) -> tuple[str, list[str]] | None:
        """A fourth sub-column beside paper, ours and Δ on the HTML page, from the CSV rows: its name and
        each row's text; None (here): none."""
        return None

    def page_note(self, rows: list[dict]) -> str:
        """A sentence the HTML page adds to its source line, from the CSV rows ("" here)."""
        return ""

    def html(self, table, rows: list[dict]) -> str:
        """A standalone HTML page of a rendered table (its CSV rows): one row per method or dataset,
        paper / ours / Δ per column (and the kind's :meth:`other_number`, and a variant row's Δ to its main row
        where the table has variant rows: :mod:`rankrepro.plan.variants`), Δ green within one point and
        red beyond, pending cells with their reason, best / second best (bold / underlined) where the CSV
        marks them."""
        spec = table.spec
        ncol = len(spec["columns"])
        replica = any(r.get("replica") == "True" for r in rows)
        esc = html_text
        other = self.other_number(rows)
        variants = any(r.get("variant") for r in rows)  # a runs table with variant rows: their Δ to the main row
        parts = ["paper", "ours", "Δ"] + ([other[0]] if other else []) + (["Δ main"] if variants else [])
        head = "".join(f'<th colspan="{len(parts)}">{esc(r["column"])}</th>' for r in rows[:ncol])
        sub = "".join("".join(f"<th>{esc(p)}</th>" for p in parts) for _ in range(ncol))
        body, notes = [], {}
        for i in range(0, len(rows), ncol):
            cells = [f"<td class=name>{esc(rows[i].get(self.row_name_key, ''))}</td>"]
            for j, r in enumerate(rows[i:i + ncol], start=i):
                diff = parse_number(r.get("diff"))
                cls = "" if diff is None else (" class=near" if abs(diff) <= tolerance(r) + 1e-9 else " class=far")
                d = int(r["decimals"]) if r.get("decimals") else 1
                if r["ours"] is None and r.get("status") not in ("ours", "cited"):
                    mark = notes.setdefault(r["status"], len(notes) + 1)
                    ours = f"—<sup>{mark}</sup>"
                else:
                    ours = "—" if r["ours"] is None else _num(r["ours"], d) + (
                        f" ± {float(r['std']):.{d}f}" if r.get("std") else "")
                paper = "" if r["paper"] is None else html_mark(_num(r["paper"], d, exact=True), r.get("paper_mark"))
                ours = html_mark(ours, r.get("ours_mark"))
                delta = "" if diff is None else f"{diff:+.{d}f}"
                cells += [f"<td>{paper}</td>", f"<td>{ours}</td>", f"<td{cls}>{delta}</td>"]
                if other:
                    cells.append(f"<td>{esc(other[1][j])}</td>")
                if variants:
                    main = parse_number(r.get("diff_main"))
                    cells.append("<td></td>" if main is None else f"<td>{main:+.{d}f}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        parts = [
            "<!DOCTYPE html><html><head><meta charset=utf-8>",
            (f"<title>{esc(spec['paper'])} {esc(spec['table'])}</title><style>"
             "body{font-family:sans-serif;font-size:14px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.name{text-align:left}"
             ".near{background:#d9f2d9}.far{background:#f9dcdc}.replica{background:#fff3cd;padding:4px}"
             "</style></head><body>"),
            f"<h3>{esc(spec['paper'])} {esc(spec['table'])}: {esc(spec.get('caption', ''))}</h3>",
            f"<p>Source: {esc(str(spec.get('source', '')))}. Δ = ours − paper; green: within {WITHIN:g} point. "
            f"{esc(self.page_note(rows))}</p>",
        ]
        if replica:
            parts.append("<p class=replica><b>Replica data.</b> Ours comes from generated replicas of the datasets; "
                         "the numbers are meaningless as results.</p>")
        parts += [f"<table><tr><th></th>{head}</tr><tr><th></th>{sub}</tr>", *body, "</table>"]
        if notes:
            parts.append("<ol>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ol>")
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"
