"""Figures for the results and the Snakemake report (matplotlib, Agg backend, PNG).

- :func:`training_curve`: one run's ``history.csv`` — the loss per epoch, the learning rates, and any
  other numeric column a training records (seconds, images/s and the device are not plotted) —
  with the run's final metrics (``metrics.json``) in the title, and its test curve (``curve.csv``
  beside it, runs with ``eval.every``: the metric that picks the best epoch, the best marked):
  ``results/runs/<id>/curve.png``.
- :func:`paper_scatter`: a paper's tables (their CSVs, :mod:`rankrepro.tables.render`), one point
  per reproduced cell, x = the paper's number, y = ours, one marker per table, the line y = x and
  the ±1 point band: ``results/tables/<paper>/scatter.png`` (static tables, the paper's text with
  no "ours", and variant rows, :mod:`rankrepro.plan.variants`, are left out).
- :func:`leaderboard_plot`: a leaderboard's CSV (:mod:`rankrepro.tables.kinds.leaderboard`), one point per loss
  with a number, x = R@1, y = mAP@R (means over the seeds, percent), error bars = their sample standard deviations
  over the seeds, one colour per loss family (the loss's declared ``family``: :mod:`rankrepro.losses.registry`),
  a triangle for a hierarchical loss, each point named: ``results/tables/<benchmark>/<dataset>.png``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from rankrepro.record.selection import CURVE_FILE, read_curve
from rankrepro.io import atomic_path
from rankrepro.tables.kinds.base import TableError

#: history.csv columns that are not curves (bookkeeping) or get their own panel
# (and the lr_<group> columns, on the learning-rate panel)
NOT_PLOTTED = {"epoch", "seconds", "batches", "images_per_s", "device", "warmup", "loss"}
MARKERS = "osD^v<>pPX*h"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def read_history(path: str | Path) -> dict[str, list]:
    """``{column: [value per row]}`` of a history.csv, numbers as floats (None where not a number)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0]) if rows else []
    return {c: [_number(r[c]) if c not in ("device", "warmup") else r[c] for r in rows] for c in columns}


def _save(fig, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    return out


def training_curve(history_csv: str | Path, out: str | Path, metrics_json: str | Path | None = None,
                   title: str | None = None) -> Path:
    """Plot one run's history (see the module docstring) to ``out`` (PNG)."""
    plt = _pyplot()
    history = read_history(history_csv)
    epochs = history.get("epoch") or []
    x = [e if e is not None else i + 1 for i, e in enumerate(epochs)]
    others = [c for c in history if c not in NOT_PLOTTED and not c.startswith("lr_")
              and any(v is not None for v in history[c])]
    record = json.loads(Path(metrics_json).read_text()) if metrics_json and Path(metrics_json).is_file() else None
    test = read_curve(Path(history_csv).parent / CURVE_FILE)
    panels = 2 + bool(others) + bool(test)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.4), squeeze=False)
    axes = axes[0]
    style = {"marker": "o", "markersize": 4}

    ax = axes[0]
    if "loss" in history:
        ax.plot(x, history["loss"], **style, label="loss")
    warmup = [xi for xi, f in zip(x, history.get("warmup") or []) if f == "True"]
    if warmup:
        ax.axvspan(min(warmup) - 0.5, max(warmup) + 0.5, color="0.9", label="warm-up (groups frozen)")
    ax.set(xlabel="epoch", ylabel="training loss (mean over the epoch)", title="loss")
    ax.legend(fontsize=8)

    ax = axes[1]
    rates = [name for name in history if name.startswith("lr_")]
    for name in rates:
        ax.plot(x, history[name], **style, label=name.replace("lr_", "lr "))
    ax.set(xlabel="epoch", ylabel="learning rate", title="learning rates")
    if any(v for name in rates for v in history[name] if v):
        ax.set_yscale("log")
    ax.legend(fontsize=8)

    if others:
        ax = axes[2]
        for name in others:
            ax.plot(x, history[name], **style, label=name)
        ax.set(xlabel="epoch", title="recorded metrics")
        ax.legend(fontsize=8)

    if test:
        _test_curve(axes[-1], test, (record or {}).get("best_test") or {}, style)

    if not epochs:
        for ax in axes:
            ax.text(0.5, 0.5, "no epoch recorded", ha="center", va="center", transform=ax.transAxes)
    for ax in axes:
        if len(x) <= 10 and x:
            ax.set_xticks(x)
    heading = title or Path(history_csv).parent.name
    devices = sorted({d for d in history.get("device") or [] if d})
    seconds = sum(v for v in history.get("seconds") or [] if v)
    detail = f"{len(x)} epoch(s), {seconds / 60:.1f} min" + (f" on {', '.join(devices)}" if devices else "")
    if record is not None:
        shown = [(k, v) for k, v in (record.get("metrics") or {}).items()
                 if isinstance(v, (int, float)) and not k.endswith("n_queries") and not k.startswith("n_")][:6]
        if shown:
            detail += "; final: " + ", ".join(f"{k} {100 * v:.1f}" for k, v in shown)
        if record.get("replica"):
            detail += " (replica data)"
    fig.suptitle(f"{heading}\n{detail}", fontsize=9)
    fig.tight_layout()
    try:
        return _save(fig, out)
    finally:
        plt.close(fig)


