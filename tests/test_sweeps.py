"""Sweep specs (``kind: sweep``, SupRank Figs. 6-8): schema, expansion into runs, rendering and plot."""

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from rankrepro.cli import main as cli_main
from rankrepro.plan.build import make_plan
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import load_setups
from rankrepro.plan.specs import load_spec
from rankrepro.tables.render import render
from rankrepro.tables.kinds.sweep import DPI, PANEL_SIZE, relative_gain, sweep_entries

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "src" / "rankrepro" / "tables" / "specs" / "suprank"
PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"
FIGS = ("fig6", "fig7", "fig8")


@pytest.mark.parametrize("table", FIGS)
def test_the_schema_accepts_the_figure_specs(table):
    spec = load_spec("suprank", table)
    assert spec["kind"] == "sweep" and len(spec["panels"]) == 2
    points = sum(len(panel["values"]) for panel in spec["panels"])
    assert len(spec["rows"]) == points and len(spec["columns"]) == 1  # the table it renders as
    for panel in spec["panels"]:
        assert len(panel["paper"]) == len(panel["values"])


def _sweep_copy(tmp_path, edit, table="fig7"):
    spec = yaml.safe_load((SPECS / f"{table}.yaml").read_text())
    edit(spec)
    d = tmp_path / "specs" / "suprank"
    d.mkdir(parents=True)
    (d / f"{table}.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    return tmp_path / "specs"


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["panels"][0].pop("param"), r"fig7\.yaml: panels\[0\]: 'param' is a required property"),
    (lambda s: s["panels"][1]["paper"].pop(), r"fig7\.yaml: panels\[1\]\.paper: 5 numbers for 6 values"),
    (lambda s: s["panels"][0].update(param="lam"), r"fig7\.yaml: panels\[0\]\.param: 'lam' does not match"),
    (lambda s: s["panels"][0].update(values=[]), r"fig7\.yaml: panels\[0\]\.values: \[\] should be non-empty"),
    (lambda s: s["panels"][0].update(scale="loglog"), r"fig7\.yaml: panels\[0\]\.scale: 'loglog' is not one of"),
    (lambda s: s.update(rows=[{"method": "x", "paper": [1.0]}]), r"fig7\.yaml: rows: a sweep has panels, not rows"),
    (lambda s: s.pop("panels"), r"fig7\.yaml: \(top level\): 'panels' is a required property"),
    (lambda s: s["panels"][0].update(param="loss.lamm"),
     r"fig7\.yaml: panels\[0\]\.values\[0\] .*loss\.lamm: loss 'roadmap' takes no parameter 'lamm'"),
    (lambda s: s["panels"][1].update(setup="suprank_inatt"), r"fig7\.yaml: panels\[1\]\.loss: unknown setup"),
    (lambda s: s["panels"][0].update(param="sampler.batch_size", values=["big"], paper=[None]),
     r"fig7\.yaml: panels\[0\]\.values\[0\] \(.*\): sampler\.batch_size: .*batch_size must be integer"),
])
def test_a_malformed_sweep_names_its_file_and_key(tmp_path, edit, message):
    with pytest.raises(PlanError, match=message):
        make_plan({"suprank": ["fig7"]}, specs_dir=_sweep_copy(tmp_path, edit))


def _cell_runs(plan, key, method, column):
    table = plan["tables"][key]
    r = [row["method"] for row in table["spec"]["rows"]].index(method)
    c = [col["key"] for col in table["spec"]["columns"]].index(column)
    (cell,) = [x for x in table["cells"] if (x["row"], x["column"]) == (r, c)]
    return cell["run_ids"]


