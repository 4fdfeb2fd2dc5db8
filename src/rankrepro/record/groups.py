"""The names of a run's optimizer parameter groups (:mod:`rankrepro.plan.groups` completes them,
:mod:`rankrepro.engine.optim` trains them)."""

from __future__ import annotations

__all__ = ["GROUPS_KEY", "MODEL_GROUPS"]

GROUPS_KEY = "groups"  # the optimizer-block key that is not an optimizer parameter
MODEL_GROUPS = ("backbone", "head", "net")  # the groups of the model's parameters; "loss" holds the loss's
