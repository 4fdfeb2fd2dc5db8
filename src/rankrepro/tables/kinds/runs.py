"""``kind: runs`` (the default): a paper table whose cells are trained runs' metrics.

Cell (row, column) is the run of the column's setup with the row's loss: the merge of the
column's setup (and its ``extends`` chain), the column's ``run`` block, the row's ``loss``, the
row's ``run`` block, the row's ``column_runs`` block for the column's group and then for its key (settings
that differ per column, e.g. per dataset), the config's overrides, and the seed when the spec lists ``seeds`` (one run
per seed). A row marked ``cited`` is quoted from other work and has no run (its ``loss``, when it names one, is
the registered loss it quotes: a leaderboard's paper number, :mod:`rankrepro.tables.reported`); a cell whose setup,
dataset or loss is only planned is pending (:mod:`rankrepro.plan.planned`).

Rendered: ours is the mean over the cell's runs (seeds) of the metric in percent (a column
with ``unit: fraction`` keeps the metric as a fraction, printed with three decimals, as PNP
prints its cosine distances: 0.318), with ``± std`` when there are several: the *sample*
standard deviation over the seeds (ddof = 1, :func:`seed_stats`); the difference is ours − paper.
A spec's ``best`` block marks, per column and per set of compared rows, the best
value in bold and the second best underlined, separately for the paper's numbers and for ours
(:func:`best_marks`; the rules: ``src/rankrepro/plan/schemas/table.schema.yaml``).

**Which epoch.** Each run's metrics.json holds its last epoch's metrics and its best epoch's on the
test set (:mod:`rankrepro.record.selection`); ours shows the one its runs' ``eval.select`` chooses
(each seed its own best epoch, then the mean), and the page says which (:func:`selection_note`). The
other number stands in a fourth sub-column beside paper, ours and Δ: ``last`` in a table whose ours
is the best epoch on the test set (the paper's protocol, optimistic: the honest number must stay in
view), ``best`` in a table whose ours is the last epoch, shown only where some cell's best differs
from its last (a test curve found a better epoch). A separate column rather than a parenthesis in the
ours cell: ``81.2 ± 0.3 (last 80.1 ± 0.4)`` does not read at a glance, and a column compares down the
rows. The CSV holds both (``last``, ``last_std``, ``best``, ``best_std``; ``best`` empty for a cell whose
runs have no test curve) with ``select`` and ``select_by``; Δ, the marks and the index's "within 1 pt" are
those of ours; the index's best − last is the mean of ``best − last``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rankrepro.record.selection import SELECT, shown_metrics
from rankrepro.plan.complete import run_id
from rankrepro.plan.schema import PlanError, validate
from rankrepro.plan.setups import check_per_loss
from rankrepro.plan.variants import SAME_AS_MAIN, VARIANT, is_variant, variant_column
from rankrepro.tables.formats import (BEST, REPLICA_TEX, SECOND, group_spans, latex_table, markdown_page, md_mark, numbers_csv, paper_number,
                                      parse_number, tex_escape, tex_mark, write_outputs)
from rankrepro.tables.kinds import TABLE_KINDS
from rankrepro.tables.kinds.base import REPLICA_NOTE, KindPlan, TableError, TableKind, check_paper_counts

__all__ = ["UNITS", "RunsTable", "best_marks", "cell_layers", "cell_values", "column_run_layers", "column_unit", "mark_groups", "other_column",
           "rank_marks", "seed_stats", "selection_note", "shown_epoch", "table_rows"]


@dataclass
class Cell:
    """A cell of a runs table: ``metric`` of ``run_ids`` (one per seed), or why it has none (``pending``)."""

    row: int
    column: int
    metric: str
    run_ids: list[str] = field(default_factory=list)
    pending: str | None = None  # why no run exists (yet)


#: a run column's unit: the factor on the metric and the decimals it is printed with (a percent
#: column: the spec's ``decimals``, default 1, as the paper prints them; top-k prints 62.89)
UNITS = {"percent": (100.0, 1), "fraction": (1.0, 3)}


def column_unit(spec: dict, column: int) -> tuple[float, int]:
    """(factor, decimals) of a run table's column (``unit``, default percent)."""
    unit = spec["columns"][column].get("unit", "percent")
    factor, decimals = UNITS[unit]
    return factor, spec.get("decimals", decimals) if unit == "percent" else decimals