def test_a_sweep_expands_into_one_run_per_value_sharing_the_tables_runs():
    plan = make_plan({"suprank": ["table1", "table2", "fig6", "fig7"]})
    fig7 = plan["tables"]["suprank/fig7"]
    lam = [c for c in fig7["cells"] if c["panel"] == "lam"]
    assert [c["value"] for c in lam] == [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]
    ids = [c["run_ids"][0] for c in lam]
    assert len(set(ids)) == len(ids) and all(len(c["run_ids"]) == 1 for c in lam)
    for cell, rid in zip(lam, ids):
        run = plan["runs"][rid]
        assert run["loss"]["name"] == "roadmap" and run["loss"]["lam"] == cell["value"] == cell["resolved"]
        assert run["dataset"] == "inat"
    # lambda 0.1 is the paper's default: Table I's ROADMAP on iNaturalist, one run
    assert lam[1]["run_ids"] == _cell_runs(plan, "suprank/table1", "ROADMAP", "inat_r1")
    rho = {c["value"]: c["run_ids"] for c in fig7["cells"] if c["panel"] == "rho"}
    assert rho[100.0] == _cell_runs(plan, "suprank/table2", "Sup-AP", "inat_map_r")
    assert len({r[0] for r in rho.values()}) == 6
    # Fig. 6: two runs per batch size (with and without L_DG*); 256 is the tables' batch size
    fig6 = plan["tables"]["suprank/fig6"]
    assert len(fig6["cells"]) == 10 and len(fig6["runs"]) == 20
    for cell in fig6["cells"]:
        (ours,), (ref,) = cell["run_ids"], cell["reference_run_ids"]
        assert plan["runs"][ours]["sampler"]["batch_size"] == plan["runs"][ref]["sampler"]["batch_size"] == cell["value"]
        assert (plan["runs"][ours]["loss"]["name"], plan["runs"][ref]["loss"]["name"]) == ("roadmap", "sup_ap")
    at256 = {c["panel"]: c for c in fig6["cells"] if c["value"] == 256}
    assert at256["sop"]["run_ids"] == _cell_runs(plan, "suprank/table1", "ROADMAP", "sop_map_r")
    assert at256["inat"]["reference_run_ids"] == _cell_runs(plan, "suprank/table2", "Sup-AP", "inat_map_r")
    assert set(fig6["runs"]) == {r for c in fig6["cells"] for r in c["run_ids"] + c["reference_run_ids"]}


def test_seeds_and_overrides_of_the_swept_key(tmp_path):
    specs = _sweep_copy(tmp_path, lambda s: s.update(seeds=[0, 1]), table="fig6")
    plan = make_plan({"suprank": ["fig6"]}, specs_dir=specs)
    cells = plan["tables"]["suprank/fig6"]["cells"]
    assert all(len(c["run_ids"]) == len(c["reference_run_ids"]) == 2 for c in cells)
    assert len(plan["runs"]) == 40
    # the config's overrides come last, as for every table: the points collapse and say so
    plan = make_plan({"suprank": ["fig6"]}, {"sampler": {"batch_size": 32}})
    cells = plan["tables"]["suprank/fig6"]["cells"]
    assert {c["resolved"] for c in cells} == {32} and len(plan["runs"]) == 4


def _fake_metrics(runs_dir, plan, value_of, replica=False):
    for rid in plan["runs"]:
        d = runs_dir / rid
        d.mkdir(parents=True, exist_ok=True)
        v = value_of(rid, plan["runs"][rid])
        if v is not None:
            metrics = {m: v for m in ("R@1", "mAP@R", "AP_level0", "H-AP")}
            (d / "metrics.json").write_text(json.dumps({"metrics": metrics, "replica": replica}))


def test_relative_gain_by_hand():
    assert relative_gain([50.0], [40.0]) == (25.0, None)
    mean, std = relative_gain([50.0, 60.0], [40.0, 50.0])  # per seed: 25 % and 20 %
    assert mean == pytest.approx(22.5) and std == pytest.approx(math.sqrt(12.5))
    mean, std = relative_gain([50.0, 60.0], [44.0])  # unpaired: of the means, 55 vs 44
    assert mean == pytest.approx(25.0) and std is None


def test_sweep_entries_compute_the_relative_gain_from_the_runs(tmp_path):
    plan = make_plan({"suprank": ["fig6"]})
    # ROADMAP mAP@R 0.33 and Sup-AP 0.30 at every batch size: +10 % relative
    _fake_metrics(tmp_path, plan, lambda rid, run: 0.33 if run["loss"]["name"] == "roadmap" else 0.30)
    entries, replica = sweep_entries(plan["tables"]["suprank/fig6"], tmp_path)
    assert not replica and len(entries) == 10
    first = entries[0]
    assert first["value"] == 32 and first["paper"] == 22.8
    assert first["ours"] == pytest.approx(10.0) and first["diff"] == pytest.approx(10.0 - 22.8)
    assert (first["ours_metric"], first["reference_metric"]) == (pytest.approx(33.0), pytest.approx(30.0))


