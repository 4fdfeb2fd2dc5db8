"""The loss registry: a thin layer over :class:`rankrepro.registry.Registry`.

``@register("name")`` on an ``nn.Module`` subclass (or ``register("name", **fixed)(builder)``
for a variant: fixed keywords, e.g. ``register("pnp_dq", variant="Dq")(PNPLoss)``);
``build("name", **hparams)`` checks every hyper-parameter (unknown names, JSON types)
before building; ``names()`` lists what is registered, ``defaults(name)`` the keyword
defaults (JSON values) and ``accepted_hparams(name)`` the settable names.

The task of a loss: a loss class may declare ``task`` (the name of the task that trains with
it, :mod:`rankrepro.engine.tasks`); without one it is a ``retrieval`` loss, called as
``loss(embeddings, labels, ...)``. ``faster_rcnn`` (:mod:`rankrepro.losses.detection`) declares
``task = "detection"``: it scores a detector's RoIs. ``names()`` lists the retrieval losses (what
the embedding losses' callers iterate over), ``names(task=None)`` every loss, ``task_of(name)``
the task of one; the catalog records a declared task (``"task"`` in the loss's entry; absent:
retrieval).

The labels a loss needs: a loss class may declare ``hierarchical = True`` (it needs labels of two
levels or more, [B, L] finest first: H-AP, NDCG, the sums over levels, CSL); a :func:`compose` builder
declares it when one of its parts does. The catalog records it (``"hierarchical": true`` in the loss's
entry; absent: one level is enough), so a leaderboard offers such a loss only on a dataset with
hierarchical labels (:mod:`rankrepro.tables.kinds.leaderboard`).

The family of a retrieval loss: each loss class declares ``family``, one of :data:`FAMILIES` -- ``"pair"`` (it
compares the embeddings of pairs or triplets of the batch: contrastive, triplet, multi-similarity, the calibration
loss), ``"proxy"`` (it compares embeddings with learned class proxies or weights: ProxyNCA, normalised softmax,
ArcFace, CSL) or ``"rank"`` (it relaxes a ranking metric: AP, recall, H-AP, NDCG, top-k precision) -- on the class
(a base class declares it for its subclasses); a :func:`compose` builder takes its ``family`` argument, else the
first part's that declares one. Hierarchical or not is the other declaration (above), not a family. The catalog
records it (``"family"``); the leaderboards' plots colour the losses by it.

The paper of a loss: a loss introduced by one of the papers this project reproduces declares ``paper``, that
paper's key (its folder of table specs: ``pnp``, ``rambo``, ``smooth_ap``, ``suprank``, ``topk``) -- on the class
(a base class for its subclasses) or as a :func:`compose` argument (else the first part's that declares one); a
loss from other work (the baselines) declares none. The catalog records it (``"paper"``); a leaderboard shows the
number that paper reports for the loss first (:mod:`rankrepro.tables.reported`).

The data sizes a loss may need (``num_classes``, ``num_classes_per_level``,
``embedding_size``) are the registry's *context*: not hyper-parameters of a run, passed by
the caller through ``build(..., context={...})`` and given only to the losses whose
signature takes them.
"""

from __future__ import annotations

import inspect

import torch

from rankrepro.registry import ParameterError, Registry, signature_parameters

__all__ = ["LOSSES", "CONTEXT", "FAMILIES", "register", "build", "names", "get", "defaults", "accepted_hparams",
           "HyperParameterError", "compose", "pick",
           "data_context", "task_of", "RETRIEVAL"]

CONTEXT = ("num_classes", "num_classes_per_level", "embedding_size")
LOSSES = Registry("loss", package="rankrepro.losses", context=CONTEXT)

MEMORY_KEYS = ("size", "warmup_epochs")

#: the task of a loss whose class declares none: it scores embeddings (module docstring)
RETRIEVAL = "retrieval"
#: the families a retrieval loss declares (module docstring)
FAMILIES = ("pair", "proxy", "rank")


class HyperParameterError(ParameterError):
    """A hyper-parameter a loss does not accept (a TypeError and a ValueError)."""


def register(name: str, builder=None, **fixed):
    """Register a loss class (or builder) under ``name``, with ``fixed`` keywords; a decorator without ``builder``."""
    return LOSSES.register(name, builder, **fixed)


def names(task: str | None = RETRIEVAL) -> list[str]:
    """Sorted registered loss names of ``task`` (default: the retrieval losses, which take
    ``(embeddings, labels, ...)``; None: every registered loss)."""
    return [n for n in LOSSES.names() if task is None or task_of(n) == task]


def task_of(name: str) -> str:
    """The task of the loss ``name``: its class's ``task`` attribute, :data:`RETRIEVAL` without one."""
    return get(name).task or RETRIEVAL


def get(name: str):
    """The registry entry of ``name`` (:class:`rankrepro.registry.Entry`: builder, fixed keywords, parameters);
    an :class:`~rankrepro.registry.UnknownNameError` (a ValueError) listing the known names otherwise."""
    return LOSSES.get(name)


def accepted_hparams(name: str) -> list[str]:
    """The keyword names :func:`build` accepts for ``name``: its hyper-parameters, then the data
    sizes (context) its builder takes; fixed keywords excluded."""
    entry = get(name)
    takes = {p.name for p in entry.signature_parameters()}
    return list(entry.parameters()) + [k for k in CONTEXT if k in takes]


def defaults(name: str) -> dict:
    """``{hyper-parameter: default}`` of ``name`` (JSON values; required ones are left out)."""
    return get(name).defaults()


