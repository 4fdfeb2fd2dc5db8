"""Optimizers and learning-rate schedules over named parameter groups, one registry each.

A run's ``optimizer`` block is ``{"name", **parameters, "groups": {group: settings}}``, complete
(the planner writes every group's values out, :mod:`rankrepro.plan.groups`). A group's parameters:

- ``backbone``: the model's backbone; ``head``: everything after it (pooling, normalisation, projection);
- ``net``: the whole model, one group (instead of backbone and head: SupRank's DeiT-S, ``optimizer.opt.net``);
- ``loss``: the loss's own parameters (proxies), when it has any.

Its settings: ``lr``; ``optimizer`` (a registered optimizer); ``weight_decay``; ``lr_min``, the floor of
a cosine schedule for this group (SupRank's proxies decay to 0.1 while the network decays to 0); and
``warmup_frozen``: not stepped during the run's warm-up epochs (SupRank's ``warmup_keys``, the trainer).
Groups of one optimizer type share a torch optimizer, with the block's parameters (betas, eps,
momentum, ...) when the type is the block's ``name`` and the type's defaults otherwise, as SupRank's
separate proxy optimizers (``torch.optim.Adam(lr=10, weight_decay=0)``) have. A ``schedule`` block is
``{"name", **parameters}``, one schedule per optimizer, stepped once per epoch.
"""

from __future__ import annotations

import math

import torch

from rankrepro.record.groups import GROUPS_KEY, MODEL_GROUPS
from rankrepro.registry import NonNegativeFloat, PositiveInt, Registry

OPTIMIZERS = Registry("optimizer", context=("groups",))
SCHEDULES = Registry("schedule", context=("optimizer", "epochs"))


@OPTIMIZERS.register("adam")
def adam(groups: list, weight_decay: NonNegativeFloat = 0.0, betas: tuple = (0.9, 0.999), eps: float = 1e-8):
    """``torch.optim.Adam`` (L2 penalty added to the gradient, as in the SupRank and Smooth-AP code)."""
    return torch.optim.Adam(groups, weight_decay=weight_decay, betas=tuple(betas), eps=eps)


@OPTIMIZERS.register("adamw")
def adamw(groups: list, weight_decay: NonNegativeFloat = 0.0, betas: tuple = (0.9, 0.999), eps: float = 1e-8):
    """``torch.optim.AdamW`` (decoupled weight decay)."""
    return torch.optim.AdamW(groups, weight_decay=weight_decay, betas=tuple(betas), eps=eps)


@OPTIMIZERS.register("sgd")
def sgd(groups: list, weight_decay: NonNegativeFloat = 0.0, momentum: NonNegativeFloat = 0.9, nesterov: bool = False):
    """``torch.optim.SGD`` with momentum."""
    return torch.optim.SGD(groups, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov)


def group_parameters(name: str, model, criterion) -> list:
    """The parameters of group ``name`` (see the module docstring); the loss's only those it trains."""
    if name == "backbone":
        return list(model.backbone.parameters())
    if name == "head":
        return list(model.head.parameters())
    if name == "net":
        return list(model.parameters())
    if name == "loss":
        return [p for p in criterion.parameters() if p.requires_grad]
    raise ValueError(f"unknown parameter group {name!r}; groups: {', '.join((*MODEL_GROUPS, 'loss'))}")


class Optimizers:
    """The run's torch optimizers (one per optimizer type among its groups), zeroed, stepped and saved as one.

    ``frozen_in_warmup``: the parameters of the groups marked ``warmup_frozen``."""

    def __init__(self, optimizers: list[torch.optim.Optimizer], frozen_in_warmup: list):
        self.optimizers = optimizers
        self.frozen_in_warmup = frozen_in_warmup

    @property
    def param_groups(self) -> list[dict]:
        return [group for opt in self.optimizers for group in opt.param_groups]

    def lr(self, name: str) -> float | None:
        """The current learning rate of group ``name`` (None: no such group, e.g. a loss without parameters)."""
        return next((g["lr"] for g in self.param_groups if g["name"] == name), None)

    def set_warmup(self, warming_up: bool) -> None:
        """Freeze (``requires_grad`` off: no gradient, no step, no backward through them) the ``warmup_frozen``
        groups while ``warming_up``, release them after."""
        for p in self.frozen_in_warmup:
            p.requires_grad_(not warming_up)

    def zero_grad(self) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def step(self, scaler) -> None:
        """Step every optimizer that received a gradient, through the AMP ``scaler``."""
        for opt in self.optimizers:
            if any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                scaler.step(opt)

    def state_dict(self) -> dict:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        for opt, saved in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(saved)


