"""The plan of a configuration: its tables planned by their kinds, their runs, datasets and extras.

:func:`make_plan` plans every table of the config's ``tables`` through its kind
(:mod:`rankrepro.tables.kinds`), collects the runs they need (cells describing the same run
share it) and the datasets the DAG prepares (:func:`plan_datasets`); :func:`plan_from_config`
adds the checked ``hgldv2`` block; :func:`write_plan` writes it under ``results/plan/`` in files named
by their content (a running workflow's plan files are never rewritten; an unchanged plan writes
nothing, so Snakemake's mtimes stay put). The plan's shape:
:mod:`rankrepro.plan.model`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rankrepro.hgldv2.prompt import check_prompt
from rankrepro.plan.benchmarks import with_benchmarks
from rankrepro.plan.model import Plan, TablePlan, run_record
from rankrepro.plan.planner import Planner
from rankrepro.plan.schema import (SCHEMA_DIR, PlanError, fill_schema_defaults, load_schema, schema_error_text,
                                   validate)
from rankrepro.plan.setups import load_setups
from rankrepro.plan.specs import SPECS_DIR, load_spec, spec_names
from rankrepro.plan.variants import check_variants_setting, expand_variants, variants_on
from rankrepro.tables.kinds import spec_kind

__all__ = ["HGLDV2_DATASET", "HGLDV2_SOURCE", "SOURCE_KEYS", "PlanFiles", "check_one_source", "make_plan",
           "plan_datasets", "plan_from_config", "plan_hgldv2", "validate_config", "write_plan"]


def make_plan(tables: dict[str, list[str]], overrides: dict | None = None, datasets_config: dict | None = None,
              *, specs_dir: str | Path | None = None, setups_dir: str | Path | None = None,
              synthetic: dict | None = None, seeds: dict[str, list[int]] | None = None,
              variants: bool | dict | None = None, **planner_kw) -> dict:
    """The plan (as JSON data: :meth:`Plan.to_json`) of the config's ``tables`` ({paper: [table, ...]}),
    ``run_overrides`` and ``datasets``, and its ``synthetic`` results (those that need no dataset,
    :mod:`rankrepro.synthetic`). Each table is planned by its kind (:meth:`TableKind.plan`), with the
    config's ``seeds`` ({"<paper>/<table>": [seed, ...]}) in place of its spec's, and its variant rows
    where the config's ``variants`` turns them on (:mod:`rankrepro.plan.variants`)."""
    if setups_dir is not None and "setups" not in planner_kw:
        planner_kw["setups"] = load_setups(setups_dir, planner_kw.get("schemas"))
    specs_dir = specs_dir or SPECS_DIR
    planner = Planner(overrides, specs_dir=specs_dir, **planner_kw)
    datasets_config = datasets_config or {}
    for name in datasets_config:
        if name not in planner.catalog["dataset"]:
            raise PlanError(f"config datasets.{name}: unknown dataset; registered: "
                            f"{', '.join(sorted(planner.catalog['dataset']))}")
    runs: dict = {}
    tables_out: dict[str, TablePlan] = {}
    read_datasets: set[str] = set()
    seeds = seeds or {}
    listed = [f"{paper}/{table}" for paper, names in tables.items() for table in names]
    specs = {f"{paper}/{table}" for paper, table in spec_names(specs_dir)}
    for key in seeds:  # a table with a spec but not in this config's tables (a config layered over another): unused
        if key not in listed and key not in specs:
            raise PlanError(f"config seeds.{key}: no table {key} in the config's tables ({', '.join(listed)}) "
                            "nor among the table specs")
    loaded = {(paper, table): load_spec(paper, table, planner.schemas, specs_dir)
              for paper, names in tables.items() for table in names}
    check_variants_setting(variants, tables, {f"{p}/{t}": any("variants" in row for row in spec.get("rows", ()))
                                              for (p, t), spec in loaded.items()})
    for paper, names in tables.items():
        for table in names:
            spec = expand_variants(loaded[paper, table], variants_on(variants, paper, table))
            kind = spec_kind(spec)
            if f"{paper}/{table}" in seeds:
                if not kind.has_runs:
                    raise PlanError(f"config seeds.{paper}/{table}: a {kind.name} table has no runs to seed")
                spec["seeds"] = list(seeds[f"{paper}/{table}"])
            planned = kind.plan(spec, planner)
            runs.update(planned.runs)
            read_datasets.update(planned.datasets or ())
            tables_out[f"{paper}/{table}"] = TablePlan(
                paper, table, {k: v for k, v in spec.items() if k != "_file"}, planned.cells, sorted(planned.runs),
                planned.datasets, spec["_file"] if kind.records_spec_file else None)
    datasets = plan_datasets({d for run in runs.values() for d in (run["dataset"], *run["eval"]["datasets"])}
                             | read_datasets, datasets_config,
                             planner.catalog["dataset"])
    synthetic = {"names": [], "scale": "paper", "seed": 0, **(synthetic or {})}
    for name in synthetic["names"]:
        if name not in planner.catalog["synthetic"]:
            raise PlanError(f"config synthetic.names: unknown result {name!r}; registered: "
                            f"{', '.join(sorted(planner.catalog['synthetic']))}")
    return Plan(dict(sorted(runs.items())), tables_out, datasets, synthetic,
                provenance={rid: planner.provenance[rid] for rid in sorted(runs)}).to_json()


