"""The planner: config + setups + table specs + catalog -> the plan, once, without torch.

A **run** is a fully resolved experiment (``workflow/schemas/run.schema.yaml``). For table
cell (row, column) it is the merge, in this order, of

1. the column's setup and every setup it ``extends`` (``experiments/setups/<paper>.yaml``),
2. the column's ``run`` block, the row's ``loss``, the row's ``run`` block (the spec),
3. the config's ``run_overrides``,
4. the seed, when the spec lists ``seeds``,

where a block that names another component (``name``) replaces the block below it whole.
The merge is then *completed*: the run schema's defaults and every component's keyword
defaults from the catalog (:mod:`rankrepro.catalog`) are written into it, so the record
pins everything training and evaluation will use. It is validated (schema, component
names and parameters, metric names) with errors that name the file and key the wrong
value came from. Its id is ``<dataset>-<loss>-<first 10 hex of the SHA-1 of its
canonical JSON>``: cells describing the same run share it, and a changed default
(through the catalog) changes it.

A cell whose setup, dataset or loss is *planned* but not implemented yet
(``experiments/planned.yaml``) is pending: the table shows the paper number alone. A
name that is neither registered nor planned is an error.

A spec of ``kind: dataset_statistics`` (e.g. a paper's dataset table) has no runs: cell
(row, column) is a statistic of the row's dataset split, computed from the dataset's
manifest when the table is rendered (:mod:`rankrepro.tables.render`). Its datasets are
prepared like the runs' datasets; a planned one makes the row pending.

A spec of ``kind: sweep`` (a figure that sweeps one setting, e.g. SupRank's Figs. 6-8) has
``panels`` instead of rows and columns: each point is the run of the panel's setup, its
``run`` block and ``loss``, with the run's ``param`` (a dotted path) set to one of ``values``
(merged after the loss, before the config's overrides, so a point whose resolved run equals
a table's cell shares its id); with a ``reference`` the point also needs the reference loss's
run at the same value (its value is the relative gain). :meth:`Planner.plan_sweep` expands it
into one row per point (:func:`sweep_rows`), rendered by :mod:`rankrepro.tables.sweep`.

A spec of ``kind: static`` (a table of text the paper prints, e.g. RaMBO's complexity table or
its hyper-parameters) has nothing to reproduce: it plans no runs, no cells and no datasets;
its plan carries the spec, rendered by :func:`rankrepro.tables.render.render_static`.

The **plan** (:func:`make_plan`) holds the runs, each table's cells and the datasets the
DAG prepares; :func:`write_plan` writes it under ``results/plan/`` (a file is rewritten
only when its content changes, so Snakemake's mtimes stay put).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from rankrepro import catalog as catalog_mod
from rankrepro.registry import ParameterError, check_parameters

__all__ = ["SCHEMA_DIR", "STATIC", "STATISTICS", "SWEEP", "PlanError", "Planner", "canonical_json", "deep_merge",
           "load_setups", "load_spec", "make_plan", "plan_from_config", "resolve_run", "row_label", "run_id", "spec_kind",
           "spec_names", "sweep_rows", "write_plan"]

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "workflow" / "schemas"
SETUPS_DIR = Path(__file__).resolve().parent / "setups"
PLANNED_FILE = Path(__file__).resolve().parent / "planned.yaml"

#: component blocks of a run: path -> catalog kind; keys of the block that are not the builder's parameters
COMPONENTS = {
    ("model",): ("model", ()),
    ("model", "pooling"): ("pooling", ()),
    ("sampler",): ("sampler", ()),
    ("optimizer",): ("optimizer", ("lr_backbone", "lr_head", "lr_loss")),
    ("schedule",): ("schedule", ()),
    ("loss",): ("loss", ("memory",)),
}
#: values that name a registered component: path -> catalog kind
NAME_REFS = {("dataset",): "dataset", ("model", "backbone"): "backbone"}


class PlanError(ValueError):
    """A config, setup or spec that cannot make a valid run; the message names the file and key."""


# ------------------------------------------------------------------------------ files


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster on many specs


def load_yaml(path: Path):
    try:
        return yaml.load(Path(path).read_text(), Loader=_LOADER)
    except yaml.YAMLError as err:
        raise PlanError(f"{_rel(Path(path))}: not valid YAML: {err}") from None
    except OSError as err:
        raise PlanError(f"{path}: cannot read: {err.strerror}") from None


@lru_cache(maxsize=None)
def _schema(name: str, schema_dir: str) -> dict:
    path = Path(schema_dir) / f"{name}.schema.yaml"
    if not path.is_file():
        raise PlanError(f"schema {path} not found (the planner runs from a rankrepro checkout)")
    return yaml.load(path.read_text(), Loader=_LOADER)


def _strip_required(schema):
    """The schema with every ``required`` removed: a partial run (setups, overrides)."""
    if isinstance(schema, dict):
        return {k: _strip_required(v) for k, v in schema.items() if k != "required"}
    if isinstance(schema, list):
        return [_strip_required(v) for v in schema]
    return schema


def _dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


TEXT_HINT = (" (snakemake --config passes nested values as text: put run_overrides in a file given with "
             "--configfile, or edit config.yaml)")


_VALIDATORS: dict = {}


def first_error(instance, schema: dict):
    """The most relevant jsonschema error of ``instance``, or None (validators cached per schema)."""
    import jsonschema

    validator = _VALIDATORS.get(id(schema))
    if validator is None or validator.schema is not schema:
        validator = _VALIDATORS[id(schema)] = jsonschema.Draft202012Validator(schema)
    if validator.is_valid(instance):
        return None
    return jsonschema.exceptions.best_match(validator.iter_errors(instance))


def validate(instance, schema: dict, where: str, prefix=(), text_hint: bool = False) -> None:
    """jsonschema validation; the first error as ``<where>: <key>: <problem>``.

    ``text_hint``: a text where a number or boolean is expected says where text values come from."""
    error = first_error(instance, schema)
    if error is not None:
        key = _dotted([*prefix, *error.absolute_path]) or "(top level)"
        hint = TEXT_HINT if text_hint and error.validator == "type" and isinstance(error.instance, str) else ""
        raise PlanError(f"{where}: {key}: {error.message}{hint}")


class Schemas:
    """The run, setups and table schemas of ``schema_dir``."""

    def __init__(self, schema_dir: str | Path = SCHEMA_DIR):
        self.dir = str(schema_dir)
        self.run = _schema("run", self.dir)
        self.partial_run = _strip_required(self.run)
        self.setups = _schema("setups", self.dir)
        self.table = _schema("table", self.dir)


# ------------------------------------------------------------------------------ merge


def deep_merge(base: dict, override: dict) -> dict:
    """A copy of ``base`` with ``override`` merged in, recursively for dicts.

    A block that names a component (``{"name": ...}``: sampler, loss, schedule ...) is
    replaced whole when the override names another component."""
    return _merge([("", base), ("", override)])[0]


def _replaces(old, new) -> bool:
    return not (isinstance(new, dict) and isinstance(old, dict) and new.get("name", old.get("name")) == old.get("name"))


def _merge(layers: list[tuple[str, dict]]) -> tuple[dict, dict]:
    """Merge ``(label, partial run)`` layers; return the run and ``{path: label}`` of every value set
    (a value inside a block set whole has the block's origin: see :func:`_origin`)."""
    out: dict = {}
    origins: dict = {}

    def put(target: dict, data: dict, label: str, prefix: tuple):
        for key, value in data.items():
            path = (*prefix, key)
            if key in target and not _replaces(target[key], value):
                put(target[key], value, label, path)
                continue
            for p in [p for p in origins if p[:len(path)] == path]:
                del origins[p]
            target[key] = copy.deepcopy(value)
            origins[path] = label  # and, through _origin, everything below it

    for label, data in layers:
        put(out, data or {}, label, ())
    return out, origins


def _origin(origins: dict, path: tuple) -> str:
    for n in range(len(path), 0, -1):
        if path[:n] in origins:
            return origins[path[:n]]
    return "the run's defaults"


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


#: keys added to the run record after run ids were fixed, with their defaults: :func:`run_id` leaves such a
#: key out of the hash while it equals its default, so every run planned before the key existed keeps its id
#: (results/runs/<id>/ stays where it is); any other value is hashed like every key
ID_NEUTRAL_DEFAULTS = {"task": "retrieval"}


def run_id(run: dict) -> str:
    """``<dataset>-<loss>-<first 10 hex of the SHA-1 of the canonical JSON>`` (keys of
    :data:`ID_NEUTRAL_DEFAULTS` at their default left out)."""
    hashed = {k: v for k, v in run.items() if k not in ID_NEUTRAL_DEFAULTS or v != ID_NEUTRAL_DEFAULTS[k]}
    digest = hashlib.sha1(canonical_json(hashed).encode()).hexdigest()[:10]
    return f"{run['dataset']}-{run['loss']['name']}-{digest}"


# --------------------------------------------------------------------------- complete


def _fill_schema_defaults(instance: dict, schema: dict) -> None:
    """Write the ``default`` of every absent property of ``schema`` into ``instance``, recursively."""
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        value = instance.get(key)
        if isinstance(value, dict):
            _fill_schema_defaults(value, sub)
            for option in sub.get("oneOf", ()):
                if option.get("type") == "object":
                    _fill_schema_defaults(value, option)


def _get(run: dict, path: tuple):
    for key in path:
        if not isinstance(run, dict) or key not in run:
            return None
        run = run[key]
    return run


def _where(origins: dict, path: tuple, context: str) -> str:
    return f"{_origin(origins, path)}{context}: {_dotted(path)}"


def complete_run(merged: dict, origins: dict, catalog: dict, schemas: Schemas, context: str = "") -> dict:
    """Fill the defaults of a merged run and validate it (see the module docstring).

    ``context`` is added to the origin of a wrong value in messages (e.g. which cell)."""
    run = copy.deepcopy(merged)
    if isinstance(_get(run, ("model", "pooling")), str):
        run["model"]["pooling"] = {"name": run["model"]["pooling"]}
    _fill_schema_defaults(run, schemas.run)
    error = first_error(run, schemas.run)
    if error is not None:
        path = tuple(error.absolute_path)
        if error.validator == "required":  # a key nobody gave: name the block's origin
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            raise PlanError(f"{_where(origins, path, context) if path else _origin(origins, ()) + context}: "
                            f"{missing!r} is required and given by no setup, spec or override")
        raise PlanError(f"{_where(origins, path, context)}: {error.message}")
    for path, kind in NAME_REFS.items():
        name = _get(run, path)
        if name not in catalog[kind]:
            raise PlanError(f"{_where(origins, path, context)}: unknown {kind} {name!r}; registered: "
                            f"{', '.join(sorted(catalog[kind]))}")
    for path, (kind, extra) in COMPONENTS.items():
        block = _get(run, path)
        if isinstance(block, str):  # a bare name (e.g. the model's default pooling "avg")
            block = {"name": block}
            _get(run, path[:-1])[path[-1]] = block
        name = block["name"]
        if name not in catalog[kind]:
            raise PlanError(f"{_where(origins, (*path, 'name'), context)}: unknown {kind} {name!r}; registered: "
                            f"{', '.join(sorted(catalog[kind]))}")
        entry = catalog[kind][name]
        params = {k: v for k, v in block.items() if k != "name" and k not in extra}
        for key in params:
            where = _where(origins, (*path, key), context)
            try:
                check_parameters(kind, name, entry, {key: params[key]}, partial=True)
            except ParameterError as err:
                raise PlanError(f"{where}: {err}") from None
        try:
            check_parameters(kind, name, entry, params)
        except ParameterError as err:
            raise PlanError(f"{_where(origins, path, context)}: {err}") from None
        for key, spec in entry["parameters"].items():
            block.setdefault(key, copy.deepcopy(spec.get("default")))
    if run["warmup_epochs"] > run["epochs"]:  # the backbone would never train
        raise PlanError(f"run{context}: warmup_epochs ({run['warmup_epochs']}, {_origin(origins, ('warmup_epochs',))}) "
                        f"exceeds epochs ({run['epochs']}, {_origin(origins, ('epochs',))})")
    from rankrepro.metrics.names import parse_metric

    for i, name in enumerate(run["eval"]["metrics"]):
        try:
            parse_metric(name)
        except ValueError as err:
            raise PlanError(f"{_where(origins, ('eval', 'metrics'), context)}[{i}]: {err}") from None
    return run


# ----------------------------------------------------------------------------- setups


@dataclass
class Setup:
    name: str
    file: Path
    data: dict

    @property
    def label(self) -> str:
        return f"{_rel(self.file)}: {self.name}"


def load_setups(setups_dir: str | Path = SETUPS_DIR, schemas: Schemas | None = None) -> dict[str, Setup]:
    """Every setup of ``<setups_dir>/*.yaml`` by name, each file checked against the setups schema."""
    schemas = schemas or Schemas()
    setups: dict[str, Setup] = {}
    for file in sorted(Path(setups_dir).glob("*.yaml")):
        data = load_yaml(file) or {}
        validate(data, schemas.setups, _rel(file))
        for name, body in data.items():
            if name in setups:
                raise PlanError(f"{_rel(file)}: setup {name!r} is also defined in {_rel(setups[name].file)}")
            partial = {k: v for k, v in body.items() if k not in ("extends", "description")}
            validate(partial, schemas.partial_run, f"{_rel(file)}", prefix=(name,))
            setups[name] = Setup(name, file, body)
    for setup in setups.values():
        _setup_chain(setup.name, setups)  # unknown parents and cycles fail here
    return setups


def _setup_chain(name: str, setups: dict[str, Setup]) -> list[Setup]:
    """The setup and its ancestors, root first."""
    chain: list[Setup] = []
    while name is not None:
        if any(s.name == name for s in chain):
            raise PlanError(f"{chain[0].label}: extends forms a cycle through {name!r}")
        if name not in setups:
            child = chain[-1] if chain else None
            where = f"{child.label}: extends" if child else "setup"
            raise PlanError(f"{where}: unknown setup {name!r}; known: {', '.join(sorted(setups))}")
        chain.append(setups[name])
        name = setups[name].data.get("extends")
    return chain[::-1]


def setup_layers(name: str, setups: dict[str, Setup]) -> list[tuple[str, dict]]:
    return [(s.label, {k: v for k, v in s.data.items() if k not in ("extends", "description")})
            for s in _setup_chain(name, setups)]


# ------------------------------------------------------------------------------ specs


SPECS_DIR = Path(str(resources.files("rankrepro.tables").joinpath("specs")))
#: the kind of a spec whose cells are computed from dataset manifests instead of runs
STATISTICS = "dataset_statistics"
#: the kind of a spec that sweeps one run setting over values (a figure): one row per point
SWEEP = "sweep"
#: the kind of a spec of text transcribed from the paper (settings, complexities): nothing to reproduce
STATIC = "static"


def spec_kind(spec: dict) -> str:
    """``runs`` (the default), :data:`STATISTICS`, :data:`SWEEP` or :data:`STATIC`."""
    return spec.get("kind", "runs")


def row_label(row: dict) -> str:
    """How a row is named in messages and tables: a run row's method, a statistics row's name."""
    return row["method"] if "method" in row else row["name"]


def spec_names(specs_dir: str | Path = SPECS_DIR) -> list[tuple[str, str]]:
    return sorted((f.parent.name, f.stem) for f in Path(specs_dir).glob("*/*.yaml"))


def load_spec(paper: str, table: str, schemas: Schemas | None = None, specs_dir: str | Path = SPECS_DIR) -> dict:
    """A table spec (``<specs_dir>/<paper>/<table>.yaml``), checked against the table schema (and one
    paper number per column); a sweep's gains the ``columns`` and ``rows`` it expands into
    (:func:`sweep_rows`)."""
    schemas = schemas or Schemas()
    path = Path(specs_dir) / paper / f"{table}.yaml"
    if not path.is_file():
        raise PlanError(f"no table spec {paper}/{table} ({_rel(path)}); known: "
                        f"{', '.join(f'{p}/{t}' for p, t in spec_names(specs_dir))}")
    spec = load_yaml(path)
    where = _rel(path)
    if isinstance(spec, dict) and spec.get("kind") == SWEEP:  # the schema's message would name no key
        for key in ("columns", "rows", "best"):
            if key in spec:
                raise PlanError(f"{where}: {key}: a sweep has panels, not {key} (it renders one row per point)")
    if isinstance(spec, dict) and spec.get("kind") == STATIC:  # the schema's message would name no reason
        for key in ("seeds", "best"):
            if key in spec:
                raise PlanError(f"{where}: {key}: a {STATIC} table has no runs (its cells are the paper's text)")
    validate(spec, schemas.table, where)
    if (spec["paper"], spec["table"]) != (paper, table):
        raise PlanError(f"{where}: paper/table say {spec['paper']}/{spec['table']}, the file is {paper}/{table}")
    if spec_kind(spec) == STATISTICS and "seeds" in spec:
        raise PlanError(f"{where}: seeds: a {STATISTICS} table has no runs to seed")
    if spec_kind(spec) == SWEEP:
        for p, panel in enumerate(spec["panels"]):
            if len(panel["paper"]) != len(panel["values"]):
                raise PlanError(f"{where}: panels[{p}].paper: {len(panel['paper'])} numbers for "
                                f"{len(panel['values'])} values ({panel['key']!r})")
            for prefix, block in ((("panels", p, "run"), panel.get("run")),
                                  (("panels", p, "reference", "run"), (panel.get("reference") or {}).get("run"))):
                if block is not None:
                    validate(block, schemas.partial_run, where, prefix=prefix)
            for i, value in enumerate(panel["values"]):
                validate(sweep_layer(panel["param"], value), schemas.partial_run, where,
                         prefix=("panels", p, "values", i))
        spec["columns"], spec["rows"] = sweep_rows(spec)  # the table it renders as: one row per point
        spec["_file"] = where
        return spec
    if spec_kind(spec) == STATIC:
        for r, row in enumerate(spec["rows"]):
            if len(row["cells"]) != len(spec["columns"]):
                raise PlanError(f"{where}: rows[{r}].cells: {len(row['cells'])} cells for "
                                f"{len(spec['columns'])} columns ({row_label(row)!r})")
        spec["_file"] = where
        return spec
    for r, row in enumerate(spec["rows"]):
        if len(row["paper"]) != len(spec["columns"]):
            raise PlanError(f"{where}: rows[{r}].paper: {len(row['paper'])} numbers for "
                            f"{len(spec['columns'])} columns ({row_label(row)!r})")
        if "run" in row:
            validate(row["run"], schemas.partial_run, where, prefix=("rows", r, "run"))
    for c, column in enumerate(spec["columns"]):
        if "run" in column:
            validate(column["run"], schemas.partial_run, where, prefix=("columns", c, "run"))
    spec["_file"] = where
    return spec


# ------------------------------------------------------------------------------- plan


@dataclass
class Cell:
    row: int
    column: int
    metric: str
    run_ids: list[str] = field(default_factory=list)
    pending: str | None = None  # why no run exists (yet)


@dataclass
class StatisticsCell:
    """A cell of a ``dataset_statistics`` table: ``statistic`` of ``dataset``'s ``splits`` (pooled)."""
    row: int
    column: int
    statistic: str
    dataset: str
    splits: list[str]
    pending: str | None = None  # why the dataset has no manifest (yet)


@dataclass
class SweepCell:
    """A point of a ``sweep`` spec (row ``row`` of its expanded table, one column): the panel's
    ``metric`` of ``run_ids`` (seeds) at ``value`` of its ``param``, and with a reference the
    runs of the reference loss at the same value. ``resolved`` is the value the runs have
    (the config's overrides may set the swept key too)."""
    row: int
    column: int
    metric: str
    panel: str
    param: str
    value: object
    run_ids: list[str] = field(default_factory=list)
    reference_run_ids: list[str] = field(default_factory=list)
    resolved: object = None
    pending: str | None = None


def sweep_layer(param: str, value) -> dict:
    """The partial run that sets the dotted ``param`` (``loss.lam``) to ``value``."""
    layer: dict = value
    for key in reversed(param.split(".")):
        layer = {key: layer}
    return layer


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_rows(spec: dict) -> tuple[list[dict], list[dict]]:
    """The one column and the rows (one per panel and value: ``method`` = "<title>: <label> =
    <value>", ``paper`` = [the paper's point]) a sweep spec expands into."""
    rows = []
    for panel in spec["panels"]:
        label = panel.get("label", panel["param"])
        for value, paper in zip(panel["values"], panel["paper"]):
            rows.append({"method": f"{panel['title']}: {label} = {_value_text(value)}", "paper": [paper],
                         "panel": panel["key"], "value": value})
    return [{"key": "point", "group": "", "header": "value"}], rows


def load_planned(path: Path = PLANNED_FILE) -> dict:
    """Names planned but not implemented yet: ``{"setups": [...], "datasets": [...], "losses": [...]}``."""
    data = load_yaml(path) or {}
    return {k: set(data.get(k) or ()) for k in ("setups", "datasets", "losses")}


class Planner:
    """Resolves runs against one catalog, one set of setups and schemas, and the config's overrides."""

    def __init__(self, overrides: dict | None = None, *, catalog: dict | None = None,
                 setups: dict[str, Setup] | None = None, schemas: Schemas | None = None,
                 planned: dict | None = None, overrides_label: str = "config run_overrides"):
        self.schemas = schemas or Schemas()
        self.catalog = catalog if catalog is not None else catalog_mod.load()
        self.setups = setups if setups is not None else load_setups(schemas=self.schemas)
        self.planned = planned if planned is not None else load_planned()
        self.overrides = overrides or {}
        self.overrides_label = overrides_label
        self._resolved: dict = {}  # the same layers give the same run: complete it once
        validate(self.overrides, self.schemas.partial_run, overrides_label, text_hint=True)
        for path, (kind, _) in COMPONENTS.items():  # a name in the overrides must exist
            name = _get(self.overrides, (*path, "name"))
            if name is not None and name not in self.catalog[kind]:
                raise PlanError(f"{overrides_label}: {_dotted((*path, 'name'))}: unknown {kind} {name!r}; "
                                f"registered: {', '.join(sorted(self.catalog[kind]))}")

    def resolve(self, setup: str, layers: list[tuple[str, dict]] = (), seed: int | None = None,
                context: str = "") -> dict:
        """The complete run of ``setup`` with the spec's ``layers`` and the overrides (and ``seed``)."""
        all_layers = [*setup_layers(setup, self.setups), *layers, (self.overrides_label, self.overrides)]
        if seed is not None:
            all_layers.append(("spec seeds", {"seed": seed}))
        key = canonical_json(all_layers)
        if key not in self._resolved:
            merged, origins = _merge(all_layers)
            self._resolved[key] = complete_run(merged, origins, self.catalog, self.schemas, context)
        return copy.deepcopy(self._resolved[key])

    def pending(self, setup: str, loss: str, where: str) -> str | None:
        """Why a cell has no run yet (planned names), None when it has one; unknown names fail."""
        if setup not in self.setups:
            if setup in self.planned["setups"]:
                return f"setup {setup} not implemented yet"
            raise PlanError(f"{where}: unknown setup {setup!r}; known: {', '.join(sorted(self.setups))}; "
                            f"planned: {', '.join(sorted(self.planned['setups']))}")
        dataset = _merge(setup_layers(setup, self.setups))[0].get("dataset")
        if dataset not in self.catalog["dataset"] and dataset in self.planned["datasets"]:
            return f"dataset {dataset} not implemented yet"
        if loss not in self.catalog["loss"]:
            if loss in self.planned["losses"]:
                return f"loss {loss} not implemented yet"
            raise PlanError(f"{where}: unknown loss {loss!r}; registered: {', '.join(sorted(self.catalog['loss']))}")
        return None

    def dataset_pending(self, dataset: str, where: str) -> str | None:
        """Why ``dataset`` has no manifest yet (planned), None when it is registered; unknown names fail."""
        if dataset in self.catalog["dataset"]:
            return None
        if dataset in self.planned["datasets"]:
            return f"dataset {dataset} not implemented yet"
        raise PlanError(f"{where}: unknown dataset {dataset!r}; registered: "
                        f"{', '.join(sorted(self.catalog['dataset']))}; planned: "
                        f"{', '.join(sorted(self.planned['datasets']))}")

    def plan_statistics(self, spec: dict) -> tuple[list[StatisticsCell], list[str]]:
        """The cells of a ``dataset_statistics`` table and the datasets whose manifests they need."""
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        cells, datasets = [], set()
        for r, row in enumerate(spec["rows"]):
            pending = self.dataset_pending(row["dataset"], f"{where}: rows[{r}].dataset")
            if pending is None:
                datasets.add(row["dataset"])
            splits = [row["split"]] if isinstance(row["split"], str) else list(row["split"])
            for c, column in enumerate(spec["columns"]):
                cells.append(StatisticsCell(r, c, column["statistic"], row["dataset"], splits, pending))
        return cells, sorted(datasets)

    def plan_sweep(self, spec: dict) -> tuple[list[SweepCell], dict]:
        """The points of a ``sweep`` spec (one per panel and value, in order) and the runs
        ``{run_id: run}`` they need (the reference's included)."""
        cells, runs = [], {}
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        for p, panel in enumerate(spec["panels"]):
            path = tuple(panel["param"].split("."))
            reference = panel.get("reference")
            arms = [("loss", [(f"{where}: panels[{p}].run", panel.get("run", {})),
                              (f"{where}: panels[{p}].loss", {"loss": panel["loss"]})])]
            if reference is not None:
                arms.append(("reference", [(f"{where}: panels[{p}].run", panel.get("run", {})),
                                           (f"{where}: panels[{p}].reference.loss", {"loss": reference["loss"]}),
                                           (f"{where}: panels[{p}].reference.run", reference.get("run", {}))]))
            pending = None
            for arm, arm_layers in arms:
                loss = arm_layers[-1 if arm == "loss" else 1][1]["loss"]
                pending = pending or self.pending(panel["setup"], loss["name"], f"{where}: panels[{p}].{arm}")
            for i, value in enumerate(panel["values"]):
                cell = SweepCell(len(cells), 0, panel["metric"], panel["key"], panel["param"], value, pending=pending)
                cells.append(cell)
                if pending:
                    continue
                for arm, arm_layers in arms:
                    layers = [*arm_layers, (f"{where}: panels[{p}].values[{i}]", sweep_layer(panel["param"], value))]
                    context = f" (sweep {panel['key']!r}, {panel['param']} = {_value_text(value)}, {arm})"
                    for seed in spec.get("seeds", [None]):
                        run = self.resolve(panel["setup"], layers, seed, context)
                        rid = run_id(run)
                        runs[rid] = run
                        (cell.run_ids if arm == "loss" else cell.reference_run_ids).append(rid)
                        if arm == "loss":
                            cell.resolved = _get(run, path)
        return cells, runs

    def plan_table(self, spec: dict) -> tuple[list[Cell], dict]:
        """The cells of a table and the runs ``{run_id: run}`` they need."""
        cells, runs = [], {}
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        for r, row in enumerate(spec["rows"]):
            for c, column in enumerate(spec["columns"]):
                cell = Cell(r, c, column["metric"])
                cells.append(cell)
                if row.get("cited"):
                    cell.pending = "cited from other work"
                    continue
                cell.pending = self.pending(column["setup"], row["loss"]["name"],
                                            f"{where}: rows[{r}] ({row['method']}) x columns[{c}] ({column['key']})")
                if cell.pending:
                    continue
                layers = [(f"{where}: columns[{c}].run", column.get("run", {})),
                          (f"{where}: rows[{r}].loss", {"loss": row["loss"]}),
                          (f"{where}: rows[{r}].run", row.get("run", {}))]
                context = f" (cell {row['method']!r} x {column['key']})"
                for seed in spec.get("seeds", [None]):
                    run = self.resolve(column["setup"], layers, seed, context)
                    rid = run_id(run)
                    runs[rid] = run
                    cell.run_ids.append(rid)
        return cells, runs


def resolve_run(setup: str, loss: dict, overrides: dict | None = None, **planner_kw) -> dict:
    """The complete run of ``loss`` in ``setup`` with ``overrides`` on top (a convenience for tests and notebooks)."""
    return Planner(overrides, **planner_kw).resolve(setup, [("loss", {"loss": loss})])


def make_plan(tables: dict[str, list[str]], overrides: dict | None = None, datasets_config: dict | None = None,
              *, specs_dir: str | Path | None = None, setups_dir: str | Path | None = None,
              synthetic: dict | None = None, **planner_kw) -> dict:
    """The plan of the config's ``tables`` ({paper: [table, ...]}), ``run_overrides`` and ``datasets``.

    ``{"runs": {id: run}, "tables": {"paper/table": {"paper", "table", "spec", "cells", "runs"}},
    "datasets": {name: {"facts": ..., "config": ...}}, "synthetic": {"names", "scale", "seed"}}``
    (``synthetic``: the config's results that need no dataset, :mod:`rankrepro.synthetic`).
    A ``dataset_statistics`` table has no runs; its entry adds ``"datasets"`` (those whose
    manifests its cells read, planned with the runs' datasets) and ``"spec_file"`` (for
    errors found when rendering); a ``static`` table has no cells and no runs (``"spec_file"``
    too). A ``sweep`` table's cells are its points (:class:`SweepCell`), its spec has the
    ``columns`` and ``rows`` it renders as (:func:`sweep_rows`, added by :func:`load_spec`)."""
    if setups_dir is not None and "setups" not in planner_kw:
        planner_kw["setups"] = load_setups(setups_dir, planner_kw.get("schemas"))
    planner = Planner(overrides, **planner_kw)
    specs_dir = specs_dir or SPECS_DIR
    datasets_config = datasets_config or {}
    for name in datasets_config:
        if name not in planner.catalog["dataset"]:
            raise PlanError(f"config datasets.{name}: unknown dataset; registered: "
                            f"{', '.join(sorted(planner.catalog['dataset']))}")
    runs: dict = {}
    tables_out: dict = {}
    statistics_datasets: set[str] = set()
    for paper, names in tables.items():
        for table in names:
            spec = load_spec(paper, table, planner.schemas, specs_dir)
            entry = {"paper": paper, "table": table, "spec": {k: v for k, v in spec.items() if k != "_file"}}
            if spec_kind(spec) == SWEEP:
                cells, table_runs = planner.plan_sweep(spec)
                runs.update(table_runs)
                entry.update(cells=[asdict(cell) for cell in cells], runs=sorted(table_runs), spec_file=spec["_file"])
            elif spec_kind(spec) == STATISTICS:
                cells, table_datasets = planner.plan_statistics(spec)
                statistics_datasets.update(table_datasets)
                entry.update(cells=[asdict(cell) for cell in cells], runs=[], datasets=table_datasets,
                             spec_file=spec["_file"])
            elif spec_kind(spec) == STATIC:  # the paper's text: nothing to run, no dataset
                entry.update(cells=[], runs=[], spec_file=spec["_file"])
            else:
                cells, table_runs = planner.plan_table(spec)
                runs.update(table_runs)
                entry.update(cells=[asdict(cell) for cell in cells], runs=sorted(table_runs))
            tables_out[f"{paper}/{table}"] = entry
    datasets = plan_datasets({run["dataset"] for run in runs.values()} | statistics_datasets, datasets_config,
                             planner.catalog["dataset"])
    synthetic = {"names": [], "scale": "paper", "seed": 0, **(synthetic or {})}
    for name in synthetic["names"]:
        if name not in planner.catalog["synthetic"]:
            raise PlanError(f"config synthetic.names: unknown result {name!r}; registered: "
                            f"{', '.join(sorted(planner.catalog['synthetic']))}")
    return {"runs": dict(sorted(runs.items())), "tables": tables_out, "datasets": datasets, "synthetic": synthetic}


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


#: the dataset whose files the H-GLDv2 pipeline reads, and the one that trains on its labels
HGLDV2_SOURCE, HGLDV2_DATASET = "gldv2", "gldv2_hier_rebuilt"


def plan_hgldv2(hgldv2: dict | None, datasets: dict, schema_dir: str | Path = SCHEMA_DIR) -> dict:
    """The config's ``hgldv2`` block checked (types: ``--config`` gives text) with its defaults filled;
    ``build`` needs the GLDv2 files (``datasets.gldv2``), and ``gldv2_hier_rebuilt`` needs ``build``."""
    block = copy.deepcopy(hgldv2 or {})
    schema = _schema("config", str(schema_dir))["properties"]["hgldv2"]
    validate(block, schema, "config", ("hgldv2",), text_hint=True)
    _fill_schema_defaults(block, schema)
    if block["build"] and HGLDV2_SOURCE not in datasets:
        raise PlanError(f"config hgldv2.build: the H-GLDv2 pipeline reads the files of {HGLDV2_SOURCE!r} (its "
                        f"*_label_to_category.csv and the release); list datasets.{HGLDV2_SOURCE}")
    if HGLDV2_DATASET in datasets and not block["build"]:
        raise PlanError(f"config datasets.{HGLDV2_DATASET}: its labels come from the H-GLDv2 pipeline; set "
                        "hgldv2.build: true")
    return block


def plan_from_config(config: dict) -> dict:
    """:func:`make_plan` of a configuration (``config.yaml`` with its profile and ``--config`` merged in),
    with the checked ``hgldv2`` block (:func:`plan_hgldv2`)."""
    plan = make_plan(config.get("tables") or {}, config.get("run_overrides") or {}, config.get("datasets") or {},
                     specs_dir=config.get("specs_dir"), setups_dir=config.get("setups_dir"),
                     synthetic=config.get("synthetic"))
    plan["hgldv2"] = plan_hgldv2(config.get("hgldv2"), plan["datasets"])
    return plan


def _write_if_changed(path: Path, text: str) -> None:
    from rankrepro.io import atomic_write_text

    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)


def write_plan(plan: dict, out_dir: str | Path = "results/plan") -> Path:
    """``<out_dir>/plan.json`` and one ``<out_dir>/tables/<paper>/<table>.json`` per table (the table rule's
    input), each rewritten only when its content changed. Returns the plan file."""
    out_dir = Path(out_dir)
    for key, table in plan["tables"].items():
        _write_if_changed(out_dir / "tables" / f"{key}.json", json.dumps(table, indent=1, sort_keys=True) + "\n")
    path = out_dir / "plan.json"
    _write_if_changed(path, json.dumps(plan, indent=1, sort_keys=True) + "\n")
    return path
