"""Optimizers and learning-rate schedules, one registry each.

A run's ``optimizer`` block is ``{"name", "lr_backbone", "lr_head", "lr_loss", **parameters}``:
the three learning rates make the parameter groups ``backbone``, ``head`` and (when the
loss has parameters, e.g. proxies) ``loss``, whose rate is ``lr_loss`` (``null``: the head's);
the other keys are the named optimizer's parameters. A ``schedule`` block is
``{"name", **parameters}``, stepped once per epoch.
"""

from __future__ import annotations

import torch

from rankrepro.registry import NonNegativeFloat, PositiveInt, Registry

OPTIMIZERS = Registry("optimizer", context=("groups",))
SCHEDULES = Registry("schedule", context=("optimizer", "epochs"))
GROUP_KEYS = ("lr_backbone", "lr_head", "lr_loss")  # optimizer-block keys that are not optimizer parameters


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


def build_optimizer(block: dict, model, criterion) -> torch.optim.Optimizer:
    """One optimizer with the param groups ``backbone``, ``head`` and (if any) ``loss``."""
    groups = [
        {"name": "backbone", "params": list(model.backbone.parameters()), "lr": block["lr_backbone"]},
        {"name": "head", "params": list(model.head.parameters()), "lr": block["lr_head"]},
    ]
    loss_params = [p for p in criterion.parameters() if p.requires_grad]
    if loss_params:
        lr = block["lr_head"] if block["lr_loss"] is None else block["lr_loss"]
        groups.append({"name": "loss", "params": loss_params, "lr": lr})
    params = {k: v for k, v in block.items() if k not in GROUP_KEYS}
    return OPTIMIZERS.build_block(params, context={"groups": groups})


@SCHEDULES.register("cosine")
def cosine(optimizer, epochs: int, t_max: PositiveInt | None = None, eta_min: float = 0.0):
    """Cosine decay over ``t_max`` epochs (None: the run's number of epochs, as in SupRank's code)."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=t_max or epochs, eta_min=eta_min)


@SCHEDULES.register("multistep")
def multistep(optimizer, epochs: int, milestones: list, gamma: float = 0.1):
    """Multiply the rates by ``gamma`` at each epoch of ``milestones``."""
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=list(milestones), gamma=gamma)


@SCHEDULES.register("constant")
def constant(optimizer, epochs: int):
    """Constant rates."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)


def build_scheduler(block: dict, optimizer, epochs: int):
    """The per-epoch schedule of a run's ``schedule`` block."""
    return SCHEDULES.build_block(block, context={"optimizer": optimizer, "epochs": epochs})
