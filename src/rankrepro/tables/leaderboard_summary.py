"""A benchmark's summary across datasets: each loss's rank on each leaderboard and its mean rank.

Read from the leaderboards' CSVs (:mod:`rankrepro.tables.kinds.leaderboard`: one per dataset, each row's
``rank`` by the first metric, standard competition ranking: equal means share a rank, the next rank skips, 1, 2, 2,
4) and written to ``results/tables/<benchmark>/summary.{md,csv}``:

- one row per loss of any leaderboard, one rank column per dataset (the CSV's name: ``cub``, ``sop`` ...); a
  dataset where the loss has no row (its labels do not support it: a hierarchical loss on CUB) or no number yet
  leaves its cell empty and does **not** count;
- **datasets**: how many datasets rank the loss; **mean rank**: the mean of those ranks (empty with none). A mean
  over fewer datasets, or over datasets with more losses (the hierarchical ones'), is not the same yardstick: the
  page says so beside the table;
- rows by mean rank, then by more datasets, then by name (losses without a rank last).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rankrepro.io import atomic_write_text
from rankrepro.tables.formats import csv_text, markdown_html, markdown_page
from rankrepro.tables.kinds.base import TableError
from rankrepro.tables.plots import csv_rows

__all__ = ["summary_rows", "write_summary"]


def _ranks(table_csv: Path) -> dict[str, dict]:
    """``{loss: {"rank": int | None, "family"}}`` of one leaderboard's CSV; a CSV without ``rank`` fails naming
    the file."""
    rows = csv_rows(table_csv)
    if rows and not {"rank", "method"} <= set(rows[0]):
        raise TableError(f"{table_csv}: no 'rank' column: not a leaderboard's CSV (kind leaderboard); "
                         "list only leaderboards' CSVs")
    return {r["method"]: {"rank": int(r["rank"]) if r["rank"] else None, "family": r.get("family") or ""}
            for r in rows}


def summary_rows(table_csvs: list[str | Path]) -> tuple[list[str], list[dict]]:
    """The datasets (the CSVs' names, in order) and one row per loss: ``{"loss", "family", <dataset>: rank or
    None, "datasets", "mean_rank"}`` sorted (module docstring)."""
    datasets = [Path(p).stem for p in table_csvs]
    if len(set(datasets)) != len(datasets):
        raise TableError(f"two leaderboards' CSVs of the same name: {', '.join(map(str, table_csvs))}")
    ranks = {name: _ranks(Path(p)) for name, p in zip(datasets, table_csvs)}
    losses = sorted({loss for table in ranks.values() for loss in table})
    out = []
    for loss in losses:
        row = {"loss": loss, "family": next((t[loss]["family"] for t in ranks.values() if loss in t), "")}
        row.update({d: ranks[d].get(loss, {}).get("rank") for d in datasets})
        present = [row[d] for d in datasets if row[d] is not None]
        row.update(datasets=len(present), mean_rank=round(statistics.fmean(present), 2) if present else None)
        out.append(row)
    out.sort(key=lambda r: (r["mean_rank"] is None, r["mean_rank"] or 0, -r["datasets"], r["loss"]))
    return datasets, out


def to_markdown(benchmark: str, datasets: list[str], rows: list[dict]) -> str:
    """The summary page (module docstring)."""
    spec = {"paper": benchmark, "table": "summary", "caption": "every loss's rank per dataset and its mean rank"}
    intro = (f"From the leaderboards of {', '.join(datasets)} (results/tables/{benchmark}/<dataset>.md): each "
             "loss's rank by the first metric on each dataset (equal means share a rank: 1, 2, 2, 4) and the mean "
             "of its ranks over the datasets where it has one. — = no row there (its labels do not support it, e.g. "
             "a hierarchical loss on a one-level dataset) or no number yet: not counted, neither as a rank nor in "
             "the mean; datasets = how many count. A mean over fewer datasets, or over datasets ranking more "
             "losses, is not the same yardstick: compare mean ranks of equal datasets counts.")
    header = ["Loss", "Family", *datasets, "Datasets", "Mean rank"]
    cells = [[r["loss"], r["family"] or "—", *(str(r[d]) if r[d] is not None else "—" for d in datasets),
              str(r["datasets"]), "—" if r["mean_rank"] is None else f"{r['mean_rank']:.2f}"] for r in rows]
    return markdown_page(spec, intro, None, header, cells, [])


def write_summary(benchmark: str, table_csvs: list[str | Path], out_prefix: str | Path,
                  html_out: str | Path | None = None) -> list[dict]:
    """Write ``<out_prefix>.md`` and ``.csv`` of the leaderboards ``table_csvs`` (module docstring), and the page
    as HTML to ``html_out`` (the report's); return the rows."""
    datasets, rows = summary_rows(table_csvs)
    fields = ["loss", "family", *datasets, "datasets", "mean_rank"]
    out_prefix = Path(out_prefix)
    page = to_markdown(benchmark, datasets, rows)
    atomic_write_text(out_prefix.with_suffix(".md"), page)
    atomic_write_text(out_prefix.with_suffix(".csv"), csv_text(rows, fields))
    if html_out:
        atomic_write_text(html_out, markdown_html(page, title=f"{benchmark} summary"))
    return rows
