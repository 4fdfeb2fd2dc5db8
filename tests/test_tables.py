"""Table specs (transcription checked against the paper text) and rendering."""

import csv
import json
import re
from pathlib import Path

import pytest

from rankrepro.experiments.plan import PlanError, load_spec, make_plan, resolve_run, run_id, spec_names
from rankrepro.tables.render import REPLICA_NOTE, render

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"


def test_every_spec_loads_and_has_one_number_per_column():
    assert ("suprank", "table1") in spec_names()
    for paper, table in spec_names():
        spec = load_spec(paper, table)
        assert spec["rows"] and spec["columns"]


@pytest.mark.skipif(not (PAPERS / "suprank_tpami.txt").exists(), reason="papers not beside the checkout")
def test_suprank_table1_numbers_match_the_paper_text():
    text = (PAPERS / "suprank_tpami.txt").read_text()
    block = text[text.index("TABLE I:"):text.index("VII-A2")]
    spec = load_spec("suprank", "table1")
    for row in spec["rows"]:
        line = next(l for l in block.splitlines() if l.startswith(row["method"]))
        numbers = [float(x) for x in re.findall(r"\d+\.\d", line[len(row["method"]):])]
        assert numbers == row["paper"], row["method"]


def _plan(overrides=None):
    return make_plan({"suprank": ["table1"]}, overrides)


def test_cells_share_runs_and_pending_cells_say_why():
    plan = _plan()
    spec, cells, runs = plan["tables"]["suprank/table1"]["spec"], plan["tables"]["suprank/table1"]["cells"], plan["runs"]
    smooth = [c for c in cells if spec["rows"][c["row"]]["loss"]["name"] == "smooth_ap"]
    sop = [c for c in smooth if spec["columns"][c["column"]]["setup"] == "suprank_sop"]
    assert len(sop) == 2 and sop[0]["run_ids"] == sop[1]["run_ids"] and len(sop[0]["run_ids"]) == 1
    inat = [c for c in smooth if spec["columns"][c["column"]]["setup"] == "suprank_inat"]
    assert all(c["pending"] and "not implemented" in c["pending"] for c in inat)
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
    plan = _plan()
    _fake_metrics(tmp_path / "runs", plan["runs"], 0.8123, 0.5, replica=False)
    rows = render(plan["tables"]["suprank/table1"], tmp_path / "runs", tmp_path / "out" / "table1")
    smooth_r1 = next(r for r in rows if r["method"].startswith("Smooth-AP") and r["column"] == "SOP R@1")
    assert smooth_r1["paper"] == 80.9 and smooth_r1["ours"] == 81.23 and smooth_r1["diff"] == pytest.approx(0.33)
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "| Smooth-AP [27] | 80.9 | 81.2 | +0.3 | 54.3 | 50.0 | -4.3 | 67.3 | — |" in md
    assert "not implemented yet" in md and "Replica data" not in md
    with open(tmp_path / "out" / "table1.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 5 * 4 and {r["status"] for r in table} >= {"ours"}
    tex = (tmp_path / "out" / "table1.tex").read_text()
    assert r"\begin{tabular}" in tex and "80.9 & 81.2 & +0.3" in tex


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
