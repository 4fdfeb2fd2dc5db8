"""GPU-hours of a plan before it runs: every run, every table, every paper (``python -m rankrepro cost``).

A run's estimate is training plus evaluation on one GPU of a kind (``--gpu``, default ``h100``)::

    train h = images per epoch x epochs / train images/s(backbone, train_crop) x amp factor / 3600
    eval h  = evaluation images x evaluations / inference images/s(backbone, test_crop) / 3600

- images per epoch: the training split's images (``min(images, max_batches_per_epoch x batch size)`` when
  epochs are cut short); warm-up epochs count as full ones (the frozen backbone makes them cheaper: an upper bound),
  and so does a sampler's per-class cap (``reduce_per_class``: H-GLDv2's epoch draws at most 8 images of each of
  its 46,593 landmarks, about 373k of its 971k images, so its estimate is about 2.6x too high);
- a fresh run's initialisation passes are not counted: the PCA of a projection (at most ``pca_images``) and the
  imprinting of a face base classifier (at most ``imprint_per_class`` images of each class: 276k of VGGFace2's
  3.1M, under a tenth of the epoch's time at inference speed);
- evaluation images: the images of every split but the training split; evaluations: one (the run's
  ``evaluate`` job) plus, with ``eval.every``, one per epoch of its test curve
  (:func:`rankrepro.record.selection.curve_epochs`);
- image counts, in order: the prepared manifest (``<results>/manifests/<dataset>/meta.json``) when it was prepared
  from the source the config names -- a generated replica for ``replica: true`` (a derived dataset: its base's
  setting), the real files otherwise: the demo's replica manifests never stand in for the real datasets of
  ``config.yaml`` in the same results folder --, the dataset's declared ``expected_counts``, :data:`PUBLISHED_IMAGES`, then those of the dataset it derives from or shares its
  source with (merge3 relabels SOP's images, H-GLDv2 GLDv2's); a run whose training count is unknown (DyML) is
  listed as not estimated;
- images/s: the GPU's throughput profile ``profiles/throughput/<gpu>.yaml`` (:func:`load_profile`: measured by
  ``python -m rankrepro bench train`` on that GPU, or assumed figures marked ``measured: false``) at the nearest
  listed crop size, scaled by pixels: ``ips(r) = ips(r0) x (r0 / r)^2``. A backbone missing from the profile is
  an error naming the file (no guessed fallback). A profile's figures are positive numbers by positive crop sizes,
  checked when it is read (:func:`load_profile`, naming the file and key).

A table's figure sums its runs; a run shared by several tables counts in each table's figure, but once in its
paper's and once in the total. Variant rows (config ``variants``, :mod:`rankrepro.plan.variants`) are in these
figures, and each table and the total also give apart the GPU-hours of the runs only variant rows need
(:func:`variant_runs`).
"""

from __future__ import annotations

import json
from pathlib import Path

from rankrepro import catalog
from rankrepro.record.selection import curve_epochs
from rankrepro.record.tasks import throughput_network
from rankrepro.io import load_yaml
from rankrepro.messages import ShortMessage
from rankrepro.plan.model import Plan

__all__ = ["PROFILES_DIR", "ProfileError", "load_profile", "images_per_s", "split_images",
           "run_cost", "plan_cost", "to_text"]

PROFILES_DIR = Path(__file__).resolve().parents[3] / "profiles" / "throughput"

#: published image counts the datasets do not enforce (their prepare checks other counts)
PUBLISHED_IMAGES = {
    # Liu et al., "Deep Relative Distance Learning", CVPR 2016: 110,178 training images; test sets of
    # 800 / 1,600 / 2,400 vehicles with 7,332 / 12,995 / 20,038 images
    "vehicleid": {"train": 110_178, "test_800": 7_332, "test_1600": 12_995, "test_2400": 20_038},
}


class ProfileError(ShortMessage, ValueError):
    """A throughput profile that is missing, malformed, or lacks what an estimate needs; the message names the file."""


