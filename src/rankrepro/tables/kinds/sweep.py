"""``kind: sweep``: a paper figure that sweeps one run setting (e.g. SupRank's Figs. 6-8).

The spec has ``panels`` instead of rows and columns: each point is the run of the panel's setup,
its ``run`` block and ``loss``, with the run's ``param`` (a dotted path) set to one of ``values``
(merged after the loss, before the config's overrides, so a point whose resolved run equals a
table's cell shares its id); with a ``reference`` the point also needs the reference loss's run
at the same value. The planner expands it into one row per point (:func:`sweep_rows`). A point's
value is, in percent:

- without a reference, the mean over seeds of the panel's metric (``100 * metrics[metric]``; of the
  epoch its runs' ``eval.select`` chooses, the last or the best on the test set, and the page says which:
  :func:`rankrepro.record.selection.shown_metrics`), with ``± std`` (sample, ddof = 1) when there are several seeds;
- with a reference, the relative gain ``100 * (ours - ref) / ref`` of the metric over the
  reference run (SupRank Fig. 6: adding L_DG* to Sup-AP, per batch size), per seed when both
  sides have the same seeds (mean ± std of the per-seed gains), else of the means.

:meth:`SweepTable.render` writes the table of points (``<prefix>.md``, ``.csv``, ``.tex``: one row
per point, the paper's point beside ours, with the CSV columns of a runs table so the results
index, the HTML page and the paper scatter read it as any table); :func:`sweep_plot` draws the
figure (``<prefix>.png``: one panel per spec panel, ours as a line with error bars, the
paper's points where the text gives them; a point with no run yet, or not finished, is left
out and named under the plot).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rankrepro.record.selection import SELECT, shown_metrics
from rankrepro.io import atomic_path
from rankrepro.plan.complete import run_id
from rankrepro.plan.merge import get_path
from rankrepro.plan.model import as_table_plan
from rankrepro.plan.schema import PlanError, validate
from rankrepro.plan.setups import check_per_loss, sweep_layer
from rankrepro.tables.formats import REPLICA_TEX, latex_table, md_row, md_rule, numbers_csv, tex_escape, write_outputs
from rankrepro.tables.kinds import TABLE_KINDS
from rankrepro.tables.kinds.base import REPLICA_NOTE, KindPlan, TableKind

__all__ = ["DPI", "PANEL_SIZE", "SweepTable", "relative_gain", "sweep_entries", "sweep_plot", "sweep_rows"]

#: one panel of the plot, inches (width, height), and the resolution: a figure of n panels is
#: (n * 480) x 420 pixels
PANEL_SIZE = (4.8, 4.2)
DPI = 100


@dataclass
class SweepCell:
    """A point of a ``sweep`` spec (row ``row`` of its expanded table, one column): the panel's
    ``metric`` of ``run_ids`` (seeds) at ``value`` of its ``param``, and with a reference the
    runs of the reference loss at the same value. ``resolved`` is the value the runs have
    (the config's overrides may set the swept key too)."""

    row: int
    column: int
    metric: str
    panel: str
    param: str
    value: object
    run_ids: list[str] = field(default_factory=list)
    reference_run_ids: list[str] = field(default_factory=list)
    resolved: object = None
    pending: str | None = None


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_rows(spec: dict) -> tuple[list[dict], list[dict]]:
    """The one column and the rows (one per panel and value: ``method`` = "<title>: <label> =
    <value>", ``paper`` = [the paper's point]) a sweep spec expands into."""
    rows = []
    for panel in spec["panels"]:
        label = panel.get("label", panel["param"])
        for value, paper in zip(panel["values"], panel["paper"]):
            rows.append({"method": f"{panel['title']}: {label} = {_value_text(value)}", "paper": [paper],
                         "panel": panel["key"], "value": value})
    return [{"key": "point", "group": "", "header": "value"}], rows


def _metric_values(run_ids: list[str], metric: str, runs_dir: Path) -> tuple[list[float] | None, bool, set[str]]:
    """The metric of each run in percent, at the epoch its ``eval.select`` chooses (None when a run has no
    metrics.json yet), whether any is a replica run, and the selections met."""
    values, replica, selects = [], False, set()
    for rid in run_ids:
        path = runs_dir / rid / "metrics.json"
        if not path.is_file():
            return None, replica, selects
        result = json.loads(path.read_text())
        replica |= bool(result.get("replica"))
        if metric not in result["metrics"]:
            raise KeyError(f"{path} has no metric {metric!r} (it has {sorted(result['metrics'])}); "
                           "add it to the setup's eval.metrics")
        values.append(100.0 * shown_metrics(result)[metric])
        selects.add(result.get("select", "last"))
    return values, replica, selects


def relative_gain(ours: list[float], reference: list[float]) -> tuple[float, float | None]:
    """``100 (ours - ref) / ref`` (percent of the reference) and its std: per pair when both lists
    have the same length (seeds), else of the means (std None)."""
    if len(ours) == len(reference):
        gains = [100.0 * (a - r) / r for a, r in zip(ours, reference)]
    else:
        mean_ref = statistics.fmean(reference)
        gains = [100.0 * (statistics.fmean(ours) - mean_ref) / mean_ref]
    return statistics.fmean(gains), (statistics.stdev(gains) if len(gains) > 1 else None)


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def sweep_entries(table_plan, runs_dir: str | Path) -> tuple[list[dict], bool]:
    """One dict per point (the CSV's rows: a runs table's columns, then the sweep's), and whether
    any run used replica data (``table_plan``: a :class:`~rankrepro.plan.model.TablePlan` or its JSON)."""
    table = as_table_plan(table_plan)
    spec, runs_dir = table.spec, Path(runs_dir)
    panels = {panel["key"]: panel for panel in spec["panels"]}
    out, replica = [], False
    for cell, row in zip(table.cells, spec["rows"]):
        panel = panels[cell["panel"]]
        reference = panel.get("reference")
        ours = std = absolute = ref_value = None
        n, selects = 0, set()
        status = cell["pending"] or "missing"
        if not cell["pending"]:
            values, rep, selects = _metric_values(cell["run_ids"], cell["metric"], runs_dir)
            replica |= rep
            ref_values = None
            if reference is not None and values is not None:
                ref_values, rep, ref_selects = _metric_values(cell["reference_run_ids"], cell["metric"], runs_dir)
                replica |= rep
                selects |= ref_selects
            if values is not None and (reference is None or ref_values is not None):
                absolute = statistics.fmean(values)
                if reference is None:
                    ours, std = _mean_std(values)
                else:
                    ref_value = statistics.fmean(ref_values)
                    ours, std = relative_gain(values, ref_values) if ref_value else (None, None)
                n = len(values)
                status = "ours" if ours is not None else "reference metric is 0: no relative gain"
        paper = row["paper"][0]
        out.append({
            "method": row["method"], "column": panel.get("header", panel["metric"]), "metric": cell["metric"],
            "paper": paper, "ours": None if ours is None else round(ours, 2),
            "std": None if std is None else round(std, 2), "seeds": n,
            "diff": None if ours is None or paper is None else round(ours - paper, 2), "status": status,
            "paper_mark": "", "ours_mark": "",
            "panel": panel["key"], "param": cell["param"], "value": cell["value"], "resolved": cell["resolved"],
            "ours_metric": None if absolute is None else round(absolute, 2),
            "reference_metric": None if ref_value is None else round(ref_value, 2),
            "run_ids": " ".join(cell["run_ids"]), "reference_run_ids": " ".join(cell["reference_run_ids"]),
            "select": " ".join(sorted(selects)),
        })
    return out, replica


def _point(e: dict, panel: dict) -> str:
    """A point as notes name it: ``<panel key>: <label> = <value>``."""
    return f"{panel['key']}: {panel.get('label', panel['param'])} = {_value_text(e['value'])}"


def _missing_notes(spec: dict, entries: list[dict]) -> list[str]:
    """``<why>: <points>`` for the points with no value, by reason (``missing``: no metrics.json yet)."""
    by_reason: dict[str, list[str]] = {}
    for panel, rows in _panel_entries(spec, entries):
        for e in rows:
            if e["ours"] is None:
                by_reason.setdefault(e["status"], []).append(_point(e, panel))
    return [f"{'missing (run not finished: no metrics.json yet)' if why == 'missing' else why}: {', '.join(points)}"
            for why, points in by_reason.items()]


def _fmt(value, std=None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}" + (f" ± {std:.1f}" if std is not None else "")


def _overridden(entries: list[dict]) -> list[str]:
    return [f"{e['method']}: the config's run_overrides set {e['param']} = {_value_text(e['resolved'])}, so the "
            "run is not at the swept value" for e in entries
            if e["resolved"] is not None and e["resolved"] != e["value"]]


def _panel_entries(spec: dict, entries: list[dict]):
    for panel in spec["panels"]:
        yield panel, [e for e in entries if e["panel"] == panel["key"]]


def _what(panel: dict) -> str:
    """What a panel's value is, in words."""
    metric = panel["metric"]
    reference = panel.get("reference")
    if reference is None:
        return f"{panel.get('method', panel['loss']['name'])}: {metric} (percent)"
    return (f"relative {metric} gain (percent) of {panel.get('method', panel['loss']['name'])} over "
            f"{reference.get('method', reference['loss']['name'])}: 100 (ours - ref) / ref at the same "
            f"{panel.get('label', panel['param'])}")


def selection_note(entries: list[dict]) -> str:
    """Which epoch ours is (:data:`rankrepro.record.selection.SELECT`), "" when nothing is ours yet."""
    selects = sorted({s for e in entries for s in (e.get("select") or "").split()})
    if not selects:
        return ""
    return "Ours: " + " or ".join(SELECT[s] for s in selects) + (" (per point, CSV column select)."
                                                                 if len(selects) > 1 else ".")


def sweep_markdown(spec: dict, entries: list[dict], replica: bool) -> str:
    source = (f"Source: {spec['source']}. One row per point of the figure: the paper's point (where the text "
              "gives one) beside ours; Δ = ours − paper; — = no run yet or not finished (see notes). The plot: "
              f"{spec['table']}.png. " + selection_note(entries)).rstrip()
    lines = [f"# {spec['paper']} {spec['table']}: {spec['caption']}", "", source, ""]
    if replica:
        lines += [f"> **Replica data.** {REPLICA_NOTE}", ""]
    notes: list[str] = []
    for panel, rows in _panel_entries(spec, entries):
        label = panel.get("label", panel["param"])
        reference = panel.get("reference")
        what = f"{_what(panel)}; `{panel['param']}` swept on setup `{panel['setup']}`."
        lines += [f"## {panel['title']}", "", what, ""]
        header = [label, "paper", "ours", "Δ"]
        if reference is not None:
            header += [f"{panel.get('method', panel['loss']['name'])} {panel['metric']}",
                       f"{reference.get('method', reference['loss']['name'])} {panel['metric']}"]
        header += ["runs"]
        lines += [md_row(header), md_rule(len(header))]
        for e in rows:
            cells = [_value_text(e["value"]), "" if e["paper"] is None else f"{e['paper']:.1f}",
                     _fmt(e["ours"], e["std"]), "" if e["diff"] is None else f"{e['diff']:+.1f}"]
            if reference is not None:
                cells += [_fmt(e["ours_metric"]), _fmt(e["reference_metric"])]
            cells.append(" ".join(f"`{r}`" for r in (e["run_ids"] + " " + e["reference_run_ids"]).split()))
            lines.append(md_row(cells))
        lines.append("")
    notes += _missing_notes(spec, entries) + _overridden(entries)
    if notes:
        lines += ["Notes:"] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines).rstrip("\n") + "\n"


