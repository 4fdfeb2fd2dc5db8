"""Merged-class robustness datasets of the PNP paper (Li et al., AAAI 2022, Tables 6-7).

The paper's whole specification: "we use the train set of SOP and VehicleID as benchmark
datasets and merge every three categories to form one new class with multi-centers (at
least three centers per class). As for evaluation, we still use original test set to
evaluate the model." It states no order, no seed and no rule for a remainder, so this
module fixes one deterministic, documented rule:

- **Which classes.** The distinct ``label`` s of the base's ``train`` rows, sorted by
  integer id (ascending). The result depends on the set of ids only, never on row order.
- **Groups.** Consecutive triples of that sorted list: ``[c1, c2, c3], [c4, c5, c6], ...``.
  A remainder of one or two classes joins the *last* triple (a group of 4 or 5), so every
  merged class has at least three original classes ("at least three centers per class").
  Fewer than three train classes is an error.
- **Merged id.** The smallest (first) original id of the group. Merged ids are therefore
  distinct, and they cannot collide with any test label: they are train ids, and the base
  already has train and test ids disjoint (its own ``disjoint`` check; ours repeats it).
- **Coarser levels.** Each ``level_k`` of a merged class is that of its first member
  (smallest id) that knows the level (value >= 0, the manifests' "unknown" being negative,
  e.g. a VehicleID vehicle without a model label); if no member knows it, the first
  member's (unknown) value. So every merged class has exactly one parent per level even
  when a group spans two super-classes / models. Each original class must itself have one
  value per level (the base's promise; checked).
- **Everything else is the base's**: every non-train row (``test`` for SOP; ``test_800``,
  ``test_1600``, ``test_2400`` for VehicleID) is kept untouched (same rows, labels, order);
  train rows keep their order and paths, only their labels change. Levels, protocol and
  image root are the base manifest's; its dataset-specific ``meta.json`` entries (e.g.
  SOP's ``super_class_names``) are carried over (coarser ids are the base's, so they stay
  valid). ``meta.json`` adds ``merge_group_size`` (3) and ``merged_classes``:
  ``{merged id: [original ids]}`` (JSON keys are strings), the auditable mapping.

What the order implies for SOP: its class ids are contiguous per super-class (all
bicycles, then all cabinets, ...), so a triple holds three products *of the same kind*
except at most one triple per super-class boundary (at most 11 of ~3,772 merged classes
span two kinds). The centres of a merged class are thus semantically close (same kind),
not random products: a milder perturbation than a random merge would be. The paper says
nothing more, so the simple rule stays. VehicleID's vehicle ids carry no such grouping
that we rely on; a triple there is whatever three consecutive vehicle ids are.

Prepare with the base manifest's folder as source::

    python -m rankrepro prepare sop_merge3 --source results/manifests/sop --data-root D --out O
"""

from __future__ import annotations

import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset
from rankrepro.data.manifest import Manifest, level_columns

GROUP_SIZE = 3
MERGED_SPLIT = "train"
# meta.json entries every manifest has (written by Dataset.prepare / write_manifest): not carried over
STANDARD_META = {"dataset", "root", "levels", "protocol", "replica", "counts", "derived_from"}


def merge_groups(class_ids, size: int = GROUP_SIZE) -> list[list[int]]:
    """The sorted distinct ``class_ids`` cut into consecutive groups of ``size``; a remainder of
    fewer than ``size`` ids joins the last group. ValueError when there are fewer than ``size`` ids."""
    ids = sorted({int(i) for i in class_ids})
    if len(ids) < size:
        raise ValueError(f"cannot merge {len(ids)} classes into classes of at least {size}")
    full = len(ids) - len(ids) % size
    groups = [ids[i:i + size] for i in range(0, full, size)]
    groups[-1].extend(ids[full:])
    return groups


