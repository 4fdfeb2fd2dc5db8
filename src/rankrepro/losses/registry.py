"""Name -> loss-class registry.

``@register("name")`` on an ``nn.Module`` subclass; ``build("name", **hparams)``
instantiates it after checking every hyper-parameter name against the class
``__init__`` signature; ``names()`` lists what is registered.
"""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar

import torch

__all__ = ["register", "build", "names", "get", "accepted_hparams", "HyperParameterError"]

_REGISTRY: dict[str, type] = {}

T = TypeVar("T", bound=type)


class HyperParameterError(TypeError, ValueError):
    """Unknown hyper-parameter name (a TypeError and a ValueError)."""


def register(name: str) -> Callable[[T], T]:
    """Class decorator registering a loss under ``name`` (must be unique)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"loss name must be a non-empty string, got {name!r}")

    def deco(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise TypeError(f"@register({name!r}) expects an nn.Module subclass, got {cls!r}")
        prev = _REGISTRY.get(name)
        if prev is not None and (prev.__module__, prev.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise ValueError(f"loss name {name!r} already registered by {prev!r}")
        _REGISTRY[name] = cls
        return cls

    return deco


def names() -> list[str]:
    """Sorted registered loss names."""
    return sorted(_REGISTRY)


def get(name: str) -> type:
    """Registered class for ``name`` (ValueError listing the known names otherwise)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; registered: {', '.join(names()) or '(none)'}") from None


def _allowed_hparams(cls: type) -> tuple[list[str], bool]:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # drop self
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    allowed = [
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return allowed, var_kw


def accepted_hparams(name: str) -> list[str]:
    """The hyper-parameter names the loss registered as ``name`` accepts."""
    return _allowed_hparams(get(name))[0]


def build(name: str, memory: dict | None = None, **hparams) -> torch.nn.Module:
    """Instantiate the loss registered as ``name`` with keyword hyper-parameters.

    ``memory`` (``{"size": N, "warmup_epochs": E}``) wraps it in a cross-batch
    memory (:class:`rankrepro.losses.memory.MemoryLoss`).
    """
    if memory is not None:
        from .memory import MemoryLoss

        unknown = sorted(set(memory) - {"size", "warmup_epochs"})
        if unknown:
            raise HyperParameterError(f"memory got unknown key(s) {unknown}; allowed: size, warmup_epochs")
        return MemoryLoss(build(name, **hparams), **memory)
    cls = get(name)
    allowed, var_kw = _allowed_hparams(cls)
    if not var_kw:
        bad = sorted(set(hparams) - set(allowed))
        if bad:
            raise HyperParameterError(
                f"loss {name!r} got unknown hyper-parameter(s) {', '.join(map(repr, bad))}; "
                f"allowed: {', '.join(allowed) or '(none)'}"
            )
    return cls(**hparams)
