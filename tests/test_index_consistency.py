"""The results index counts a cell reproduced only when every run of it has finished (a table rendered
before its runs changed must not say "4 of 4 cells reproduced" beside "1 of 2 runs finished"), and a
NaN metric never takes a best or second-best mark."""

import json
import math

from rankrepro.tables import index
from rankrepro.tables.formats import BEST, SECOND
from rankrepro.tables.kinds.runs import best_marks, rank_marks

FIELDS = "method,column,metric,paper,ours,std,seeds,diff,status,replica"


def _stale_results(tmp_path):
    """Table p/t (1 row x 2 columns) on runs r1 (finished) and r2 (no metrics.json: not finished), whose
    CSV, rendered earlier, has a number of ours in both cells."""
    res = tmp_path / "results"
    spec = {"paper": "p", "table": "t", "caption": "c", "source": "Table 1",
            "columns": [{"group": "SOP", "header": f"h{c}", "metric": "R@1"} for c in range(2)],
            "rows": [{"method": "Ours", "paper": [80.0, 70.0]}]}
    cells = [{"row": 0, "column": c, "pending": None, "run_ids": [f"r{c + 1}"], "metric": "R@1"} for c in range(2)]
    plan = {"tables": {"p/t": {"paper": "p", "table": "t", "spec": spec, "cells": cells, "runs": ["r1", "r2"]}}}
    (res / "plan").mkdir(parents=True)
    (res / "plan" / "plan.json").write_text(json.dumps(plan))
    (res / "tables" / "p").mkdir(parents=True)
    (res / "tables" / "p" / "t.csv").write_text(
        f"{FIELDS}\nOurs,SOP h0,R@1,80.0,80.5,,1,0.5,ours,False\nOurs,SOP h1,R@1,70.0,70.2,,1,0.2,ours,False\n")
    for rid in ("r1", "r2"):
        (res / "runs" / rid).mkdir(parents=True)
        (res / "runs" / rid / "history.csv").write_text("epoch,loss,seconds,device\n1,0.5,60.0,cpu\n")
    (res / "runs" / "r1" / "metrics.json").write_text(json.dumps({"metrics": {"R@1": 0.805}, "seconds": {}}))
    return res, plan


def test_a_cell_whose_run_has_not_finished_is_not_reproduced(tmp_path):
    res, plan = _stale_results(tmp_path)
    built = index.build_index(plan, res)
    (table,) = built["tables"]
    assert (table["runs"], table["finished"]) == (2, 1)
    assert (table["cells"], table["reproduced"], table["within"], table["pending"]) == (2, 1, 1, 1)
    assert table["reasons"] == {"missing": 1}
    total = built["total"]
    assert (total["reproduced"], total["finished"], total["runs"]) == (1, 1, 2)
    (res / "runs" / "r2" / "metrics.json").write_text(json.dumps({"metrics": {"R@1": 0.702}, "seconds": {}}))
    assert index.build_index(plan, res)["tables"][0]["reproduced"] == 2  # all finished: counted again


def test_a_nan_metric_is_never_marked():
    nan = float("nan")
    assert rank_marks({"a": 90.0, "b": nan, "c": 80.0}) == {"a": BEST, "c": SECOND}
    assert rank_marks({"a": nan, "b": 90.0, "c": 80.0}) == {"b": BEST, "c": SECOND}
    assert rank_marks({"a": nan, "b": 90.0}) == {}
    assert rank_marks({"a": 1.0, "b": nan, "c": 2.0}, better="lower") == {"a": BEST, "c": SECOND}
    spec = {"best": {}, "columns": [{"metric": "R@1"}], "rows": [{}, {}, {}]}
    _, ours = best_marks(spec, {}, {(0, 0): nan, (1, 0): 61.0, (2, 0): 60.0})
    assert ours == {(1, 0): BEST, (2, 0): SECOND} and math.isnan(nan)


def test_the_index_shows_the_mean_gap_between_the_best_epoch_on_test_and_the_last(tmp_path):
    """best − last, in points, over the reproduced percent cells with both numbers: p/t (4.0 and 0.0;
    its fraction column does not count) -> +2.0; q/t has no test curve (no best) -> —; the total over
    the three cells: (4 + 0 + 5) / 3 = +3.0 with r/t's single cell at +5.0."""
    res = tmp_path / "results"
    header = "method,column,metric,unit,paper,ours,std,seeds,diff,status,select,last,best,replica"
    csvs = {"p/t": ["Ours,SOP h0,R@1,percent,80.0,83.0,,1,3.0,ours,best_test,79.0,83.0,False",
                    "Ours,SOP h1,R@1,percent,70.0,70.0,,1,0.0,ours,best_test,70.0,70.0,False",
                    "Ours,SOP h2,d,fraction,0.3,0.2,,1,-0.1,ours,best_test,0.3,0.2,False"],
            "q/t": ["Ours,SOP h0,R@1,percent,80.0,79.0,,1,-1.0,ours,last,79.0,,False"],
            "r/t": ["Ours,SOP h0,R@1,percent,80.0,60.0,,1,-20.0,ours,last,60.0,65.0,False"]}
    tables = {}
    for key, lines in csvs.items():
        paper, table = key.split("/")
        ncol = len(lines)
        spec = {"paper": paper, "table": table, "caption": "c", "source": "s",
                "columns": [{"group": "SOP", "header": f"h{c}", "metric": "R@1"} for c in range(ncol)],
                "rows": [{"method": "Ours", "paper": [0.0] * ncol}]}
        cells = [{"row": 0, "column": c, "pending": None, "run_ids": [], "metric": "R@1"} for c in range(ncol)]
        tables[key] = {"paper": paper, "table": table, "spec": spec, "cells": cells, "runs": []}
        (res / "tables" / paper).mkdir(parents=True)
        (res / "tables" / paper / f"{table}.csv").write_text("\n".join([header, *lines]) + "\n")
    built = index.build_index({"tables": tables}, res)
    gaps = {f"{t['paper']}/{t['table']}": (t["gap"], t["gap_cells"]) for t in built["tables"]}
    assert gaps == {"p/t": (2.0, 2), "q/t": (None, 0), "r/t": (5.0, 1)}
    assert (built["total"]["gap"], built["total"]["gap_cells"]) == (3.0, 3)
    text = index.to_markdown(built)
    assert "| within 1 pt | best − last | pending |" in text
    assert "| 3 | 3 | 1 | +2.0 | 0 |" in text and "| 1 | 1 | 1 | — | 0 |" in text
    assert "Best epoch on the test set − last epoch: +3.0 points on average over 3 cells." in text
