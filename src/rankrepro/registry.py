"""One registry pattern for every kind of component (losses, samplers, datasets, ...).

A :class:`Registry` maps a name to a *builder* -- a class or a function -- plus optional
*fixed* keywords, so that variants are registrations, not subclasses::

    LOSSES.register("smooth_ap")(SmoothAP)                 # or @LOSSES.register("smooth_ap")
    LOSSES.register("pnp_dq", variant="Dq")(PNPLoss)        # a variant: fixed keywords

The builder's *parameters* are its keyword parameters, minus the fixed ones, minus the
registry's ``context`` (arguments the caller supplies at build time, e.g. a sampler's
``labels`` and ``seed`` or a loss's ``num_classes``). Each parameter has a default
(or is required) and a JSON type read from its annotation (or from its default); a size is
annotated with a bounded alias -- :data:`PositiveInt` (>= 1), :data:`AtLeastTwoInt` (>= 2, e.g. a number
of bins or of samples per block), :data:`NonNegativeInt` (>= 0),
:data:`PositiveFloat` (> 0), :data:`NonNegativeFloat` (>= 0), also inside ``| None`` and as the
items of ``list[...]``/``Sequence[...]`` -- and the catalog records the bound (``minimum`` or
``exclusiveMinimum``, JSON Schema's words; ``items`` for a sequence), so a zero size fails the
plan instead of the training; a choice among strings is annotated ``Literal["a", "b"]`` and recorded as
``enum``. The aliases are read from the annotation's text: the builders'
modules use ``from __future__ import annotations``.
:meth:`Registry.build` checks the given parameters -- unknown names, missing required
ones, wrong JSON types, NaN or infinite numbers -- before calling the builder, and an unknown name lists the
registered ones.

This module imports no torch: the planner reads the same facts from the catalog
(:mod:`rankrepro.catalog`), a JSON snapshot of every registry.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rankrepro.messages import ShortMessage, short_text

__all__ = ["Registry", "Entry", "Parameter", "choices", "signature_parameters", "UnknownNameError", "ParameterError", "json_types",
           "check_json_type", "has_non_finite", "check_parameters", "PositiveInt", "AtLeastTwoInt", "NonNegativeInt", "PositiveFloat", "NonNegativeFloat"]


class UnknownNameError(KeyError, ValueError):
    """A name that is not registered (a KeyError and a ValueError); the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return short_text(str(self.args[0])) if self.args else ""


class ParameterError(ShortMessage, TypeError, ValueError):
    """Parameters a builder does not accept, lacks or gets with the wrong type."""


REQUIRED = inspect.Parameter.empty

#: bounded sizes for annotations (``num_bins: PositiveInt = 10``, ``chunk_size: PositiveInt | None = None``)
PositiveInt = int
AtLeastTwoInt = int
NonNegativeInt = int
PositiveFloat = float
NonNegativeFloat = float
#: annotation token of a bounded alias -> (its plain token, its bound as JSON Schema keywords)
_BOUNDED = {"PositiveInt": ("int", {"minimum": 1}), "AtLeastTwoInt": ("int", {"minimum": 2}),
            "NonNegativeInt": ("int", {"minimum": 0}),
            "PositiveFloat": ("float", {"exclusiveMinimum": 0}), "NonNegativeFloat": ("float", {"minimum": 0})}

# annotation token -> JSON types (``float`` accepts integers, as JSON numbers do)
_TOKENS = {"int": ["integer"], "float": ["number"], "bool": ["boolean"], "str": ["string"], "None": ["null"],
           "list": ["array"], "tuple": ["array"], "dict": ["object"], "Sequence": ["array"]}
_TOKENS.update({alias: _TOKENS[plain] for alias, (plain, _) in _BOUNDED.items()})


def _literal_values(annotation) -> list | None:
    """The values of a ``Literal["a", "b"]`` annotation (its text), None for any other annotation."""
    if not isinstance(annotation, str):
        return None
    match = re.fullmatch(r"Literal\[(.+)\]", annotation.strip())
    return None if match is None else list(ast.literal_eval(f"({match.group(1)},)"))


def _annotation_bounds(annotation) -> dict:
    """The bound of a size annotation (see the module docstring): ``{"minimum": 1}``,
    ``{"items": {"minimum": 1}}`` for ``list[PositiveInt]``; ``{"enum": [...]}`` for a ``Literal[...]`` of
    choices; {} when it names no bounded alias."""
    if not isinstance(annotation, str):
        return {}
    choices = _literal_values(annotation)
    if choices is not None:
        return {"enum": choices}
    for part in annotation.split("|"):
        match = re.fullmatch(r"(\w+)(?:\[\s*(\w+).*\])?", part.strip())
        if match is None:
            continue
        outer, inner = match.groups()
        if outer in _BOUNDED:
            return dict(_BOUNDED[outer][1])
        if inner in _BOUNDED:
            return {"items": dict(_BOUNDED[inner][1])}
    return {}