def load_profile(gpu: str, profiles_dir: str | Path = PROFILES_DIR) -> dict:
    """The profile ``<profiles_dir>/<gpu>.yaml`` (``gpu``, ``measured``, ``amp_factor``, ``train`` and ``inference``:
    ``{backbone: {crop size: images/s}}``) with its ``path``; an unknown GPU kind names the folder and its kinds."""
    path = Path(profiles_dir) / f"{gpu}.yaml"
    if not path.is_file():
        kinds = sorted(p.stem for p in Path(profiles_dir).glob("*.yaml"))
        raise ProfileError(f"no throughput profile for GPU kind {gpu!r}: {path} does not exist; the profiles in "
                           f"{profiles_dir}: {', '.join(kinds) or '(none)'} (python -m rankrepro bench train on "
                           "that GPU writes one)")
    profile = load_yaml(path)
    if not isinstance(profile, dict):
        raise ProfileError(f"{path}: a throughput profile is a mapping (gpu, measured, amp_factor, train, inference), "
                           f"not {type(profile).__name__}")
    for key in ("measured", "amp_factor", "train", "inference"):
        if key not in profile:
            raise ProfileError(f"{path}: no {key!r}")
    _check_figures(path, "amp_factor", profile["amp_factor"])
    for phase in ("train", "inference"):
        if not isinstance(profile[phase], dict):
            raise ProfileError(f"{path}: {phase}: a mapping {{backbone: {{crop size: images/s}}}}, not "
                               f"{type(profile[phase]).__name__}")
        for backbone, table in profile[phase].items():
            _check_figures(path, f"{phase}.{backbone}", table, sizes=True)
    return {**profile, "path": str(path)}


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _check_figures(path: Path, key: str, table, sizes: bool = False) -> None:
    """``table`` (the profile's ``key``) a non-empty mapping of positive, finite numbers; with ``sizes``, keyed by
    positive whole crop sizes."""
    if not isinstance(table, dict) or not table:
        raise ProfileError(f"{path}: {key}: a non-empty mapping of positive numbers, not {table!r:.80}")
    for name, value in table.items():
        if sizes and not (isinstance(name, int) and not isinstance(name, bool) and name > 0):
            raise ProfileError(f"{path}: {key}: crop size {name!r:.40} is not a positive whole number of pixels")
        if not _positive(value):
            raise ProfileError(f"{path}: {key}.{name}: {value!r:.40} is not a positive number "
                               f"({'images/s' if sizes else 'a factor'})")


def images_per_s(profile: dict, phase: str, backbone: str, size: int, amp: str = "fp16") -> float:
    """Images/s of ``phase`` (``train`` or ``inference``) for ``backbone`` at crop ``size`` under ``amp``:
    the nearest listed size scaled by pixels, times the amp factor (module docstring)."""
    table = profile[phase].get(backbone)
    if not table:
        raise ProfileError(f"{profile['path']}: {phase}: no figure for backbone {backbone!r} (it lists "
                           f"{', '.join(profile[phase])}); add one, or run python -m rankrepro bench train")
    if amp not in profile["amp_factor"]:
        raise ProfileError(f"{profile['path']}: amp_factor: no factor for amp {amp!r}")
    listed = min((int(s) for s in table), key=lambda s: (abs(s - size), s))
    factor = profile["amp_factor"][amp] if phase == "train" else 1.0
    return float(table[listed]) * (listed / size) ** 2 * factor


def _declared(name: str) -> dict[str, int]:
    from rankrepro.data import datasets

    counts = datasets.load(name).expected_counts
    out = {split: c["images"] for split, c in counts.items() if "images" in c}
    return {**out, **PUBLISHED_IMAGES.get(name, {})}


def config_replica(name: str, datasets: dict[str, dict]) -> bool:
    """Whether the config takes dataset ``name`` from a generated replica (``datasets``: the plan's
    ``{name: {"facts", "config"}}``); a derived dataset has its base's source."""
    entry = datasets.get(name, {})
    base = entry.get("facts", {}).get("derived_from")
    return config_replica(base, datasets) if base else bool(entry.get("config", {}).get("replica", False))


def manifest_counts(meta: Path) -> tuple[dict[str, int], bool]:
    """``({split: images}, replica)`` of the prepared manifest whose ``meta.json`` is ``meta``; a
    :class:`~rankrepro.data.manifest.ManifestError` naming it when they cannot be read."""
    from rankrepro.data.manifest import ManifestError, read_meta

    record = read_meta(meta.parent)
    redo = "prepare the dataset again (delete its manifest folder)"
    try:
        counts = {split: c["images"] for split, c in record["counts"].items()}
    except (KeyError, TypeError, AttributeError):
        raise ManifestError(f"{meta}: no 'counts' of the form {{split: {{images: n}}}}; {redo}") from None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values()):
        raise ManifestError(f"{meta}: counts: image counts are whole numbers >= 0; {redo}")
    return counts, bool(record.get("replica", False))


