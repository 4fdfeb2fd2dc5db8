"""Schemas, YAML loading and validation errors that name the file and key.

The schemas (``schemas/<name>.schema.yaml`` in this package: ``config``, ``run``, ``setups``,
``table``) ship with the package, so an installed rankrepro plans without a checkout.
:func:`validate` reports the first jsonschema error as ``<where>: <key>: <problem>``.

Types are checked strictly (:data:`STRICT_TYPES`), stricter than JSON Schema's own: an ``integer`` is an int, never
a float with no fraction (``1.0``, YAML's ``1.0e3``: numpy refuses it as a seed), and a ``number`` is finite (YAML's
``.nan``, ``.inf`` and ``-.inf`` are refused: ``checkpoint_minutes: .nan`` would compare false with every bound).
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from pathlib import Path

from rankrepro import io

__all__ = ["SCHEMA_DIR", "STRICT_TYPES", "TEXT_HINT", "PlanError", "Schemas", "check_yaml_files",
           "fill_schema_defaults", "float_type_problem", "first_error", "load_schema", "load_yaml", "rel_path",
           "validate"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

TEXT_HINT = (" (snakemake --config passes nested values as text: put nested values in a file given with "
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


def _is_integer(_checker, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(_checker, value) -> bool:
    return _is_integer(_checker, value) or (isinstance(value, float) and math.isfinite(value))


#: the JSON types as the plan checks them (module docstring): ``integer`` an int (not a bool, not ``1.0``),
#: ``number`` an int or a finite float
STRICT_TYPES = {"integer": _is_integer, "number": _is_finite_number}

_VALIDATORS: dict = {}


def _validator_class():
    import jsonschema

    base = jsonschema.Draft202012Validator
    return jsonschema.validators.extend(base, type_checker=base.TYPE_CHECKER.redefine_many(STRICT_TYPES))


def first_error(instance, schema: dict):
    """The most relevant jsonschema error of ``instance`` under :data:`STRICT_TYPES`, or None (validators cached
    per schema); the ``message`` of a float refused by its type says why (:func:`float_type_problem`)."""
    import jsonschema

    validator = _VALIDATORS.get(id(schema))
    if validator is None or validator.schema is not schema:
        validator = _VALIDATORS[id(schema)] = _validator_class()(schema)
    if validator.is_valid(instance):
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error.validator in ("type", "oneOf", "anyOf"):  # a float no branch of a oneOf takes: say why
        error.message = float_type_problem(error.instance) or error.message
    return error


def float_type_problem(value) -> str | None:
    """Why the float ``value`` fails a strict type (:data:`STRICT_TYPES`): not finite, or a float where an integer
    is expected; None for any other value."""
    if not isinstance(value, float):
        return None
    if not math.isfinite(value):
        return f"{value} is not a finite number (NaN and infinities are refused)"
    if value.is_integer():
        return f"{value} is a float where an integer is expected (write {int(value)})"
    return None


def validate(instance, schema: dict, where: str, prefix=(), text_hint: bool = False) -> None:
    """jsonschema validation (:data:`STRICT_TYPES`); the first error as ``<where>: <key>: <problem>``.

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