def bound_problem(value, bounds: dict) -> str | None:
    """What is wrong with ``value`` under ``bounds`` (``minimum``, ``exclusiveMinimum``, ``items``), or None;
    None, booleans and non-numbers are left to the type check; a choice (``enum``) must be one of its values."""
    if "enum" in bounds:
        return None if value in bounds["enum"] else f"must be one of {', '.join(map(str, bounds['enum']))}, got {value!r}"
    if "items" in bounds:
        if isinstance(value, (list, tuple)) and any(bound_problem(v, bounds["items"]) for v in value):
            return f"items must be {_bound_text(bounds['items'])}, got {list(value)!r}"
        return None
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if ("minimum" in bounds and not value >= bounds["minimum"]) or \
            ("exclusiveMinimum" in bounds and not value > bounds["exclusiveMinimum"]):
        return f"must be {_bound_text(bounds)}, got {value!r}"
    return None


def _bound_text(bounds: dict) -> str:
    return f">= {bounds['minimum']}" if "minimum" in bounds else f"> {bounds['exclusiveMinimum']}"


def _annotation_types(annotation) -> list[str] | None:
    """JSON types of a simple annotation (``float``, ``int | None``, ``tuple[int, ...]``); None if unknown."""
    if annotation is REQUIRED:
        return None
    choices = _literal_values(annotation)
    if choices is not None:
        return list(dict.fromkeys(t for value in choices for t in json_types(value))) or None
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    types: list[str] = []
    for part in text.split("|"):
        token = re.split(r"[\[.]", part.strip(), maxsplit=1)[0].strip()
        if token not in _TOKENS:
            return None
        types += [t for t in _TOKENS[token] if t not in types]
    return types or None


def json_types(value) -> list[str]:
    """The JSON type of a Python value, as a one-element list (``integer`` for ints, not bools)."""
    if value is None:
        return ["null"]
    if isinstance(value, bool):
        return ["boolean"]
    if isinstance(value, int):
        return ["integer"]
    if isinstance(value, float):
        return ["number"]
    if isinstance(value, str):
        return ["string"]
    if isinstance(value, (list, tuple)):
        return ["array"]
    if isinstance(value, dict):
        return ["object"]
    return []


def has_non_finite(value) -> bool:
    """Whether ``value`` is, or holds (in a list, tuple or dict), a float NaN or infinity."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    return False


def check_json_type(value, types: list[str] | None) -> bool:
    """True when ``value`` has one of the JSON ``types`` (None or [] = any; ``number`` takes integers)."""
    if not types:
        return True
    have = json_types(value)
    return any(t in types for t in have) or ("integer" in have and "number" in types)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a builder: its default (``required`` when it has none) and JSON types."""

    name: str
    default: Any = None
    required: bool = False
    types: list[str] | None = None  # None: any JSON value
    bounds: dict = field(default_factory=dict)  # a size's bound (:func:`bound_problem`)

    def as_json(self) -> dict:
        out: dict = {"required": True} if self.required else {"default": self.default}
        if self.types:
            out["types"] = list(self.types)
        return {**out, **self.bounds}


def choices(builder: Callable, name: str) -> list:
    """The values a ``Literal[...]`` annotation of parameter ``name`` of ``builder`` allows (the one list of them:
    the builder checks a direct call against it, the catalog records it as ``enum``)."""
    annotation = next(p.annotation for p in signature_parameters(builder) if p.name == name)
    values = _literal_values(annotation)
    if values is None:
        raise TypeError(f"{builder.__qualname__}: parameter {name!r} is not annotated Literal[...]")
    return values


def signature_parameters(builder: Callable) -> list[inspect.Parameter]:
    """The parameters a builder is called with: a class's ``__init__`` without ``self``, or a function's."""
    fn = builder.__init__ if isinstance(builder, type) else builder
    params = list(inspect.signature(fn).parameters.values())
    return params[1:] if isinstance(builder, type) else params