def test_render_and_plot_write_md_csv_tex_png(tmp_path):
    gone = {"suprank_sop", "suprank_sop_hier"}  # as if SOP's setups were only planned: pending points
    setups = {name: s for name, s in load_setups().items() if name not in gone}
    plan = make_plan({"suprank": ["fig6", "fig8"]}, setups=setups,
                     planned={"setups": gone, "datasets": set(), "losses": set()})
    runs_dir = tmp_path / "runs"
    finished = sorted(plan["runs"])[:-1]  # one run not finished yet
    _fake_metrics(runs_dir, plan, lambda rid, run: 0.4 + 0.01 * (len(rid) % 7) if rid in finished else None,
                  replica=True)
    for table in ("fig6", "fig8"):
        table_plan = json.loads(json.dumps(plan["tables"][f"suprank/{table}"]))  # as the rule reads it
        render(table_plan, runs_dir, tmp_path / "out" / table)
        for ext in ("md", "csv", "tex"):
            assert (tmp_path / "out" / f"{table}.{ext}").stat().st_size > 0
        md = (tmp_path / "out" / f"{table}.md").read_text()
        assert "Replica data" in md and "Source: suprank_tpami.txt" in md
        with open(tmp_path / "out" / f"{table}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == len(table_plan["spec"]["rows"])
        assert {"method", "column", "paper", "ours", "diff", "status", "value", "run_ids"} <= set(rows[0])
        png = tmp_path / "out" / f"{table}.png"
        assert cli_main(["sweep-plot", "--plan", str(_write(tmp_path / f"{table}.json", table_plan)),
                         "--runs-dir", str(runs_dir), "--out", str(png)]) == 0
        import matplotlib.image

        image = matplotlib.image.imread(png)
        panels = len(table_plan["spec"]["panels"])
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert image.shape[:2] == (round(PANEL_SIZE[1] * DPI), round(panels * PANEL_SIZE[0] * DPI))
        assert image[..., :3].std() > 0  # something is drawn
    fig6 = (tmp_path / "out" / "fig6.md").read_text()
    assert "setup suprank_sop not implemented yet: sop: batch size = 32, sop: batch size = 64" in fig6
    assert "| 32 | 5.5 | — |  | — | — |  |" in fig6  # a pending point keeps the paper's number
    assert "| 32 | 22.8 |" in fig6
    tex = (tmp_path / "out" / "fig8.tex").read_text()
    assert r"$\alpha$ = 0.25" in tex and r"$\lambda$ = 0.1" in tex
    fig8 = (tmp_path / "out" / "fig8.md").read_text()
    assert "missing (run not finished" in fig8


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


needs_papers = pytest.mark.skipif(not PAPERS.is_dir(), reason=f"the papers folder {PAPERS} is absent")


@needs_papers
def test_the_paper_points_are_the_figures_text():
    """Fig. 6's bar labels (each printed three times in the text layer, after the x ticks) and the
    two points of Fig. 7(a) the text states."""
    text = (PAPERS / "suprank_tpami.txt").read_text()
    fig6 = load_spec("suprank", "fig6")
    for panel, caption in zip(fig6["panels"], ("(a) iNaturalist", "(b) SOP")):
        ticks = "".join(str(v) for v in panel["values"])
        labels = "".join(f"{v:g}" * 3 for v in panel["paper"])
        line = text.splitlines()[text.splitlines().index(caption) - 1]
        assert line.startswith(ticks) and line.endswith(labels), (panel["key"], line)
    fig7 = load_spec("suprank", "fig7")
    lam = dict(zip(fig7["panels"][0]["values"], fig7["panels"][0]["paper"]))
    assert "72.1 R@1 v.s. 71.8 R@1" in text
    assert {k: v for k, v in lam.items() if v is not None} == {0.1: 71.8, 0.3: 72.1}
    assert all(v is None for panel in load_spec("suprank", "fig8")["panels"] for v in panel["paper"])
