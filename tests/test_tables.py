"""Table specs (transcription checked against the paper text) and rendering."""

import csv
import json
from pathlib import Path

import pytest

from rankrepro.plan.build import make_plan
from rankrepro.plan.complete import run_id
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import load_setups
from rankrepro.plan.specs import load_spec, spec_names
from rankrepro.tables.kinds.base import REPLICA_NOTE
from rankrepro.tables.render import render

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"


def test_every_spec_loads_and_has_one_number_per_column():
    assert ("suprank", "table1") in spec_names()
    for paper, table in spec_names():
        spec = load_spec(paper, table)
        if spec.get("kind") == "leaderboard":  # rows from the loss registry, added when planned (tests/test_roof.py)
            assert spec["setup"] and spec["metrics"] and "rows" not in spec
            continue
        assert spec["rows"] and spec["columns"]


def _plan(overrides=None, **planner_kw):
    return make_plan({"suprank": ["table1"]}, overrides, **planner_kw)


def _plan_with_inat_planned():
    """Table I as if suprank_inat were still only planned (plan/planned.yaml)."""
    setups = {name: s for name, s in load_setups().items() if name != "suprank_inat"}
    return _plan(setups=setups, planned={"setups": {"suprank_inat"}, "datasets": set(), "losses": set()})


def test_cells_share_runs_and_pending_cells_say_why():
    plan = _plan()
    spec, cells, runs = plan["tables"]["suprank/table1"]["spec"], plan["tables"]["suprank/table1"]["cells"], plan["runs"]
    smooth = [c for c in cells if spec["rows"][c["row"]]["loss"]["name"] == "smooth_ap"]
    sop = [c for c in smooth if spec["columns"][c["column"]]["setup"] == "suprank_sop"]
    assert len(sop) == 2 and sop[0]["run_ids"] == sop[1]["run_ids"] and len(sop[0]["run_ids"]) == 1
    inat = [c for c in smooth if spec["columns"][c["column"]]["setup"] == "suprank_inat"]
    assert len(inat) == 2 and inat[0]["run_ids"] == inat[1]["run_ids"] != sop[0]["run_ids"]
    planned = _plan_with_inat_planned()["tables"]["suprank/table1"]["cells"]
    pending = [c for c in planned if spec["columns"][c["column"]]["setup"] == "suprank_inat"]
    assert pending and all(c["pending"] == "setup suprank_inat not implemented yet" and not c["run_ids"]
                           for c in pending)
    expected = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    assert run_id(expected) in runs


def test_overrides_change_the_run_id():
    base = _plan()["runs"]
    demo = _plan({"epochs": 1, "warmup_epochs": 0})["runs"]
    assert set(base).isdisjoint(demo)
    assert all(run["epochs"] == 1 for run in demo.values())


def _fake_metrics(runs_dir, runs, r1, map_r, replica):
    for rid in runs:
        (runs_dir / rid).mkdir(parents=True)
        (runs_dir / rid / "metrics.json").write_text(json.dumps(
            {"replica": replica, "metrics": {"R@1": r1, "mAP@R": map_r}}))