@dataclass(frozen=True)
class Entry:
    """A registered builder with its fixed keywords."""

    kind: str
    name: str
    builder: Callable
    fixed: dict = field(default_factory=dict)
    context: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """``module:qualname`` of the builder."""
        return f"{self.builder.__module__}:{self.builder.__qualname__}"

    def signature_parameters(self) -> list[inspect.Parameter]:
        return signature_parameters(self.builder)

    @property
    def accepts_any(self) -> bool:
        """The builder takes ``**kwargs``: parameters other than the listed ones are passed on unchecked."""
        return any(p.kind is p.VAR_KEYWORD for p in self.signature_parameters())

    def parameters(self) -> dict[str, Parameter]:
        """The user-settable parameters, in signature order."""
        out = {}
        for p in self.signature_parameters():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.name in self.fixed \
                    or p.name in self.context:
                continue
            required = p.default is REQUIRED
            default = None if required else p.default
            if isinstance(default, tuple):
                default = list(default)
            types = _annotation_types(p.annotation)
            if types is None and not required and default is not None:
                types = json_types(default) or None
                if types == ["integer"]:
                    types = ["number"]  # an int default does not make a float value wrong... unless annotated
            out[p.name] = Parameter(p.name, default, required, types, _annotation_bounds(p.annotation))
        return out

    def check(self, params: dict, where: str = "", complete: bool = False) -> None:
        """:func:`check_parameters` against this entry (``where``: the file and key the parameters come from;
        ``complete``: every parameter must be given, defaults included -- a resolved run)."""
        check_parameters(self.kind, self.name, self.as_json(), params, where, complete)

    def defaults(self) -> dict:
        """{parameter: default} of the parameters that have one."""
        return {k: p.default for k, p in self.parameters().items() if not p.required}

    @property
    def task(self) -> str | None:
        """The task the builder declares in a ``task`` attribute (``"detection"`` for the detector's
        model and loss), None when it declares none (e.g. the retrieval components)."""
        return getattr(self.builder, "task", None)

    @property
    def hierarchical(self) -> bool:
        """The builder declares ``hierarchical = True``: it needs labels of two levels or more ([B, L], L >= 2,
        finest first) to be what it is (a hierarchical loss: H-AP, NDCG, a sum over levels); False when it
        declares nothing."""
        return bool(getattr(self.builder, "hierarchical", False))

    @property
    def family(self) -> str | None:
        """The family the builder declares in a ``family`` attribute (a retrieval loss's: ``pair``, ``proxy``,
        ``rank``, :data:`rankrepro.losses.registry.FAMILIES`), None when it declares none."""
        return getattr(self.builder, "family", None)

    @property
    def paper(self) -> str | None:
        """The paper the builder declares in a ``paper`` attribute (the reproduced paper that introduced a loss,
        :mod:`rankrepro.losses.registry`), None when it declares none."""
        return getattr(self.builder, "paper", None)

    def as_json(self) -> dict:
        """The entry as the catalog stores it: target, fixed keywords (a function as its
        ``module:qualname``), parameters, accepts_any, ``task`` when the builder declares one, ``hierarchical``
        (true) when it declares it (:attr:`hierarchical`), ``family`` when it declares one (:attr:`family`), ``paper`` when it declares one (:attr:`paper`), and ``facts`` when the builder declares facts with an ``as_json`` (a task's :class:`~rankrepro.record.tasks.TaskFacts`)."""
        fixed = {k: f"{v.__module__}:{v.__qualname__}" if callable(v) else v for k, v in self.fixed.items()}
        out = {"target": self.target, "fixed": fixed, "accepts_any": self.accepts_any,
               "parameters": {k: p.as_json() for k, p in self.parameters().items()}}
        if self.task is not None:
            out["task"] = self.task
        if self.hierarchical:
            out["hierarchical"] = True
        if self.family is not None:
            out["family"] = self.family
        if self.paper is not None:
            out["paper"] = self.paper
        facts = getattr(self.builder, "facts", None)
        if hasattr(facts, "as_json"):
            out["facts"] = facts.as_json()
        return out

    def build(self, *args, context: dict | None = None, complete: bool = False, **params):
        """``builder(*args, **fixed, **params, **context)`` after :meth:`check`.

        ``context`` entries are passed only when the builder accepts them."""
        self.check(params, complete=complete)
        names = {p.name for p in self.signature_parameters()}
        extra = {k: v for k, v in (context or {}).items() if k in names or self.accepts_any}
        return self.builder(*args, **self.fixed, **params, **extra)


