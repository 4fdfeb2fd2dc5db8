"""Origins of a run's values, shortened for reading (the card's JSON keeps them whole).

The planner labels each value of a run with where it came from
(:attr:`Planner.provenance <rankrepro.plan.planner.Planner.provenance>`); :func:`short_origin`
words a label for a reader comparing recipes:

- a setup file: ``src/rankrepro/plan/setups/suprank.yaml: suprank_inat`` → ``suprank.yaml: suprank_inat``
  (``: per_loss.roadmap`` kept);
- a table spec: ``src/rankrepro/tables/specs/suprank/table4.yaml: rows[20].column_runs.CUB`` →
  ``suprank/table4.yaml rows[20] (ROADMAP (ours) DeiT-S) column_runs.CUB``: the row's method, the
  column's group and header, the panel's title, read from the plan's table;
- a component's code default: ``code default of model 'retrieval_net' (rankrepro.models.heads:RetrievalNet)``
  → ``default (RetrievalNet)``; the run schema's default → ``default (run schema)``;
- a parameter group's value filled from the optimizer block or the schedule
  (:mod:`rankrepro.plan.groups`): the shortened origin of that value, then ``(optimizer.name)``,
  ``(optimizer.weight_decay)`` or ``(schedule's floor)``; a loss group copied from the model's:
  ``follows the head group``;
- a table's ``seeds``: ``the table's seeds``; any other label (``config run_overrides``) as it is.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from rankrepro.plan.model import TablePlan

__all__ = ["NOT_RECORDED", "cell_column", "cell_row", "short_origin"]

#: the origin of a value a plan file does not record (a plan written before provenance existed)
NOT_RECORDED = "not recorded in the plan"

_FILLED_FROM = re.compile(r"^(?P<base>.+) \((?P<how>optimizer\.\w+|schedule's floor)\)$")
_CODE_DEFAULT = re.compile(r"^code default of (?P<kind>\w+) '(?P<name>[^']+)'(?: \((?P<target>[^)]+)\))?$")
_LOSS_FOLLOWS = re.compile(r"^the (?P<group>\w+) group's settings \(no loss group set")
_YAML_KEY = re.compile(r"^(?P<path>\S+\.ya?ml): (?P<key>.+)$")
_SPEC_PART = re.compile(r"^(?P<part>rows|columns|panels)\[(?P<index>\d+)\](?P<rest>.*)$")


def cell_row(spec: dict, index: int) -> str:
    """How a card names row ``index`` of a table spec: its method."""
    rows = spec.get("rows") or []
    return rows[index].get("method", f"row {index}") if index < len(rows) else f"row {index}"


def cell_column(spec: dict, index: int) -> str:
    """How a card names column ``index`` of a table spec: its group and header (``CUB R@1``)."""
    columns = spec.get("columns") or []
    if index >= len(columns):
        return f"column {index}"
    column = columns[index]
    return " ".join(p for p in (column.get("group"), column.get("header")) if p) or column.get("key", f"column {index}")


def _spec_label(spec: dict, part: str, index: int) -> str | None:
    if part == "rows":
        return cell_row(spec, index)
    if part == "columns":
        return cell_column(spec, index)
    panels = spec.get("panels") or []
    if index >= len(panels):
        return None
    return panels[index].get("title") or panels[index].get("key")


def _spec_table(path: str, tables: dict[str, TablePlan]) -> TablePlan | None:
    """The planned table whose spec file is ``path`` (``.../<paper>/<table>.yaml``)."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2:
        return None
    return tables.get(f"{parts[-2]}/{PurePosixPath(parts[-1]).stem}")


def short_origin(origin: str, tables: dict[str, TablePlan] | None = None) -> str:
    """``origin`` (a provenance label) shortened for reading; ``tables``: the plan's, whose specs name
    rows, columns and panels (see the module docstring)."""
    tables = tables or {}
    filled = _FILLED_FROM.match(origin)
    if filled:
        return f"{short_origin(filled['base'], tables)} ({filled['how']})"
    default = _CODE_DEFAULT.match(origin)
    if default:
        target = default["target"]
        return f"default ({target.rsplit(':', 1)[-1] if target else default['name']})"
    if origin.startswith("run schema default"):
        return "default (run schema)"
    if origin == "spec seeds":
        return "the table's seeds"
    follows = _LOSS_FOLLOWS.match(origin)
    if follows:
        return f"follows the {follows['group']} group"
    located = _YAML_KEY.match(origin)
    if not located:
        return origin
    path, key = located["path"], located["key"]
    table = _spec_table(path, tables)
    if table is None:  # a setup file (or a spec this plan does not hold)
        return f"{PurePosixPath(path).name}: {key}"
    where = f"{table.key}.yaml"
    part = _SPEC_PART.match(key)
    if not part:
        return f"{where} {key}"
    label = _spec_label(table.spec, part["part"], int(part["index"]))
    rest = part["rest"].removeprefix(".")
    return " ".join(p for p in (f"{where} {part['part']}[{part['index']}]", f"({label})" if label else "", rest) if p)