def build_optimizer(block: dict, model, criterion) -> Optimizers:
    """The optimizers of a complete ``optimizer`` block over ``model`` and ``criterion`` (module docstring)."""
    defaults = {k: v for k, v in block.items() if k not in ("name", GROUPS_KEY)}
    by_type: dict[str, list] = {}
    frozen: list = []
    for name, settings in block[GROUPS_KEY].items():
        params = group_parameters(name, model, criterion)
        if not params:
            continue
        group = {"name": name, "params": params, "lr": settings["lr"], "lr_min": settings["lr_min"]}
        if settings["weight_decay"] is not None:
            group["weight_decay"] = settings["weight_decay"]
        by_type.setdefault(settings["optimizer"] or block["name"], []).append(group)
        if settings["warmup_frozen"]:
            frozen.extend(params)
    optimizers = []
    for kind, groups in by_type.items():
        params = defaults if kind == block["name"] else {}
        optimizers.append(OPTIMIZERS.build_block({"name": kind, **params}, context={"groups": groups}))
    return Optimizers(optimizers, frozen)


class Schedules:
    """One schedule per optimizer of an :class:`Optimizers`, stepped and saved as one."""

    def __init__(self, schedules: list):
        self.schedules = schedules

    def step(self) -> None:
        for schedule in self.schedules:
            schedule.step()

    def state_dict(self) -> dict:
        return {"schedules": [s.state_dict() for s in self.schedules]}

    def load_state_dict(self, state: dict) -> None:
        for schedule, saved in zip(self.schedules, state["schedules"], strict=True):
            schedule.load_state_dict(saved)


def cosine_factor(step: int, t_max: int, lr: float, lr_min: float) -> float:
    """The cosine schedule's rate at epoch ``step`` over the initial ``lr``:
    ``(lr_min + (lr - lr_min) (1 + cos(pi step / t_max)) / 2) / lr`` (1 where ``lr`` is 0), the closed form of
    ``torch.optim.lr_scheduler.CosineAnnealingLR`` (SupRank's schedulers) with a floor of the group's own."""
    if lr == 0:
        return 1.0
    return (lr_min + (lr - lr_min) * (1 + math.cos(math.pi * step / t_max)) / 2) / lr


@SCHEDULES.register("cosine")
def cosine(optimizer, epochs: int, t_max: PositiveInt | None = None, eta_min: float = 0.0):
    """Cosine decay over ``t_max`` epochs (None: the run's number of epochs, as in SupRank's code) to
    ``eta_min``, or to a group's own ``lr_min`` (:func:`cosine_factor`)."""
    t_max = t_max or epochs
    factors = []
    for group in optimizer.param_groups:
        floor = eta_min if group.get("lr_min") is None else group["lr_min"]
        factors.append(lambda step, lr=group["lr"], floor=floor: cosine_factor(step, t_max, lr, floor))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factors)


@SCHEDULES.register("multistep")
def multistep(optimizer, epochs: int, milestones: list, gamma: float = 0.1):
    """Multiply the rates by ``gamma`` at each epoch of ``milestones``."""
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=list(milestones), gamma=gamma)


@SCHEDULES.register("constant")
def constant(optimizer, epochs: int):
    """Constant rates."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def build_scheduler(block: dict, optimizers: Optimizers, epochs: int) -> Schedules:
    """The per-epoch schedules of a run's ``schedule`` block, one per optimizer."""
    return Schedules([SCHEDULES.build_block(block, context={"optimizer": opt, "epochs": epochs})
                      for opt in optimizers.optimizers])
