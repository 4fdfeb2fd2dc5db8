"""``kind: leaderboard``: every registered retrieval loss on one dataset, one recipe, seeds (issue 36, "under one roof").

A leaderboard spec (``specs/roof/<dataset>.yaml``) names a ``setup`` (the dataset's recipe, identical for every
loss: ``plan/setups/roof.yaml``), its ``metrics`` (one column each; the first ranks the rows), ``seeds``
(:data:`DEFAULT_SEEDS` when it lists none; the config's ``seeds`` replace them) and an optional ``per_loss``
block (``{loss: partial run}``: what a loss needs beyond its registered defaults, merged after the setup).
It writes no rows: :meth:`LeaderboardTable.plan` adds them from the planner's catalog and then plans the spec
as a runs table (:class:`~rankrepro.tables.kinds.runs.RunsTable`: the same run ids, seeds, layers and cells):

- **rows** (:func:`loss_rows`): one per registered loss, sorted by name, whose task is retrieval (the catalog's
  ``task``: the detector's loss is not) and whose labels the dataset has: a loss declaring ``hierarchical``
  (:mod:`rankrepro.losses.registry`) only where the dataset declares two label levels or more (its facts'
  ``levels``). A newly registered loss is a new row once the catalog records it; each row's loss block is its
  name alone, so its hyper-parameters are its registered defaults (filled by the planner) and the data sizes
  its builder takes (class counts) come from the training set; each row records the loss's ``family`` and
  ``hierarchical`` (the catalog's: the plot's colour and marker), and per column ``paper`` and ``paper_source``:
  the number a reproduced paper reports for the loss on the dataset and metric, and where
  (:func:`add_reported`, :mod:`rankrepro.tables.reported`: the loss's own paper first, else the most recent);
- **columns** (:func:`metric_columns`): one per metric, all of the setup, the spec's ``per_loss`` in their
  ``run`` block (the same block in every column: a row's columns share its runs).

The expanded spec (``rows``, ``columns``, ``seeds``) is what the table's plan records, so the later pages (the
significance tests, the summary across datasets, the plot) read the plan's cells as a runs table's: cell
(row, column) = the row's loss, the column's metric, ``run_ids`` one per seed.

Rendered (:meth:`LeaderboardTable.render`): ``<prefix>.csv`` holds a runs table's entries (ours = mean over
the seeds of the epoch ``eval.select`` chooses, the last by default; ``std`` the sample standard deviation;
``last``/``best``: the last epoch's and the best epoch's on the test set, shown, never ranked on) with each
entry's ``rank``: the rank of its row by the first metric's ours (standard competition ranking, 1 = best;
empty without a number), ``vs_best`` and ``p_value``: whether the loss is within noise of the best loss of
that column (:mod:`rankrepro.tables.significance`: a two-sided Welch t-test over the seeds), the row's ``family``
and ``hierarchical``, and ``paper`` / ``paper_source`` (``diff``: ours - paper, under two recipes).
``<prefix>.md`` is the leaderboard, best first: rank, loss, ours ± std and the verdict against the column's best
per metric, the papers' numbers beside them (each with the index of its source, listed in the notes), the
best-on-test numbers where a test curve found a better epoch; ``<prefix>.tex`` the same leaderboard in LaTeX
(rank, loss, ours ± std per metric, the best bold, within noise marked ≈, the papers' numbers). The plot
(:func:`rankrepro.tables.plots.leaderboard_plot`, ``<prefix>.png``) and the summary across datasets
(:mod:`rankrepro.tables.leaderboard_summary`) read the CSV.
"""

from __future__ import annotations

import re

from rankrepro.plan.merge import merge_layers
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import check_per_loss, setup_layers
from rankrepro.tables.formats import (REPLICA_TEX, latex_table, markdown_html, markdown_page, numbers_csv, parse_number,
                                      tex_escape, write_outputs)
from rankrepro.tables.kinds import TABLE_KINDS
from rankrepro.tables.kinds.base import REPLICA_NOTE, KindPlan
from rankrepro.tables.kinds.runs import (RunsTable, _number, cell_values, other_column, selection_note, shown_epoch,
                                         table_rows)
from rankrepro.tables.reported import PERCENT, choose, reported_for
from rankrepro.tables.significance import BEST, TEST, WITHIN, noise_verdicts, verdict_text

__all__ = ["DEFAULT_SEEDS", "LEADERBOARDS", "SUMMARY", "LeaderboardTable", "add_reported", "hierarchical_dataset",
           "loss_rows", "mark_noise", "metric_columns", "rank_rows", "supports"]

