"""Schemas, YAML loading and validation errors that name the file and key.

The schemas (``schemas/<name>.schema.yaml`` in this package: ``config``, ``run``, ``setups``,
``table``) ship with the package, so an installed rankrepro plans without a checkout.
:func:`validate` reports the first jsonschema error as ``<where>: <key>: <problem>``.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

from rankrepro import io

__all__ = ["SCHEMA_DIR", "TEXT_HINT", "PlanError", "Schemas", "check_yaml_files", "fill_schema_defaults", "first_error",
           "load_schema", "load_yaml", "rel_path", "validate"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

TEXT_HINT = (" (snakemake --config passes nested values as text: put run_overrides in a file given with "
             "--configfile, or edit config.yaml)")


class PlanError(ValueError):
    """A config, setup or spec that cannot make a valid run; the message names the file and key."""


def rel_path(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it (for messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_yaml(path: Path):
    """The YAML data of ``path`` (:func:`rankrepro.io.load_yaml`: a key given twice is an error);
    :class:`PlanError` naming the file (and line) when it cannot be read or parsed."""
    try:
        return io.load_yaml(path, rel_path(Path(path)))
    except ValueError as err:
        raise PlanError(str(err)) from None
    except OSError as err:
        raise PlanError(f"{path}: cannot read: {err.strerror}") from None


def check_yaml_files(paths) -> None:
    """Parse every file of ``paths`` with the package's loader: :class:`PlanError` naming the file and line
    of a key given twice. For the config files Snakemake loads with its own loader (last key wins):
    the workflow's bootstrap calls it on ``workflow.configfiles``."""
    for path in paths:
        load_yaml(Path(path))


@lru_cache(maxsize=None)
def load_schema(name: str, schema_dir: str = str(SCHEMA_DIR)) -> dict:
    """The schema ``<schema_dir>/<name>.schema.yaml`` (cached)."""
    path = Path(schema_dir) / f"{name}.schema.yaml"
    if not path.is_file():
        raise PlanError(f"schema {path} not found (the package's schemas/ folder is missing)")
    return load_yaml(path)


def strip_required(schema):
    """The schema with every ``required`` removed: a partial run (setups, overrides)."""
    if isinstance(schema, dict):
        return {k: strip_required(v) for k, v in schema.items() if k != "required"}
    if isinstance(schema, list):
        return [strip_required(v) for v in schema]
    return schema


def dotted(path) -> str:
    """A key path as messages print it: ``rows[2].loss.name``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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
        key = dotted([*prefix, *error.absolute_path]) or "(top level)"
        hint = TEXT_HINT if text_hint and error.validator == "type" and isinstance(error.instance, str) else ""
        raise PlanError(f"{where}: {key}: {error.message}{hint}")


def fill_schema_defaults(instance: dict, schema: dict) -> None:
    """Write the ``default`` of every absent property of ``schema`` into ``instance``, recursively."""
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        value = instance.get(key)
        if isinstance(value, dict):
            fill_schema_defaults(value, sub)
            for option in sub.get("oneOf", ()):
                if option.get("type") == "object":
                    fill_schema_defaults(value, option)


class Schemas:
    """The run, setups and table schemas of ``schema_dir``."""

    def __init__(self, schema_dir: str | Path = SCHEMA_DIR):
        self.dir = str(schema_dir)
        self.run = load_schema("run", self.dir)
        self.partial_run = strip_required(self.run)
        self.setups = load_schema("setups", self.dir)
        self.table = load_schema("table", self.dir)
