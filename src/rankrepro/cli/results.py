"""``table``, ``sweep-plot``, ``results-index``, ``table-html``, ``plot``, ``leaderboard-summary``, ``synthetic`` and
``track``: the tables, figures, index and report pages, and their MLflow import (workflow/rules/tables.smk,
sweeps.smk, synthetic.smk)."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_table(args) -> None:
    from rankrepro.plan.model import TablePlan
    from rankrepro.tables.render import render

    render(TablePlan.load(args.plan), args.runs_dir, args.out_prefix)
    print(Path(args.out_prefix).with_suffix(".md").read_text())


def _add_table_command(sub, name: str, func, help_text: str, out: str, out_help: str) -> None:
    """A command that reads a table's plan and its runs' results (``table``, ``sweep-plot``) and writes ``out``."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--plan", required=True, help="the table's plan: results/plan/tables/<paper>/<table>.<hash>.json")
    p.add_argument("--runs-dir", required=True)
    p.add_argument(out, required=True, help=out_help)
    p.set_defaults(func=func)


def add_table(sub) -> None:
    _add_table_command(sub, "table", cmd_table, "render a paper table (paper vs ours)", "--out-prefix",
                       "results/tables/<paper>/<table> (writes .md, .csv, .tex)")


def cmd_sweep_plot(args) -> None:
    from rankrepro.plan.model import TablePlan
    from rankrepro.tables.kinds.sweep import sweep_plot

    print(sweep_plot(TablePlan.load(args.plan), args.runs_dir, args.out))


def add_sweep_plot(sub) -> None:
    _add_table_command(sub, "sweep-plot", cmd_sweep_plot,
                       "plot a sweep spec's points (a paper figure: ours beside the paper's)", "--out",
                       "results/tables/<paper>/<table>.png")


def cmd_results_index(args) -> None:
    from rankrepro.tables.index import write_index

    total = write_index(args.plan, args.results_dir, args.out, html_out=args.html)["total"]
    print(f"{args.out}: {total['tables']} tables, {total['reproduced']}/{total['cells']} cells reproduced, "
          f"{total['within']} within one point, {total['gpu_h']:.2f} GPU-hours, {total['cpu_h']:.2f} CPU-hours")


def add_results_index(sub) -> None:
    p = sub.add_parser("results-index", help="write results/README.md: per table, cells reproduced, within one "
                       "point, pending (why), replica or real data, GPU- and CPU-hours")
    p.add_argument("--plan", required=True, help="results/plan/plan.<hash>.json")
    p.add_argument("--results-dir", default="results", help="where tables/, runs/, synthetic/, hgldv2/ are")
    p.add_argument("--out", required=True, help="results/README.md")
    p.add_argument("--html", help="also the index as an HTML page (the report's copy)")
    p.set_defaults(func=cmd_results_index)


def cmd_table_html(args) -> None:
    from rankrepro.tables.index import write_table_html

    write_table_html(args.plan, args.csv, args.out)


def add_table_html(sub) -> None:
    p = sub.add_parser("table-html", help="an HTML page of a rendered table (for the Snakemake report)")
    p.add_argument("--plan", required=True, help="the table's plan: results/plan/tables/<paper>/<table>.<hash>.json")
    p.add_argument("--csv", required=True, help="the rendered table: results/tables/<paper>/<table>.csv")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_table_html)


def cmd_plot(args) -> None:
    from rankrepro.tables import plots

    if args.what == "curves":
        for folder in map(Path, args.runs):
            plots.training_curve(folder / "history.csv", folder / "curve.png", metrics_json=folder / "metrics.json")
        print(f"wrote curve.png in {len(args.runs)} run folders")
        return
    if not args.out:
        sys.exit(f"rankrepro plot {args.what}: --out is required")
    if args.what == "curve":
        plots.training_curve(args.history, args.out, metrics_json=args.metrics, title=args.title)
    elif args.what == "leaderboard":
        if len(args.tables) != 1:
            raise SystemExit(f"plot leaderboard: --tables takes one leaderboard's CSV, got {len(args.tables)}")
        plots.leaderboard_plot(args.tables[0], args.out, args.title or Path(args.tables[0]).stem)
    else:
        plots.paper_scatter(args.paper, args.tables, args.out)
    print(f"wrote {args.out}")


