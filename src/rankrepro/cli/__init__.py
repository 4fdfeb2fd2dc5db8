"""``python -m rankrepro <command>``: the one entry point every Snakemake rule calls.

Each command is declared beside its handler: ``add_<command>(sub)`` adds its subparser (its arguments,
help and ``func``, the ``cmd_<command>`` that runs it) next to that handler, in one module per group of
commands: :mod:`~rankrepro.cli.data` (a dataset's files, manifest and image caches),
:mod:`~rankrepro.cli.runs` (a run's record, training and evaluation), :mod:`~rankrepro.cli.results`
(tables, figures, the index and report pages, MLflow), :mod:`~rankrepro.cli.plan` (a config's plan, its
cost, the recipe cards), :mod:`~rankrepro.cli.tools` (the catalog, the benchmarks); ``hgldv2`` and its
steps: :mod:`rankrepro.hgldv2.cli`. :func:`build_parser` adds them in the order of :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse

from rankrepro.cli import data, plan, results, runs, tools
from rankrepro.hgldv2 import cli as hgldv2_cli

#: the commands' ``add_<command>(sub)``, in the order ``--help`` lists them
COMMANDS = (data.add_replica, data.add_download, data.add_prepare, runs.add_write_run, runs.add_train,
            runs.add_evaluate, runs.add_train_batch, runs.add_adopt, data.add_cache, results.add_table,
            results.add_sweep_plot, results.add_results_index, results.add_table_html, results.add_plot,
            plan.add_plan, plan.add_cost, plan.add_recipe, results.add_synthetic, tools.add_catalog,
            results.add_track, hgldv2_cli.register, tools.add_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rankrepro", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.func(args)
    return 0
