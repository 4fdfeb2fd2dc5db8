"""Schemas, YAML loading and validation errors that name the file and key (the value they quote cut short).

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
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from rankrepro import io
from rankrepro.messages import VALUE_LIMIT, ShortMessage, short_text

__all__ = ["SCHEMA_DIR", "STRICT_TYPES", "TEXT_HINT", "PlanError", "Schemas", "check_config_files",
           "fill_schema_defaults", "first_error", "float_type_problem", "load_schema", "load_yaml", "load_yaml_mapping",
           "rel_path", "schema_error_text", "schema_problem", "validate"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

TEXT_HINT = (" (snakemake --config passes nested values as text: put nested values in a file given with "
             "--configfile, or edit config.yaml)")


class PlanError(ShortMessage, ValueError):
    """A config, setup or spec that cannot make a valid run; the message names the file and key."""


def rel_path(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it (for messages)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextmanager
def _plan_errors(path):
    """A file's read or format error (:class:`~rankrepro.io.FileFormatError`) as a :class:`PlanError` naming it."""
    try:
        yield
    except ValueError as err:
        raise PlanError(str(err)) from None
    except OSError as err:
        raise PlanError(f"{path}: cannot read: {err.strerror}") from None


def load_yaml(path: Path):
    """The YAML data of ``path`` (:func:`rankrepro.io.load_yaml`: a key given twice, or aliases past its bound,
    are errors); :class:`PlanError` naming the file (and line) when it cannot be read or parsed."""
    with _plan_errors(path):
        return io.load_yaml(path, rel_path(Path(path)))


def load_yaml_mapping(path: Path, *, allow_empty: bool = False) -> dict:
    """:func:`load_yaml` of a file that must hold a mapping (:func:`rankrepro.io.expect_mapping`: an empty file
    is ``{}`` where ``allow_empty``): a config, a setups file, a table spec."""
    with _plan_errors(path):
        return io.load_yaml_mapping(path, rel_path(Path(path)), allow_empty=allow_empty)


def check_config_files(paths) -> None:
    """Read every config file of ``paths`` with the package's loader (:func:`load_yaml_mapping`): a
    :class:`PlanError` naming the file and line of a key given twice or of an alias past the bound, or the file
    that holds no mapping. Snakemake loads config files with its own loader, which keeps the last of a key given
    twice and expands aliases without bound where it merges mappings: the Snakefile calls this on each file
    before its ``configfile:`` directives load them (``config.yaml``, the command line's ``--configfile``
    files, a profile's settings file)."""
    for path in paths:
        load_yaml_mapping(Path(path))


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


def schema_problem(error) -> str:
    """jsonschema's message of ``error``, which quotes the value it refuses whole, cut to 2 x
    :data:`~rankrepro.messages.VALUE_LIMIT` characters (:func:`~rankrepro.messages.short_text`: the start of the
    value and the problem)."""
    return short_text(error.message, 2 * VALUE_LIMIT)


def schema_error_text(error, where: str, prefix=(), text_hint: bool = False) -> str:
    """A jsonschema error as ``<where>: <key>: <problem>`` (:func:`schema_problem`).

    ``text_hint``: a text where a number or boolean is expected says where text values come from."""
    key = dotted([*prefix, *error.absolute_path]) or "(top level)"
    hint = TEXT_HINT if text_hint and error.validator == "type" and isinstance(error.instance, str) else ""
    return f"{where}: {key}: {schema_problem(error)}{hint}"


def validate(instance, schema: dict, where: str, prefix=(), text_hint: bool = False) -> None:
    """jsonschema validation (:data:`STRICT_TYPES`); the first error as :func:`schema_error_text` says it, a
    :class:`PlanError`."""
    error = first_error(instance, schema)
    if error is not None:
        raise PlanError(schema_error_text(error, where, prefix, text_hint))


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
