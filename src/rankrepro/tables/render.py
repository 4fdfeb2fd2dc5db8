"""Render a planned table with the paper's numbers beside ours, to Markdown, CSV and LaTeX.

What a table is computed from and how it prints is its kind's (:mod:`rankrepro.tables.kinds`:
``runs``, ``dataset_statistics``, ``sweep``, ``static``); the primitives they share (escaping,
marks, CSV, files) are :mod:`rankrepro.tables.formats`.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.plan.model import TablePlan, as_table_plan

__all__ = ["render"]


def render(table_plan: TablePlan | dict, runs_dir: str | Path, out_prefix: str | Path,
           manifests_dir: str | Path | None = None) -> list[dict]:
    """Write ``<out_prefix>.md``, ``.csv`` and ``.tex`` of a planned table (its JSON as in
    ``results/plan/tables/<paper>/<table>.json``, or a :class:`~rankrepro.plan.model.TablePlan`);
    return the table's entries (its CSV rows).

    Its runs' metrics are read under ``runs_dir``; a dataset statistics table reads
    ``<manifests_dir>/<dataset>/meta.json`` (default: ``manifests`` beside ``runs_dir``)."""
    table = as_table_plan(table_plan)
    return table.kind.render(table, runs_dir, out_prefix, manifests_dir)
