"""The papers' numbers a leaderboard shows beside ours (rankrepro.tables.reported, issue 36): derived from the
papers' table specs by the module docstring's rule, never transcribed again."""

import shutil

import pytest
import yaml

from rankrepro import catalog as catalog_mod
from rankrepro.plan.planner import Planner
from rankrepro.plan.specs import SPECS_DIR
from rankrepro.tables.kinds.leaderboard import add_reported
from rankrepro.tables.reported import NEWEST_FIRST, Reported, choose, reported_for, reported_numbers


@pytest.fixture(scope="module")
def planner():
    return Planner()


@pytest.fixture(scope="module")
def index(planner):
    return reported_for(planner)


def test_a_loss_shows_its_own_papers_number_first(index):
    # Smooth-AP on SOP R@1: its own Table 2 (BS=224: the first row at its registered tau 0.01), not SupRank's 80.9
    chosen = choose(index[("smooth_ap", "sop", "R@1", "percent")], "smooth_ap")
    assert (chosen.value, chosen.paper, chosen.table, chosen.method) == (79.2, "smooth_ap", "table2",
                                                                        "Smooth-AP BS=224")
    assert chosen.source == 'smooth_ap/table2, row "Smooth-AP BS=224", column "SOP R@1"'
    others = {(n.paper, n.value) for n in index[("smooth_ap", "sop", "R@1", "percent")]}
    assert ("smooth_ap", 80.1) in others and ("suprank", 80.9) in others  # candidates, not chosen


def test_a_loss_of_no_reproduced_paper_shows_the_newest_papers_number(index):
    candidates = index[("triplet", "sop", "R@1", "percent")]
    assert {n.paper for n in candidates} == {"rambo", "suprank"}  # RaMBO's and SupRank's quotes (cited rows)
    chosen = choose(candidates, None)
    assert (chosen.paper, chosen.value, chosen.cited) == (NEWEST_FIRST[0], 72.7, True)
    assert chosen.source == 'suprank/table4, row "Triplet SH [5]", column "SOP R@1" (cited from other work)'


def test_a_loss_no_paper_reports_has_no_number(index, planner):
    assert ("calibration", "sop", "R@1", "percent") not in index
    rows = [{"loss": {"name": "calibration"}}, {"loss": {"name": "smooth_ap"}}]
    columns = [{"metric": "R@1"}, {"metric": "mAP@R"}, {"metric": "R@1", "unit": "fraction"}]
    add_reported(rows, columns, "sop", index, planner.catalog["loss"])
    assert rows[0]["paper"] == [None, None, None] and rows[0]["paper_source"] == [None, None, None]
    assert rows[1]["paper"][0] == 79.2 and rows[1]["paper"][2] is None  # another unit: no number
    assert rows[1]["paper_source"][0].startswith("smooth_ap/table2")


def test_the_declared_papers_are_folders_of_table_specs():
    declared = {e["paper"] for e in catalog_mod.load()["loss"].values() if "paper" in e}
    assert declared == set(NEWEST_FIRST)
    assert all((SPECS_DIR / paper).is_dir() for paper in NEWEST_FIRST)
    losses = catalog_mod.load()["loss"]
    assert [losses[n].get("paper") for n in ("smooth_ap", "pnp_dq", "rambo_recall", "topk_precision", "roadmap",
                                             "happier", "sup_ap", "triplet", "smooth_recall")] == [
        "smooth_ap", "pnp", "rambo", "topk", "suprank", "suprank", "suprank", None, None]


def _number(paper, value, as_defined=True, table="table1", position=(0, 0)):
    return Reported(value, paper, table, "row", "SOP R@1", position, False, as_defined)


def test_the_choice_rule_by_hand():
    topk, pnp, suprank = _number("topk", 1.0), _number("pnp", 2.0), _number("suprank", 3.0)
    assert choose([topk, pnp, suprank], "topk") is topk  # its own paper, however old
    assert choose([topk, pnp, suprank], None) is suprank  # else the newest
    assert choose([topk, pnp], "smooth_ap") is pnp  # its own paper reports none here
    other = _number("a_users_paper", 4.0)
    assert choose([other, topk], None) is topk  # a paper folder of no known date: after the five
    tuned, defined = _number("pnp", 5.0, as_defined=False), _number("pnp", 6.0, table="table7")
    assert choose([tuned, defined], None) is defined  # as defined before tuned, whatever the table
    newer_tuned = _number("suprank", 9.0, as_defined=False)
    assert choose([newer_tuned, topk], None) is topk  # as defined before tuned, whatever the paper
    assert choose([newer_tuned, topk], "suprank") is newer_tuned  # its own paper first
    first, later = _number("pnp", 7.0, table="table2", position=(3, 1)), _number("pnp", 8.0, table="table2",
                                                                                  position=(4, 0))
    assert choose([later, first], None) is first
    assert choose([], "pnp") is None


def _write_spec(specs, paper, table, rows, columns):
    (specs / paper).mkdir(parents=True, exist_ok=True)
    (specs / paper / f"{table}.yaml").write_text(yaml.safe_dump({
        "paper": paper, "table": table, "title": "t", "caption": "c", "source": "test", "columns": columns,
        "rows": rows}))


