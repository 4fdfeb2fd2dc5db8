"""``python -m rankrepro <command>``: the one entry point every Snakemake rule calls.

Each command is declared beside its handler: ``add_<command>(sub)`` adds its subparser (its arguments,
help and ``func``, the ``cmd_<command>`` that runs it) next to that handler, in one module per group of
commands: :mod:`~rankrepro.cli.data` (a dataset's files, manifest and image caches),
:mod:`~rankrepro.cli.runs` (a run's record, training and evaluation), :mod:`~rankrepro.cli.results`
(tables, figures, the index and report pages, MLflow), :mod:`~rankrepro.cli.plan` (a config's plan, its
cost, the recipe cards), :mod:`~rankrepro.cli.tools` (the catalog, the benchmarks, the pilot); ``hgldv2`` and its
steps: :mod:`rankrepro.hgldv2.cli`. :func:`build_parser` adds them in the order of :data:`COMMANDS`.
:func:`run` is the process's entry (``python -m rankrepro``): :func:`main` with every message that reaches it cut
to a bounded length.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from rankrepro.cli import data, plan, results, runs, tools
from rankrepro.hgldv2 import cli as hgldv2_cli
from rankrepro.io import FileFormatError
from rankrepro.messages import MESSAGE_LIMIT, short_text

#: the commands' ``add_<command>(sub)``, in the order ``--help`` lists them
COMMANDS = (data.add_replica, data.add_download, data.add_prepare, runs.add_write_run, runs.add_train,
            runs.add_evaluate, runs.add_train_batch, data.add_cache, results.add_table,
            results.add_sweep_plot, results.add_results_index, results.add_table_html, results.add_plot,
            results.add_leaderboard_summary,
            plan.add_plan, plan.add_cost, plan.add_recipe, results.add_synthetic, tools.add_catalog,
            results.add_track, hgldv2_cli.register, tools.add_bench, tools.add_pilot)


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


def run(argv: list[str] | None = None) -> int:
    """:func:`main` for a process (``python -m rankrepro``), the last guard of the messages' length: an exit's
    message (``sys.exit(text)``) is cut to 2 x :data:`~rankrepro.messages.MESSAGE_LIMIT` characters (room for
    the prefix a command puts before an error's message, already cut to 1 x) and each line of an uncaught error's
    traceback to 1 x, the traceback to 4 x in all (:func:`~rankrepro.messages.short_text`); such an error ends
    the process with status 1, as Python's own handler does. A :class:`~rankrepro.io.FileFormatError` (a file
    the command reads is malformed: the message names it) ends it with its message only, status 1."""
    try:
        return main(argv)
    except SystemExit as done:
        if isinstance(done.code, str):
            raise SystemExit(short_text(done.code, 2 * MESSAGE_LIMIT)) from None
        raise
    except FileFormatError as err:  # names the file and what is wrong with it: no traceback
        raise SystemExit(f"rankrepro: {err}") from None
    except Exception as err:  # noqa: BLE001 -- printed, as Python would, but of a bounded length
        lines = "".join(traceback.format_exception(err)).splitlines()
        print(short_text("\n".join(map(short_text, lines)), 4 * MESSAGE_LIMIT), file=sys.stderr)
        return 1
