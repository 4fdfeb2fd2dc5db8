"""Run completion and run ids.

A merged run (:mod:`rankrepro.plan.merge`) is *completed*: the run schema's defaults and every
component's keyword defaults from the catalog (:mod:`rankrepro.catalog`) are written into it,
so the record pins everything training and evaluation will use. It is validated (schema,
component names and parameters, metric names) with errors that name the file and key the
wrong value came from. Its id is ``<dataset>-<loss>-<first 10 hex of the SHA-1 of its
canonical JSON>`` (:func:`run_id`): cells describing the same run share it, and a changed
default (through the catalog) changes it. Every value a default fills gets its origin (the run
schema, a component's code default, :mod:`rankrepro.plan.groups`), so :func:`provenance` says where
each value of the complete run came from.
"""

from __future__ import annotations

import copy
import hashlib
import json

from rankrepro.catalog import COMPONENTS, NAME_REFS, OPTIONAL_COMPONENTS
from rankrepro.plan.groups import complete_groups
from rankrepro.plan.merge import get_path, origin_of
from rankrepro.plan.schema import PlanError, Schemas, dotted, fill_schema_defaults, first_error, schema_problem
from rankrepro.record.tasks import DEFAULT_TASK, facts_of
from rankrepro.registry import ParameterError, check_parameters

__all__ = ["ID_NEUTRAL_DEFAULTS", "SCHEMA_DEFAULT", "canonical_json", "check_batch_split", "check_dataset_tasks",
           "check_index_blocks", "check_random_crop", "dataset_task",
           "check_select_by", "complete_run", "leaf_paths", "provenance", "run_id"]

#: the origin of a value the run schema's default filled
SCHEMA_DEFAULT = "run schema default (src/rankrepro/plan/schemas/run.schema.yaml)"


def canonical_json(obj) -> str:
    """The JSON text a run's id hashes: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


#: keys added to the run record after run ids were fixed (dotted paths), with their defaults: :func:`run_id`
#: leaves such a key out of the hash while it equals its default, so every run planned before the key existed
#: keeps its id (results/runs/<id>/ stays where it is); any other value is hashed like every key
ID_NEUTRAL_DEFAULTS = {"task": DEFAULT_TASK, "eval.every": None, "eval.select": "last", "eval.select_by": None,
                       "images.face": None, "base_loss": None, "eval.datasets": [],
                       "grad_clip": None}


def _without_neutral_defaults(run: dict) -> dict:
    """``run`` less the keys of :data:`ID_NEUTRAL_DEFAULTS` at their default (the blocks on their path copied)."""
    out = dict(run)
    for dotted_key, default in ID_NEUTRAL_DEFAULTS.items():
        *parents, key = dotted_key.split(".")
        holder = out
        for parent in parents:
            if not isinstance(holder.get(parent), dict):
                break
            holder[parent] = holder = dict(holder[parent])
        else:
            if key in holder and holder[key] == default:
                del holder[key]
    return out


def run_id(run: dict) -> str:
    """``<dataset>-<loss>-<first 10 hex of the SHA-1 of the run's canonical JSON>`` (keys of
    :data:`ID_NEUTRAL_DEFAULTS` at their default left out)."""
    digest = hashlib.sha1(canonical_json(_without_neutral_defaults(run)).encode()).hexdigest()[:10]
    return f"{run['dataset']}-{run['loss']['name']}-{digest}"


def _where(origins: dict, path: tuple, context: str) -> str:
    return f"{origin_of(origins, path)}{context}: {dotted(path)}"


def leaf_paths(obj: dict, prefix: tuple = ()) -> list[tuple]:
    """The key paths of ``obj``'s values that are not dicts (a list is one value), in order."""
    out = []
    for key, value in obj.items():
        path = (*prefix, key)
        out.extend(leaf_paths(value, path) if isinstance(value, dict) and value else [path])
    return out


def provenance(run: dict, origins: dict) -> dict[str, str]:
    """``{dotted key: origin}`` of every value of a complete ``run`` (the ``origins`` its completion recorded)."""
    return {dotted(path): origin_of(origins, path) for path in leaf_paths(run)}


