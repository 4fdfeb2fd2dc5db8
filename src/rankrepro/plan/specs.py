"""Table specs: ``src/rankrepro/tables/specs/<paper>/<table>.yaml``, loaded and checked.

A spec is checked against the table schema (``schemas/table.schema.yaml``) and by its kind
(:mod:`rankrepro.tables.kinds`: e.g. one paper number per column), with errors naming the
file and key; the loaded spec carries its file as ``_file`` (for messages).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rankrepro.plan.schema import PlanError, Schemas, load_yaml_mapping, rel_path, validate
from rankrepro.tables.kinds import find_kind, spec_kind

__all__ = ["SPECS_DIR", "load_spec", "spec_names"]

SPECS_DIR = Path(str(resources.files("rankrepro.tables").joinpath("specs")))


def spec_names(specs_dir: str | Path = SPECS_DIR) -> list[tuple[str, str]]:
    """Every ``(paper, table)`` with a spec under ``specs_dir``, sorted."""
    return sorted((f.parent.name, f.stem) for f in Path(specs_dir).glob("*/*.yaml"))


def load_spec(paper: str, table: str, schemas: Schemas | None = None, specs_dir: str | Path = SPECS_DIR) -> dict:
    """A table spec (``<specs_dir>/<paper>/<table>.yaml``), checked against the table schema and by its
    kind (which may add what it expands into: a sweep's ``columns`` and ``rows``)."""
    schemas = schemas or Schemas()
    path = Path(specs_dir) / paper / f"{table}.yaml"
    if not path.is_file():
        raise PlanError(f"no table spec {paper}/{table} ({rel_path(path)}); known: "
                        f"{', '.join(f'{p}/{t}' for p, t in spec_names(specs_dir))}")
    spec = load_yaml_mapping(path)
    where = rel_path(path)
    kind = find_kind(spec)
    if kind is not None:  # a message naming the key, where the schema's would name none
        kind.check_before_schema(spec, where)
    validate(spec, schemas.table, where)
    if (spec["paper"], spec["table"]) != (paper, table):
        raise PlanError(f"{where}: paper/table say {spec['paper']}/{spec['table']}, the file is {paper}/{table}")
    spec_kind(spec).check(spec, where, schemas)
    spec["_file"] = where
    return spec
