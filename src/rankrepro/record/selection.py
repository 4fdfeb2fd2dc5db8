"""Model selection on the test set: a run's test curve, its best epoch, and which number a table shows.

Smooth-AP, PNP, RaMBO and top-k report the epoch whose *test* R@1 is highest (their code saves a
checkpoint whenever the test R@1 improves; RaMBO section 5.1: "reporting performance at a time-point
that maximizes R@1"): a number chosen on the test set itself. A run reproduces that protocol with its
``eval`` block (``src/rankrepro/plan/schemas/run.schema.yaml``):

- ``every`` (k, or null): during training the model is evaluated on the run's test protocol at the
  **curve epochs** :func:`curve_epochs` = {e in 1..E : e mod k = 0} ∪ {E} (E = ``epochs``; null: none,
  only the final model is evaluated, by the evaluate step), by :mod:`rankrepro.engine.curve`, into
  ``curve.csv`` beside ``model.pt`` (:data:`CURVE_FILE`: ``epoch``, ``seconds`` of that evaluation, then
  one column per metric key of ``metrics.json``);
- ``select_by`` (a name of ``eval.metrics``; null: the first): the metric that picks the best epoch;
- ``select`` (``last`` | ``best_test``): which of the two numbers a table's "ours" shows.

**The best epoch on the test set** (:func:`best_on_test`), per metric key: a bare key ``m`` is taken at
the epoch that maximises ``select_by``; a key ``<group>/<m>`` (VehicleID's ``small/R@1`` ...,
DyML's ``fine/mAP`` ...) at the epoch that maximises ``<group>/<select_by>``: each test set picks its
own epoch, as Smooth-AP's code keeps one checkpoint per VehicleID test list. The best epoch is the
first curve epoch with the highest value (a later one must beat it strictly, as the official codes
compare ``>``; NaN is never best). The curve's row of the final epoch is replaced by the evaluate
step's metrics (the same model, evaluated again by the job that writes ``metrics.json``), so the best
is never below the last on its selecting metric. A key whose selecting metric is absent from the curve
(a count such as ``n_queries`` outside any group), and every key of a run without a curve (``every``
null, or a run trained before curves existed), keeps its final value: best = last.

``metrics.json`` (:func:`rankrepro.engine.evaluate.evaluate`) keeps ``metrics``, the final epoch's
metrics (the honest number), and adds :func:`selection_record`::

    "epoch": E,                    # the epoch "metrics" is of (the run's last)
    "select": "last" | "best_test",  # the run's eval.select: which one a table's "ours" shows
    "best_test": {
        "select_by": "R@1",        # the metric that picked the epoch (eval.select_by resolved)
        "source": "curve" | "last",  # "last": no curve, best = last
        "epoch": 20 | null,        # the best epoch when every key shares it, else null
        "epochs": {key: epoch},    # the epoch each key's value comes from
        "metrics": {key: value},   # the keys of "metrics", each at its best epoch
    }

Readers take the number a table shows through :func:`shown_metrics` (a ``metrics.json`` of an older
version, without these keys, shows its ``metrics``). This module imports nothing but the standard library.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

__all__ = ["CURVE_FILE", "SELECT", "best_on_test", "curve_csv", "curve_epochs", "read_curve", "select_by_of",
           "selection_record", "shown_metrics"]

#: the test curve's file, beside model.pt
CURVE_FILE = "curve.csv"
#: what a table's "ours" shows, per eval.select
SELECT = {"last": "last epoch", "best_test": "best epoch on the test set, the paper's protocol"}
#: the columns of curve.csv before the metric keys
_FIXED = ("epoch", "seconds")


def curve_epochs(epochs: int, every: int | None) -> list[int]:
    """The epochs (1-based) evaluated during training: every ``every``-th and the last; [] when ``every`` is None."""
    if every is None:
        return []
    return sorted({e for e in range(every, epochs + 1, every)} | {epochs})


def select_by_of(eval_block: dict, computed=()) -> str:
    """The metric that picks the best epoch: ``eval.select_by``, or the first of ``eval.metrics``, or (an empty
    ``eval.metrics``: the protocol's defaults) the first ``computed`` key without its test-set prefix."""
    if eval_block.get("select_by"):
        return eval_block["select_by"]
    if eval_block.get("metrics"):
        return eval_block["metrics"][0]
    return next(iter(computed)).rpartition("/")[2]


def curve_csv(rows: list[dict]) -> str:
    """The text of curve.csv: ``epoch``, ``seconds``, then the metric keys in the order of the first row."""
    keys = list(_FIXED) + [k for k in (rows[0] if rows else {}) if k not in _FIXED]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_curve(path: str | Path) -> list[dict]:
    """The rows of a curve.csv (``epoch`` an int, every other field a float); [] when the file is absent."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: int(v) if k == "epoch" else float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _selecting_key(key: str, select_by: str) -> str:
    """The metric key whose maximum picks the epoch of ``key`` (module docstring)."""
    group, _, name = key.rpartition("/")
    return f"{group}/{select_by}" if group else select_by


def best_on_test(curve: list[dict], final: dict, final_epoch: int, select_by: str) -> dict:
    """The ``best_test`` block of metrics.json (module docstring) from the test ``curve`` (rows of
    :func:`read_curve`), the evaluate step's ``final`` metrics of epoch ``final_epoch`` and ``select_by``."""
    rows = sorted([r for r in curve if r["epoch"] != final_epoch] + [{"epoch": final_epoch, **final}],
                  key=lambda r: r["epoch"])
    best: dict[str, int] = {}  # selecting key -> its best epoch
    for key in {_selecting_key(k, select_by) for k in final}:
        top = None
        for row in rows:
            value = row.get(key)
            if isinstance(value, (int, float)) and not math.isnan(value) and (top is None or value > top[1]):
                top = (row["epoch"], value)
        best[key] = top[0] if top else final_epoch
    by_epoch = {r["epoch"]: r for r in rows}
    epochs = {k: best[_selecting_key(k, select_by)] for k in final}
    metrics = {k: by_epoch[e].get(k, final[k]) for k, e in epochs.items()}
    distinct = set(epochs.values())
    return {"select_by": select_by, "source": "curve" if curve else "last",
            "epoch": distinct.pop() if len(distinct) == 1 else None, "epochs": epochs, "metrics": metrics}


def selection_record(run: dict, final: dict, curve: list[dict]) -> dict:
    """The keys metrics.json adds to ``final`` (module docstring) for ``run`` and its test ``curve``."""
    return {"epoch": run["epochs"], "select": run["eval"].get("select", "last"),
            "best_test": best_on_test(curve, final, run["epochs"], select_by_of(run["eval"], final))}


def shown_metrics(result: dict, select: str | None = None) -> dict:
    """The metrics a table shows of a metrics.json ``result``: the best epoch's (``best_test``) or the final
    ones (``last``); ``select`` None: the run's own ``select`` (``last`` for a record without one)."""
    select = select or result.get("select", "last")
    if select not in SELECT:
        raise ValueError(f"select must be one of {', '.join(SELECT)}, got {select!r}")
    return result["best_test"]["metrics"] if select == "best_test" and "best_test" in result else result["metrics"]