#: the seeds of a leaderboard whose spec lists none [our choice: three restarts, as RaMBO reports; the config's
#: ``seeds`` replace them]
DEFAULT_SEEDS = (0, 1, 2)
#: the catalog's task of a loss that declares none (:data:`rankrepro.losses.registry.RETRIEVAL`, without torch)
RETRIEVAL = "retrieval"
#: the name of a benchmark's summary across datasets (``results/tables/<benchmark>/summary.{md,csv}``): no table
#: of a leaderboard benchmark may bear it
SUMMARY = "summary"
#: the results index's section and the report's category of the leaderboards (apart from the papers' tables)
LEADERBOARDS = "Leaderboards"


def hierarchical_dataset(facts: dict) -> bool:
    """Whether a dataset (its catalog ``facts``) has hierarchical labels: two levels or more."""
    return len(facts["levels"]) >= 2


def supports(loss: dict, facts: dict) -> bool:
    """Whether a loss (its catalog entry) trains on a dataset (its facts): a retrieval loss, and one declaring
    ``hierarchical`` only where the dataset's labels have several levels."""
    return loss.get("task", RETRIEVAL) == RETRIEVAL and (not loss.get("hierarchical") or hierarchical_dataset(facts))


def loss_rows(catalog: dict, dataset: str, ncol: int) -> list[dict]:
    """The rows of ``dataset``'s leaderboard: every loss of the catalog it supports (:func:`supports`), sorted,
    each ``{"method", "loss": {"name"}, "paper", "paper_source", "family", "hierarchical"}`` (``paper``,
    ``paper_source``: ``ncol`` nulls each, filled by :func:`add_reported`; ``family``: the loss's declared family,
    None where it declares none)."""
    facts = catalog["dataset"][dataset]["facts"]
    return [{"method": name, "loss": {"name": name}, "paper": [None] * ncol, "paper_source": [None] * ncol,
             "family": entry.get("family"), "hierarchical": bool(entry.get("hierarchical"))}
            for name, entry in sorted(catalog["loss"].items()) if supports(entry, facts)]


def add_reported(rows: list[dict], columns: list[dict], dataset: str, reported: dict, losses: dict) -> None:
    """Fill each row's ``paper`` (one number per column, None where no paper reports one) and ``paper_source``
    (where it is printed) with the number a paper reports for the row's loss on ``dataset`` and the column's
    metric (:func:`rankrepro.tables.reported.choose` among ``reported``; ``losses``: the catalog's, whose
    ``paper`` names the loss's own paper)."""
    for row in rows:
        chosen = [choose(reported.get((row["loss"]["name"], dataset, column["metric"], column.get("unit", PERCENT)),
                                      []), losses[row["loss"]["name"]].get("paper"))
                  for column in columns]
        row["paper"] = [None if n is None else n.value for n in chosen]
        row["paper_source"] = [None if n is None else n.source for n in chosen]


def metric_columns(spec: dict, group: str) -> list[dict]:
    """A runs table's columns of a leaderboard spec: one per metric, of its setup, the spec's ``per_loss`` in their
    ``run`` block; ``group``: the dataset's title."""
    run = {"per_loss": spec["per_loss"]} if spec.get("per_loss") else {}
    return [{"key": re.sub(r"[^a-z0-9]+", "_", m["metric"].lower()).strip("_"), "group": group,
             "header": m["header"], "setup": spec["setup"], "metric": m["metric"], "run": run}
            for m in spec["metrics"]]


def rank_rows(rows: list[dict], ncol: int) -> None:
    """Add ``rank`` to every entry of ``rows`` (a runs table's, :func:`~rankrepro.tables.kinds.runs.table_rows`):
    its row's rank by the first column's ours, higher first, standard competition ranking (ties share a rank, the
    next rank skips: 1, 2, 2, 4); None for a row without a number."""
    firsts = [rows[i]["ours"] for i in range(0, len(rows), ncol)]
    for r, value in enumerate(firsts):
        rank = None if value is None else 1 + sum(other is not None and other > value for other in firsts)
        for entry in rows[r * ncol:(r + 1) * ncol]:
            entry["rank"] = rank


def mark_noise(rows: list[dict], values: dict, ncol: int) -> None:
    """Add ``vs_best`` and ``p_value`` to every entry of ``rows`` (a runs table's), from the cells' per-seed
    values of the epoch ours shows (``values``: :func:`~rankrepro.tables.kinds.runs.cell_values`): per column,
    :func:`~rankrepro.tables.significance.noise_verdicts` (the best, within noise of it, below it, or n/a with
    one seed; "" without a number)."""
    nrow = len(rows) // ncol
    for c in range(ncol):
        samples = [[round(v, 9) for v in values[(r, c)]["samples"][shown_epoch(values[(r, c)])]]
                   if (r, c) in values else None for r in range(nrow)]  # 100 * 0.2 = 20.000000000000004: 20
        for r, (verdict, p) in enumerate(noise_verdicts(samples)):
            rows[r * ncol + c].update(vs_best=verdict, p_value=None if p is None else float(f"{p:.4g}"))