def split_images(name: str, datasets: dict[str, dict], results: str | Path = "results") -> tuple[dict[str, int], str]:
    """``({split: images}, where from)`` of dataset ``name`` (``datasets``: the plan's ``{name: {"facts",
    "config"}}``, for ``derived_from``, ``source`` and the config's ``replica``); the order is the module
    docstring's."""
    facts = {n: d.get("facts", {}) for n, d in datasets.items()}
    meta, ignored = Path(results) / "manifests" / name / "meta.json", ""
    if meta.is_file():
        counts, replica = manifest_counts(meta)
        kind = "replica manifest" if replica else "manifest"
        if replica == config_replica(name, datasets):
            return counts, f"{kind} {meta}"
        ignored = f" (the {kind} {meta} is not the config's source)"
    counts, where = _declared(name), f"{name}'s declared counts"
    fact = facts.get(name, {})
    kin = [fact.get("derived_from")] + [n for n, f in facts.items() if f.get("source") and
                                        f.get("source") == fact.get("source") and n != name]
    for other in filter(None, kin):
        if "train" in counts:
            break
        more = _declared(other)
        if "train" in more:
            counts, where = {**more, **counts}, f"{other}'s declared counts (the same images)"
    return counts, where + ignored


def run_cost(run: dict, profile: dict, counts: dict[str, int], other_counts: tuple[dict[str, int], ...] = ()) -> dict:
    """One run's estimate (module docstring): images, images/s and hours; ``gpu_h`` None (with ``note``) when
    the training split's image count is unknown. ``other_counts``: the split counts of the run's
    ``eval.datasets``, whose images (every split but ``train``) its final evaluation embeds too."""
    images = run["images"]
    split = run.get("train_split", "train")
    network = throughput_network(run, catalog.load())
    out = {"dataset": run["dataset"], "backbone": network, "train_crop": images["train_crop"],
           "test_crop": images["test_crop"], "amp": run["amp"], "epochs": run["epochs"],
           "batch_size": run["sampler"]["batch_size"], "train_images": counts.get(split),
           "eval_images": sum(n for s, n in counts.items() if s != split),
           "other_eval_images": sum(n for c in other_counts for s, n in c.items() if s != "train"),
           "evaluations": 1 + len(curve_epochs(run["epochs"], run["eval"].get("every"))), "gpu_h": None, "note": ""}
    if out["train_images"] is None:
        out["note"] = f"no image count for {run['dataset']}'s {split} split"
        return out
    per_epoch = out["train_images"]
    if run.get("max_batches_per_epoch"):
        per_epoch = min(per_epoch, run["max_batches_per_epoch"] * out["batch_size"])
    out["train_ips"] = images_per_s(profile, "train", network, images["train_crop"], run["amp"])
    out["infer_ips"] = images_per_s(profile, "inference", network, images["test_crop"], run["amp"])
    out["train_h"] = per_epoch * run["epochs"] / out["train_ips"] / 3600
    out["eval_h"] = (out["eval_images"] * out["evaluations"] + out["other_eval_images"]) / out["infer_ips"] / 3600
    out["gpu_h"] = out["train_h"] + out["eval_h"]
    return out


def _sum(costs: dict[str, dict], ids) -> dict:
    ids = list(dict.fromkeys(ids))
    known = [costs[r]["gpu_h"] for r in ids if r in costs and costs[r]["gpu_h"] is not None]
    return {"gpu_h": sum(known), "runs": len(ids), "not_estimated": len(ids) - len(known)}


