"""GPU-hours of a plan before it runs: every run, every table, every paper (``python -m rankrepro cost``).

A run's estimate is training plus evaluation on one GPU of a kind (``--gpu``, default ``h100``)::

    train h = images per epoch x epochs / train images/s(backbone, train_crop, amp) / 3600
    eval h  = evaluation images x evaluations / inference images/s(backbone, test_crop, amp) / 3600

- images per epoch (:func:`rankrepro.plan.epochs.epoch_images`): what the run's sampler draws in one epoch. For
  ``m_per_class``, whole batches of distinct classes after the per-class cap ``reduce_per_class`` (the formula:
  :mod:`rankrepro.plan.epochs`), from the images of each class (:func:`train_class_sizes`): those of the prepared
  manifest's training split when it counts (below); else, for a capped sampler, the declared images spread evenly
  over the declared classes (the most images a cap lets through: an upper bound; H-GLDv2: 970,981 images over
  46,593 landmarks, each giving 8, so 1,456 batches of 256, 372,736 images, not 970,981); else, like every other
  sampler, the training split's images (an upper bound: the sampler drops a class's left-over images). Then
  ``min(that, max_batches_per_epoch x batch size)`` when epochs are cut short. Warm-up epochs count as full ones
  (the frozen backbone makes them cheaper: an upper bound);
- a fresh run's initialisation passes are not counted: the PCA of a projection (at most ``pca_images``) and the
  imprinting of a face base classifier (at most ``imprint_per_class`` images of each class: 276k of VGGFace2's
  3.1M, under a tenth of the epoch's time at inference speed);
- evaluation images: the images of every split but the training split; evaluations: one (the run's
  ``evaluate`` job) plus, with ``eval.every``, one per epoch of its test curve
  (:func:`rankrepro.record.selection.curve_epochs`);
- image counts, in order: the prepared manifest (``<results>/manifests/<dataset>/meta.json``) when it was prepared
  from the source the config names -- a generated replica for ``replica: true`` (a derived dataset: its base's
  setting), the real files otherwise: the demo's replica manifests never stand in for the real datasets of
  ``config.yaml`` in the same results folder --, the dataset's declared ``expected_counts`` and
  :data:`PUBLISHED_COUNTS` (then :data:`UNVERIFIED_COUNTS`: DyML's training images, figures no copy of their
  source here confirms; the estimate names the runs resting on them, and without a test count their evaluation is
  not counted), then those of the dataset it derives from or shares its source with (merge3 relabels SOP's
  images); a run whose training count is still unknown is listed as not estimated;
- images/s: the GPU's throughput profile ``profiles/throughput/<gpu>.yaml`` (:func:`load_profile`: measured by
  ``python -m rankrepro bench train`` on that GPU, or assumed figures marked ``measured: false``), or a profile file
  given instead (``cost --profile``, config ``cluster.profile``; :func:`load_profile_file`: e.g. the one
  ``python -m rankrepro pilot`` measures, ``results/pilot/throughput.yaml``), one table per
  phase and precision (:data:`PRECISION_SUFFIX`): ``train`` and ``inference`` for mixed precision (``amp: fp16``
  or ``bf16``), ``train_fp32`` and ``inference_fp32`` for ``amp: none`` (float32; TF32 convolutions, cuDNN's
  default), evaluation running under the run's autocast too; at the nearest listed crop size, scaled by pixels:
  ``ips(r) = ips(r0) x (r0 / r)^2``. A backbone missing from the table is an error naming the file (no guessed
  fallback). A profile's figures are positive numbers by positive crop sizes, checked when it is read
  (:func:`load_profile`, naming the file and key).

A table's figure sums its runs; a run shared by several tables counts in each table's figure, but once in its
paper's and once in the total. Variant rows (config ``variants``, :mod:`rankrepro.plan.variants`) are in these
figures, and each table and the total also give apart the GPU-hours of the runs only variant rows need
(:func:`variant_runs`). A leaderboard (config ``benchmarks``, :mod:`rankrepro.tables.kinds.leaderboard`) is
also given per seed count, one and three seeds (:func:`leaderboard_cost`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rankrepro import catalog
from rankrepro.record.selection import curve_epochs
from rankrepro.record.tasks import throughput_network
from rankrepro.io import load_yaml
from rankrepro.messages import ShortMessage
from rankrepro.plan.epochs import epoch_images
from rankrepro.plan.model import Plan
from rankrepro.tables.kinds import spec_kind

__all__ = ["PROFILES_DIR", "PRECISION_SUFFIX", "ProfileError", "load_profile", "images_per_s", "split_images",
           "train_class_sizes", "ClassSizes", "run_cost", "plan_cost", "to_text", "load_profile_file",
           "config_manifest"]

PROFILES_DIR = Path(__file__).resolve().parents[3] / "profiles" / "throughput"

#: published counts the datasets do not enforce (their prepare checks other counts), in the form of a dataset's
#: ``expected_counts``: ``{split: {"images": n, <finest level>: classes}}``
PUBLISHED_COUNTS = {
    # Liu et al., "Deep Relative Distance Learning", CVPR 2016: 110,178 training images; test sets of
    # 800 / 1,600 / 2,400 vehicles with 7,332 / 12,995 / 20,038 images
    "vehicleid": {"train": {"images": 110_178}, "test_800": {"images": 7_332}, "test_1600": {"images": 12_995},
                  "test_2400": {"images": 20_038}},
    # SupRank config/dataset/gldv2_hier.yaml (num_samples_train, num_classes_train_level0): 970,981 training
    # images of 46,593 landmarks, not enforced at prepare (rankrepro.data.datasets.gldv2: from SupRank's internal
    # label file, not shown to follow from the released one)
    "gldv2_hier": {"train": {"images": 970_981, "landmark": 46_593}},
}

#: training-image counts that no copy of their source on this project's machines confirms, in the form of
#: :data:`PUBLISHED_COUNTS` and used like them until the dataset is prepared (its manifest's counts replace them); the
#: estimate marks the runs that rest on them (:data:`UNVERIFIED`). DyML (Sun et al., "Dynamic Metric Learning", CVPR
#: 2021, arXiv 2103.11781, Table 1, rounded to 0.1K there): DyML-Vehicle 343.1K, -Animal 407.8K, -Product 747.5K
#: training images [unverified: recalled, not read from the paper; SupRank's config/dataset/dyml_*.yaml leave
#: num_samples_train empty]. No test count is stated anywhere we can read: their evaluation is not counted.
UNVERIFIED_COUNTS = {
    "dyml_vehicle": {"train": {"images": 343_100}},
    "dyml_animal": {"train": {"images": 407_800}},
    "dyml_product": {"train": {"images": 747_500}},
}
#: the words that mark, in a run's ``counts_from``, counts from :data:`UNVERIFIED_COUNTS`
UNVERIFIED = "unverified figures"

#: the profile table of each run ``amp``, after the phase's name: mixed precision ``train`` / ``inference``,
#: float32 ``train_fp32`` / ``inference_fp32``
PRECISION_SUFFIX = {"fp16": "", "bf16": "", "none": "_fp32"}
#: a profile's tables of images/s, each ``{backbone: {crop size: images/s}}``
PROFILE_TABLES = ("train", "train_fp32", "inference", "inference_fp32")


class ProfileError(ShortMessage, ValueError):
    """A throughput profile that is missing, malformed, or lacks what an estimate needs; the message names the file.
    ``brief``: the same in one short line, the file relative to the project (the results index's header)."""

    def __init__(self, message: str, brief: str | None = None):
        super().__init__(message)
        self.brief = brief or message


def shown_path(path: str | Path) -> str:
    """``path`` relative to the project folder when inside it, else as given: for short messages."""
    try:
        return str(Path(path).resolve().relative_to(PROFILES_DIR.parents[1]))
    except ValueError:
        return str(path)


def load_profile(gpu: str, profiles_dir: str | Path = PROFILES_DIR) -> dict:
    """The profile ``<profiles_dir>/<gpu>.yaml`` (``gpu``, ``measured`` and the :data:`PROFILE_TABLES`, each
    ``{backbone: {crop size: images/s}}``) with its ``path``; an unknown GPU kind names the folder and its kinds."""
    path = Path(profiles_dir) / f"{gpu}.yaml"
    if not path.is_file():
        kinds = sorted(p.stem for p in Path(profiles_dir).glob("*.yaml"))
        raise ProfileError(f"no throughput profile for GPU kind {gpu!r}: {path} does not exist; the profiles in "
                           f"{profiles_dir}: {', '.join(kinds) or '(none)'} (python -m rankrepro bench train on "
                           "that GPU writes one)")
    return load_profile_file(path)


def load_profile_file(path: str | Path) -> dict:
    """The throughput profile in file ``path`` (:func:`load_profile`'s form: ``python -m rankrepro pilot`` writes
    one, ``results/pilot/throughput.yaml``), checked, with its ``path``; a missing file names it."""
    path = Path(path)
    if not path.is_file():
        raise ProfileError(f"throughput profile {path} does not exist (python -m rankrepro pilot writes "
                           "results/pilot/throughput.yaml)", brief=f"no throughput profile {shown_path(path)}")
    profile = load_yaml(path)
    if not isinstance(profile, dict):
        raise ProfileError(f"{path}: a throughput profile is a mapping (gpu, measured, {', '.join(PROFILE_TABLES)}), "
                           f"not {type(profile).__name__}")
    for key in ("measured", *PROFILE_TABLES):
        if key not in profile:
            old = (" (its amp_factor is no longer read: the float32 figures are a table of their own; python -m "
                   "rankrepro bench train writes both)" if "amp_factor" in profile else "")
            raise ProfileError(f"{path}: no {key!r}{old}")
    for phase in PROFILE_TABLES:
        if not isinstance(profile[phase], dict):
            raise ProfileError(f"{path}: {phase}: a mapping {{backbone: {{crop size: images/s}}}}, not "
                               f"{type(profile[phase]).__name__}")
        for backbone, table in profile[phase].items():
            _check_figures(path, f"{phase}.{backbone}", table)
    return {**profile, "path": str(path)}


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _check_figures(path: Path, key: str, table) -> None:
    """``table`` (the profile's ``key``) a non-empty mapping of positive, finite images/s keyed by positive whole
    crop sizes."""
    if not isinstance(table, dict) or not table:
        raise ProfileError(f"{path}: {key}: a non-empty mapping of positive numbers, not {table!r:.80}")
    for name, value in table.items():
        if not (isinstance(name, int) and not isinstance(name, bool) and name > 0):
            raise ProfileError(f"{path}: {key}: crop size {name!r:.40} is not a positive whole number of pixels")
        if not _positive(value):
            raise ProfileError(f"{path}: {key}.{name}: {value!r:.40} is not a positive number (images/s)")


def images_per_s(profile: dict, phase: str, backbone: str, size: int, amp: str = "fp16") -> float:
    """Images/s of ``phase`` (``train`` or ``inference``) for ``backbone`` at crop ``size`` under ``amp``: the
    table of that precision (:data:`PRECISION_SUFFIX`), its nearest listed size scaled by pixels (module
    docstring)."""
    if amp not in PRECISION_SUFFIX:
        raise ProfileError(f"amp {amp!r} has no throughput table (known: {', '.join(PRECISION_SUFFIX)})")
    key = phase + PRECISION_SUFFIX[amp]
    table = profile[key].get(backbone)
    if not table:
        raise ProfileError(f"{profile['path']}: {key}: no figure for backbone {backbone!r} (it lists "
                           f"{', '.join(profile[key])}); add one, or run python -m rankrepro bench train",
                           brief=f"no {key} throughput for backbone {backbone!r} in {shown_path(profile['path'])}")
    listed = min((int(s) for s in table), key=lambda s: (abs(s - size), s))
    return float(table[listed]) * (listed / size) ** 2


def declared_counts(name: str) -> dict[str, dict[str, int]]:
    """Dataset ``name``'s ``expected_counts`` with :data:`PUBLISHED_COUNTS`' merged in, per split."""
    from rankrepro.data import datasets

    counts = {split: dict(c) for split, c in datasets.load(name).expected_counts.items()}
    for published in (PUBLISHED_COUNTS, UNVERIFIED_COUNTS):
        for split, more in published.get(name, {}).items():
            counts[split] = {**counts.get(split, {}), **more}
    return counts


def _declared(name: str) -> dict[str, int]:
    return {split: c["images"] for split, c in declared_counts(name).items() if "images" in c}


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


def config_manifest(name: str, datasets: dict[str, dict], results: str | Path):
    """``(meta.json, {split: images}, where)`` of dataset ``name``'s prepared manifest when it was prepared from the
    config's source; ``(meta.json, None, why it is ignored)`` when it was not; ``(meta.json, None, "")`` without one."""
    meta = Path(results) / "manifests" / name / "meta.json"
    if not meta.is_file():
        return meta, None, ""
    counts, replica = manifest_counts(meta)
    kind = "replica manifest" if replica else "manifest"
    if replica == config_replica(name, datasets):
        return meta, counts, f"{kind} {meta}"
    return meta, None, f"the {kind} {meta} is not the config's source"


def split_images(name: str, datasets: dict[str, dict], results: str | Path = "results") -> tuple[dict[str, int], str]:
    """``({split: images}, where from)`` of dataset ``name`` (``datasets``: the plan's ``{name: {"facts",
    "config"}}``, for ``derived_from``, ``source`` and the config's ``replica``); the order is the module
    docstring's."""
    facts = {n: d.get("facts", {}) for n, d in datasets.items()}
    _, counts, note = config_manifest(name, datasets, results)
    if counts is not None:
        return counts, note
    ignored = f" ({note})" if note else ""
    counts, where = _declared(name), f"{name}'s declared counts"
    if name in UNVERIFIED_COUNTS:
        where += f" ({UNVERIFIED}: rankrepro.plan.cost.UNVERIFIED_COUNTS)"
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


def train_class_sizes(run: dict, datasets: dict[str, dict], results: str | Path = "results") -> list[int] | None:
    """The images of each class of ``run``'s training split that :func:`~rankrepro.plan.epochs.epoch_images`
    counts with (module
    docstring), for an ``m_per_class`` sampler: the prepared manifest's (when it counts, as in
    :func:`split_images`), else with a ``reduce_per_class`` cap the declared images spread evenly over the
    declared classes of the finest level; None otherwise. A manifest that cannot be read is a
    :class:`~rankrepro.data.manifest.ManifestError` naming it."""
    sampler = run["sampler"]
    if sampler.get("name") != "m_per_class":
        return None
    name, split = run["dataset"], run.get("train_split", "train")
    meta, counts, _ = config_manifest(name, datasets, results)
    if counts is not None:
        return _manifest_class_sizes(meta.parent, split)
    if not sampler.get("reduce_per_class"):
        return None
    from rankrepro.data import datasets as registry

    declared = declared_counts(name).get(split, {})
    classes, images = declared.get(registry.load(name).levels[0]), declared.get("images")
    if not classes or images is None:
        return None
    return [images // classes + (i < images % classes) for i in range(classes)]


class ClassSizes:
    """:func:`train_class_sizes` of a plan's runs (``datasets``: the plan's), each manifest read once."""

    def __init__(self, datasets: dict[str, dict], results: str | Path = "results"):
        self.datasets, self.results = datasets, results
        self._cache: dict[tuple, list[int] | None] = {}

    def __call__(self, run: dict) -> list[int] | None:
        sampler = run["sampler"]
        key = (run["dataset"], run.get("train_split", "train"), sampler.get("name"),
               bool(sampler.get("reduce_per_class")))
        if key not in self._cache:
            self._cache[key] = train_class_sizes(run, self.datasets, self.results)
        return self._cache[key]


def _manifest_class_sizes(directory: Path, split: str) -> list[int]:
    """Images per finest class (``label`` >= 0) of ``split`` in the manifest ``directory``'s ``manifest.csv``."""
    import pandas as pd

    from rankrepro.data.manifest import MANIFEST_CSV, ManifestError

    path = directory / MANIFEST_CSV
    try:
        table = pd.read_csv(path, usecols=["split", "label"], dtype={"split": str})
        labels = pd.to_numeric(table.loc[table["split"] == split, "label"], errors="raise")
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise ManifestError(f"{path}: cannot read its split and label columns ({str(err)[:200]}); prepare the "
                            "dataset again (delete its manifest folder)") from None
    return [int(n) for n in labels[labels >= 0].value_counts().sort_index()]


def run_cost(run: dict, profile: dict, counts: dict[str, int], other_counts: tuple[dict[str, int], ...] = (),
             class_sizes: Sequence[int] | None = None) -> dict:
    """One run's estimate (module docstring): images, images/s and hours; ``gpu_h`` None (with ``note``) when
    the training split's image count is unknown. ``other_counts``: the split counts of the run's
    ``eval.datasets``, whose images (every split but ``train``) its final evaluation embeds too;
    ``class_sizes``: :func:`train_class_sizes`'s (:func:`~rankrepro.plan.epochs.epoch_images`)."""
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
    if not out["eval_images"]:
        out["note"] = f"evaluation not counted: no image count for {run['dataset']}'s test splits"
    out["epoch_images"] = per_epoch = epoch_images(run, out["train_images"], class_sizes)
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
              profiles_dir: str | Path = PROFILES_DIR, profile_file: str | Path | None = None) -> dict:
    """Every run's, table's and paper's estimate on ``gpu`` and the total (each run once; module docstring);
    ``profile_file``: a profile file priced with instead of ``gpu``'s (:func:`load_profile_file`)."""
    plan = plan if isinstance(plan, Plan) else Plan.from_json(plan)
    profile = load_profile_file(profile_file) if profile_file else load_profile(gpu, profiles_dir)
    counts = {name: split_images(name, plan.datasets, results)
              for name in {d for r in plan.runs.values() for d in (r["dataset"], *r["eval"].get("datasets", []))}}
    sizes = ClassSizes(plan.datasets, results)
    runs = {rid: {**run_cost(run, profile, counts[run["dataset"]][0],
                             tuple(counts[d][0] for d in run["eval"].get("datasets", [])), sizes(run)),
                  "counts_from": counts[run["dataset"]][1], "unverified": UNVERIFIED in counts[run["dataset"]][1]}
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
            "runs": runs, "tables": tables, "papers": papers, "leaderboards": leaderboard_cost(plan, tables),
            "total": {**_sum(runs, plan.runs), "variants": _sum(runs, [r for r in plan.runs if r in variant_only])}}


#: the seed counts a leaderboard's GPU-hours are given for (one seed: a first look; three: the default)
LEADERBOARD_SEEDS = (1, 3)


def leaderboard_cost(plan: Plan, tables: dict[str, dict]) -> dict[str, dict]:
    """Per leaderboard table (a kind that ``costs_per_seed``: :mod:`rankrepro.tables.kinds.leaderboard`; ``tables``:
    :func:`plan_cost`'s entries):
    its planned ``seeds`` count, ``per_seed`` (its GPU-hours over that count: one run per row and seed, the seed
    changing no image count) and ``by_seeds`` ({n: GPU-hours with n seeds} for :data:`LEADERBOARD_SEEDS`)."""
    out = {}
    for key, table in plan.tables.items():
        if spec_kind(table.spec).costs_per_seed:
            seeds = len(table.spec["seeds"])
            per_seed = tables[key]["gpu_h"] / seeds
            out[key] = {"seeds": seeds, "per_seed": per_seed, "rows": len(table.spec["rows"]),
                        "not_estimated": tables[key]["not_estimated"],
                        "by_seeds": {n: n * per_seed for n in LEADERBOARD_SEEDS}}
    return out


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


def _unverified_text(runs: dict[str, dict]) -> list[str]:
    """A line naming the datasets whose estimates rest on :data:`UNVERIFIED_COUNTS`, if any run's does."""
    names = sorted({r["dataset"] for r in runs.values() if r.get("unverified")})
    if not names:
        return []
    runs = [r for r in runs.values() if r.get("unverified")]
    unseen = sum(not r["eval_images"] for r in runs)
    return [f"{len(runs)} runs rest on unverified image counts ({', '.join(names)}: "
            "rankrepro.plan.cost.UNVERIFIED_COUNTS) until their datasets are prepared"
            + (f"; {unseen} of them without their evaluation (no test image count)" if unseen else "")]


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
             *_unverified_text(cost["runs"]),
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
    if cost.get("leaderboards"):
        lines += ["", "leaderboards (GPU-h by seeds per dataset; config seeds.<table> sets a table's seeds):"]
        for key, e in cost["leaderboards"].items():
            lines.append(f"  {key:<16} " + "  ".join(f"{n} seed{'s' * (n > 1)}: {_h(h):>8} GPU-h"
                                                     for n, h in e["by_seeds"].items())
                         + f"  ({e['rows']} losses, planned with {e['seeds']}"
                         + (f"; {e['not_estimated']} runs not estimated" if e["not_estimated"] else "") + ")")
    if per_run:
        lines += ["", "run | backbone | crop | amp | epochs | train images | images per epoch | eval images | GPU-h | "
                  "counts from"]
        for rid, r in cost["runs"].items():
            h = _h(r["gpu_h"]) if r["gpu_h"] is not None else "-"
            h += f" ({r['note']})" if r["note"] else ""
            lines.append(f"{rid} | {r['backbone']} | {r['train_crop']} | {r['amp']} | {r['epochs']} | "
                         f"{r['train_images']} | {r.get('epoch_images', '-')} | {r['eval_images']} | {h} | "
                         f"{r['counts_from']}")
    return "\n".join(lines) + "\n"