def test_render_puts_paper_ours_and_difference_side_by_side(tmp_path):
    plan = _plan_with_inat_planned()
    _fake_metrics(tmp_path / "runs", plan["runs"], 0.8123, 0.5, replica=False)
    rows = render(plan["tables"]["suprank/table1"], tmp_path / "runs", tmp_path / "out" / "table1")
    smooth_r1 = next(r for r in rows if r["method"].startswith("Smooth-AP") and r["column"] == "SOP R@1")
    assert smooth_r1["paper"] == 80.9 and smooth_r1["ours"] == 81.23 and smooth_r1["diff"] == pytest.approx(0.33)
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "| Smooth-AP [27] | <u>80.9</u> | 81.2 | +0.3 | <u>54.3</u> | 50.0 | -4.3 | <u>67.3</u> | — |" in md
    assert "not implemented yet" in md and "Replica data" not in md
    with open(tmp_path / "out" / "table1.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 5 * 4 and {r["status"] for r in table} >= {"ours"}
    tex = (tmp_path / "out" / "table1.tex").read_text()
    assert r"\begin{tabular}" in tex and r"\underline{80.9} & 81.2 & +0.3" in tex


def test_replica_tables_say_so(tmp_path):
    plan = _plan()
    _fake_metrics(tmp_path / "runs", plan["runs"], 0.1, 0.05, replica=True)
    render(plan["tables"]["suprank/table1"], tmp_path / "runs", tmp_path / "t")
    assert REPLICA_NOTE in (tmp_path / "t.md").read_text()
    assert "Replica data" in (tmp_path / "t.tex").read_text()


def test_unknown_table_is_a_clear_error():
    with pytest.raises(PlanError, match=r"no table spec suprank/table99 .*known: (.*, )?suprank/table1(,|$)"):
        load_spec("suprank", "table99")


def test_atomic_outputs_get_the_usual_permissions(tmp_path):
    import os
    import stat

    from rankrepro.io import atomic_write_text

    atomic_write_text(tmp_path / "x.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "x.txt").stat().st_mode) == 0o666 & ~mask


# ------------------------------------------------------------------ best / second best marks


def test_rank_marks_ties_nulls_and_lower_is_better():
    from rankrepro.tables.formats import BEST, SECOND
    from rankrepro.tables.kinds.runs import rank_marks

    assert rank_marks({"a": 1.0, "b": 3.0, "c": 3.0, "d": None, "e": 2.0}) == {"b": BEST, "c": BEST, "e": SECOND}
    assert rank_marks({"a": 1.0, "b": 3.0, "e": 2.0}, "lower") == {"a": BEST, "e": SECOND}
    assert rank_marks({"a": 2.0, "b": 2.0, "c": None}) == {}  # nothing stands out
    assert rank_marks({"a": 2.0, "b": None}) == {}
    assert rank_marks({"a": 1.0, "b": 2.0}) == {"b": BEST, "a": SECOND}
    with pytest.raises(ValueError, match="better"):
        rank_marks({"a": 1.0}, "more")


def _toy_table(tmp_path, best):
    spec = {"paper": "toy", "table": "t1", "caption": "Toy.", "source": "nowhere", "best": best,
            "columns": [{"key": "r1", "group": "G", "header": "R@1", "setup": "s", "metric": "R@1"},
                        {"key": "err", "group": "G", "header": "Err", "setup": "s", "metric": "err", "better": "lower"}],
            "rows": [{"method": "A", "loss": {"name": "x"}, "paper": [80.0, 5.0]},
                     {"method": "B", "loss": {"name": "x"}, "paper": [80.0, 3.0]},
                     {"method": "C", "loss": {"name": "x"}, "paper": [79.0, None]},
                     {"method": "D", "cited": True, "paper": [78.0, 4.0]}]}
    metrics = {"A": {"R@1": 0.8149, "err": 0.10}, "B": {"R@1": 0.8151, "err": 0.20}, "C": {"R@1": 0.70}}
    cells = []
    for r, row in enumerate(spec["rows"]):
        for c, column in enumerate(spec["columns"]):
            have = column["metric"] in metrics.get(row["method"], {})
            rid = f"{row['method']}-{column['key']}"
            if have:
                (tmp_path / "runs" / rid).mkdir(parents=True)
                (tmp_path / "runs" / rid / "metrics.json").write_text(json.dumps(
                    {"metrics": {column["metric"]: metrics[row["method"]][column["metric"]]}}))
            cells.append({"row": r, "column": c, "metric": column["metric"], "run_ids": [rid] if have else [],
                          "pending": None if have or row.get("cited") else "no run"})
    table = {"paper": "toy", "table": "t1", "spec": spec, "cells": cells}
    rows = render(table, tmp_path / "runs", tmp_path / "out" / "t1")
    return rows, *((tmp_path / "out" / f"t1.{ext}").read_text() for ext in ("md", "tex"))


def test_best_and_second_best_are_marked_for_the_paper_and_for_ours(tmp_path):
    rows, md, tex = _toy_table(tmp_path, {})
    marks = {(e["method"], e["column"]): (e["paper_mark"], e["ours_mark"]) for e in rows}
    # R@1 (higher is better): paper 80.0 tie (A, B) best, 79.0 second; ours 81.5 = 81.5 as printed, tie best
    assert marks[("A", "G R@1")] == ("best", "best") and marks[("B", "G R@1")] == ("best", "best")
    assert marks[("C", "G R@1")] == ("second", "second") and marks[("D", "G R@1")] == ("", "")
    # Err (lower is better): paper B 3.0 best, D 4.0 (cited) second, C null; ours A 10.0 best, B 20.0 second
    assert marks[("B", "G Err")] == ("best", "second") and marks[("D", "G Err")] == ("second", "")
    assert marks[("A", "G Err")] == ("", "best") and marks[("C", "G Err")] == ("", "")
    assert "| A | **80.0** | **81.5** | +1.5 | 5.0 | **10.0** | +5.0 |" in md
    assert "| C | <u>79.0</u> | <u>70.0</u> | -9.0 |  | — |  |" in md
    assert "| D (cited) | 78.0 | — |  | <u>4.0</u> | — |  |" in md
    assert r"A & \textbf{80.0} & \textbf{81.5} & +1.5 & 5.0 & \textbf{10.0} & +5.0 \\" in tex
    assert r"\underline{79.0}" in tex
    with open(tmp_path / "out" / "t1.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [r["paper_mark"] for r in csv_rows][:4] == ["best", "", "best", "best"]


def test_marks_follow_the_groups_and_switches(tmp_path):
    rows, md, _ = _toy_table(tmp_path / "g", {"groups": [["A", 2], ["B", "D"]], "ours": False})
    marks = {(e["method"], e["column"]): (e["paper_mark"], e["ours_mark"]) for e in rows}
    assert marks[("A", "G R@1")] == ("best", "") and marks[("C", "G R@1")] == ("second", "")
    assert marks[("B", "G R@1")] == ("best", "") and marks[("D", "G R@1")] == ("second", "")
    assert marks[("B", "G Err")] == ("best", "") and marks[("D", "G Err")] == ("second", "")
    assert "**81.5**" not in md
    rows, md, _ = _toy_table(tmp_path / "none", None)
    assert not any(e["paper_mark"] or e["ours_mark"] for e in rows) and "**" not in md and "<u>" not in md


def test_mark_groups_name_exactly_one_row():
    from rankrepro.tables.kinds.base import TableError
    from rankrepro.tables.kinds.runs import mark_groups

    spec = {"paper": "toy", "table": "t", "rows": [{"method": "A"}, {"method": "A"}, {"method": "B"}]}
    assert mark_groups(dict(spec, best={})) == [[0, 1, 2]] and mark_groups(spec) == []
    assert mark_groups(dict(spec, best={"groups": [["B", 0]]})) == [[2, 0]]
    with pytest.raises(TableError, match=r"best.groups\[0\]: 'A' names 2 rows"):
        mark_groups(dict(spec, best={"groups": [["A"]]}))
    with pytest.raises(TableError, match=r"best.groups\[0\]: 'Z' names 0 rows"):
        mark_groups(dict(spec, best={"groups": [["Z"]]}))
    with pytest.raises(TableError, match="out of range"):
        mark_groups(dict(spec, best={"groups": [[3]]}))


def test_every_specs_best_groups_resolve():
    from rankrepro.tables.kinds.runs import mark_groups

    for paper, table in spec_names():
        spec = load_spec(paper, table)
        for group in mark_groups(spec):
            assert len(set(group)) == len(group), f"{paper}/{table}: a row is twice in one best group"


def test_paper_numbers_print_as_transcribed():
    """One decimal as most papers print, more where the paper prints more (face mAP 0.828, margin 0.02)."""
    from rankrepro.tables.formats import paper_number as _fmt

    assert [_fmt(v) for v in (80.9, 100.0, 3, 0.828, 0.02, 59.55, None)] == [
        "80.9", "100.0", "3.0", "0.828", "0.02", "59.55", ""]
    # a column's decimals (top-k prints 70.70, PNP's fractions 0.380), more where the number has more
    assert [_fmt(70.7, 2), _fmt(0.38, 3), _fmt(0.3125, 3)] == ["70.70", "0.380", "0.3125"]


def test_a_fraction_column_keeps_the_metric_and_three_decimals(tmp_path):
    """PNP prints Dists@intra as 0.318: ours beside it is a fraction too, not 31.8."""
    spec = {"paper": "toy", "table": "t2", "caption": "Toy.", "source": "nowhere", "best": {},
            "columns": [{"key": "r1", "group": "G", "header": "R@1", "setup": "s", "metric": "R@1"},
                        {"key": "d", "group": "G", "header": "Dists@intra", "setup": "s", "metric": "dists@intra",
                         "unit": "fraction"}],
            "rows": [{"method": "A", "loss": {"name": "x"}, "paper": [77.9, 0.318]},
                     {"method": "B", "loss": {"name": "x"}, "paper": [76.3, 0.301]}]}
    metrics = {"A": {"R@1": 0.5, "dists@intra": 0.31214}, "B": {"R@1": 0.4, "dists@intra": 0.3126}}
    cells = []
    for r, row in enumerate(spec["rows"]):
        (tmp_path / "runs" / row["method"]).mkdir(parents=True)
        (tmp_path / "runs" / row["method"] / "metrics.json").write_text(json.dumps({"metrics": metrics[row["method"]]}))
        cells += [{"row": r, "column": c, "metric": col["metric"], "run_ids": [row["method"]], "pending": None}
                  for c, col in enumerate(spec["columns"])]
    rows = render({"paper": "toy", "table": "t2", "spec": spec, "cells": cells}, tmp_path / "runs", tmp_path / "t2")
    a = next(r for r in rows if r["method"] == "A" and r["metric"] == "dists@intra")
    assert a["unit"] == "fraction" and a["ours"] == pytest.approx(0.3121) and a["diff"] == pytest.approx(-0.0059)
    md = (tmp_path / "t2.md").read_text()
    # marks compare ours as printed: 0.312 < 0.313 (B best); R@1 in percent, one decimal
    assert "| A | **77.9** | **50.0** | -27.9 | **0.318** | <u>0.312</u> | -0.006 |" in md
    assert r"\textbf{0.318} & \underline{0.312} & -0.006" in (tmp_path / "t2.tex").read_text()
    spec["decimals"] = 2  # percent columns at the paper's two decimals; the fraction column keeps three
    render({"paper": "toy", "table": "t2", "spec": spec, "cells": cells}, tmp_path / "runs", tmp_path / "t3")
    assert "| A | **77.90** | **50.00** | -27.90 | **0.318** | <u>0.312</u> | -0.006 |" in (tmp_path / "t3.md").read_text()


# ------------------------------------------------------------------------- static tables


def _static_spec(**edits) -> dict:
    spec = {"paper": "mine", "table": "static", "kind": "static", "caption": "Complexity ($n$ items).",
            "source": "hand-written", "columns": [{"key": "cost", "group": "Cost", "header": "forward + backward"},
                                                  {"key": "general", "group": "Cost", "header": "general"}],
            "rows": [{"method": "RaMBO", "cells": [r"$O(n \log n)$", "✓"]},
                     {"method": "Theirs", "paper_row": "Theirs [3]", "cells": ["3×10^{-6}", "x | y"],
                      "note": "as printed"}]}
    spec.update(edits)
    return spec


def _static_plan(tmp_path, spec):
    import yaml

    (tmp_path / "specs" / "mine").mkdir(parents=True, exist_ok=True)
    (tmp_path / "specs" / "mine" / "static.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return make_plan({"mine": ["static"]}, specs_dir=tmp_path / "specs")


def test_a_static_table_plans_no_runs_cells_or_datasets(tmp_path):
    plan = _static_plan(tmp_path, _static_spec())
    entry = plan["tables"]["mine/static"]
    assert plan["runs"] == {} and plan["datasets"] == {}
    assert entry["runs"] == [] and entry["cells"] == [] and entry["spec"]["rows"][1]["paper_row"] == "Theirs [3]"
    assert entry["spec_file"].endswith("mine/static.yaml")


def test_render_static_writes_the_papers_cells(tmp_path):
    from rankrepro.tables.kinds.static import STATIC_NOTE

    plan = _static_plan(tmp_path, _static_spec())
    rows = render(plan["tables"]["mine/static"], tmp_path / "runs", tmp_path / "out" / "static")
    assert rows[0] == {"method": "RaMBO", "column": "Cost forward + backward", "paper": r"$O(n \log n)$"}
    md = (tmp_path / "out" / "static.md").read_text()
    assert STATIC_NOTE in md and "ours" not in md.replace(STATIC_NOTE, "") and "Δ" not in md
    assert "| Method | Cost forward + backward | Cost general |" in md
    assert r"| RaMBO | $O(n \log n)$ | ✓ |" in md  # math and marks as printed
    assert r"| Theirs | 3×10^{-6} | x \| y |" in md and "- Theirs: as printed" in md
    with open(tmp_path / "out" / "static.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["method", "column", "paper"] and len(table) == 4
    assert table[1] == {"method": "RaMBO", "column": "Cost general", "paper": "✓"}
    assert table[2]["paper"] == "3×10^{-6}"
    tex = (tmp_path / "out" / "static.tex").read_text()
    assert r"\caption{Complexity ($n$ items).}" in tex and r"\begin{tabular}{lcc}" in tex
    assert r" & \multicolumn{2}{c}{Cost} \\" in tex and r"Method & forward + backward & general \\" in tex
    assert r"RaMBO & $O(n \log n)$ & $\checkmark$ \\" in tex
    assert r"Theirs & 3$\times$10$^{-6}$ & x | y \\" in tex
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex and "ours" not in tex


def test_a_static_tables_row_header_may_be_empty(tmp_path):
    plan = _static_plan(tmp_path, _static_spec(row_header=""))
    render(plan["tables"]["mine/static"], tmp_path / "runs", tmp_path / "t")
    assert "|  | Cost forward + backward |" in (tmp_path / "t.md").read_text()
    assert "\n & forward + backward & general \\\\\n" in (tmp_path / "t.tex").read_text()


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["rows"][1]["cells"].pop(), r"static.yaml: rows\[1\].cells: 1 cells for 2 columns \('Theirs'\)"),
    (lambda s: s["rows"][0].update(paper=[1, 2]), r"static.yaml: rows\[0\]: Additional properties"),
    (lambda s: s["rows"][0].update(cells=[1, "✓"]), r"static.yaml: rows\[0\].cells\[0\]: 1 is not of type 'string'"),
    (lambda s: s["columns"][0].update(setup="rambo_sop"), r"static.yaml: columns\[0\]: Additional properties"),
    (lambda s: s.update(seeds=[0]), r"static.yaml: seeds: a static table has no runs"),
    (lambda s: s.update(best={}), r"static.yaml: best: a static table has no runs"),
    (lambda s: s.pop("kind"), r"static.yaml: .*is a required property"),  # read as a runs table
])
def test_a_bad_static_spec_names_its_file_and_key(tmp_path, edit, message):
    spec = _static_spec()
    edit(spec)
    with pytest.raises(PlanError, match=message):
        _static_plan(tmp_path, spec)


def test_row_header_is_for_static_tables_only(tmp_path):
    spec = load_spec("suprank", "table1")
    spec = {k: v for k, v in spec.items() if k != "_file"} | {"row_header": "Method", "paper": "mine", "table": "static"}
    with pytest.raises(PlanError, match="row_header"):
        _static_plan(tmp_path, spec)


# ------------------------------------------------ which epoch: last and best on the test set, seeds


def _epochs_table(tmp_path, select):
    """One R@1 column, rows A (seeds 0 and 1) and B (one seed); every run has a test curve: A's last
    0.80 / 0.78 and best 0.82 / 0.84, B's last = best 0.70."""
    spec = {"paper": "toy", "table": "t4", "caption": "Toy.", "source": "nowhere",
            "columns": [{"key": "r1", "group": "G", "header": "R@1", "setup": "s", "metric": "R@1"}],
            "rows": [{"method": "A", "loss": {"name": "x"}, "paper": [81.0]},
                     {"method": "B", "loss": {"name": "x"}, "paper": [70.0]}]}
    runs = {"A0": (0.80, 0.82), "A1": (0.78, 0.84), "B0": (0.70, 0.70)}
    for rid, (last, best) in runs.items():
        (tmp_path / "runs" / rid).mkdir(parents=True)
        (tmp_path / "runs" / rid / "metrics.json").write_text(json.dumps({
            "metrics": {"R@1": last}, "epoch": 10, "select": select,
            "best_test": {"select_by": "R@1", "source": "curve", "epoch": 4, "epochs": {"R@1": 4},
                          "metrics": {"R@1": best}}}))
    cells = [{"row": 0, "column": 0, "metric": "R@1", "run_ids": ["A0", "A1"], "pending": None},
             {"row": 1, "column": 0, "metric": "R@1", "run_ids": ["B0"], "pending": None}]
    table = {"paper": "toy", "table": "t4", "spec": spec, "cells": cells}
    rows = render(table, tmp_path / "runs", tmp_path / "out" / "t4")
    return table, rows, *((tmp_path / "out" / f"t4.{ext}").read_text() for ext in ("md", "tex", "csv"))


def test_a_best_on_test_table_shows_the_last_epoch_beside_it_and_mean_std_over_seeds(tmp_path):
    from rankrepro.tables.index import table_html
    from rankrepro.tables.kinds.base import TableKind

    table, rows, md, tex, csv_text = _epochs_table(tmp_path, "best_test")
    # A: best 82, 84 -> 83.0 ± 1.41 (sample std, n - 1); last 80, 78 -> 79.0 ± 1.41; B: 70.0 both
    a = rows[0]
    assert (a["ours"], a["std"], a["seeds"], a["diff"]) == (83.0, 1.41, 2, 2.0)
    assert (a["select"], a["select_by"], a["last"], a["last_std"], a["best"], a["best_std"]) == (
        "best_test", "R@1", 79.0, 1.41, 83.0, 1.41)
    assert "| Method | G R@1 paper | G R@1 ours | G R@1 Δ | G R@1 last |" in md
    assert "| A | 81.0 | 83.0 ± 1.4 | +2.0 | 79.0 ± 1.4 |" in md and "| B | 70.0 | 70.0 | +0.0 | 70.0 |" in md
    assert "Ours: best epoch on the test set, the paper's protocol (the epoch of highest test R@1" in md
    assert "± = sample standard deviation (n − 1) over 2 seeds" in md
    assert r"A & 81.0 & 83.0 $\pm$ 1.4 & +2.0 & 79.0 $\pm$ 1.4 \\" in tex and r"\begin{tabular}{lrrrr}" in tex
    assert r"best epoch on the test set" in tex and r"$\pm$ = sample standard deviation" in tex
    assert csv_text.splitlines()[0].startswith("method,column,metric,unit,decimals,paper,ours,std,seeds,diff,status,"
                                               "select,select_by,last,last_std,best,best_std,")
    page = table_html(table, TableKind().read_rows(tmp_path / "out" / "t4.csv"))
    assert "<th>last</th>" in page and "<td>79.0 ± 1.4</td>" in page and "best epoch on the test set" in page


def test_a_last_epoch_table_shows_the_best_epoch_where_a_curve_found_better(tmp_path):
    _, rows, md, tex, _ = _epochs_table(tmp_path, "last")
    assert (rows[0]["ours"], rows[0]["std"], rows[0]["diff"]) == (79.0, 1.41, -2.0)
    assert "| Method | G R@1 paper | G R@1 ours | G R@1 Δ | G R@1 best |" in md
    assert "| A | 81.0 | 79.0 ± 1.4 | -2.0 | 83.0 ± 1.4 |" in md
    assert "Ours: last epoch; best: the best epoch on the test set (highest test R@1)" in md


def test_md_text_shows_outside_text_verbatim_by_hand():
    from rankrepro.tables.formats import md_text
    assert md_text("a|b <i>&</i> [x](y) `c` *d* _e_ ~f~ \\ g\nh\r\ni\rj") == \
        r"a\|b &lt;i&gt;&amp;&lt;/i&gt; \[x\](y) \`c\` \*d\* \_e\_ \~f\~ \\ g h i j"
    assert md_text("Notre-Dame de Paris") == "Notre-Dame de Paris"
