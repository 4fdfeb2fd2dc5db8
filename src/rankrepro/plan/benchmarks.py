"""Benchmarks of our own, beside the five papers' tables: the config's ``benchmarks`` switch.

A benchmark is a "paper" of our own (:data:`BENCHMARKS`): its tables are specs under
``src/rankrepro/tables/specs/<benchmark>/`` like a paper's, but a config turns them on by name under
``benchmarks`` (``{roof: [cub, sop]}``: those leaderboards of :mod:`rankrepro.tables.kinds.leaderboard`) rather
than under ``tables``. Off by default (``benchmarks: {}``): the plan is the papers' alone, unchanged.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.plan.schema import PlanError
from rankrepro.plan.specs import SPECS_DIR, spec_names

__all__ = ["BENCHMARKS", "with_benchmarks"]

#: the benchmarks a config may turn on: "under one roof" (issue 36), a leaderboard per dataset
BENCHMARKS = ("roof",)


def with_benchmarks(tables: dict[str, list[str]], setting: dict | None,
                    specs_dir: str | Path | None = None) -> dict[str, list[str]]:
    """The config's ``tables`` ({paper: [table, ...]}) with the tables its ``benchmarks`` (``setting``) turns on
    appended (each once); ``tables`` itself when none is on. :class:`PlanError` naming ``config
    benchmarks.<name>[i]`` for a table the benchmark has no spec of (the message lists those it has)."""
    if not any((setting or {}).values()):
        return tables
    out = {paper: list(names) for paper, names in tables.items()}
    for name, wanted in setting.items():
        have = [table for paper, table in spec_names(specs_dir or SPECS_DIR) if paper == name]
        for i, table in enumerate(wanted or ()):
            if table not in have:
                raise PlanError(f"config benchmarks.{name}[{i}]: {table!r} is no table of the {name} benchmark; "
                                f"it has: {', '.join(have)}")
            if table not in out.setdefault(name, []):
                out[name].append(table)
    return out