def complete_run(merged: dict, origins: dict, catalog: dict, schemas: Schemas, context: str = "") -> dict:
    """Fill the defaults of a merged run and validate it (see the module docstring).

    ``origins`` (the merge's) gets the origin of every value a default fills. ``context`` is added to
    the origin of a wrong value in messages (e.g. which cell)."""
    run = copy.deepcopy(merged)
    if "per_task" in run:
        raise PlanError(f"{_where(origins, ('per_task',), context)}: per_task belongs in the config's run_overrides only")
    if isinstance(get_path(run, ("model", "pooling")), str):
        run["model"]["pooling"] = {"name": run["model"]["pooling"]}
    given = set(leaf_paths(run))
    fill_schema_defaults(run, schemas.run)
    for path in leaf_paths(run):
        if path not in given:
            origins.setdefault(path, SCHEMA_DEFAULT)
    error = first_error(run, schemas.run)
    if error is not None:
        path = tuple(error.absolute_path)
        if error.validator == "required":  # a key nobody gave: name the block's origin
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            raise PlanError(f"{_where(origins, path, context) if path else origin_of(origins, ()) + context}: "
                            f"{missing!r} is required and given by no setup, spec or override")
        raise PlanError(f"{_where(origins, path, context)}: {schema_problem(error)}")
    for path, kind in NAME_REFS.items():
        name = get_path(run, path)
        if path == ("model", "backbone") and (name is None or run["task"] in catalog["task"] and
                                              facts_of(run, catalog)["backbones"] is not None):
            continue  # a model without a backbone, or one of a task whose model takes backbones of its own
            # (faster_rcnn): check_task checks them
        if name not in catalog[kind]:
            raise PlanError(f"{_where(origins, path, context)}: unknown {kind} {name!r}; registered: "
                            f"{', '.join(sorted(catalog[kind]))}")
    check_task(run, origins, catalog, context)
    for i, name in enumerate(run["eval"]["datasets"]):
        if name not in catalog["dataset"] or name == run["dataset"]:
            why = "the run's own dataset" if name == run["dataset"] else "an unknown dataset"
            raise PlanError(f"{_where(origins, ('eval', 'datasets'), context)}[{i}]: {name!r} is {why}; registered: "
                            f"{', '.join(sorted(catalog['dataset']))}")
    check_dataset_tasks(run, origins, catalog, context)
    for path, (kind, extra) in COMPONENTS.items():
        block = get_path(run, path)
        if block is None and path in OPTIONAL_COMPONENTS:
            continue
        if isinstance(block, str):  # a bare name (e.g. the model's default pooling "avg")
            block = {"name": block}
            get_path(run, path[:-1])[path[-1]] = block
        name = block["name"]
        if name not in catalog[kind]:
            raise PlanError(f"{_where(origins, (*path, 'name'), context)}: unknown {kind} {name!r}; registered: "
                            f"{', '.join(sorted(catalog[kind]))}")
        entry = catalog[kind][name]
        params = {k: v for k, v in block.items() if k != "name" and k not in extra}
        for key in params:
            where = _where(origins, (*path, key), context)
            try:
                check_parameters(kind, name, entry, {key: params[key]}, partial=True)
            except ParameterError as err:
                raise PlanError(f"{where}: {err}") from None
        try:
            check_parameters(kind, name, entry, params)
        except ParameterError as err:
            raise PlanError(f"{_where(origins, path, context)}: {err}") from None
        for key, spec in entry["parameters"].items():
            if key not in block:
                block[key] = copy.deepcopy(spec.get("default"))
                origins[(*path, key)] = f"code default of {kind} {name!r} ({entry['target']})"
    complete_groups(run, origins, catalog, context)
    check_batch_split(run, origins, context)
    check_index_blocks(run, origins, context)
    check_random_crop(run, origins, context)
    if run["warmup_epochs"] > run["epochs"]:  # the backbone would never train
        raise PlanError(f"run{context}: warmup_epochs ({run['warmup_epochs']}, {origin_of(origins, ('warmup_epochs',))}) "
                        f"exceeds epochs ({run['epochs']}, {origin_of(origins, ('epochs',))})")
    from rankrepro.metrics.names import parse_metric

    known = facts_of(run, catalog)["metrics"]  # None: the retrieval metric grammar
    for i, name in enumerate(run["eval"]["metrics"]):
        try:
            if known is not None:
                if name not in known:
                    raise ValueError(f"unknown {run['task']} metric {name!r}; known: {', '.join(known)}")
            else:
                parse_metric(name)
        except ValueError as err:
            raise PlanError(f"{_where(origins, ('eval', 'metrics'), context)}[{i}]: {err}") from None
    check_select_by(run, origins, context)
    return run


