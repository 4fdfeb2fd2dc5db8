"""Schemas, YAML loading and validation errors that name the file and key (the value they quote cut short).

The schemas (``schemas/<name>.schema.yaml`` in this package: ``config``, ``run``, ``setups``,
``table``) ship with the package, so an installed rankrepro plans without a checkout.
:func:`validate` reports the first jsonschema error as ``<where>: <key>: <problem>``.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from rankrepro import io
from rankrepro.messages import VALUE_LIMIT, ShortMessage, short_text

__all__ = ["SCHEMA_DIR", "TEXT_HINT", "PlanError", "Schemas", "check_config_files", "fill_schema_defaults",
           "first_error", "load_schema", "load_yaml", "load_yaml_mapping", "rel_path", "schema_error_text",
           "schema_problem", "validate"]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

TEXT_HINT = (" (snakemake --config passes nested values as text: put run_overrides in a file given with "
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
    """jsonschema validation; the first error as :func:`schema_error_text` says it, a :class:`PlanError`."""
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