def sweep_latex(spec: dict, entries: list[dict], replica: bool) -> str:
    lines = [r"value & paper & ours & $\Delta$ \\"]
    for panel, rows in _panel_entries(spec, entries):
        title = f"{tex_escape(panel['title'])}: {tex_escape(panel.get('header', panel['metric']))}"
        lines += [r"\midrule", rf"\multicolumn{{4}}{{l}}{{{title}}} \\"]
        for e in rows:
            ours = "--" if e["ours"] is None else f"{e['ours']:.1f}" + (
                f" $\\pm$ {e['std']:.1f}" if e["std"] is not None else "")
            lines.append(" & ".join([
                f"{tex_escape(panel.get('label', panel['param']))} = {tex_escape(_value_text(e['value']))}",
                "" if e["paper"] is None else f"{e['paper']:.1f}", ours,
                "" if e["diff"] is None else f"{e['diff']:+.1f}"]) + r" \\")
    note = selection_note(entries)
    return latex_table(tex_escape(spec["caption"]) + (REPLICA_TEX if replica else "") + (f" {tex_escape(note)}" if note else ""),
                       "lrrr", lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_panel(ax, panel: dict, rows: list[dict]) -> None:
    values = [e["value"] for e in rows]
    scale = panel.get("scale", "linear")
    if scale == "categorical" or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        xs = list(range(len(values)))
        ax.set_xticks(xs, [_value_text(v) for v in values])
    else:
        xs = [float(v) for v in values]
        if scale == "log":
            ax.set_xscale("log")
    ours = [(x, e["ours"], e["std"] or 0.0) for x, e in zip(xs, rows) if e["ours"] is not None]
    paper = [(x, e["paper"]) for x, e in zip(xs, rows) if e["paper"] is not None]
    if scale == "categorical":
        width = 0.38
        if paper:
            ax.bar([x - width / 2 for x, _ in paper], [y for _, y in paper], width, color="tab:gray", label="paper")
        if ours:
            ax.bar([x + width / 2 for x, _, _ in ours], [y for _, y, _ in ours], width, color="tab:blue",
                   yerr=[s for _, _, s in ours], label="ours")
        ax.axhline(0.0, color="0.3", lw=0.8)
    else:
        if paper:
            ax.plot([x for x, _ in paper], [y for _, y in paper], "s", color="tab:gray", ms=7, label="paper")
        if ours:
            ax.errorbar([x for x, _, _ in ours], [y for _, y, _ in ours], yerr=[s for _, _, s in ours],
                        fmt="o-", color="tab:blue", capsize=3, label="ours")
    if not ours and not paper:
        ax.text(0.5, 0.5, "no point yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=8)
    ax.set_title(panel["title"], fontsize=9)
    ax.set_xlabel(panel.get("label", panel["param"]))
    ax.set_ylabel(panel.get("header", panel["metric"]))
    ax.grid(alpha=0.3)


def sweep_plot(table_plan, runs_dir: str | Path, out: str | Path) -> Path:
    """Draw the sweep (one panel per spec panel) to ``out`` (PNG, (n * 480) x 420 pixels)."""
    plt = _pyplot()
    spec = as_table_plan(table_plan).spec
    entries, replica = sweep_entries(table_plan, runs_dir)
    panels = list(_panel_entries(spec, entries))
    fig, axes = plt.subplots(1, len(panels), figsize=(PANEL_SIZE[0] * len(panels), PANEL_SIZE[1]), dpi=DPI,
                             squeeze=False)
    for ax, (panel, rows) in zip(axes[0], panels):
        _draw_panel(ax, panel, rows)
    caption = [f"{spec['paper']} {spec['table']}: {spec['caption']}"]
    if replica:
        caption.append("Replica data: ours is meaningless.")
    caption += [f"Not plotted, {note}" for note in _missing_notes(spec, entries)] + _overridden(entries)
    text = "\n".join(_wrap(line, int(110 * len(panels) * 0.9)) for line in caption)
    fig.subplots_adjust(left=0.09 / len(panels) + 0.03, right=0.98, top=0.9, bottom=0.16 + 0.04 * text.count("\n"),
                        wspace=0.3)
    fig.text(0.01, 0.01, text, fontsize=7, va="bottom", ha="left")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    return out


def _wrap(line: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(line, max(width, 40))) or line



@TABLE_KINDS.register("sweep")
class SweepTable(TableKind):
    """A figure's points, one row per point (see the module docstring)."""

    def page_note(self, rows: list[dict]) -> str:
        return selection_note(rows)

    def check_before_schema(self, spec: dict, where: str) -> None:
        for key in ("columns", "rows", "best"):
            if key in spec:
                raise PlanError(f"{where}: {key}: a sweep has panels, not {key} (it renders one row per point)")

    def check(self, spec: dict, where: str, schemas) -> None:
        """Each panel's points and blocks; adds the ``columns`` and ``rows`` it renders as (:func:`sweep_rows`)."""
        for p, panel in enumerate(spec["panels"]):
            if len(panel["paper"]) != len(panel["values"]):
                raise PlanError(f"{where}: panels[{p}].paper: {len(panel['paper'])} numbers for "
                                f"{len(panel['values'])} values ({panel['key']!r})")
            for prefix, block in ((("panels", p, "run"), panel.get("run")),
                                  (("panels", p, "reference", "run"), (panel.get("reference") or {}).get("run"))):
                if block is not None:
                    validate(block, schemas.partial_run, where, prefix=prefix)
                    check_per_loss(block, schemas, where, prefix)
            for i, value in enumerate(panel["values"]):
                validate(sweep_layer(panel["param"], value), schemas.partial_run, where,
                         prefix=("panels", p, "values", i))
        spec["columns"], spec["rows"] = sweep_rows(spec)  # the table it renders as: one row per point

    def plan(self, spec: dict, planner) -> KindPlan:
        """The points (one per panel and value, in order) and the runs they need (the reference's included)."""
        cells, runs = [], {}
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        for p, panel in enumerate(spec["panels"]):
            path = tuple(panel["param"].split("."))
            reference = panel.get("reference")
            arms = [("loss", [(f"{where}: panels[{p}].run", panel.get("run", {})),
                              (f"{where}: panels[{p}].loss", {"loss": panel["loss"]})])]
            if reference is not None:
                arms.append(("reference", [(f"{where}: panels[{p}].run", panel.get("run", {})),
                                           (f"{where}: panels[{p}].reference.loss", {"loss": reference["loss"]}),
                                           (f"{where}: panels[{p}].reference.run", reference.get("run", {}))]))
            pending = None
            for arm, arm_layers in arms:
                loss = arm_layers[-1 if arm == "loss" else 1][1]["loss"]
                pending = pending or planner.pending(panel["setup"], loss["name"], f"{where}: panels[{p}].{arm}")
            for i, value in enumerate(panel["values"]):
                cell = SweepCell(len(cells), 0, panel["metric"], panel["key"], panel["param"], value, pending=pending)
                cells.append(cell)
                if pending:
                    continue
                for arm, arm_layers in arms:
                    layers = [*arm_layers, (f"{where}: panels[{p}].values[{i}]", sweep_layer(panel["param"], value))]
                    context = f" (sweep {panel['key']!r}, {panel['param']} = {_value_text(value)}, {arm})"
                    for seed in spec.get("seeds", [None]):
                        run = planner.resolve(panel["setup"], layers, seed, context)
                        rid = run_id(run)
                        runs[rid] = run
                        (cell.run_ids if arm == "loss" else cell.reference_run_ids).append(rid)
                        if arm == "loss":
                            cell.resolved = get_path(run, path)
        return KindPlan([asdict(cell) for cell in cells], runs)

    def figures(self, table, results: str = "results") -> list[str]:
        """The plot (:func:`sweep_plot`); its md/csv/tex are the table's outputs."""
        return [f"{results}/tables/{table.key}.png"]

    def render(self, table, runs_dir, out_prefix, manifests_dir=None) -> list[dict]:
        spec = table.spec
        entries, replica = sweep_entries(table, runs_dir)
        write_outputs(out_prefix, sweep_markdown(spec, entries, replica), numbers_csv(entries, replica),
                      sweep_latex(spec, entries, replica))
        return entries