def data_context(num_classes_per_level, embedding_size: int) -> dict:
    """The build context of a training set: ``num_classes`` (finest level), ``num_classes_per_level``
    (finest first) and ``embedding_size``."""
    counts = [int(c) for c in num_classes_per_level]
    return {"num_classes": counts[0], "num_classes_per_level": counts, "embedding_size": int(embedding_size)}


def build(name: str, memory: dict | None = None, context: dict | None = None, base_loss: dict | None = None,
          **hparams) -> torch.nn.Module:
    """Instantiate the loss registered as ``name`` with keyword hyper-parameters.

    ``memory`` (``{"size": N, "warmup_epochs": E}``) wraps it in a cross-batch memory
    (:class:`rankrepro.losses.memory.MemoryLoss`). ``base_loss`` (a loss block ``{"name", **hparams}``, the run's
    ``base_loss``, built with the same ``context``) is added to it (:class:`rankrepro.losses.combined.WithBase`: the
    face networks' own classification loss kept under an appended one; named as the run's key so that no loss's
    own hyper-parameter is taken for it: multi-similarity's ``base``). ``context``: the training set's sizes
    (``num_classes``, ``num_classes_per_level``, ``embedding_size``), passed only to the
    losses whose signature takes them (sizes given as keywords, ``build("csl",
    num_classes_per_level=[...], embedding_size=...)``, are taken as context too). Unknown or
    mistyped hyper-parameters raise :class:`HyperParameterError` naming them.
    """
    entry = get(name)
    sizes = {k: hparams.pop(k) for k in CONTEXT if k in hparams}
    if sizes:
        context = {**(context or {}), **sizes}
    if memory is not None:
        if task_of(name) != RETRIEVAL:
            raise HyperParameterError(f"loss {name!r} (task {task_of(name)}) takes no memory: the cross-batch "
                                      "memory holds embeddings")
        unknown = sorted(set(memory) - set(MEMORY_KEYS))
        if unknown:
            raise HyperParameterError(f"memory got unknown key(s) {unknown}; allowed: {', '.join(MEMORY_KEYS)}")
    na = sorted(k for k in hparams if k in entry.fixed and entry.fixed[k] is None)
    if na:  # a variant's registration fixes the hyper-parameters of other variants to None
        raise HyperParameterError(f"loss {name!r} takes no parameter {', '.join(map(repr, na))} (it belongs to "
                                  f"another variant); allowed: {', '.join(entry.parameters()) or '(none)'}")
    try:
        loss = entry.build(context=context, **hparams)  # checks the hyper-parameters first
    except ParameterError as err:
        raise HyperParameterError(str(err)) from None
    if memory is not None:
        from .memory import MemoryLoss

        loss = MemoryLoss(loss, **memory)
    if base_loss is not None:
        from .combined import WithBase

        loss = WithBase(loss, build(**base_loss, context=context))
    return loss


def _keyword_parameters(fn) -> list[inspect.Parameter]:
    return [p for p in signature_parameters(fn) if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "step"]


def compose(name: str, module: str, make, *parts, doc: str | None = None, fixed: dict | None = None,
            family: str | None = None, paper: str | None = None, **defaults):
    """A builder with one flat keyword signature made of the parts' keyword parameters.

    ``parts``: callables (classes or functions) whose keyword parameters (``step`` excepted)
    become the builder's, in order, with ``defaults`` overriding their defaults; the same
    name may not come from two parts; ``fixed`` parameters are left out of the signature
    and always take their fixed value. ``make(values)`` gets every value (given or default)
    and builds the loss; :func:`pick` selects one part's values. The builder is named
    ``name`` in ``module`` (assign it to that module-level name), so the registry reads
    plain JSON parameters from it -- e.g. Sup-AP = ``APLoss(step=SupRankStep(tau=..., ...))``
    registered with flat ``tau``, ``rho``, ... keywords. ``family`` and ``paper``: the loss's family and paper
    (module docstring), each by default the first part's that declares one.
    """
    params: dict[str, inspect.Parameter] = {}
    fixed = dict(fixed or {})
    for part in parts:
        for p in _keyword_parameters(part):
            if p.name in fixed:
                continue
            if p.name in params:
                raise ValueError(f"{name}: parameter {p.name!r} comes from two parts")
            params[p.name] = p.replace(kind=inspect.Parameter.KEYWORD_ONLY,
                                       default=defaults.get(p.name, p.default))
    unknown = sorted(set(defaults) - set(params))
    if unknown:
        raise ValueError(f"{name}: defaults for unknown parameter(s) {unknown}")
    signature = inspect.Signature(list(params.values()))

    def builder(**kwargs):
        bound = signature.bind(**kwargs)
        bound.apply_defaults()
        return make({**bound.arguments, **fixed})

    builder.__signature__ = signature
    if any(getattr(part, "hierarchical", False) for part in parts):  # the labels a part needs (module docstring)
        builder.hierarchical = True
    family = family or next((part.family for part in parts if getattr(part, "family", None)), None)
    if family:  # the family (module docstring): given, else the first part's
        builder.family = family
    paper = paper or next((part.paper for part in parts if getattr(part, "paper", None)), None)
    if paper:  # the paper that introduced the loss (module docstring): given, else the first part's
        builder.paper = paper
    builder.__name__ = builder.__qualname__ = name
    builder.__module__ = module
    builder.__doc__ = doc
    return builder


def pick(values: dict, part) -> dict:
    """The entries of ``values`` that are keyword parameters of ``part``."""
    names_ = {p.name for p in _keyword_parameters(part)}
    return {k: v for k, v in values.items() if k in names_}
