"""Variant rows: a paper row again with the official code's (or another plausible) setting, beside the paper's.

Where a paper and its official code disagree, a runs table's spec declares the other reading on the row it
concerns (``rows[i].variants``, ``schemas/table.schema.yaml``): each variant has a ``label`` (what differs), a
``source`` (the file @ commit, or the paper's section, the other reading comes from) and what it changes:

- ``run`` / ``column_runs``: a partial run merged after every layer of the row (the row's ``run`` and
  ``column_runs`` included), so the variant's cell is the main row's run with that change;
- ``columns``: the column keys or groups the variant concerns (default every column); its other cells are
  the main row's and are left empty;
- ``select``: which epoch the variant row shows (``last`` / ``best_test``, :mod:`rankrepro.record.selection`)
  of the main row's own runs, no training of its own (a variant of the model selection).

Variants are off by default: the config's ``variants`` (``true``, or ``{<paper> | <paper>/<table>: bool}``, a
table's entry over its paper's) turns them on (:func:`variants_on`). A table with variants on has one extra
row per variant, appended after the paper's rows (so the paper rows keep their indexes, their cells and run
ids), each naming its main row (``variant.of``); with them off the spec's declarations are dropped and the
table plans as if they were not there (:func:`expand_variants`). The table renders the variant row with its
own Δ to the paper's number and its Δ to the main row's ours (:mod:`rankrepro.tables.kinds.runs`); ``cost``
gives the GPU-hours of the runs only variant rows need (:mod:`rankrepro.plan.cost`), and the results index
counts variant cells apart from the paper's (:mod:`rankrepro.tables.kinds.base`).
"""

from __future__ import annotations

import copy

from rankrepro.plan.schema import PlanError

__all__ = ["SAME_AS_MAIN", "VARIANT", "expand_variants", "is_variant", "check_variants_setting", "variant_column",
           "variants_on"]

#: the key of an expanded variant row that says which variant it is (and of which row)
VARIANT = "variant"

#: the pending reason of a variant row's cell in a column the variant does not change (its ``columns``): no run,
#: not counted as a cell anywhere
SAME_AS_MAIN = "variant row: the variant does not change this column (see its main row)"


def variants_on(setting, paper: str, table: str) -> bool:
    """Whether the config's ``variants`` (``setting``: a bool or ``{paper | paper/table: bool}``) turns on the
    variant rows of ``paper/table``: a table's entry wins over its paper's; off by default."""
    if isinstance(setting, bool):
        return setting
    setting = setting or {}
    return bool(setting.get(f"{paper}/{table}", setting.get(paper, False)))


def check_variants_setting(setting, tables: dict[str, list[str]], declared: dict[str, bool]) -> None:
    """:class:`PlanError` naming ``config variants.<key>`` for a key that names no paper or table of the config's
    ``tables``, or a table whose spec declares no variant (``declared``: {"paper/table": has variants})."""
    if isinstance(setting, bool) or not setting:
        return
    for key in setting:
        paper, _, table = key.partition("/")
        if paper not in tables or (table and table not in tables[paper]):
            listed = ", ".join(f"{p}/{t}" for p, names in tables.items() for t in names)
            raise PlanError(f"config variants.{key}: no {'table' if table else 'paper'} {key} in the config's "
                            f"tables ({listed})")
        if table and not declared.get(key):
            with_variants = ", ".join(k for k, has in declared.items() if has) or "none"
            raise PlanError(f"config variants.{key}: the spec of {key} declares no variant rows; tables that do: "
                            f"{with_variants}")


def is_variant(row: dict) -> bool:
    """Whether an (expanded) spec row is a variant row."""
    return VARIANT in row


def expand_variants(spec: dict, on: bool) -> dict:
    """``spec`` with its rows' ``variants`` declarations removed and, when ``on``, one row per variant appended
    after the paper's rows: the main row's method, paper numbers, loss, run and column_runs, its ``method``
    followed by the variant's label, and ``variant``: the declaration with ``of`` (the main row's index) and
    ``at`` (where it is declared: ``rows[i].variants[j]``)."""
    spec = copy.deepcopy(spec)
    appended = []
    for r, row in enumerate(spec.get("rows", [])):
        for v, variant in enumerate(row.pop("variants", None) or ()):
            if not on:
                continue
            extra = {k: val for k, val in row.items() if k != "paper_row"}
            extra["method"] = f"{row['method']} · {variant['label']}"
            extra[VARIANT] = {**variant, "of": r, "at": f"rows[{r}].variants[{v}]"}
            appended.append(extra)
    if appended:
        spec["rows"] = spec["rows"] + appended
    return spec


def variant_column(variant: dict, column: dict) -> bool:
    """Whether ``variant`` concerns ``column`` (its ``columns``, by key or group; all columns without one)."""
    wanted = variant.get("columns")
    return wanted is None or column["key"] in wanted or column["group"] in wanted

