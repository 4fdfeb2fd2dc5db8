"""The catalog: a JSON snapshot of every registry, read by the planner without importing torch.

``catalog.json`` (beside this module) holds, for each kind of component (backbone,
dataset, loss, model, optimizer, pooling, protocol, sampler, schedule, synthetic, task), each registered name with
its builder (``module:qualname``), fixed keywords, parameters (default or
``required``, JSON types) and the ``task`` its builder declares, if any (the detector's model
and loss: ``detection``; every evaluation protocol: the task whose runs it scores) -- and, for datasets,
the facts the DAG needs (archive name, protocol, levels). The planner fills every default of a run from it, so a run's id
changes when a default in code changes.

The code is the source of truth: ``python -m rankrepro catalog`` rewrites the file from
the live registries (this imports torch), ``python -m rankrepro catalog --check`` fails
when they differ, and so does the test suite. Training checks the same thing for the
components of its run before it starts, so a stale catalog never trains a run whose
id does not describe it.
"""

from __future__ import annotations

import importlib
import json
from functools import lru_cache
from pathlib import Path

from rankrepro.messages import ShortMessage

__all__ = ["REGISTRIES", "COMPONENTS", "OPTIONAL_COMPONENTS", "NAME_REFS", "CATALOG_PATH", "load", "live", "write", "diff", "CatalogError"]

CATALOG_PATH = Path(__file__).with_name("catalog.json")

#: kind -> "module:attribute" of its registry
REGISTRIES = {
    "backbone": "rankrepro.models.backbones:BACKBONES",
    "dataset": "rankrepro.data.datasets:DATASETS",
    "loss": "rankrepro.losses.registry:LOSSES",
    "model": "rankrepro.models.heads:MODELS",
    "optimizer": "rankrepro.engine.optim:OPTIMIZERS",
    "pooling": "rankrepro.models.pooling:POOLINGS",
    "protocol": "rankrepro.metrics.protocols:REGISTRY",
    "sampler": "rankrepro.data.samplers:SAMPLERS",
    "schedule": "rankrepro.engine.optim:SCHEDULES",
    "synthetic": "rankrepro.synthetic:SYNTHETIC",
    "task": "rankrepro.engine.tasks:TASKS",
}

#: the component blocks of a run: key path -> (catalog kind, keys of the block that are not the
#: builder's parameters); the planner fills their defaults, training checks them (:func:`check_run`).
#: A block of :data:`OPTIONAL_COMPONENTS` may be null (none).
COMPONENTS = {
    ("model",): ("model", ()),
    ("model", "pooling"): ("pooling", ()),
    ("sampler",): ("sampler", ()),
    ("optimizer",): ("optimizer", ("groups",)),
    ("schedule",): ("schedule", ()),
    ("loss",): ("loss", ("memory",)),
    ("base_loss",): ("loss", ()),
}
OPTIONAL_COMPONENTS = {("base_loss",), ("model", "pooling")}  # pooling: a model that has none (faster_rcnn)
#: the values of a run that name a registered component: key path -> catalog kind
NAME_REFS = {("dataset",): "dataset", ("model", "backbone"): "backbone", ("task",): "task"}


class CatalogError(ShortMessage, RuntimeError):
    """The committed catalog does not describe the code."""


def registry(kind: str):
    """The live registry of ``kind`` (imports its modules)."""
    module, attr = REGISTRIES[kind].split(":")
    return getattr(importlib.import_module(module), attr)


def live() -> dict:
    """The catalog as the code defines it now."""
    out = {}
    for kind in sorted(REGISTRIES):
        reg = registry(kind)
        entries = reg.catalog()
        if kind == "dataset":
            for name in entries:
                from rankrepro.data.datasets import load

                entries[name]["facts"] = load(name).facts()
        out[kind] = entries
    json.dumps(out)  # every default must be a JSON value
    return out


@lru_cache(maxsize=None)
def _load(path: str) -> str:
    return Path(path).read_text()


def load(path: str | Path | None = None) -> dict:
    """The committed catalog (no torch import)."""
    path = Path(path or CATALOG_PATH)
    if not path.is_file():
        raise CatalogError(f"{path} is missing: run `python -m rankrepro catalog` to write it")
    return json.loads(_load(str(path)))


def write(path: str | Path | None = None) -> Path:
    """Rewrite ``catalog.json`` from the live registries."""
    from rankrepro.io import atomic_write_text

    path = Path(path or CATALOG_PATH)
    atomic_write_text(path, json.dumps(live(), indent=1, sort_keys=True) + "\n")
    _load.cache_clear()
    return path


def diff(committed: dict, current: dict) -> list[str]:
    """Human-readable differences ``kind name: what`` between two catalogs."""
    out = []
    for kind in sorted(set(committed) | set(current)):
        a, b = committed.get(kind, {}), current.get(kind, {})
        for name in sorted(set(a) | set(b)):
            if name not in b:
                out.append(f"{kind} {name}: in the catalog, no longer registered")
            elif name not in a:
                out.append(f"{kind} {name}: registered, missing from the catalog")
            elif a[name] != b[name]:
                keys = sorted(k for k in set(a[name]) | set(b[name]) if a[name].get(k) != b[name].get(k))
                out.append(f"{kind} {name}: {', '.join(keys)} changed")
    return out


def check(path: str | Path | None = None) -> None:
    """Raise :class:`CatalogError` when the committed catalog differs from the code."""
    problems = diff(load(path), live())
    if problems:
        raise CatalogError(f"{path or CATALOG_PATH} does not match the code (run `python -m rankrepro catalog`"
                           " and commit it; run ids will change where defaults changed):\n  "
                           + "\n  ".join(problems))


def check_run(run: dict, path: str | Path | None = None) -> None:
    """Raise :class:`CatalogError` unless every component of ``run`` pins every parameter the code takes
    and the committed catalog (``path``, default ``catalog.json``) describes each of them as the code does
    (parameter names, defaults, types, bounds, fixed keywords).

    A run planned with a stale catalog lacks the parameters added since (or has ones removed
    since), or took defaults the code no longer has: its id does not describe what the code
    would do, so it must not train."""
    from rankrepro.registry import ParameterError, UnknownNameError

    committed = load(path)
    for key_path, (kind, extra) in COMPONENTS.items():
        block = run
        for key in key_path:
            block = block.get(key)
        if block is None and key_path in OPTIONAL_COMPONENTS:
            continue
        params = {k: v for k, v in block.items() if k != "name" and k not in extra}
        try:
            entry = registry(kind).get(block["name"])
            entry.check(params, where=f"run {'.'.join(key_path)}", complete=True)
        except (ParameterError, UnknownNameError) as err:
            raise CatalogError(str(err)) from None
        stored, current = committed.get(kind, {}).get(entry.name), entry.as_json()
        if stored != current:
            changed = diff({kind: {entry.name: stored}} if stored else {}, {kind: {entry.name: current}})
            raise CatalogError(f"run {'.'.join(key_path)}: {kind} {entry.name!r}: parameters changed in code since "
                               f"{path or CATALOG_PATH} was written ({'; '.join(changed)}): run `python -m rankrepro "
                               "catalog`, commit it and plan again (run ids change where defaults changed)")
