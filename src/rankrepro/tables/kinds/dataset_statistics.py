"""``kind: dataset_statistics``: a paper's dataset table, counted from the dataset manifests.

Cell (row, column) is a statistic of the row's dataset split, computed from the dataset's
manifest (``<manifests_dir>/<dataset>/meta.json``, whose ``counts`` hold the images and
distinct finest labels of every split) when the table is rendered: ``images``, ``classes``
and ``images_per_class`` (rounded half up to one decimal, as papers print it). A row that
pools several splits sums them: the rows, and the distinct (split, label) pairs, so a pooled
value equals the sum of the splits' values (as papers sum VehicleID's test lists). It has no
runs; its datasets are prepared like the runs' datasets, and a planned one makes the row pending.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from rankrepro.plan.schema import PlanError
from rankrepro.tables.formats import (REPLICA_TEX, column_title, latex_table, markdown_page, numbers_csv, tex_escape,
                                      write_outputs)
from rankrepro.tables.kinds import TABLE_KINDS
from rankrepro.tables.kinds.base import KindPlan, TableError, TableKind, check_paper_counts

__all__ = ["STATISTICS_REPLICA_NOTE", "DatasetStatisticsTable", "images_per_class", "split_counts",
           "split_statistics", "statistics_values"]

STATISTICS_REPLICA_NOTE = ("Numbers under 'ours' are counted from generated replicas of the datasets (demo "
                           "profile), not from the real files; they are meaningless as results.")


@dataclass
class StatisticsCell:
    """A cell of a ``dataset_statistics`` table: ``statistic`` of ``dataset``'s ``splits`` (pooled)."""

    row: int
    column: int
    statistic: str
    dataset: str
    splits: list[str]
    pending: str | None = None  # why the dataset has no manifest (yet)


def split_counts(manifest_dir: str | Path) -> tuple[dict, bool]:
    """``{split: {"images", "classes"}}`` of a manifest (its meta.json's ``counts``; counted from
    manifest.csv when meta.json has none) and whether it is a generated replica."""
    manifest_dir = Path(manifest_dir)
    meta_path = manifest_dir / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: prepare the dataset first (snakemake {meta_path})")
    meta = json.loads(meta_path.read_text())
    counts = meta.get("counts")
    if counts is None:
        from rankrepro.data.manifest import read_manifest

        counts = read_manifest(manifest_dir).counts()
    return counts, bool(meta.get("replica"))


def images_per_class(images: int, classes: int) -> float | None:
    """``images / classes`` rounded half up to one decimal (exactly, on the fraction)."""
    if not classes:
        return None
    tenths = Fraction(images * 10, classes)
    return float(int(tenths + Fraction(1, 2))) / 10


def split_statistics(counts: dict, splits: list[str]) -> dict:
    """images, classes and images_per_class of ``splits`` pooled: sums over the splits (rows, and
    distinct (split, label) pairs)."""
    images = sum(int(counts[s]["images"]) for s in splits)
    classes = sum(int(counts[s]["classes"]) for s in splits)
    return {"images": images, "classes": classes, "images_per_class": images_per_class(images, classes)}


def statistics_values(table, manifests_dir: str | Path) -> tuple[dict, bool]:
    """{row: {statistic: value}} of a dataset statistics table's non-pending rows (``table``: a
    :class:`~rankrepro.plan.model.TablePlan`), and whether any manifest is a replica. A split the
    manifest lacks fails naming the spec file and row."""
    spec = table.spec
    values, replica, manifests = {}, False, {}
    for cell in table.cells:
        if cell["pending"] or cell["row"] in values:
            continue
        dataset, splits, r = cell["dataset"], cell["splits"], cell["row"]
        if dataset not in manifests:
            manifests[dataset] = split_counts(Path(manifests_dir) / dataset)
        counts, is_replica = manifests[dataset]
        replica |= is_replica
        missing = [s for s in splits if s not in counts]
        if missing:
            raise TableError(f"{table.where}: rows[{r}].split ({spec['rows'][r]['name']}): the manifest of {dataset} "
                             f"({Path(manifests_dir) / dataset / 'meta.json'}) has no split "
                             f"{', '.join(map(repr, missing))}; its splits: {', '.join(sorted(counts))}")
        values[r] = split_statistics(counts, splits)
    return values, replica


def _diff_value(ours, paper):
    if ours is None or paper is None:
        return None
    return ours - paper if isinstance(ours, int) and float(paper).is_integer() else round(ours - paper, 2)