def check_task(run: dict, origins: dict, catalog: dict, context: str = "") -> None:
    """:class:`PlanError` naming where the value was set when the run's model or loss belongs to another task
    than the run's (``task``; its loss's and its model's catalog ``task``, absent: the default task), or when the
    run asks for what its task's facts (:class:`~rankrepro.record.tasks.TaskFacts`, from the catalog) do not
    allow: a backbone its model does not take, a run key the task refuses set to another value than its only one."""
    task = run["task"]
    for path, kind in ((("model", "name"), "model"), (("loss", "name"), "loss")):
        name = get_path(run, path)
        own = catalog[kind].get(name, {}).get("task") or DEFAULT_TASK
        if name in catalog[kind] and own != task:
            raise PlanError(f"{_where(origins, path, context)}: {kind} {name!r} is a {own} {kind}, the run's task is "
                            f"{task!r} ({origin_of(origins, ('task',))})")
    facts = facts_of(run, catalog)
    backbone = run["model"].get("backbone")
    if facts["backbones"] is not None and backbone not in facts["backbones"]:
        raise PlanError(f"{_where(origins, ('model', 'backbone'), context)}: {backbone!r} is no backbone of the "
                        f"{task} task's model; known: {', '.join(facts['backbones'])}")
    for key, only in facts["refused"].items():
        path = tuple(key.split("."))
        if get_path(run, path) != only:
            raise PlanError(f"{_where(origins, path, context)}: a {task} run has no {key} (only {only!r})")


def dataset_task(name: str, catalog: dict) -> str:
    """The task whose runs the protocol of dataset ``name`` scores (the catalog's dataset facts name the protocol,
    its protocol entry the task); :class:`PlanError` when the catalog lacks that protocol."""
    protocol = catalog["dataset"][name]["facts"]["protocol"]
    entry = catalog.get("protocol", {}).get(protocol)
    if entry is None:
        raise PlanError(f"dataset {name!r}: its protocol {protocol!r} is not in the catalog: run "
                        "`python -m rankrepro catalog` and plan again")
    return entry.get("task") or DEFAULT_TASK


def check_dataset_tasks(run: dict, origins: dict, catalog: dict, context: str = "") -> None:
    """:class:`PlanError` naming where the value was set when the run's ``dataset`` or one of its ``eval.datasets``
    is scored by a protocol of another task than the run's (a retrieval run on voc07: its evaluation would refuse
    it after the training). A task no protocol scores (one whose evaluator reads the manifest itself: the toy task
    of tests/test_toy_task.py) is not checked."""
    task = run["task"]
    if not any((entry.get("task") or DEFAULT_TASK) == task for entry in catalog.get("protocol", {}).values()):
        return
    named = [("dataset", run["dataset"])] + [(f"eval.datasets[{i}]", name)
                                             for i, name in enumerate(run["eval"]["datasets"])]
    for key, name in named:
        own = dataset_task(name, catalog)
        if own != task:
            path = ("dataset",) if key == "dataset" else ("eval", "datasets")
            protocol = catalog["dataset"][name]["facts"]["protocol"]
            raise PlanError(f"{origin_of(origins, path)}{context}: {key}: dataset {name!r} is a {own} dataset "
                            f"(protocol {protocol!r}), the run's task is {task!r} ({origin_of(origins, ('task',))}); "
                            "its evaluation would refuse it after the training")


def check_index_blocks(run: dict, origins: dict, context: str = "") -> None:
    """:class:`PlanError` when the loss reads the batch as blocks of ``index_blocks`` samples of one class (PNP's
    official index-based positives, :mod:`rankrepro.losses.pnp`) but the sampler draws ``samples_per_class`` of
    another size: the blocks would split or join classes."""
    blocks, per_class = run["loss"].get("index_blocks"), run["sampler"].get("samples_per_class")
    if blocks is not None and per_class is not None and blocks != per_class:
        raise PlanError(f"{_where(origins, ('loss', 'index_blocks'), context)}: index_blocks {blocks} must equal the "
                        f"sampler's samples_per_class {per_class} ({origin_of(origins, ('sampler', 'samples_per_class'))})")