class MergedEvery3(Dataset):
    """The base's train classes merged three by three (see the module docstring).

    A subclass sets ``derived_from``, ``title``, ``disjoint`` and the literal
    ``base_levels`` / ``base_protocol``: the fallback facts while the base dataset is not
    registered (the catalog must list them anyway). When the base is registered its own
    ``levels`` / ``protocol`` are used (looked up lazily, so the two cannot drift); at
    prepare time the base manifest's ``meta.json`` must agree with them.
    """

    base_levels: list[str] = ["class"]
    base_protocol: str = "same-set"
    expected_counts: dict[str, dict[str, int]] = {}  # the counts follow from the base's

    def __init__(self) -> None:
        self._merge_meta: dict | None = None

    # -- facts: the base's, lazily ---------------------------------------------------------------

    def _base_dataset(self) -> Dataset | None:
        from rankrepro.data import datasets

        return datasets.load(self.derived_from) if self.derived_from in datasets.DATASETS else None

    @property
    def levels(self) -> list[str]:  # type: ignore[override]
        """The base's level names (the registered base dataset's, else :attr:`base_levels`)."""
        base = self._base_dataset()
        return list(base.levels if base is not None else self.base_levels)

    @property
    def protocol(self) -> str:  # type: ignore[override]
        """The base's protocol (the registered base dataset's, else :attr:`base_protocol`)."""
        base = self._base_dataset()
        return base.protocol if base is not None else self.base_protocol

    # -- prepare ---------------------------------------------------------------------------------

    def derive(self, base: Manifest) -> pd.DataFrame:
        """The base's rows with the train labels merged (see the module docstring)."""
        self._merge_meta = None
        where = base.directory or "the base manifest"
        if base.meta.get("dataset") != self.derived_from:
            raise ValueError(f"{self.title}: {where} is a manifest of {base.meta.get('dataset')!r}, "
                             f"expected {self.derived_from!r}")
        for key, ours in (("levels", self.levels), ("protocol", self.protocol)):
            if base.meta.get(key) != ours:
                raise ValueError(f"{self.title}: {where} has {key} {base.meta.get(key)!r}, "
                                 f"expected the base's {ours!r}")
        columns = level_columns(len(self.levels))
        table = base.table.copy()
        train = (table["split"] == MERGED_SPLIT).to_numpy()
        if not train.any():
            raise ValueError(f"{self.title}: {where} has no {MERGED_SPLIT!r} rows to merge")
        rows = table.loc[train, columns]
        parents = {}
        for column in columns[1:]:
            values = rows.groupby("label")[column].unique()
            several = {int(k): sorted(int(x) for x in v) for k, v in values.items() if len(v) != 1}
            if several:
                raise ValueError(f"{self.title}: train classes of {where} with several {column} values, "
                                 f"e.g. {dict(list(several.items())[:5])}")
            parents[column] = {int(k): int(v[0]) for k, v in values.items()}
        groups = merge_groups(rows["label"])
        new_label, new_parent = {}, {column: {} for column in columns[1:]}
        for group in groups:
            for original in group:
                new_label[original] = group[0]
            for column in columns[1:]:
                known = [parents[column][c] for c in group if parents[column][c] >= 0]
                value = known[0] if known else parents[column][group[0]]
                for original in group:
                    new_parent[column][original] = value
        old = table.loc[train, "label"].astype("int64")
        table.loc[train, "label"] = old.map(new_label).astype("int64")
        for column in columns[1:]:
            table.loc[train, column] = old.map(new_parent[column]).astype("int64")
        table[columns] = table[columns].astype("int64")
        carried = {k: v for k, v in base.meta.items() if k not in STANDARD_META}
        self._merge_meta = {**carried, "merge_group_size": GROUP_SIZE,
                            "merged_classes": {str(group[0]): group for group in groups}}
        return table

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """The base's own ``meta.json`` entries, ``merge_group_size`` and ``merged_classes``
        ({merged id: [original ids]}), as the last :meth:`derive` found them."""
        if self._merge_meta is None:
            raise RuntimeError(f"{self.title}: extra_meta needs derive() first")
        return dict(self._merge_meta)


@DATASETS.register("sop_merge3")
class SOPMerge3(MergedEvery3):
    """SOP with every three train products merged into one class (PNP Table 6)."""

    title = "SOP merge3"
    derived_from = "sop"
    base_levels = ["class", "super_class"]  # fallback only: sop.SOP's, used when registered
    base_protocol = "same-set"
    disjoint = (("train", "test"),)


@DATASETS.register("vehicleid_merge3")
class VehicleIDMerge3(MergedEvery3):
    """VehicleID with every three train vehicles merged into one class (PNP Table 7)."""

    title = "VehicleID merge3"
    derived_from = "vehicleid"
    # fallback only (vehicleid.py's registered attributes win): the levels and protocol VehicleID states
    base_levels = ["vehicle", "model"]
    base_protocol = "vehicleid"
    disjoint = (("train", "test_800"), ("train", "test_1600"), ("train", "test_2400"))