def seed_stats(values: Sequence[float]) -> tuple[float, float | None, int]:
    """``(mean, std, n)`` of a cell's values over its seeds: std is the sample standard deviation
    (ddof = 1, the estimate of the spread between restarts), None for a single seed."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values)


def cell_values(cells: list[dict], runs_dir: str | Path, spec: dict) -> tuple[dict, bool]:
    """{(row, column): {"last", "best": (mean, std or None, n), "samples": {"last", "best": [value per seed]},
    "select": "last" | "best_test", "select_by"}} in the column's unit (:func:`column_unit`): the last epoch's
    and the best epoch's on the test set (:mod:`rankrepro.record.selection`) over the cell's runs (``best``
    (None, None, 0) unless every run of the cell has a test curve: without one there is no best epoch to show),
    and which of them ours shows (its runs' ``eval.select``, :func:`shown_epoch`); and whether any run used
    replica data."""
    values, replica = {}, False
    for cell in cells:
        factor = column_unit(spec, cell["column"])[0]
        last, best, selects, select_by, curves = [], [], set(), set(), set()
        for rid in cell["run_ids"]:
            path = Path(runs_dir) / rid / "metrics.json"
            result = json.loads(path.read_text())
            replica |= bool(result.get("replica"))
            if cell["metric"] not in result["metrics"]:
                raise KeyError(f"{path} has no metric {cell['metric']!r} (it has {sorted(result['metrics'])}); "
                               "add it to the setup's eval.metrics")
            last.append(factor * shown_metrics(result, "last")[cell["metric"]])
            best.append(factor * shown_metrics(result, "best_test")[cell["metric"]])
            selects.add(cell.get("select") or result.get("select", "last"))  # a variant may show the other epoch
            select_by.add((result.get("best_test") or {}).get("select_by"))
            curves.add((result.get("best_test") or {}).get("source") == "curve")
        if len(selects) > 1:
            raise TableError(f"{spec['paper']}/{spec['table']}: the runs of one cell ({', '.join(cell['run_ids'])}) "
                             f"select different epochs: {sorted(selects)}")
        if last:
            values[(cell["row"], cell["column"])] = {
                "last": seed_stats(last), "best": seed_stats(best) if curves == {True} else (None, None, 0),
                "samples": {"last": last, "best": best if curves == {True} else []},
                "select": selects.pop(), "select_by": select_by.pop()}
    return values, replica


def shown_epoch(value: dict) -> str:
    """Which of a cell's values (:func:`cell_values`) ours shows: ``best`` where its runs select the best epoch
    on the test set and have one, else ``last``."""
    return "best" if value["select"] == "best_test" and value["best"][0] is not None else "last"


def mark_groups(spec: dict) -> list[list[int]]:
    """The sets of rows (indexes) whose values the spec's ``best`` block compares; [] without one.

    ``best.groups`` names rows by method (which must name exactly one row) or by index."""
    best = spec.get("best")
    if best is None:
        return []
    rows = [row for row in spec["rows"] if not is_variant(row)]  # variant rows are not the paper's: never marked
    if "groups" not in best:
        return [list(range(len(rows)))]
    where = f"{spec['paper']}/{spec['table']}: best.groups"
    by_method: dict[str, list[int]] = {}
    for r, row in enumerate(rows):
        by_method.setdefault(row.get("method"), []).append(r)
    groups = []
    for g, group in enumerate(best["groups"]):
        members = []
        for ref in group:
            if isinstance(ref, int) and not isinstance(ref, bool):
                if not 0 <= ref < len(rows):
                    raise TableError(f"{where}[{g}]: row index {ref} out of range (0..{len(rows) - 1})")
                members.append(ref)
            else:
                hits = by_method.get(ref, [])
                if len(hits) != 1:
                    raise TableError(f"{where}[{g}]: {ref!r} names {len(hits)} rows (a method naming exactly "
                                     "one row, or a row index)")
                members.append(hits[0])
        groups.append(members)
    return groups


def rank_marks(values: dict, better: str = "higher") -> dict:
    """``{key: BEST | SECOND}`` of ``values`` ({key: number or None}): the best value(s) and the
    next distinct one(s); None and NaN (a diverged run's metric) are skipped, never ranked;
    nothing is marked unless two values differ."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    present = {k: v for k, v in values.items() if v is not None and v == v}  # v != v: NaN
    ranked = sorted(set(present.values()), reverse=better == "higher")
    if len(ranked) < 2:
        return {}
    return {k: BEST if v == ranked[0] else SECOND for k, v in present.items() if v in ranked[:2]}


def best_marks(spec: dict, paper: dict, ours: dict) -> tuple[dict, dict]:
    """The marks ``{(row, column): BEST | SECOND}`` of the paper's numbers and of ours, from
    ``paper`` / ``ours`` = {(row, column): value or None}. Ours are compared as printed (one
    decimal, three in a fraction column); ``best.paper`` / ``best.ours`` (default true) switch either off."""
    best = spec.get("best")
    paper_marks: dict = {}
    ours_marks: dict = {}
    if best is None:
        return paper_marks, ours_marks
    printed = {k: None if v is None else round(v, column_unit(spec, k[1])[1]) for k, v in ours.items()}
    for group in mark_groups(spec):
        for c, column in enumerate(spec["columns"]):
            better = column.get("better", "higher")
            if best.get("paper", True):
                paper_marks.update(rank_marks({(r, c): paper.get((r, c)) for r in group}, better))
            if best.get("ours", True):
                ours_marks.update(rank_marks({(r, c): printed.get((r, c)) for r in group}, better))
    return paper_marks, ours_marks


def table_rows(spec: dict, cells: list[dict], values: dict) -> list[dict]:
    """One dict per (row, column): method, column, unit, decimals, paper, ours, std, diff, status, and the
    best / second best marks of the paper's number and of ours (``paper_mark``, ``ours_mark``:
    "best", "second" or "")."""
    out = []
    by_pos = {(c["row"], c["column"]): c for c in cells}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            paper = row["paper"][c]
            value = values.get((r, c))
            select = value["select"] if value else ""
            last, best = (value["last"], value["best"]) if value else ((None, None, 0),) * 2
            mean, std, n = value[shown_epoch(value)] if value else last
            decimals = column_unit(spec, c)[1]
            digits = decimals + 1

            def rounded(x):
                return None if x is None else round(x, digits)

            cell = by_pos[(r, c)]
            status = "cited" if row.get("cited") else ("ours" if mean is not None else (cell["pending"] or "missing"))
            out.append({
                "method": row["method"], "column": f"{column['group']} {column['header']}", "metric": column["metric"],
                "unit": column.get("unit", "percent"), "decimals": decimals, "paper": paper,
                "ours": rounded(mean), "std": rounded(std), "seeds": n,
                "diff": None if mean is None or paper is None else round(mean - paper, digits), "status": status,
                "select": select, "select_by": value["select_by"] or "" if value else "",
                "last": rounded(last[0]), "last_std": rounded(last[1]), "best": rounded(best[0]),
                "best_std": rounded(best[1]),
            })
    ncol = len(spec["columns"])
    paper_marks, ours_marks = best_marks(spec, {(i // ncol, i % ncol): e["paper"] for i, e in enumerate(out)},
                                         {(i // ncol, i % ncol): e["ours"] for i, e in enumerate(out)})
    for i, entry in enumerate(out):
        entry["paper_mark"] = paper_marks.get((i // ncol, i % ncol), "")
        entry["ours_mark"] = ours_marks.get((i // ncol, i % ncol), "")
    if any(is_variant(row) for row in spec["rows"]):
        for i, entry in enumerate(out):
            variant = spec["rows"][i // ncol].get(VARIANT)
            main = out[variant["of"] * ncol + i % ncol] if variant else None
            entry["variant"] = variant["label"] if variant else ""
            entry["diff_main"] = (None if main is None or main["ours"] is None or entry["ours"] is None
                                  else round(entry["ours"] - main["ours"], entry["decimals"] + 1))
    return out


def _number(mean, std, decimals: int, pm: str = "±", none: str = "—") -> str:
    if mean is None:
        return none
    return f"{mean:.{decimals}f}" + (f" {pm} {std:.{decimals}f}" if std is not None else "")


def _ours(entry: dict, pm: str = "±") -> str:
    return _number(entry["ours"], entry["std"], entry["decimals"], pm)


def _diff(entry: dict) -> str:
    return "" if entry["diff"] is None else f"{entry['diff']:+.{entry['decimals']}f}"


def other_column(rows: list[dict]) -> str | None:
    """The name of the sub-column beside ours that shows the other epoch's number (module docstring):
    ``last`` where ours is the best epoch on the test set, ``best`` where ours is the last epoch and some
    cell's best differs from its last, ``other epoch`` in a table mixing both; None: no such column."""
    selects = {e["select"] for e in rows if e["select"]}
    if selects == {"best_test"}:
        return "last"
    if selects == {"last"}:
        return "best" if any(e["best"] is not None and e["best"] != e["last"] for e in rows) else None
    return "other epoch" if selects else None


def _other(entry: dict, pm: str = "±") -> str:
    """A cell's number of the epoch ours does not show (:func:`other_column`); "" where it has none."""
    key = "last" if entry["select"] == "best_test" else "best"
    return _number(entry[key], entry[f"{key}_std"], entry["decimals"], pm, none="")


def selection_note(rows: list[dict]) -> str:
    """What the page says of its numbers of ours: which epoch they are (:data:`rankrepro.record.selection.SELECT`),
    what the other sub-column shows, and the ± over seeds; "" when nothing is ours yet."""
    selects = sorted({e["select"] for e in rows if e["select"]})
    by = ", ".join(sorted({e["select_by"] for e in rows if e["select_by"]})) or "its first metric"
    notes = []
    if selects == ["best_test"]:
        notes.append(f"ours: {SELECT['best_test']} (the epoch of highest test {by}, chosen on the test set "
                     "itself: optimistic); last: the last epoch, without selection.")
    elif selects == ["last"]:
        notes.append(f"ours: {SELECT['last']}" + (f"; best: the {SELECT['best_test'].split(',')[0]} (highest "
                                                  f"test {by}), what that protocol would report."
                                                  if other_column(rows) else "."))
    elif selects:
        notes.append(f"ours: per cell, the epoch its runs' eval.select chooses (CSV column select): "
                     f"{SELECT['last']} or {SELECT['best_test']} (by {by}); other epoch: the one ours does not show.")
    seeds = sorted({e["seeds"] for e in rows if e["seeds"] and e["seeds"] > 1})
    if seeds:
        notes.append(f"± = sample standard deviation (n − 1) over {'/'.join(map(str, seeds))} seeds, beside their mean.")
    return " ".join(n[0].upper() + n[1:] for n in notes)


#: the sub-column of a variant row's difference to its main row's ours (tables with variant rows only)
DIFF_MAIN = "Δ main"


def _diff_main(entry: dict) -> str:
    return "" if entry.get("diff_main") is None else f"{entry['diff_main']:+.{entry['decimals']}f}"


def variant_notes(spec: dict) -> list[str]:
    """One line per variant row of ``spec`` (:mod:`rankrepro.plan.variants`): its name, what it changes and its
    source; [] without variant rows."""
    notes = []
    for row in spec["rows"]:
        variant = row.get(VARIANT)
        if not variant:
            continue
        changes = [f"{part} {json.dumps(variant[part], sort_keys=True)}" for part in ("run", "column_runs")
                   if part in variant]
        changes += [f"shows the {SELECT[variant['select']]} of the main row's runs"] if "select" in variant else []
        columns = f" (columns {', '.join(variant['columns'])})" if "columns" in variant else ""
        notes.append(f"Variant row {row['method']!r}: {spec['rows'][variant['of']]['method']!r} with "
                     f"{'; '.join(changes)}{columns}. Source: {variant['source']}.")
    return notes


def to_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    other = other_column(rows)
    variants = variant_notes(spec)
    parts = ("paper", "ours", "Δ") + ((other,) if other else ()) + ((DIFF_MAIN,) if variants else ())
    header = ["Method"] + [f"{c['group']} {c['header']} {part}" for c in spec["columns"] for part in parts]
    intro = (f"Source: {spec['source']}. Paper numbers beside ours (percent unless a column says fraction); "
             "Δ = ours − paper; — = no run yet (see notes). " + selection_note(rows)).rstrip()
    if variants:
        intro += (" Rows after the paper's are variant rows (config `variants`): a paper row again with the official "
                  f"code's or another reading's setting; {DIFF_MAIN} = the variant's ours − its main row's.")
    cells, notes = [], []
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        method = row["method"] + (" (cited)" if row.get("cited") else "")
        cells.append([method] + [part for e in entries
                                 for part in (md_mark(paper_number(e["paper"], e["decimals"]), e["paper_mark"]),
                                              md_mark(_ours(e), e["ours_mark"]), _diff(e))
                                 + ((_other(e),) if other else ()) + ((_diff_main(e),) if variants else ())])
        notes += sorted({e["status"] for e in entries if e["status"] not in ("ours", "cited")})
    return markdown_page(spec, intro, REPLICA_NOTE if replica else None, header, cells, notes + variants)


def to_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    other = other_column(rows)
    variants = any(is_variant(row) for row in spec["rows"])
    width = 3 + bool(other) + variants  # paper, ours, Δ (the other epoch's, Δ main)
    groups = group_spans(spec["columns"], width)
    sub = "paper & ours & $\\Delta$" + (f" & {other}" if other else "") + (" & $\\Delta$ main" if variants else "")
    lines = ["Method & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{tex_escape(g)}}}" for g, n in groups) + r" \\",
             " & " + " & ".join(rf"\multicolumn{{{width}}}{{c}}{{{tex_escape(c['header'])}}}" for c in spec["columns"])
             + r" \\",
             " & " + " & ".join([sub] * ncol) + r" \\", r"\midrule"]
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        parts = [tex_escape(row["method"])]
        for e in entries:
            ours = "--" if e["ours"] is None else _ours(e, pm="$\\pm$")
            parts += [tex_mark(paper_number(e["paper"], e["decimals"]), e["paper_mark"]),
                      tex_mark(ours, e["ours_mark"]), _diff(e)] + ([_other(e, "$\\pm$")] if other else []) + (
                [_diff_main(e)] if variants else [])
        lines.append(" & ".join(parts) + r" \\")
    note = selection_note(rows)
    caption = tex_escape(spec["caption"]) + (REPLICA_TEX if replica else "") + (f" {tex_escape(note)}" if note else "")
    return latex_table(caption, "l" + "r" * width * ncol, lines)


def column_run_layers(at: str, block: dict, column: dict) -> list[tuple[str, dict]]:
    """The layers of ``block``'s ``column_runs`` (a row's or a variant's, declared at ``at``) for ``column``: its
    entry for the column's group, then for its key."""
    return [(f"{at}.column_runs.{selector}", block["column_runs"][selector])
            for selector in dict.fromkeys((column["group"], column["key"])) if selector in block.get("column_runs", {})]


def cell_layers(where: str, at: str, row: dict, c: int, column: dict) -> list[tuple[str, dict]]:
    """The spec's layers of ``row``'s runs in column ``c`` (declared at ``at``, e.g. ``rows[2]``, in spec file
    ``where``), merged after the column's setup: the column's ``run``, the row's ``loss``, the row's ``run``, the
    row's ``column_runs`` for the column (:func:`column_run_layers`)."""
    return [(f"{where}: columns[{c}].run", column.get("run", {})),
            (f"{where}: {at}.loss", {"loss": row["loss"]}),
            (f"{where}: {at}.run", row.get("run", {})),
            *column_run_layers(f"{where}: {at}", row, column)]


def _cell_record(cell: Cell, row: dict) -> dict:
    """A cell's plan record: its fields, and for a variant row's cell ``variant`` (true) and the epoch the
    variant shows where it sets one (``select``): keys a paper row's cell does not have, so that a table's plan
    without variants is what it was before variants existed."""
    record = asdict(cell)
    if VARIANT in row:
        record["variant"] = True
        if "select" in row[VARIANT]:
            record["select"] = row[VARIANT]["select"]
    return record


@TABLE_KINDS.register("runs")
class RunsTable(TableKind):
    """A table of trained runs' metrics (see the module docstring)."""

    records_spec_file = False

    def check(self, spec: dict, where: str, schemas) -> None:
        check_paper_counts(spec, where)
        selectors = {c["group"] for c in spec["columns"]} | {c["key"] for c in spec["columns"]}
        for r, row in enumerate(spec["rows"]):
            blocks = [(("rows", r, "run"), row["run"])] if "run" in row else []
            for selector, block in row.get("column_runs", {}).items():
                if selector not in selectors:
                    raise PlanError(f"{where}: rows[{r}].column_runs.{selector}: no column has this group or key; "
                                    f"groups: {', '.join(sorted({c['group'] for c in spec['columns']}))}")
                blocks.append((("rows", r, "column_runs", selector), block))
            labels = [variant["label"] for variant in row.get("variants", ())]
            for v, variant in enumerate(row.get("variants", ())):
                at = ("rows", r, "variants", v)
                if variant["label"] in labels[:v]:
                    raise PlanError(f"{where}: rows[{r}].variants[{v}].label: {variant['label']!r} labels two "
                                    f"variants of {row['method']!r}; each says what it changes")
                for selector in (*variant.get("column_runs", {}), *variant.get("columns", ())):
                    if selector not in selectors:
                        raise PlanError(f"{where}: rows[{r}].variants[{v}]: {selector!r}: no column has this group "
                                        f"or key; keys: {', '.join(c['key'] for c in spec['columns'])}")
                if "run" in variant:
                    blocks.append(((*at, "run"), variant["run"]))
                blocks += [((*at, "column_runs", selector), block)
                           for selector, block in variant.get("column_runs", {}).items()]
            for prefix, block in blocks:
                validate(block, schemas.partial_run, where, prefix=prefix)
                check_per_loss(block, schemas, where, prefix)
        for c, column in enumerate(spec["columns"]):
            if "run" in column:
                validate(column["run"], schemas.partial_run, where, prefix=("columns", c, "run"))
                check_per_loss(column["run"], schemas, where, ("columns", c, "run"))

    def plan(self, spec: dict, planner) -> KindPlan:
        cells, runs = [], {}
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        for r, row in enumerate(spec["rows"]):
            if row.get("cited") and "loss" in row and row["loss"]["name"] not in planner.catalog["loss"]:
                raise PlanError(f"{where}: rows[{r}].loss.name: unknown loss {row['loss']['name']!r} (the registered "
                                f"loss whose number the cited row {row['method']!r} quotes); registered: "
                                f"{', '.join(sorted(planner.catalog['loss']))}")
            for c, column in enumerate(spec["columns"]):
                cell = Cell(r, c, column["metric"])
                cells.append(cell)
                if row.get("cited"):
                    cell.pending = "cited from other work"
                    continue
                variant = row.get(VARIANT)
                if variant and not variant_column(variant, column):
                    cell.pending = SAME_AS_MAIN
                    continue
                # a variant row's layers are its main row's (its spec position names them), then the variant's
                at = f"rows[{variant['of']}]" if variant else f"rows[{r}]"
                cell.pending = planner.pending(column["setup"], row["loss"]["name"],
                                               f"{where}: {at} ({row['method']}) x columns[{c}] ({column['key']})")
                if cell.pending:
                    continue
                layers = cell_layers(where, at, row, c, column)
                if variant:  # the variant's own blocks, after every layer of its main row
                    declared = f"{where}: {variant['at']}"
                    layers += [(f"{declared}.run", variant["run"])] if "run" in variant else []
                    layers += column_run_layers(declared, variant, column)
                context = f" (cell {row['method']!r} x {column['key']})"
                for seed in spec.get("seeds", [None]):
                    run = planner.resolve(column["setup"], layers, seed, context)
                    rid = run_id(run)
                    runs[rid] = run
                    cell.run_ids.append(rid)
        return KindPlan([_cell_record(cell, spec["rows"][cell.row]) for cell in cells], runs)

    def render(self, table, runs_dir, out_prefix, manifests_dir=None) -> list[dict]:
        spec, cells = table.spec, table.cells
        values, replica = cell_values(cells, runs_dir, spec)
        rows = table_rows(spec, cells, values)
        write_outputs(out_prefix, to_markdown(spec, rows, replica), numbers_csv(rows, replica),
                      to_latex(spec, rows, replica))
        return rows

    @staticmethod
    def _epochs(rows: list[dict]) -> list[dict]:
        """The CSV rows' fields of the two epochs as :func:`table_rows` gives them (numbers, not text)."""
        return [{"select": r.get("select") or "", "select_by": r.get("select_by") or "",
                 "decimals": int(r.get("decimals") or 1), "seeds": int(r.get("seeds") or 0),
                 **{k: parse_number(r.get(k)) for k in ("last", "last_std", "best", "best_std")}} for r in rows]

    def other_number(self, rows: list[dict]) -> tuple[str, list[str]] | None:
        epochs = self._epochs(rows)
        other = other_column(epochs)
        return (other, [_other(e) for e in epochs]) if other else None

    def page_note(self, rows: list[dict]) -> str:
        return selection_note(self._epochs(rows))
