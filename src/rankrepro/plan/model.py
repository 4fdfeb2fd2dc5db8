"""The plan as typed data: :class:`Plan` and :class:`TablePlan`, and the queries every reader needs.

The planner writes the plan as JSON (``results/plan/plan.<hash>.json`` and one
``results/plan/tables/<paper>/<table>.<hash>.json`` per table, named by their content,
:func:`rankrepro.plan.build.write_plan`);
``from_json`` / ``to_json`` convert without changing that shape:

- ``runs``: ``{run_id: run}`` (the complete runs, :mod:`rankrepro.plan.complete`);
- ``tables``: ``{"<paper>/<table>": table}``, each ``{"paper", "table", "spec", "cells", "runs"}``,
  with ``"datasets"`` (the manifests its cells read) and ``"spec_file"`` where its kind records them;
- ``datasets``: ``{name: {"facts", "config"}}``; ``synthetic``: ``{"names", "scale", "seed"}``;
  ``hgldv2``: the checked ``hgldv2`` block (plans made from a config);
- ``provenance``: ``{run_id: {dotted key: origin}}``, where each value of each run came from (the setup
  file and setup, the spec's row or column, the config's overrides, a default: :attr:`Planner.provenance
  <rankrepro.plan.planner.Planner.provenance>`), what the recipe cards print (:mod:`rankrepro.recipe`).

What a table is computed from, what it reads and renders, is its kind's
(:mod:`rankrepro.tables.kinds`): :attr:`TablePlan.kind`. Paths are under a results folder
(``results`` by default): ``runs/<id>/metrics.json``, ``manifests/<dataset>/meta.json``,
``tables/<paper>/<table>.{md,csv,tex}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rankrepro.io import FileFormatError, load_json_mapping
from rankrepro.messages import short_repr
from rankrepro.plan.schema import PlanError
from rankrepro.tables.kinds import spec_kind
from rankrepro.tables.kinds.base import TableKind

__all__ = ["RUN_ID_KEY", "Plan", "TablePlan", "as_table_plan", "check_run_record", "metrics_path", "manifest_path",
           "run_record"]

#: the key of a run.json that holds its run's id (:meth:`Plan.run_record`)
RUN_ID_KEY = "id"

#: the files a rendered table consists of
TABLE_FORMATS = ("md", "csv", "tex")


def run_record(run: dict, run_id: str) -> dict:
    """What ``results/runs/<id>/run.json`` holds: the complete ``run`` and its id under :data:`RUN_ID_KEY`
    (a key the run schema does not allow in a run, so no run has it; the id hashes the run without it)."""
    return {**run, RUN_ID_KEY: run_id}


def load_plan_file(path: str | Path, keys, what: str) -> dict:
    """The JSON object of a plan file at ``path`` (:func:`rankrepro.io.load_json_mapping`) that has each of
    ``keys``; a :class:`~rankrepro.io.FileFormatError` naming the file, and the keys it lacks, otherwise (``what``:
    how the message names such a file)."""
    data = load_json_mapping(path)
    missing = [key for key in keys if key not in data]
    if missing:
        raise FileFormatError(f"{path}: not a {what} file: it has no {', '.join(map(repr, missing))} key "
                              "(results/plan/ holds the files `python -m rankrepro plan` writes)")
    return data


def check_run_record(record, where: str, run_id: str) -> dict:
    """``record`` (a run.json or a plan's run file, read from ``where``) when it holds run ``run_id``: its
    :data:`RUN_ID_KEY` is that id and the run hashes to it (:func:`rankrepro.plan.complete.run_id`);
    :class:`PlanError` naming ``where`` otherwise."""
    from rankrepro.plan.complete import run_id as hash_id

    if not isinstance(record, dict) or record.get(RUN_ID_KEY) != run_id:
        found = record.get(RUN_ID_KEY) if isinstance(record, dict) else type(record).__name__
        raise PlanError(f"{where}: holds run {short_repr(found)}, not {run_id}")
    run = {k: v for k, v in record.items() if k != RUN_ID_KEY}
    if hash_id(run) != run_id:
        raise PlanError(f"{where}: its content hashes to {hash_id(run)}, not to its id {run_id} (edited by hand? "
                        "delete it and run snakemake again to rewrite it from the plan)")
    return record


def metrics_path(run_id: str, results: str = "results") -> str:
    """A run's metrics.json (what a table reads of it)."""
    return f"{results}/runs/{run_id}/metrics.json"


def manifest_path(dataset: str, results: str = "results") -> str:
    """A prepared dataset's meta.json (its split counts)."""
    return f"{results}/manifests/{dataset}/meta.json"


@dataclass
class TablePlan:
    """One planned table: its spec, its cells (the kind's cell records), the runs they need and,
    for kinds that read manifests, the datasets (``None`` otherwise)."""

    paper: str
    table: str
    spec: dict
    cells: list[dict] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    datasets: list[str] | None = None
    spec_file: str | None = None

    @classmethod
    def from_json(cls, data: dict) -> TablePlan:
        return cls(data["paper"], data["table"], data["spec"], data.get("cells", []), data.get("runs", []),
                   data.get("datasets"), data.get("spec_file"))

    @classmethod
    def load(cls, path: str | Path) -> TablePlan:
        """The table plan of a ``results/plan/tables/<paper>/<table>.<hash>.json`` (:func:`load_plan_file`)."""
        return cls.from_json(load_plan_file(path, ("paper", "table", "spec"), "table plan"))

    def to_json(self) -> dict:
        out = {"paper": self.paper, "table": self.table, "spec": self.spec, "cells": self.cells, "runs": self.runs}
        if self.datasets is not None:
            out["datasets"] = self.datasets
        if self.spec_file is not None:
            out["spec_file"] = self.spec_file
        return out

    @property
    def key(self) -> str:
        """``<paper>/<table>``."""
        return f"{self.paper}/{self.table}"

    @property
    def where(self) -> str:
        """How messages name the table: its spec file when recorded, else its key."""
        return self.spec_file or self.key

    @property
    def kind(self) -> TableKind:
        """The table's kind (:mod:`rankrepro.tables.kinds`)."""
        return spec_kind(self.spec)

    @property
    def title(self) -> str:
        """The table's short title (the spec's ``title``; its caption when it has none)."""
        return self.spec.get("title") or self.spec.get("caption", "")

    def inputs(self, results: str = "results") -> list[str]:
        """The files rendering the table reads: its runs' metrics.json and its datasets' manifests."""
        return [metrics_path(rid, results) for rid in self.runs] + [
            manifest_path(name, results) for name in self.datasets or ()]

    def outputs(self, results: str = "results") -> list[str]:
        """The rendered table: ``<results>/tables/<paper>/<table>.{md,csv,tex}``."""
        return [f"{results}/tables/{self.key}.{ext}" for ext in TABLE_FORMATS]

    def figures(self, results: str = "results") -> list[str]:
        """The figures its kind draws besides the table (a sweep's plot), none for most kinds."""
        return self.kind.figures(self, results)


def as_table_plan(table: TablePlan | dict) -> TablePlan:
    """``table`` as a :class:`TablePlan` (a table's JSON as read from ``results/plan/tables/``)."""
    return table if isinstance(table, TablePlan) else TablePlan.from_json(table)


@dataclass
class Plan:
    """Every planned run, table, dataset and synthetic result (see the module docstring)."""

    runs: dict[str, dict]
    tables: dict[str, TablePlan]
    datasets: dict[str, dict]
    synthetic: dict
    hgldv2: dict | None = None
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> Plan:
        return cls(data.get("runs", {}), {key: TablePlan.from_json(t) for key, t in data["tables"].items()},
                   data.get("datasets", {}), data.get("synthetic", {}), data.get("hgldv2"), data.get("provenance", {}))

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """The plan of a ``results/plan/plan.<hash>.json`` (:func:`load_plan_file`)."""
        return cls.from_json(load_plan_file(path, ("tables",), "plan"))

    def to_json(self) -> dict:
        out = {"runs": self.runs, "tables": {key: t.to_json() for key, t in self.tables.items()},
               "datasets": self.datasets, "synthetic": self.synthetic}
        if self.hgldv2 is not None:
            out["hgldv2"] = self.hgldv2
        if self.provenance:
            out["provenance"] = self.provenance
        return out

    def run_record(self, run_id: str, where: str = "the plan") -> dict:
        """:func:`run_record` of the planned run ``run_id``; :class:`PlanError` naming ``where`` (the plan
        file) for an id that is not planned."""
        if run_id not in self.runs:
            raise PlanError(f"{where}: run {run_id} is not in the plan ({len(self.runs)} runs)")
        return run_record(self.runs[run_id], run_id)

    def table(self, key: str) -> TablePlan:
        """The table ``<paper>/<table>``; :class:`PlanError` naming the planned ones otherwise."""
        if key not in self.tables:
            raise PlanError(f"table {key} is not in the plan (config.yaml's tables); planned: "
                            f"{', '.join(self.tables) or '(none)'}")
        return self.tables[key]

    def runs_of(self, key: str) -> list[str]:
        """The run ids table ``key`` needs."""
        return self.table(key).runs

    def table_inputs(self, key: str, results: str = "results") -> list[str]:
        """The files rendering table ``key`` reads (:meth:`TablePlan.inputs`)."""
        return self.table(key).inputs(results)

    def tables_of_kind(self, kind: str) -> list[str]:
        """The keys of the tables of kind ``kind``, in plan order."""
        return [key for key, table in self.tables.items() if table.kind.name == kind]

    def tables_of_paper(self, paper: str) -> list[str]:
        """The keys of ``paper``'s tables, in plan order."""
        return [key for key, table in self.tables.items() if table.paper == paper]

    def papers(self) -> list[str]:
        """The papers with a planned table, in plan order."""
        return list(dict.fromkeys(table.paper for table in self.tables.values()))

    def tables_using(self, run_id: str) -> list[str]:
        """The keys of the tables that need run ``run_id``, in plan order."""
        return [key for key, table in self.tables.items() if run_id in table.runs]

    def table_runs(self) -> list[str]:
        """The runs some table needs, each once, in plan order."""
        return list(dict.fromkeys(rid for table in self.tables.values() for rid in table.runs))

    def table_outputs(self, results: str = "results") -> list[str]:
        """Every table's rendered files."""
        return [path for table in self.tables.values() for path in table.outputs(results)]
