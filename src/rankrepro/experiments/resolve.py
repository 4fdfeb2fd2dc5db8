"""Resolve table cells into runs.

A run is a fully resolved experiment (dataset, model, loss, sampler, optimizer,
schedule, epochs, images, seed ...). Its id is ``<dataset>-<loss>-<hash>`` where
the hash is the first 10 hex digits of the SHA-1 of the run's canonical JSON
(sorted keys, no spaces), so cells describing the same run share one id and
Snakemake trains it once.
"""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from pathlib import Path

import yaml


def deep_merge(base: dict, override: dict) -> dict:
    """A copy of ``base`` with ``override`` merged in, recursively for dicts.

    A block that names a component (``{"name": ...}``: sampler, loss, schedule ...)
    is replaced whole when the override names another component.
    """
    out = copy.deepcopy(base)
    for key, value in override.items():
        if (isinstance(value, dict) and isinstance(out.get(key), dict)
                and value.get("name", out[key].get("name")) == out[key].get("name")):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def run_id(run: dict) -> str:
    digest = hashlib.sha1(canonical_json(run).encode()).hexdigest()[:10]
    return f"{run['dataset']}-{run['loss']['name']}-{digest}"


def load_setups(path: str | Path | None = None) -> dict:
    text = Path(path).read_text() if path else resources.files("rankrepro.experiments").joinpath(
        "setups.yaml").read_text()
    return yaml.safe_load(text)


def resolve_run(setup: str, loss: dict, overrides: dict | None = None, setups: dict | None = None) -> dict:
    """The run of ``loss`` trained in paper setup ``setup``, with the config's ``overrides`` on top."""
    setups = setups if setups is not None else load_setups()
    if setup not in setups:
        raise KeyError(f"unknown setup {setup!r}; known: {sorted(setups)}")
    run = deep_merge(deep_merge(setups[setup], {"loss": loss}), overrides or {})
    for name in run.get("eval", {}).get("metrics") or ():  # a bad metric name fails here, not after training
        from rankrepro.metrics import parse_metric

        try:
            parse_metric(name)
        except ValueError as err:
            raise ValueError(f"setup {setup!r}: eval.metrics: {err}") from None
    return run
