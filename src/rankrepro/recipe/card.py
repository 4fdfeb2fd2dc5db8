"""A run's recipe card: its resolved values by section, and where each came from.

:func:`recipe_card` arranges a planned run (``schemas/run.schema.yaml``) for a reader comparing
recipes, as JSON data:

- ``run_id``, ``dataset``, ``task``;
- ``model``, ``images``, ``sampler``, ``loss``, ``schedule``: the run's blocks as they are;
- ``optimizer``: the optimizer block's type and parameters (``betas``, ``eps``, ...: those of every group
  of that type; a group of another type has its type's defaults);
- ``groups``: per parameter group (:mod:`rankrepro.engine.optim`) ``params`` (which parameters, in
  words), ``optimizer``, ``lr``, ``weight_decay``, ``lr_min`` (its cosine floor) and ``warmup_frozen``;
- ``epochs``, ``warmup_epochs``, ``max_batches_per_epoch``, ``amp``, ``train_split``, ``seed``;
- ``eval``: the run's evaluation block, with ``every`` (null: once, after training) and ``select``
  (``last`` | ``best_test``) where the run record has none; ``select``: that model selection again;
- ``other``: any further key of the run (none today);
- ``tables``: the tables and cells that use the run (``[{"table", "title", "cells": [{"row",
  "method", "columns", "reference"}]}]``, a sweep's reference runs with ``reference`` true);
- ``provenance``: ``{dotted key of the run record: origin}`` for every value of the run, whole (the
  plan's; :func:`rankrepro.recipe.origins.short_origin` shortens them for reading), and for the
  evaluation defaults the card adds.

The keys of every block are ordered ``name`` first, then alphabetically, so a card reads the same
whether its run comes from the planner or from a plan file (written with sorted keys).
"""

from __future__ import annotations

import copy
import difflib

from rankrepro.plan.complete import leaf_paths
from rankrepro.record.groups import GROUPS_KEY
from rankrepro.plan.model import Plan, TablePlan
from rankrepro.plan.schema import dotted
from rankrepro.recipe.origins import NOT_RECORDED, cell_column, cell_row
from rankrepro.tables.index import natural_key

__all__ = ["BLOCKS", "EVAL_DEFAULTS", "GROUP_KEYS", "GROUP_PARAMS", "REQUIRED_KEYS", "TRAINING_KEYS", "close_run_ids",
           "plan_cards", "recipe_card", "run_uses"]

#: the run's blocks a card copies as they are, in the order a card shows them
BLOCKS = ("model", "images", "sampler", "loss", "schedule")
#: the run's top-level training settings, in the order a card shows them
TRAINING_KEYS = ("epochs", "warmup_epochs", "max_batches_per_epoch", "amp", "train_split", "seed")
#: which parameters each group trains (rankrepro.engine.optim.group_parameters), in words
GROUP_PARAMS = {
    "backbone": "the backbone",
    "head": "the head (pooling, normalisation, projection)",
    "net": "the whole network (backbone and head)",
    "loss": "the loss's own parameters (proxies; none for a loss without)",
}
#: a group's settings (rankrepro.plan.groups), in the order a card shows them
GROUP_KEYS = ("optimizer", "lr", "weight_decay", "lr_min", "warmup_frozen")
#: evaluation settings a run record may lack (planned before they existed): {key: (value, origin)}
EVAL_DEFAULTS = {
    "every": (None, "not in the run record: evaluated once, after the last epoch"),
    "select": ("last", "not in the run record: the model of the last epoch"),
}
#: the keys every card has
REQUIRED_KEYS = ("run_id", "dataset", "task", *BLOCKS, "optimizer", "groups", *TRAINING_KEYS, "eval", "select",
                 "other", "tables", "provenance")


def run_uses(run_id: str, tables: dict[str, TablePlan]) -> list[dict]:
    """The tables and cells that use run ``run_id``, table2 before table10 (see the module docstring)."""
    out = []
    for key, table in sorted(tables.items(), key=lambda item: natural_key(item[0])):
        if run_id not in table.runs:
            continue
        cells: dict[tuple, dict] = {}
        for cell in table.cells:
            for reference, ids in ((False, cell.get("run_ids") or ()), (True, cell.get("reference_run_ids") or ())):
                if run_id in ids:
                    use = cells.setdefault((cell["row"], reference), {
                        "row": cell["row"], "method": cell_row(table.spec, cell["row"]), "columns": [],
                        "reference": reference})
                    use["columns"].append(cell_column(table.spec, cell["column"]))
        out.append({"table": key, "title": table.title, "cells": list(cells.values())})
    return out


def _group_order(name: str) -> int:
    return list(GROUP_PARAMS).index(name) if name in GROUP_PARAMS else len(GROUP_PARAMS)


def _ordered(block):
    """``block`` with the keys of every dict in it ordered ``name`` first, then alphabetically."""
    if not isinstance(block, dict):
        return block
    return {key: _ordered(block[key]) for key in sorted(block, key=lambda k: (k != "name", k))}


def recipe_card(run_id: str, run: dict, provenance: dict[str, str] | None = None,
                tables: dict[str, TablePlan] | None = None) -> dict:
    """The recipe card of run ``run_id`` (see the module docstring): ``provenance`` is the plan's
    ``{dotted key: origin}`` of the run (a key it lacks: :data:`NOT_RECORDED`), ``tables`` the plan's
    tables (the cells that use the run)."""
    run = _ordered(copy.deepcopy(run))
    provenance = provenance or {}
    origins = {dotted(path): provenance.get(dotted(path), NOT_RECORDED) for path in leaf_paths(run)}
    block = run["optimizer"]
    groups = {name: {"params": GROUP_PARAMS.get(name, name), **{k: group[k] for k in GROUP_KEYS if k in group},
                     **{k: v for k, v in group.items() if k not in GROUP_KEYS}}
              for name, group in sorted(block[GROUPS_KEY].items(), key=lambda item: _group_order(item[0]))}
    evaluation = dict(run["eval"])
    for key, (value, origin) in EVAL_DEFAULTS.items():
        if key not in evaluation:
            evaluation[key] = value
            origins[f"eval.{key}"] = origin
    shown = {"task", "dataset", "optimizer", "eval", *BLOCKS, *TRAINING_KEYS}
    return {
        "run_id": run_id, "dataset": run["dataset"], "task": run["task"],
        **{name: run[name] for name in BLOCKS},
        "optimizer": {k: v for k, v in block.items() if k != GROUPS_KEY},
        "groups": groups,
        **{key: run[key] for key in TRAINING_KEYS},
        "eval": evaluation, "select": evaluation["select"],
        "other": {k: v for k, v in run.items() if k not in shown},
        "tables": run_uses(run_id, tables or {}),
        "provenance": origins,
    }


def plan_cards(plan: Plan) -> dict[str, dict]:
    """``{run id: recipe card}`` of every run of ``plan``, by run id."""
    return {rid: recipe_card(rid, plan.runs[rid], plan.provenance.get(rid), plan.tables) for rid in sorted(plan.runs)}


def close_run_ids(run_id: str, run_ids, n: int = 5) -> list[str]:
    """Up to ``n`` planned ids close to ``run_id``: those it begins, then the most similar (difflib)."""
    ids = list(run_ids)
    close = [rid for rid in ids if rid.startswith(run_id)][:n]
    close += [rid for rid in difflib.get_close_matches(run_id, ids, n=n, cutoff=0.6) if rid not in close]
    return close[:n]