def _test_curve(ax, curve: list[dict], best: dict, style: dict) -> None:
    """The test curve's metric that picks the best epoch (each test set's where a protocol has several), in
    percent per evaluated epoch, its best epoch starred (``best``: metrics.json's ``best_test``)."""
    select_by = best.get("select_by") or next(k for k in curve[0] if k not in ("epoch", "seconds"))
    keys = [k for k in curve[0] if k == select_by or k.endswith("/" + select_by)]
    for key in keys:
        ax.plot([r["epoch"] for r in curve], [100 * r[key] for r in curve], **style, label=key)
        epoch = (best.get("epochs") or {}).get(key)
        value = (best.get("metrics") or {}).get(key)
        if epoch is not None and value is not None:
            ax.plot([epoch], [100 * value], "*", color="black", markersize=12)
    ax.set(xlabel="epoch", ylabel=f"{select_by} (percent)", title="test curve (best epoch: *)")
    ax.legend(fontsize=8)


def csv_rows(path: str | Path) -> list[dict]:
    """The rows of a CSV file as dicts (text values)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def scatter_points(table_csv: str | Path) -> list[tuple[float, float, str]]:
    """``(paper, ours, label)`` for every cell of a paper row of a rendered table with both numbers, in percent (a
    column printed as a fraction, ``unit: fraction``, times 100, so it shares the percent axes)."""
    points = []
    for row in csv_rows(table_csv):
        paper, ours = _number(row.get("paper")), _number(row.get("ours"))
        if paper is not None and ours is not None and row.get("status") != "cited" and not row.get("variant"):
            if row.get("unit") == "fraction":
                paper, ours = 100 * paper, 100 * ours
            points.append((paper, ours, f"{row.get('method') or row.get('name', '')} {row.get('column', '')}".strip()))
    return points


def _scatter_panel(ax, groups: list[tuple[str, list]], counts: bool) -> int:
    """One panel: the points of each table (a marker each), y = x, and the ±1 point band (percent)
    or log-log axes (dataset statistics: counts)."""
    allv, n = [], 0
    for i, (name, points) in enumerate(groups):
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        allv += xs + ys
        n += len(points)
        ax.scatter(xs, ys, marker=MARKERS[i % len(MARKERS)], s=36, alpha=0.8, label=f"{name} ({len(points)} cells)")
    if counts:
        allv = [v for v in allv if v > 0]
    if not allv:
        ax.text(0.5, 0.5, "no reproduced cell yet", ha="center", va="center", transform=ax.transAxes)
        return 0
    lo, hi = min(allv), max(allv)
    if counts:
        lo, hi = lo / 2, hi * 2
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.plot([lo, hi], [lo, hi], color="0.3", lw=1, label="y = x")
    else:
        pad = max(1.0, 0.05 * (hi - lo))
        lo, hi = lo - pad, hi + pad
        ax.plot([lo, hi], [lo, hi], color="0.3", lw=1, label="y = x")
        ax.fill_between([lo, hi], [lo - 1, hi - 1], [lo + 1, hi + 1], color="tab:green", alpha=0.12,
                        label="within 1 point")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.legend(fontsize=8, loc="upper left")
    return n


def paper_scatter(paper: str, table_csvs: list[str | Path], out: str | Path) -> Path:
    """Plot the paper-vs-ours scatter of one paper's tables (see the module docstring) to ``out``:
    metric tables (percent) in one panel, dataset statistics tables (counts, log-log) in another
    when the paper has both."""
    plt = _pyplot()
    percent, counts, replica = [], [], False
    for path in table_csvs:
        rows = csv_rows(path)
        if rows and "ours" not in rows[0]:  # a static table (the paper's text): nothing to compare
            continue
        replica |= any(r.get("replica") == "True" for r in rows)
        (counts if rows and "statistic" in rows[0] else percent).append((Path(path).stem, scatter_points(path)))
    panels = [(groups, kind == "counts") for kind, groups in (("percent", percent), ("counts", counts)) if groups]
    panels = panels or [([], False)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 5.0), squeeze=False)
    n = 0
    for ax, (groups, is_counts) in zip(axes[0], panels):
        n += _scatter_panel(ax, groups, is_counts)
        ax.set(xlabel="paper", ylabel="ours")
        if len(panels) > 1 or is_counts:
            ax.set_title("dataset statistics (counts)" if is_counts else "metrics (percent)", fontsize=9)
    fig.suptitle(f"{paper}: paper vs ours, {n} reproduced cells" + ("\n(replica data: meaningless)" if replica else ""),
                 fontsize=10)
    fig.tight_layout()
    try:
        return _save(fig, out)
    finally:
        plt.close(fig)


#: a leaderboard plot's axes: the metric of each (its CSV's ``metric``)
LEADERBOARD_AXES = ("R@1", "mAP@R")
#: a loss family's colour (:data:`rankrepro.losses.registry.FAMILIES`); a loss declaring none is grey
FAMILY_COLOURS = {"pair": "tab:blue", "proxy": "tab:orange", "rank": "tab:green"}
NO_FAMILY = "no family declared"


def leaderboard_points(table_csv: str | Path) -> list[dict]:
    """``{"loss", "family", "hierarchical", "x", "x_std", "y", "y_std"}`` per loss of a leaderboard's CSV with a
    number on both axes (:data:`LEADERBOARD_AXES`; std 0 with one seed); a CSV without either metric fails
    naming the file."""
    rows = csv_rows(table_csv)
    present = {r.get("metric") for r in rows}
    missing = [m for m in LEADERBOARD_AXES if m not in present]
    if missing or (rows and "family" not in rows[0]):
        raise TableError(f"{table_csv}: not a leaderboard's CSV with {' and '.join(LEADERBOARD_AXES)} (missing: "
                         f"{', '.join(missing) or 'the family column'}); render it with the table rule first")
    by_loss: dict[str, dict] = {}
    for row in rows:
        entry = by_loss.setdefault(row["method"], {"loss": row["method"], "family": row.get("family") or "",
                                                   "hierarchical": row.get("hierarchical") == "True"})
        if row["metric"] in LEADERBOARD_AXES:
            axis = "x" if row["metric"] == LEADERBOARD_AXES[0] else "y"
            entry[axis], entry[f"{axis}_std"] = _number(row.get("ours")), _number(row.get("std")) or 0.0
    return [e for e in by_loss.values() if e.get("x") is not None and e.get("y") is not None]


def leaderboard_plot(table_csv: str | Path, out: str | Path, title: str) -> Path:
    """Plot a leaderboard (see the module docstring) to ``out`` (PNG), titled ``title``."""
    plt = _pyplot()
    points = leaderboard_points(table_csv)
    replica = any(r.get("replica") == "True" for r in csv_rows(table_csv))
    fig, ax = plt.subplots(figsize=(7.5, 6.0))
    seen = set()
    for p in points:
        family = p["family"] if p["family"] in FAMILY_COLOURS else NO_FAMILY
        colour = FAMILY_COLOURS.get(family, "0.5")
        ax.errorbar(p["x"], p["y"], xerr=p["x_std"], yerr=p["y_std"], fmt="^" if p["hierarchical"] else "o",
                    color=colour, ecolor=colour, elinewidth=1, capsize=2, markersize=6,
                    label=family if family not in seen else None)
        seen.add(family)
        ax.annotate(p["loss"], (p["x"], p["y"]), textcoords="offset points", xytext=(4, 3), fontsize=7)
    if any(p["hierarchical"] for p in points):
        ax.plot([], [], "^", color="0.3", label="hierarchical loss (triangle)")
    if not points:
        ax.text(0.5, 0.5, "no loss has a number yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=8, title="loss family", title_fontsize=8)
    ax.set(xlabel=f"{LEADERBOARD_AXES[0]} (percent, mean ± std over seeds)",
           ylabel=f"{LEADERBOARD_AXES[1]} (percent, mean ± std over seeds)")
    ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: {len(points)} losses" + ("\n(replica data: meaningless)" if replica else ""), fontsize=10)
    fig.tight_layout()
    try:
        return _save(fig, out)
    finally:
        plt.close(fig)
