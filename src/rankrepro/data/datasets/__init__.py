"""Dataset modules by name.

Each module defines ``NAME``, ``LEVELS`` (finest first), ``PROTOCOL``,
``download(data_root, ...) -> Path`` and ``prepare(source, manifest_dir, *, data_root, replica) -> Manifest``.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

_MODULES = {"sop": "rankrepro.data.datasets.sop"}


def names() -> list[str]:
    """The registered dataset names, sorted."""
    return sorted(_MODULES)


def get(name: str) -> ModuleType:
    """The module of dataset ``name``."""
    if name not in _MODULES:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(names())}")
    return import_module(_MODULES[name])