def test_cited_rows_count_variants_and_other_datasets_do_not(tmp_path, planner):
    specs = tmp_path / "specs"
    shutil.copytree(SPECS_DIR / "roof", specs / "roof")  # a leaderboard: no paper's numbers
    sop = {"key": "r1", "group": "SOP", "header": "R@1", "setup": "smooth_ap_sop_224", "metric": "R@1"}
    cub = {"key": "cub_r1", "group": "CUB", "header": "R@1", "setup": "suprank_cub", "metric": "R@1"}
    _write_spec(specs, "pnp", "table9", [
        {"method": "Quoted [3]", "cited": True, "loss": {"name": "fast_ap"}, "paper": [76.4, 60.0]},
        {"method": "Ours", "loss": {"name": "pnp_dq"}, "paper": [81.0, None],
         "variants": [{"label": "tau 0.5", "source": "test", "run": {"loss": {"tau": 0.5}}}]},
        {"method": "Tuned", "loss": {"name": "pnp_dq", "tau": 0.05}, "paper": [82.0, 70.0]},
    ], [sop, cub])
    index = reported_numbers(specs, planner.setups, planner.catalog["loss"], planner.schemas)
    fast = index[("fast_ap", "sop", "R@1", "percent")]
    assert [(n.value, n.cited) for n in fast] == [(76.4, True)]
    assert fast[0].source == 'pnp/table9, row "Quoted [3]", column "SOP R@1" (cited from other work)'
    assert [n.value for n in index[("fast_ap", "cub", "R@1", "percent")]] == [60.0]  # the column's setup's dataset
    pnp = index[("pnp_dq", "sop", "R@1", "percent")]
    assert [(n.value, n.as_defined) for n in pnp] == [(81.0, True), (82.0, False)]  # the variant: no number
    assert choose(pnp, "pnp").value == 81.0
    assert [n.value for n in index[("pnp_dq", "cub", "R@1", "percent")]] == [70.0]  # the paper prints none for Ours


def test_a_cited_row_names_a_registered_loss_or_the_plan_fails(tmp_path):
    from rankrepro.plan.build import make_plan
    from rankrepro.plan.schema import PlanError

    specs = tmp_path / "specs"
    sop = {"key": "r1", "group": "SOP", "header": "R@1", "setup": "smooth_ap_sop_224", "metric": "R@1"}
    _write_spec(specs, "pnp", "table9", [{"method": "Quoted [3]", "cited": True, "loss": {"name": "fastap"},
                                         "paper": [76.4]}], [sop])
    with pytest.raises(PlanError, match=r"table9.yaml: rows\[0\].loss.name: unknown loss 'fastap'.*fast_ap"):
        make_plan({"pnp": ["table9"]}, specs_dir=specs)
    _write_spec(specs, "pnp", "table9", [{"method": "Quoted [3]", "cited": True, "loss": {"name": "fast_ap", "gamma": 1},
                                         "paper": [76.4]}], [sop])
    with pytest.raises(PlanError, match=r"table9.yaml: rows\[0\].loss"):  # a quote has no parameters of ours
        make_plan({"pnp": ["table9"]}, specs_dir=specs)


def test_a_leaderboard_plan_records_the_numbers_and_their_sources():
    from rankrepro.plan.build import make_plan

    spec = make_plan({"roof": ["sop"]})["tables"]["roof/sop"]["spec"]
    metrics = [c["metric"] for c in spec["columns"]]
    rows = {row["method"]: row for row in spec["rows"]}
    smooth = rows["smooth_ap"]
    assert smooth["paper"][metrics.index("R@1")] == 79.2
    assert smooth["paper_source"][metrics.index("R@1")].startswith('smooth_ap/table2, row "Smooth-AP BS=224"')
    assert rows["calibration"]["paper"] == [None] * len(metrics)
    assert all(len(row["paper"]) == len(row["paper_source"]) == len(metrics) for row in spec["rows"])


def test_the_page_the_csv_and_the_latex_show_the_papers_number_and_its_source(tmp_path):
    import csv
    import json

    from rankrepro.plan.build import make_plan
    from rankrepro.tables.render import render

    table = make_plan({"roof": ["sop"]}, seeds={"roof/sop": [0]})["tables"]["roof/sop"]
    names = [row["method"] for row in table["spec"]["rows"]]
    for cell in table["cells"]:
        if names[cell["row"]] != "smooth_ap":
            cell["run_ids"] = []
        for rid in cell["run_ids"]:
            (tmp_path / "runs" / rid).mkdir(parents=True, exist_ok=True)
            (tmp_path / "runs" / rid / "metrics.json").write_text(json.dumps(
                {"replica": False, "select": "last", "metrics": {m: 0.5 for m in ("R@1", "mAP@R", "H-AP", "ASI",
                                                                                  "NDCG")}}))
    render(table, tmp_path / "runs", tmp_path / "out" / "sop")
    md = (tmp_path / "out" / "sop.md").read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| Rank"))
    assert "| R@1 (paper) | mAP@R (paper) |" in header
    smooth = next(ln for ln in md.splitlines() if ln.startswith("| 1 | smooth_ap |"))
    assert "| 79.2 [1] |" in smooth  # its source's index in the notes
    assert '- [1] smooth_ap/table2, row "Smooth-AP BS=224", column "SOP R@1"' in md
    assert "under that paper's recipe" in md
    with open(tmp_path / "out" / "sop.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["method"] == "smooth_ap"]
    r1 = next(r for r in rows if r["metric"] == "R@1")
    assert (r1["paper"], r1["diff"], r1["paper_source"]) == (
        "79.2", "-29.2", 'smooth_ap/table2, row "Smooth-AP BS=224", column "SOP R@1"')
    calibration = next(ln for ln in md.splitlines() if "| calibration |" in ln)
    assert calibration.count("| — |") >= 4  # no run, no paper number
    tex = (tmp_path / "out" / "sop.tex").read_text()
    assert "R@1 (paper)" in tex and "79.2" in tex
