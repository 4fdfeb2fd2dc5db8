"""Table specs and the runs they need.

A spec (``specs/<paper>/<table>.yaml``) lists ``columns`` (each a paper ``setup``
and a ``metric``) and ``rows`` (each a ``method``, the ``loss`` it trains with and
the ``paper`` numbers, one per column, ``null`` where the paper has none). A row
marked ``cited: true`` is quoted from other work: it has no run. Cell (row,
column) is the run ``resolve_run(column.setup, row.loss, overrides)`` for each
seed in ``seeds`` (default: the setup's own seed). A cell whose loss, dataset or
setup does not exist yet is *pending*: the table shows the paper number alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

import yaml

from rankrepro import losses
from rankrepro.data import datasets
from rankrepro.experiments.resolve import deep_merge, load_setups, resolve_run, run_id


@dataclass
class Cell:
    row: int
    column: int
    metric: str
    run_ids: list[str] = field(default_factory=list)
    pending: str | None = None  # why no run exists yet


def spec_names() -> list[tuple[str, str]]:
    root = resources.files("rankrepro.tables").joinpath("specs")
    return sorted((paper.name, f.name.removesuffix(".yaml")) for paper in root.iterdir() if paper.is_dir()
                  for f in paper.iterdir() if f.name.endswith(".yaml"))


def load_spec(paper: str, table: str) -> dict:
    path = resources.files("rankrepro.tables").joinpath("specs", paper, f"{table}.yaml")
    if not path.is_file():
        raise FileNotFoundError(f"no table spec {paper}/{table}; known: {spec_names()}")
    spec = yaml.safe_load(path.read_text())
    for row in spec["rows"]:
        if len(row["paper"]) != len(spec["columns"]):
            raise ValueError(f"{paper}/{table}: row {row['method']!r} has {len(row['paper'])} paper numbers "
                             f"for {len(spec['columns'])} columns")
    return spec


def _pending_reason(setup: str, setups: dict, loss: dict) -> str | None:
    if setup not in setups:
        return f"setup {setup} not implemented yet"
    if setups[setup]["dataset"] not in datasets.names():
        return f"dataset {setups[setup]['dataset']} not implemented yet"
    if loss["name"] not in losses.names():
        return f"loss {loss['name']} not implemented yet"
    return None


def plan_table(spec: dict, overrides: dict | None = None, setups: dict | None = None) -> tuple[list[Cell], dict]:
    """The cells of a table and the runs ``{run_id: run}`` they need."""
    setups = setups if setups is not None else load_setups()
    cells, runs = [], {}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            cell = Cell(r, c, column["metric"])
            cells.append(cell)
            if row.get("cited"):
                cell.pending = "cited from other work"
                continue
            cell.pending = _pending_reason(column["setup"], setups, row["loss"])
            if cell.pending:
                continue
            base_seed = setups[column["setup"]]["seed"]
            for seed in spec.get("seeds", [base_seed]):
                run = resolve_run(column["setup"], row["loss"], deep_merge(overrides or {}, {"seed": seed}),
                                  setups)
                rid = run_id(run)
                runs[rid] = run
                cell.run_ids.append(rid)
    return cells, runs


def plan(tables: dict[str, list[str]], overrides: dict | None = None) -> tuple[dict, dict]:
    """For the config's ``tables`` ({paper: [table, ...]}): ({(paper, table): run ids}, {run_id: run})."""
    setups = load_setups()
    needed, runs = {}, {}
    for paper, names in tables.items():
        for table in names:
            cells, table_runs = plan_table(load_spec(paper, table), overrides, setups)
            needed[(paper, table)] = sorted(table_runs)
            runs.update(table_runs)
    return needed, runs