def _by_rank(rows: list[dict], ncol: int) -> list[list[dict]]:
    """The entries of each row, rows by rank (rows without a number last, by name)."""
    by_row = [rows[i:i + ncol] for i in range(0, len(rows), ncol)]
    return sorted(by_row, key=lambda entries: (entries[0]["rank"] is None, entries[0]["rank"] or 0,
                                               entries[0]["method"]))


#: what a leaderboard's paper numbers are (its page's intro, its LaTeX caption)
PAPER_NOTE = ("Paper: the number a reproduced paper reports for the loss on this dataset and metric (the loss's own "
              "paper first, else the most recent paper: rankrepro.tables.reported), under that paper's recipe, not "
              "this one's: it places ours, it is no target")


def _paper_cells(entries: list[dict], sources: dict[str, int]) -> list[str]:
    """A row's paper numbers on the page, each with the index of its source (``sources``: source -> index,
    grown as new sources appear); — where no paper reports one."""
    cells = []
    for e in entries:
        if e["paper"] is None:
            cells.append("—")
            continue
        index = sources.setdefault(e["paper_source"], len(sources) + 1)
        cells.append(f"{_number(e['paper'], None, e['decimals'])} [{index}]")
    return cells


def to_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    """The leaderboard page: rows by rank, ours ± std and the verdict against the column's best per metric
    (:func:`mark_noise`), the paper's number beside ours where a paper reports one (its source in the notes), the
    best-on-test numbers where some differ from the last epoch's (never ranked on)."""
    ncol = len(spec["metrics"])
    best = other_column(rows) == "best"  # where some cell's best epoch on the test set is not its last
    paper = any(e["paper"] is not None for e in rows)
    sources: dict[str, int] = {}
    header = (["Rank", "Loss"] + [part for m in spec["metrics"] for part in (m["header"], f"{m['header']} vs best")]
              + ([f"{m['header']} (paper)" for m in spec["metrics"]] if paper else [])
              + ([f"{m['header']} (best on test)" for m in spec["metrics"]] if best else []))
    cells = [[str(entries[0]["rank"] or "—"), entries[0]["method"]]
             + [part for e in entries for part in (_number(e["ours"], e["std"], e["decimals"]),
                                                     verdict_text(e["vs_best"], e["p_value"]))]
             + (_paper_cells(entries, sources) if paper else [])
             + ([_number(e["best"], e["best_std"], e["decimals"]) for e in entries] if best else [])
             for entries in _by_rank(rows, ncol)]
    intro = (f"Source: {spec['source']}. Every registered retrieval loss the dataset's labels support, one recipe "
             f"(setup `{spec['setup']}`), seeds {', '.join(map(str, spec['seeds']))}; ranked by "
             f"{spec['metrics'][0]['header']} (mean over the seeds; equal means share a rank); — = no run yet. "
             f"vs best: against the loss with the best mean of that column, by a {TEST}: ≈ = within noise "
             "(p ≥ alpha), < = below it (p < alpha), n/a (one seed) = no test without two seeds on both sides. "
             + (f"{PAPER_NOTE}; [n]: its source, in the notes. " if paper else "")
             + selection_note(rows)).rstrip()
    notes = (sorted({e["status"] for e in rows if e["status"] not in ("ours", "cited", "missing")})
             + [f"[{index}] {source}" for source, index in sources.items()])
    return markdown_page(spec, intro, REPLICA_NOTE if replica else None, header, cells, notes)


def _tex_value(entry: dict) -> str:
    """A leaderboard cell in LaTeX: ours ± std, bold for the column's best, ``≈`` within noise of it."""
    if entry["ours"] is None:
        return "--"
    text = _number(entry["ours"], entry["std"], entry["decimals"], pm="$\\pm$")
    if entry["vs_best"] == BEST:
        return rf"\textbf{{{text}}}"
    return text + (r"$^{\approx}$" if entry["vs_best"] == WITHIN else "")