def plan_datasets(used: set[str], datasets_config: dict, catalog: dict) -> dict:
    """``{name: {"facts", "config"}}`` of the datasets the runs use, those the config lists
    and the bases of derived ones. Datasets that share their files (``facts["source"]``)
    must take them from the same place; a url/checksum override needs a single file."""
    default_cfg = {"replica": False, "extracted": None, "url": None, "checksum": None}
    names = set(used) | set(datasets_config)
    while True:
        bases = {catalog[n]["facts"]["derived_from"] for n in names} - {None} - names
        if not bases:
            break
        names |= bases
    datasets = {name: {"facts": catalog[name]["facts"], "config": {**default_cfg, **(datasets_config.get(name) or {})}}
                for name in sorted(names)}
    by_source: dict[str, list[str]] = {}
    for name, entry in datasets.items():
        facts, cfg = entry["facts"], entry["config"]
        check_one_source(name, cfg)
        if facts["derived_from"] and cfg != default_cfg:
            raise PlanError(f"config datasets.{name}: {name} is derived from {facts['derived_from']} and has no "
                            f"files of its own; set replica/extracted/url/checksum on datasets.{facts['derived_from']}")
        if (cfg["url"] or cfg["checksum"]) and facts["files"] != 1:
            raise PlanError(f"config datasets.{name}: url/checksum override a single file, but {name} has "
                            f"{facts['files']} source files; point datasets.{name}.extracted to a copy instead")
        if facts["source"]:
            by_source.setdefault(facts["source"], []).append(name)
    for source, members in by_source.items():
        first = members[0]
        for other in members[1:]:
            for key in ("replica", "url", "checksum"):
                if datasets[first]["config"][key] != datasets[other]["config"][key]:
                    raise PlanError(f"config datasets.{other}.{key} differs from datasets.{first}.{key}: both "
                                    f"datasets use the files of {source!r}, so they must come from the same place")
    return datasets


#: the config keys of a dataset's files, by source: a generated replica, a copy already extracted, another download
SOURCE_KEYS = {"replica": ("replica",), "extracted": ("extracted",), "download": ("url", "checksum")}


def check_one_source(name: str, cfg: dict) -> None:
    """:class:`PlanError` naming the keys when the config entry ``datasets.<name>`` (``cfg``) gives its files more
    than one source (:data:`SOURCE_KEYS`): ``replica: true`` with ``extracted`` or ``url``/``checksum``, or
    ``extracted`` with ``url``/``checksum``; the workflow would take one and ignore the other without a word."""
    given = {source: [key for key in keys if cfg.get(key)] for source, keys in SOURCE_KEYS.items()}
    given = {source: keys for source, keys in given.items() if keys}
    if len(given) > 1:
        keys = [f"datasets.{name}.{key}" for keys in given.values() for key in keys]
        raise PlanError(f"config {', '.join(keys)}: these give the files of {name} {len(given)} sources ("
                        f"{', '.join(given)}); keep one: replica (a generated replica), extracted (a copy already "
                        "extracted) or url/checksum (another download)")


#: the dataset whose files the H-GLDv2 pipeline reads, and the one that trains on its labels
HGLDV2_SOURCE, HGLDV2_DATASET = "gldv2", "gldv2_hier_rebuilt"


def plan_hgldv2(hgldv2: dict | None, datasets: dict, schema_dir: str | Path = SCHEMA_DIR) -> dict:
    """The config's ``hgldv2`` block checked (types: ``--config`` gives text) with its defaults filled;
    ``build`` needs the GLDv2 files (``datasets.gldv2``), and ``gldv2_hier_rebuilt`` needs ``build``."""
    block = copy.deepcopy(hgldv2 or {})
    schema = load_schema("config", str(schema_dir))["properties"]["hgldv2"]
    validate(block, schema, "config", ("hgldv2",), text_hint=True)
    fill_schema_defaults(block, schema)
    try:
        check_prompt(block["clip"]["prompt"])
    except ValueError as err:
        raise PlanError(f"config: {err}") from None
    if block["build"] and HGLDV2_SOURCE not in datasets:
        raise PlanError(f"config hgldv2.build: the H-GLDv2 pipeline reads the files of {HGLDV2_SOURCE!r} (its "
                        f"*_label_to_category.csv and the release); list datasets.{HGLDV2_SOURCE}")
    if HGLDV2_DATASET in datasets and not block["build"]:
        raise PlanError(f"config datasets.{HGLDV2_DATASET}: its labels come from the H-GLDv2 pipeline; set "
                        "hgldv2.build: true")
    return block