def statistics_rows(spec: dict, cells: list[dict], values: dict) -> list[dict]:
    """One dict per (row, column): name, dataset, splits, column, statistic, paper, ours, diff, status."""
    out = []
    by_pos = {(c["row"], c["column"]): c for c in cells}
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            cell = by_pos[(r, c)]
            paper = row["paper"][c]
            if isinstance(paper, float) and paper.is_integer() and column["statistic"] != "images_per_class":
                paper = int(paper)
            ours = values[r][column["statistic"]] if r in values else None
            out.append({
                "name": row["name"], "dataset": row["dataset"], "splits": "+".join(cell["splits"]),
                "column": column_title(column), "statistic": column["statistic"],
                "paper": paper, "ours": ours, "diff": _diff_value(ours, paper),
                "status": "ours" if ours is not None else (cell["pending"] or "missing"),
            })
    return out


def _stat(value, statistic: str, sign: bool = False) -> str:
    if value is None:
        return ""
    if statistic == "images_per_class" or not float(value).is_integer():
        return f"{value:+.1f}" if sign else f"{value:.1f}"
    return f"{int(value):+,}" if sign else f"{int(value):,}"


def _stat_parts(entry: dict) -> list[str]:
    ours = "—" if entry["ours"] is None else _stat(entry["ours"], entry["statistic"])
    return [_stat(entry["paper"], entry["statistic"]), ours, _stat(entry["diff"], entry["statistic"], sign=True)]


def statistics_markdown(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    header = ["Dataset", "Manifest splits"] + [f"{column_title(c)} {part}" for c in spec["columns"]
                                               for part in ("paper", "ours", "Δ")]
    intro = (f"Source: {spec['source']}. Paper numbers beside ours, counted from the dataset manifests "
             "(results/manifests/<dataset>/); pooled splits (a + b) are summed; Δ = ours − paper; "
             "— = no manifest yet (see notes).")
    cells, notes = [], []
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        splits = " + ".join(entries[0]["splits"].split("+"))
        cells.append([row["name"], f"{row['dataset']}: {splits}"] + [part for e in entries for part in _stat_parts(e)])
        notes += sorted({e["status"] for e in entries if e["status"] != "ours"})
    return markdown_page(spec, intro, STATISTICS_REPLICA_NOTE if replica else None, header, cells, notes)


def statistics_latex(spec: dict, rows: list[dict], replica: bool) -> str:
    ncol = len(spec["columns"])
    lines = []
    if any(c.get("group") for c in spec["columns"]):
        lines.append(" & & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{tex_escape(c.get('group', ''))}}}"
                                           for c in spec["columns"]) + r" \\")
    lines += ["Dataset & Splits & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{tex_escape(c['header'])}}}"
                                                 for c in spec["columns"]) + r" \\",
              " & & " + " & ".join(["paper & ours & $\\Delta$"] * ncol) + r" \\", r"\midrule"]
    for r, row in enumerate(spec["rows"]):
        entries = rows[r * ncol:(r + 1) * ncol]
        parts = [tex_escape(row["name"]), tex_escape(" + ".join(entries[0]["splits"].split("+")))]
        for e in entries:
            paper, ours, diff = _stat_parts(e)
            parts += [paper, "--" if e["ours"] is None else ours, diff]
        lines.append(" & ".join(parts) + r" \\")
    return latex_table(tex_escape(spec["caption"]) + (REPLICA_TEX if replica else ""), "ll" + "rrr" * ncol, lines)


@TABLE_KINDS.register("dataset_statistics")
class DatasetStatisticsTable(TableKind):
    """Counts of the datasets' manifests (see the module docstring)."""

    has_runs = False
    row_name_key = "name"

    def check(self, spec: dict, where: str, schemas) -> None:
        if "seeds" in spec:
            raise PlanError(f"{where}: seeds: a dataset_statistics table has no runs to seed")
        check_paper_counts(spec, where)

    def plan(self, spec: dict, planner) -> KindPlan:
        where = spec.get("_file", f"{spec['paper']}/{spec['table']}")
        cells, datasets = [], set()
        for r, row in enumerate(spec["rows"]):
            pending = planner.dataset_pending(row["dataset"], f"{where}: rows[{r}].dataset")
            if pending is None:
                datasets.add(row["dataset"])
            splits = [row["split"]] if isinstance(row["split"], str) else list(row["split"])
            for c, column in enumerate(spec["columns"]):
                cells.append(StatisticsCell(r, c, column["statistic"], row["dataset"], splits, pending))
        return KindPlan([asdict(cell) for cell in cells], {}, sorted(datasets))

    def render(self, table, runs_dir, out_prefix, manifests_dir=None) -> list[dict]:
        """Reads ``<manifests_dir>/<dataset>/meta.json`` (default: ``manifests`` beside ``runs_dir``,
        i.e. ``results/manifests`` for ``results/runs``)."""
        manifests_dir = Path(runs_dir).parent / "manifests" if manifests_dir is None else manifests_dir
        spec = table.spec
        values, replica = statistics_values(table, manifests_dir)
        rows = statistics_rows(spec, table.cells, values)
        write_outputs(out_prefix, statistics_markdown(spec, rows, replica), numbers_csv(rows, replica),
                      statistics_latex(spec, rows, replica))
        return rows