def plan_cost(plan: Plan | dict, gpu: str = "h100", results: str | Path = "results",
              profiles_dir: str | Path = PROFILES_DIR) -> dict:
    """Every run's, table's and paper's estimate on ``gpu`` and the total (each run once; module docstring)."""
    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    profile = load_profile(gpu, profiles_dir)
    counts = {name: split_images(name, plan.datasets, results)
              for name in {d for r in plan.runs.values() for d in (r["dataset"], *r["eval"].get("datasets", []))}}
    runs = {rid: {**run_cost(run, profile, counts[run["dataset"]][0],
                             tuple(counts[d][0] for d in run["eval"].get("datasets", []))),
                  "counts_from": counts[run["dataset"]][1]}
            for rid, run in plan.runs.items()}
    users: dict[str, int] = {}
    for table in plan.tables.values():
        for rid in set(table.runs):
            users[rid] = users.get(rid, 0) + 1
    variant_only = variant_runs(plan)
    tables = {key: {**_sum(runs, t.runs), "paper": t.paper, "title": t.title,
                    "shared": sum(users[r] > 1 for r in set(t.runs)),
                    "variants": _sum(runs, [r for r in t.runs if r in variant_only])} for key, t in plan.tables.items()}
    papers = {paper: {**_sum(runs, [r for k in plan.tables_of_paper(paper) for r in plan.runs_of(k)]),
                      "tables": plan.tables_of_paper(paper)} for paper in plan.papers()}
    return {"gpu": profile.get("gpu", gpu), "profile": profile["path"], "measured": bool(profile["measured"]),
            "runs": runs, "tables": tables, "papers": papers,
            "total": {**_sum(runs, plan.runs), "variants": _sum(runs, [r for r in plan.runs if r in variant_only])}}


def variant_runs(plan: Plan) -> set[str]:
    """The runs only variant rows need (:mod:`rankrepro.plan.variants`): those of variant cells that no other cell
    of any table needs."""
    variant, main = set(), set()
    for table in plan.tables.values():
        mine = {r for cell in table.cells if cell.get("variant") for r in cell.get("run_ids", ())}
        others = {r for cell in table.cells if not cell.get("variant") for r in cell.get("run_ids", ())}
        variant |= mine - others
        main |= set(table.runs) - (mine - others)
    return variant - main


def _variants_text(entry: dict) -> str:
    """`` of which variant rows: X GPU-h, N runs`` where variant rows need runs of their own, "" otherwise."""
    v = entry.get("variants")
    return (f"; variant rows: {_h(v['gpu_h'])} GPU-h, {v['runs']} run{'s' * (v['runs'] > 1)}"
            if v and v["runs"] else "")


def _h(value: float) -> str:
    return f"{value:,.1f}" if value >= 0.1 else ("0" if value == 0 else "<0.1")


def to_text(cost: dict, per_run: bool = False) -> str:
    """The estimate as text: the total, then per paper its tables (and with ``per_run`` every run)."""
    t = cost["total"]
    lines = [f"GPU-hour estimate on {cost['gpu']} ({cost['profile']}, "
             f"{'measured' if cost['measured'] else 'NOT MEASURED: assumed figures'})",
             f"total: {_h(t['gpu_h'])} GPU-h for {t['runs']} runs, each counted once"
             + (f" (+ {t['not_estimated']} runs not estimated: no image count)" if t["not_estimated"] else "")
             + _variants_text(t),
             "a table counts every run it needs (a shared run in each table); a paper and the total count it once", ""]
    for paper, p in cost["papers"].items():
        lines.append(f"{paper}: {_h(p['gpu_h'])} GPU-h ({p['runs']} runs"
                     + (f", {p['not_estimated']} not estimated" if p["not_estimated"] else "") + ")")
        for key in p["tables"]:
            e = cost["tables"][key]
            extra = [f"{e['shared']} shared"] if e["shared"] else []
            extra += [f"{e['not_estimated']} not estimated"] if e["not_estimated"] else []
            extra += [_variants_text(e)[2:]] if _variants_text(e) else []
            figure = _h(e["gpu_h"]) if e["runs"] > e["not_estimated"] else "-"
            lines.append(f"  {key.split('/', 1)[1]:<12} {figure:>8} GPU-h  {e['runs']:>3} runs"
                         + (f" ({', '.join(extra)})" if extra else "") + f"  {e['title']}")
    if per_run:
        lines += ["", "run | backbone | crop | amp | epochs | train images | eval images | GPU-h | counts from"]
        for rid, r in cost["runs"].items():
            h = _h(r["gpu_h"]) if r["gpu_h"] is not None else f"- ({r['note']})"
            lines.append(f"{rid} | {r['backbone']} | {r['train_crop']} | {r['amp']} | {r['epochs']} | "
                         f"{r['train_images']} | {r['eval_images']} | {h} | {r['counts_from']}")
    return "\n".join(lines) + "\n"