def check_parameters(kind: str, name: str, entry: dict, params: dict, where: str = "",
                     complete: bool = False, partial: bool = False) -> None:
    """Raise :class:`ParameterError` unless ``params`` suit ``entry`` (an entry as the catalog stores it).

    Unknown names (unless the builder takes ``**kwargs``), fixed keywords, missing required
    parameters (every parameter when ``complete``), values of the wrong JSON type and sizes out of
    their bound fail, the message prefixed by ``where``; ``partial`` skips the missing-parameter check."""
    prefix = f"{where}: " if where else ""
    accepted = entry["parameters"]
    fixed = {k: v for k, v in entry["fixed"].items() if k in params}
    if fixed:
        given = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
        raise ParameterError(f"{prefix}{kind} {name!r} fixes {given}; register another name for another value")
    unknown = sorted(set(params) - set(accepted))
    if unknown and not entry["accepts_any"]:
        raise ParameterError(f"{prefix}{kind} {name!r} takes no parameter {', '.join(map(repr, unknown))}; "
                             f"allowed: {', '.join(accepted) or '(none)'}")
    missing = [] if partial else [k for k, p in accepted.items() if (p.get("required") or complete) and k not in params]
    if missing:
        hint = (" (a resolved run pins every default: it was planned with a catalog that lacks them; "
                "run `python -m rankrepro catalog` and plan again)" if complete else "")
        raise ParameterError(f"{prefix}{kind} {name!r} needs {', '.join(map(repr, missing))}{hint}")
    for key, value in params.items():
        types = accepted.get(key, {}).get("types")
        if has_non_finite(value):  # NaN passes every bound (it compares false), inf every minimum
            raise ParameterError(f"{prefix}{kind} {name!r}: {key} must hold finite numbers, got {value!r}")
        if not check_json_type(value, types):
            raise ParameterError(f"{prefix}{kind} {name!r}: {key} must be {' or '.join(types)}, "
                                 f"got {value!r} ({' '.join(json_types(value)) or type(value).__name__})")
        problem = bound_problem(value, accepted.get(key, {}))
        if problem:
            raise ParameterError(f"{prefix}{kind} {name!r}: {key} {problem}")


class Registry:
    """Name -> :class:`Entry` for one kind of component.

    ``package``: a package whose modules are imported on first lookup, so that the
    registrations they hold run (e.g. ``rankrepro.losses``). ``context``: parameter names
    the caller supplies at build time, not part of a run's parameters. ``name_pattern``: what a
    name must match (default ``[a-z0-9_]+``: names become parts of run ids and file names; the
    evaluation protocols keep the hyphenated names the manifests use).
    """

    def __init__(self, kind: str, package: str | None = None, context: tuple[str, ...] = (),
                 name_pattern: str = r"[a-z0-9_]+"):
        self.kind = kind
        self.package = package
        self.context = tuple(context)
        self.name_pattern = name_pattern
        self._entries: dict[str, Entry] = {}
        self._loaded = package is None

    def register(self, name: str, builder: Callable | None = None, **fixed):
        """Register ``builder`` under ``name`` (with ``fixed`` keywords); without ``builder``, a decorator."""
        if not isinstance(name, str) or not re.fullmatch(self.name_pattern, name):
            raise ValueError(f"{self.kind} name must match {self.name_pattern}, got {name!r}")

        def add(obj):
            entry = Entry(self.kind, name, obj, dict(fixed), self.context)
            prev = self._entries.get(name)
            if prev is not None and (prev.target, prev.fixed) != (entry.target, entry.fixed):
                raise ValueError(f"{self.kind} name {name!r} is already registered by {prev.target}")
            unknown = sorted(set(fixed) - {p.name for p in entry.signature_parameters()})
            if unknown and not entry.accepts_any:
                raise ValueError(f"{self.kind} {name!r}: fixed keyword(s) {unknown} are not parameters of "
                                 f"{entry.target}")
            self._entries[name] = entry
            return obj

        return add if builder is None else add(builder)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{self.package}.{module.name}")

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self._load()
        return sorted(self._entries)

    def registered(self) -> list[str]:
        """The registered names in the order they were registered."""
        self._load()
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def get(self, name: str) -> Entry:
        """The entry of ``name``; :class:`UnknownNameError` listing the registered names otherwise."""
        self._load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(f"unknown {self.kind} {name!r}; registered: "
                                   f"{', '.join(sorted(self._entries)) or '(none)'}") from None

    def build(self, name: str, *args, context: dict | None = None, complete: bool = False, **params):
        """Build ``name`` with ``params`` (checked) and the caller's ``context``."""
        return self.get(name).build(*args, context=context, complete=complete, **params)

    def build_block(self, block: dict, *args, context: dict | None = None, complete: bool = False):
        """Build from a component block ``{"name": ..., **params}`` (``complete``: a resolved run's block,
        which must pin every parameter)."""
        params = dict(block)
        return self.build(params.pop("name"), *args, context=context, complete=complete, **params)

    def catalog(self) -> dict:
        """{name: {target, fixed, parameters: {p: {default | required, types}}, accepts_any}} (JSON)."""
        return {name: self._entries[name].as_json() for name in self.names()}