def add_plot(sub) -> None:
    p = sub.add_parser("plot", help="a run's training curve, several runs' (curves: each run folder's curve.png), "
                       "a paper's paper-vs-ours scatter, or a leaderboard's R@1 vs mAP@R (PNG)")
    p.add_argument("what", choices=["curve", "curves", "scatter", "leaderboard"])
    p.add_argument("--out", help="curve, scatter, leaderboard: the PNG")
    p.add_argument("--runs", nargs="*", default=[], help="curves: run folders results/runs/<id> (each one's "
                   "history.csv and metrics.json read, its curve.png written)")
    p.add_argument("--history", help="curve: results/runs/<id>/history.csv")
    p.add_argument("--metrics", help="curve: results/runs/<id>/metrics.json (final metrics in the title)")
    p.add_argument("--title", help="curve: default the run folder's name; leaderboard: default the CSV's name")
    p.add_argument("--paper", help="scatter: the paper's name")
    p.add_argument("--tables", nargs="*", default=[], help="scatter: the paper's table CSVs; leaderboard: its CSV")
    p.set_defaults(func=cmd_plot)


def cmd_leaderboard_summary(args) -> None:
    from rankrepro.tables.leaderboard_summary import write_summary

    rows = write_summary(args.benchmark, args.tables, args.out_prefix, html_out=args.html)
    print(f"{args.out_prefix}.md: {len(rows)} losses over {len(args.tables)} leaderboards")


def add_leaderboard_summary(sub) -> None:
    p = sub.add_parser("leaderboard-summary", help="a benchmark's summary across datasets: each loss's rank per "
                       "leaderboard and its mean rank (Markdown, CSV)")
    p.add_argument("--benchmark", required=True, help="the benchmark (the leaderboards' paper): roof")
    p.add_argument("--tables", nargs="+", required=True,
                   help="its leaderboards' CSVs: results/tables/roof/<dataset>.csv")
    p.add_argument("--out-prefix", required=True, help="results/tables/roof/summary (writes .md, .csv)")
    p.add_argument("--html", help="also the page as HTML (the report's copy)")
    p.set_defaults(func=cmd_leaderboard_summary)


def cmd_synthetic(args) -> None:
    from rankrepro.synthetic import run

    record = run(args.name, args.out_prefix, scale=args.scale, seed=args.seed)
    print(Path(args.out_prefix).with_suffix(".md").read_text() if record else "")


def add_synthetic(sub) -> None:
    p = sub.add_parser("synthetic", help="compute a result that needs no image dataset (toy figure, timing table)")
    p.add_argument("name", help="a registered result (rankrepro.synthetic)")
    p.add_argument("--out-prefix", required=True, help="writes <prefix>.md, .json (and .png for figures)")
    p.add_argument("--scale", default="paper", choices=["paper", "demo"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_synthetic)


def cmd_track(args) -> None:
    from rankrepro.tracking import import_runs

    runs, tables = list(args.runs), list(args.tables)
    if args.plan:  # every run and table of the plan
        from rankrepro.plan.model import Plan

        plan = Plan.load(args.plan)
        runs += [str(Path(args.runs_dir) / rid) for rid in plan.runs]
        tables += [str(Path(args.tables_dir) / key) for key in plan.tables]
    imported = import_runs(runs, tables, args.tracking_uri, args.experiment, args.out,
                           artifact_root=args.artifact_root)
    print(f"imported {len(imported)} runs/tables into {args.tracking_uri}")


def add_track(sub) -> None:
    p = sub.add_parser("track", help="import finished runs and tables into MLflow")
    p.add_argument("--plan", help="results/plan/plan.<hash>.json: import its runs and tables")
    p.add_argument("--runs-dir", default="results/runs", help="where the plan's runs are (with --plan)")
    p.add_argument("--tables-dir", default="results/tables", help="where the plan's tables are (with --plan)")
    p.add_argument("--runs", nargs="*", default=[], help="run directories")
    p.add_argument("--tables", nargs="*", default=[], help="table path prefixes (without suffix)")
    p.add_argument("--tracking-uri", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--artifact-root")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_track)