def to_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    """The leaderboard in LaTeX: rank, loss, ours ± std per metric, rows by rank, and the paper's numbers after
    them where a paper reports some; the column's best bold, a loss within noise of it marked ≈ (the caption names
    the test)."""
    ncol = len(spec["metrics"])
    paper = any(e["paper"] is not None for e in rows)
    headers = ([tex_escape(m["header"]) for m in spec["metrics"]]
               + ([tex_escape(f"{m['header']} (paper)") for m in spec["metrics"]] if paper else []))
    lines = ["Rank & Loss & " + " & ".join(headers) + r" \\", r"\midrule"]
    for entries in _by_rank(rows, ncol):
        lines.append(" & ".join([str(entries[0]["rank"] or "--"), tex_escape(entries[0]["method"])]
                                + [_tex_value(e) for e in entries]
                                + ([_number(e["paper"], None, e["decimals"], none="--") for e in entries] if paper
                                   else [])) + r" \\")
    note = selection_note(rows)
    caption = (tex_escape(spec["caption"]) + (REPLICA_TEX if replica else "")
               + tex_escape(f" Ranked by {spec['metrics'][0]['header']}. Bold: the best mean of the column; ")
               + r"$^{\approx}$" + tex_escape(f": within noise of it ({TEST}, p ≥ alpha).")
               + (tex_escape(f" {PAPER_NOTE} (sources in the CSV).") if paper else "")
               + (f" {tex_escape(note)}" if note else ""))
    return latex_table(caption, "rl" + "r" * (len(headers)), lines)


@TABLE_KINDS.register("leaderboard")
class LeaderboardTable(RunsTable):
    """A leaderboard (module docstring): a runs table whose rows come from the catalog."""

    records_spec_file = True
    costs_per_seed = True

    def check(self, spec: dict, where: str, schemas) -> None:
        check_per_loss(spec, schemas, where)

    def plan(self, spec: dict, planner) -> KindPlan:
        """Add the spec's ``rows``, ``columns`` and ``seeds`` (module docstring), then plan it as a runs table."""
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        if spec["setup"] not in planner.setups:
            raise PlanError(f"{where}: setup: unknown setup {spec['setup']!r}; known: "
                            f"{', '.join(sorted(planner.setups))}")
        if spec["table"] == SUMMARY:
            raise PlanError(f"{where}: table: {SUMMARY!r} is the name of the benchmark's summary across datasets "
                            f"(results/tables/{spec['paper']}/{SUMMARY}.md); rename the spec")
        check_per_loss(spec, planner.schemas, where, losses=planner.catalog["loss"])
        recipe = merge_layers(setup_layers(spec["setup"], planner.setups))[0]
        dataset = recipe.get("dataset")
        if dataset not in planner.catalog["dataset"]:
            raise PlanError(f"{where}: setup: {spec['setup']!r} names no registered dataset ({dataset!r})")
        evaluated = (recipe.get("eval") or {}).get("metrics") or []
        for m, metric in enumerate(spec["metrics"]):
            if metric["metric"] not in evaluated:
                raise PlanError(f"{where}: metrics[{m}]: {metric['metric']!r} is not evaluated by setup "
                                f"{spec['setup']!r} (its eval.metrics: {', '.join(evaluated)}); add it there or "
                                "drop the column")
        spec["seeds"] = list(spec.get("seeds") or DEFAULT_SEEDS)
        spec["columns"] = metric_columns(spec, planner.catalog["dataset"][dataset]["facts"]["title"])
        spec["rows"] = loss_rows(planner.catalog, dataset, len(spec["columns"]))
        add_reported(spec["rows"], spec["columns"], dataset, reported_for(planner), planner.catalog["loss"])
        return super().plan(spec, planner)

    def html(self, table, rows: list[dict]) -> str:
        """The report's page of a leaderboard: its Markdown page (:func:`to_markdown`) from the CSV rows, as HTML."""
        entries = [{**r, **self._epochs([r])[0], "std": parse_number(r.get("std")), "rank": int(r["rank"]) if r.get(
            "rank") else None, "p_value": parse_number(r.get("p_value")), "vs_best": r.get("vs_best") or ""}
                   for r in rows]
        replica = any(r.get("replica") == "True" for r in rows)
        return markdown_html(to_markdown(table.spec, entries, replica), title=f"{table.paper} {table.table}")

    def figures(self, table, results: str = "results") -> list[str]:
        """The plot (:func:`rankrepro.tables.plots.leaderboard_plot`):
        ``<results>/tables/<benchmark>/<dataset>.png``."""
        return [f"{results}/tables/{table.key}.png"]

    def render(self, table, runs_dir, out_prefix, manifests_dir=None) -> list[dict]:
        spec, cells = table.spec, table.cells
        values, replica = cell_values(cells, runs_dir, spec)
        rows = table_rows(spec, cells, values)
        rank_rows(rows, len(spec["columns"]))
        mark_noise(rows, values, len(spec["columns"]))
        for i, entry in enumerate(rows):
            row = spec["rows"][i // len(spec["columns"])]
            entry.update(family=row.get("family") or "", hierarchical=bool(row.get("hierarchical")),
                         paper_source=row["paper_source"][i % len(spec["columns"])] or "")
        write_outputs(out_prefix, to_markdown(spec, rows, replica), numbers_csv(rows, replica),
                      to_latex(spec, rows, replica))
        return rows