def validate_config(config: dict) -> None:
    """Validate a configuration against ``schemas/config.schema.yaml`` (unknown keys are errors), its types
    strictly (:data:`~rankrepro.plan.schema.STRICT_TYPES`: a seed ``1.0``, ``checkpoint_minutes: .nan`` fail),
    a :class:`PlanError` naming the key (:func:`~rankrepro.plan.schema.schema_error_text`: Snakemake's own message
    prints the whole schema and the whole value); then write the schema's defaults into it, as
    ``snakemake.utils.validate`` does in a Snakefile (the same function: its defaults)."""
    from jsonschema import ValidationError
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate as snakemake_validate

    validate(config, load_schema("config"), "config", text_hint=True)
    try:
        snakemake_validate(config, schema=str(SCHEMA_DIR / "config.schema.yaml"))
    except WorkflowError as err:
        error = err.__context__  # the error Snakemake's message quotes, raised while handling it
        raise PlanError(schema_error_text(error, "config") if isinstance(error, ValidationError)
                        else f"config: {err}") from None


def plan_from_config(config: dict) -> dict:
    """:func:`make_plan` of a configuration (``config.yaml`` with its profile and ``--config`` merged in)
    after :func:`validate_config` (which fills its defaults in place), its ``tables`` with those its ``benchmarks``
    turn on (:func:`rankrepro.plan.benchmarks.with_benchmarks`), with the checked ``hgldv2`` block
    (:func:`plan_hgldv2`). The Snakefile and ``python -m rankrepro plan`` both plan through it."""
    validate_config(config)
    tables = with_benchmarks(config.get("tables") or {}, config.get("benchmarks"), config.get("specs_dir"))
    plan = make_plan(tables, config.get("run_overrides") or {}, config.get("datasets") or {},
                     specs_dir=config.get("specs_dir"), setups_dir=config.get("setups_dir"),
                     synthetic=config.get("synthetic"), seeds=config.get("seeds"), variants=config.get("variants"))
    plan["hgldv2"] = plan_hgldv2(config.get("hgldv2"), plan["datasets"])
    return plan


@dataclass(frozen=True)
class PlanFiles:
    """The files of a plan written by :func:`write_plan`: ``plan`` (the track and results_index rules'
    input), ``tables`` ({"<paper>/<table>": that table's plan file}, the table rules' input) and
    ``runs`` (the folder of the runs' records, ``<id>.json``: the run_config rule's input)."""

    plan: Path
    tables: dict[str, Path]
    runs: Path

    def run(self, run_id: str) -> Path:
        """The record of run ``run_id`` (what its run.json holds)."""
        return self.runs / f"{run_id}.json"


def _write_content_addressed(folder: Path, stem: str, data: dict) -> Path:
    """Write ``data`` as JSON to ``<folder>/<stem>.<first 12 hex of the SHA-256 of the text>.json``,
    unless that file already holds the text (its mtime then stays put); returns the path."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    path = folder / f"{stem}.{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    _write_if_changed(path, text)
    return path


def _write_if_changed(path: Path, text: str) -> None:
    from rankrepro.io import atomic_write_text

    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)


def write_plan(plan: dict, out_dir: str | Path = "results/plan") -> PlanFiles:
    """Write a plan's JSON data (:func:`make_plan`) as ``<out_dir>/plan.<hash>.json`` and one
    ``<out_dir>/tables/<paper>/<table>.<hash>.json`` per table, each named by the hash of its text,
    and each run's record (:meth:`Plan.run_record <rankrepro.plan.model.Plan.run_record>`) as
    ``<out_dir>/runs/<run id>.json``, named by its id, which hashes its content.

    Files are content-addressed so that planning never changes what a running workflow reads: a
    second ``snakemake`` in the same folder (even ``-n``) plans before Snakemake's lock refuses it,
    and a different config there writes other files. An unchanged file is not rewritten (Snakemake's
    mtimes stay put), and a table's file name changes exactly when its plan does. Files of earlier
    plans stay; ``results/plan/`` may be deleted while no snakemake runs in the folder."""
    out_dir = Path(out_dir)
    tables = {key: _write_content_addressed(out_dir / "tables" / table["paper"], table["table"], table)
              for key, table in plan["tables"].items()}
    files = PlanFiles(_write_content_addressed(out_dir, "plan", plan), tables, out_dir / "runs")
    for rid, run in plan["runs"].items():
        _write_if_changed(files.run(rid), json.dumps(run_record(run, rid), indent=1, sort_keys=True) + "\n")
    return files
