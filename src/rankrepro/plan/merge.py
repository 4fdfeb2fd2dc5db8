"""Layered merge of partial runs, remembering where each value came from.

A run is merged from labelled layers (setups, the spec's blocks, the config's overrides, ...):
later layers win, dicts merge key by key, and a block that names another component
(``{"name": ...}``: sampler, loss, schedule ...) replaces the block below it whole. The merge
records the label of the layer that set each value, so errors name the file and key a wrong
value came from (:func:`origin_of`).
"""

from __future__ import annotations

import copy

__all__ = ["deep_merge", "get_path", "merge_layers", "origin_of"]


def deep_merge(base: dict, override: dict) -> dict:
    """A copy of ``base`` with ``override`` merged in, recursively for dicts.

    A block that names a component (``{"name": ...}``: sampler, loss, schedule ...) is
    replaced whole when the override names another component."""
    return merge_layers([("", base), ("", override)])[0]


def _replaces(old, new) -> bool:
    return not (isinstance(new, dict) and isinstance(old, dict) and new.get("name", old.get("name")) == old.get("name"))


def merge_layers(layers: list[tuple[str, dict]]) -> tuple[dict, dict]:
    """Merge ``(label, partial run)`` layers; return the run and ``{path: label}`` of every value set
    (a value inside a block set whole has the block's origin: see :func:`origin_of`)."""
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
            origins[path] = label  # and, through origin_of, everything below it

    for label, data in layers:
        put(out, data or {}, label, ())
    return out, origins


def origin_of(origins: dict, path: tuple) -> str:
    """The label of the layer that set the value at ``path`` (or the block holding it)."""
    for n in range(len(path), 0, -1):
        if path[:n] in origins:
            return origins[path[:n]]
    return "the run's defaults"


def get_path(run: dict, path: tuple):
    """The value at key ``path`` of ``run``, None when a key is absent."""
    for key in path:
        if not isinstance(run, dict) or key not in run:
            return None
        run = run[key]
    return run