def check_random_crop(run: dict, origins: dict, context: str = "") -> None:
    """:class:`PlanError` naming where the values were set when ``images.rrc_scale`` and ``rrc_ratio`` are not
    both ranges (a RandomResizedCrop) or both null (a plain random crop, :func:`rankrepro.data.transforms.
    train_transform`), or when a plain random crop would not fit: ``train_resize`` null, or a side of it
    smaller than ``train_crop`` (an int resizes the shorter side to it)."""
    images = run["images"]
    scale, ratio = images["rrc_scale"], images["rrc_ratio"]
    if (scale is None) != (ratio is None):
        shown = {key: "null" if value is None else value for key, value in (("scale", scale), ("ratio", ratio))}
        raise PlanError(f"{_where(origins, ('images', 'rrc_scale'), context)} is {shown['scale']} but images.rrc_ratio "
                        f"({origin_of(origins, ('images', 'rrc_ratio'))}) is {shown['ratio']}: both ranges (a "
                        "RandomResizedCrop) or both null (a plain random crop)")
    resize, crop = images["train_resize"], images["train_crop"]
    if scale is None and (resize is None or min(resize if isinstance(resize, list) else [resize]) < crop):
        raise PlanError(f"{_where(origins, ('images', 'train_resize'), context)}: a plain random crop (rrc_scale and "
                        f"rrc_ratio null) of train_crop {crop} ({origin_of(origins, ('images', 'train_crop'))}) needs "
                        f"train_resize at least {crop} on each side, got {'null' if resize is None else resize}")


def check_select_by(run: dict, origins: dict, context: str = "") -> None:
    """:class:`PlanError` naming where the run's ``eval`` block was set when its model selection
    (:mod:`rankrepro.record.selection`) cannot work: ``select_by`` not one of ``metrics``; the metric that
    picks the best epoch (``select_by``, or the first of ``metrics``) one where lower is better
    (``dists@...``) while a test curve is kept (``every``); ``select: best_test`` without a curve."""
    block = run["eval"]
    select_by, metrics = block.get("select_by"), block["metrics"]
    if select_by is not None and select_by not in metrics:
        raise PlanError(f"{_where(origins, ('eval', 'select_by'), context)}: {select_by!r} is not one of "
                        f"eval.metrics ({', '.join(metrics)}; {origin_of(origins, ('eval', 'metrics'))})")
    chosen = select_by or metrics[0]
    if block.get("every") is not None and chosen.startswith("dists@"):
        path = ("eval", "select_by") if select_by else ("eval", "metrics")
        raise PlanError(f"{_where(origins, path, context)}: the best epoch maximises {chosen!r}, a metric where "
                        "lower is better; set eval.select_by to another of eval.metrics")
    if block.get("select") == "best_test" and block.get("every") is None:
        raise PlanError(f"{_where(origins, ('eval', 'select'), context)}: best_test needs a test curve; set "
                        f"eval.every ({origin_of(origins, ('eval', 'every'))} leaves it null)")


def check_batch_split(run: dict, origins: dict, context: str = "") -> None:
    """:class:`PlanError` when the run's sampler cannot split its batch (checked when training builds it,
    :mod:`rankrepro.data.samplers`): ``m_per_class`` and ``class_random`` need ``batch_size`` a multiple
    of ``samples_per_class``; ``hierarchical`` (pytorch-metric-learning's HierarchicalSampler) needs it a
    multiple of ``super_classes_per_batch``, and each super-class's share a multiple of ``samples_per_class``.
    The message names where ``batch_size`` and the other number were set."""
    block = run["sampler"]
    name, size, per_class = block["name"], block.get("batch_size"), block.get("samples_per_class")
    if name not in ("m_per_class", "class_random", "hierarchical") or \
            not all(isinstance(v, int) for v in (size, per_class)):
        return
    path = ("sampler", "batch_size")
    where = f"{_where(origins, path, context)}: sampler {name!r}: batch_size {size}"
    per_class_origin = origin_of(origins, ("sampler", "samples_per_class"))
    if name in ("m_per_class", "class_random"):
        if size % per_class:
            raise PlanError(f"{where} is not a multiple of samples_per_class {per_class} ({per_class_origin})")
        return
    supers = block.get("super_classes_per_batch")
    if not isinstance(supers, int) or supers < 1:
        return
    if size % supers:
        raise PlanError(f"{where} is not a multiple of super_classes_per_batch {supers} "
                        f"({origin_of(origins, ('sampler', 'super_classes_per_batch'))})")
    if (size // supers) % per_class:
        raise PlanError(f"{where} over super_classes_per_batch {supers} gives {size // supers} per super-class, "
                        f"not a multiple of samples_per_class {per_class} ({per_class_origin})")
