"""The numbers the reproduced papers report for a loss: what a leaderboard shows beside ours (issue 36).

Every table spec of kind ``runs`` is a transcription of one paper's table. A cell of it is a number the paper
reports for a loss on a dataset and a metric when its row names a registered loss (``loss.name``) and the
paper prints a number there:

- the loss: the row's ``loss.name`` (a row with its own hyper-parameters or run settings counts too);
- the dataset: the column's setup's, after the column's ``run`` block, the row's ``run`` block and its
  ``column_runs`` for that column (the layers its runs are made of; a column whose setup is only planned has
  no known dataset and counts for nothing);
- the metric and its unit: the column's ``metric`` and ``unit`` (default percent).

A row quoted from other work (``cited: true``) that names a loss counts: its number is the quote the paper prints,
and its source says so. Variant rows (ablations, :mod:`rankrepro.plan.variants`) never count: a variant changes the
loss or its training, it is not what the paper reports for the loss.

:func:`reported_numbers` indexes the cells of every spec under a specs folder by ``(loss, dataset, metric, unit)``;
:func:`choose` picks the one a leaderboard shows, by this rule:

1. the loss's own paper first: the paper the loss declares (``paper`` in its catalog entry,
   :mod:`rankrepro.losses.registry`: e.g. Smooth-AP's numbers on SOP come from Smooth-AP's Table 2);
2. then a row whose loss block sets no parameter away from the loss's registered defaults and which has no ``run``
   block (the loss as defined, in the table's own setup) before one with its own parameters or settings (e.g. a
   memory: XBM is not the contrastive loss);
3. then the papers, the most recently published first (:data:`NEWEST_FIRST`; a paper folder not in it after them,
   by name) -- the newest paper (SupRank) is also the one whose ResNet-50 recipes the leaderboards use;
4. then tables by name, rows and columns in spec order.

The number is the paper's, under the paper's recipe (its backbone, embedding size, batch, epochs and model
selection), not the leaderboard's: it places ours, it is no target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rankrepro.plan.merge import merge_layers
from rankrepro.plan.setups import setup_layers
from rankrepro.plan.specs import load_spec, spec_names
from rankrepro.tables.kinds import spec_kind
from rankrepro.tables.kinds.runs import cell_layers

__all__ = ["NEWEST_FIRST", "PERCENT", "Reported", "choose", "reported_for", "reported_numbers"]

#: the reproduced papers (their folders of table specs), the most recently published first: SupRank (TPAMI,
#: manuscript received May 2023), PNP (AAAI 2022), Smooth-AP (ECCV, August 2020), RaMBO (CVPR, June 2020), "Sampling
#: Wisely" (ICCV 2019)
NEWEST_FIRST = ("suprank", "pnp", "smooth_ap", "rambo", "topk")
#: the unit of a column that names none
PERCENT = "percent"


@dataclass(frozen=True)
class Reported:
    """One number a paper reports for a loss: ``value`` in ``paper``'s ``table``, row ``method`` (its ``position``
    in the spec), column ``column`` (``<group> <header>``); ``cited`` when the paper quotes it from other work;
    ``as_defined`` when the row's loss block sets no parameter away from the loss's registered defaults and the row
    has no ``run`` block."""

    value: float
    paper: str
    table: str
    method: str
    column: str
    position: tuple[int, int]
    cited: bool
    as_defined: bool

    @property
    def source(self) -> str:
        """Where the number is printed: ``<paper>/<table>, row "<method>", column "<column>"`` (and "cited from
        other work" for a quote)."""
        text = f'{self.paper}/{self.table}, row "{self.method}", column "{self.column}"'
        return text + (" (cited from other work)" if self.cited else "")


def _dataset(spec: dict, r: int, c: int, setups: dict) -> str | None:
    """The dataset of cell (``r``, ``c``)'s runs (module docstring); None when its setup is only planned."""
    column = spec["columns"][c]
    if column["setup"] not in setups:
        return None
    layers = [*setup_layers(column["setup"], setups),
              *cell_layers(spec["_file"], f"rows[{r}]", spec["rows"][r], c, column)]
    return merge_layers(layers)[0].get("dataset")


def _as_defined(row: dict, losses: dict) -> bool:
    """Whether ``row`` trains its loss as registered: every parameter its loss block sets at its default
    (``losses``: the catalog's), and no ``run`` or ``column_runs`` block."""
    parameters = losses.get(row["loss"]["name"], {}).get("parameters", {})
    return (all(k in parameters and parameters[k]["default"] == v for k, v in row["loss"].items() if k != "name")
            and not row.get("run") and not row.get("column_runs"))


def reported_numbers(specs_dir: str | Path, setups: dict, losses: dict, schemas=None) -> dict[tuple, list[Reported]]:
    """``{(loss, dataset, metric, unit): [Reported, ...]}``: every number a ``runs`` table spec under ``specs_dir``
    reports for a loss (module docstring); ``setups`` give the columns' datasets, ``losses`` (the catalog's) the
    registered defaults."""
    index: dict[tuple, list[Reported]] = {}
    for paper, table in spec_names(specs_dir):
        spec = load_spec(paper, table, schemas, specs_dir)
        if spec_kind(spec).name != "runs":  # a leaderboard, a sweep, a static table: no paper's cells of a loss
            continue
        for r, row in enumerate(spec["rows"]):
            loss = (row.get("loss") or {}).get("name")
            if loss is None:
                continue
            as_defined = _as_defined(row, losses)
            for c, column in enumerate(spec["columns"]):
                value = row["paper"][c]
                dataset = None if value is None else _dataset(spec, r, c, setups)
                if dataset is None:
                    continue
                key = (loss, dataset, column["metric"], column.get("unit", PERCENT))
                index.setdefault(key, []).append(Reported(
                    float(value), paper, table, row["method"], f"{column['group']} {column['header']}", (r, c),
                    bool(row.get("cited")), as_defined))
    return index


def _paper_order(paper: str) -> tuple[int, str]:
    return (NEWEST_FIRST.index(paper), "") if paper in NEWEST_FIRST else (len(NEWEST_FIRST), paper)


def choose(candidates: list[Reported], own_paper: str | None) -> Reported | None:
    """The number a leaderboard shows among ``candidates`` (one loss, dataset, metric), by the module docstring's
    rule (``own_paper``: the paper the loss declares, None for a loss from other work); None without any."""
    return min(candidates, default=None,
               key=lambda n: (n.paper != own_paper, not n.as_defined, _paper_order(n.paper), n.table, n.position))


def reported_for(planner) -> dict[tuple, list[Reported]]:
    """:func:`reported_numbers` of ``planner``'s specs folder, setups and losses, indexed once per plan."""
    if "reported" not in planner.memo:
        planner.memo["reported"] = reported_numbers(planner.specs_dir, planner.setups, planner.catalog["loss"],
                                                    planner.schemas)
    return planner.memo["reported"]
