"""Completion of a run's optimizer parameter groups (:mod:`rankrepro.engine.optim` trains them).

A merged ``optimizer`` block names its groups partly; :func:`complete_groups` writes every group's
settings out, so the run record (and its recipe card) says what each group trains with:

- a group set to null is removed (a later layer replacing an earlier one's groups);
- the model's groups are ``backbone`` and ``head``, or ``net`` alone (the whole model);
- ``loss`` (the loss's own parameters) absent: a copy of the head's (or net's) settings, never frozen
  in warm-up: SupRank's losses take ``${optimizer.opt.head}``, a separate optimizer with the head's
  settings, stepped outside its ``warmup_keys``;
- a group's ``optimizer`` null: the block's ``name``; ``weight_decay`` null: the block's when the group
  uses the block's optimizer, that optimizer's default otherwise; ``lr_min`` null: the schedule's floor
  (``eta_min`` of a cosine schedule; other schedules have none, and a group that sets one fails);
  ``warmup_frozen``: false.

Each value written gets its origin in ``origins`` (for the recipe card's provenance).
"""

from __future__ import annotations

import copy

from rankrepro.plan.merge import origin_of
from rankrepro.plan.schema import PlanError, dotted
from rankrepro.record.groups import GROUPS_KEY

__all__ = ["SCHEDULES_WITH_FLOOR", "complete_groups"]

#: the schedules with a floor a group may set (``lr_min``, rankrepro.engine.optim): others fail the plan when one does
SCHEDULES_WITH_FLOOR = ("cosine",)

WHY_LOSS_GROUP = "the {model} group's settings (no loss group set: the loss's parameters follow it, SupRank ${{optimizer.opt.{model}}})"


def _where(origins: dict, path: tuple, context: str) -> str:
    return f"{origin_of(origins, path)}{context}: {dotted(path)}"


def complete_groups(run: dict, origins: dict, catalog: dict, context: str = "") -> None:
    """Check and complete ``run["optimizer"]["groups"]`` in place (see the module docstring)."""
    block = run["optimizer"]
    groups = block[GROUPS_KEY] = {name: group for name, group in block[GROUPS_KEY].items() if group is not None}
    base = ("optimizer", GROUPS_KEY)
    if "net" in groups and ("backbone" in groups or "head" in groups):
        raise PlanError(f"{_where(origins, (*base, 'net'), context)}: 'net' is the whole model: set it alone, or "
                        f"'backbone' and 'head' (given: {', '.join(groups)})")
    if "net" not in groups and not ("backbone" in groups and "head" in groups):
        raise PlanError(f"{_where(origins, base, context)}: the model's parameters need the groups 'backbone' and "
                        f"'head', or 'net' (given: {', '.join(groups)})")
    model_group = "net" if "net" in groups else "head"
    if "loss" not in groups:
        groups["loss"] = {**copy.deepcopy(groups[model_group]), "warmup_frozen": False}
        origins[(*base, "loss")] = WHY_LOSS_GROUP.format(model=model_group)
    schedule = run["schedule"]
    floor = schedule.get("eta_min", 0.0) if schedule["name"] in SCHEDULES_WITH_FLOOR else None
    floor_key = ("schedule", "eta_min") if floor is not None else ("schedule", "name")  # where the floor was set
    for name, group in groups.items():
        path = (*base, name)
        kind = group.get("optimizer") or block["name"]
        if kind not in catalog["optimizer"]:
            raise PlanError(f"{_where(origins, (*path, 'optimizer'), context)}: unknown optimizer {kind!r}; "
                            f"registered: {', '.join(sorted(catalog['optimizer']))}")
        if group.get("lr_min") is not None and floor is None:
            raise PlanError(f"{_where(origins, (*path, 'lr_min'), context)}: a floor needs a schedule with one "
                            f"({', '.join(SCHEDULES_WITH_FLOOR)}); the schedule is {schedule['name']!r} "
                            f"({origin_of(origins, ('schedule', 'name'))})")
        if group.get("lr_min") is not None and group["lr_min"] > group["lr"]:
            raise PlanError(f"{_where(origins, (*path, 'lr_min'), context)}: floor {group['lr_min']} is above the "
                            f"group's lr {group['lr']}")
        own_default = catalog["optimizer"][kind]["parameters"].get("weight_decay", {}).get("default", 0.0)
        filled = {
            "optimizer": (kind, f"{origin_of(origins, ('optimizer', 'name'))} (optimizer.name)"),
            "weight_decay": (block.get("weight_decay", own_default), f"{origin_of(origins, ('optimizer', 'weight_decay'))} (optimizer.weight_decay)")
            if kind == block["name"] else (own_default, f"code default of optimizer {kind!r}"),
            "lr_min": (floor, f"{origin_of(origins, floor_key)} (schedule's floor)"),
            "warmup_frozen": (False, "run schema default"),
        }
        for key, (value, origin) in filled.items():
            if group.get(key) is None:
                group[key] = value
                origins[(*path, key)] = origin
