"""Variant rows (rankrepro.plan.variants): declared in the specs, off by default, planned, rendered, costed, indexed."""

import copy
import csv
import json
import shutil

import pytest
import yaml

from rankrepro.plan.build import make_plan, plan_from_config
from rankrepro.plan.cost import plan_cost, to_text
from rankrepro.plan.schema import PlanError
from rankrepro.plan.specs import SPECS_DIR
from rankrepro.plan.variants import SAME_AS_MAIN, expand_variants, variants_on
from rankrepro.plan.model import TablePlan
from rankrepro.tables.index import build_index, table_html, to_markdown as index_markdown
from rankrepro.tables.plots import scatter_points
from rankrepro.tables.render import render

from test_plan import REPO

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())

#: the disagreements issue 34 asks a variant row for: (table, main row's method, a word of the variant's label)
DISAGREEMENTS = [
    ("pnp/table3", "PNP-D_q (BS = 112)", "label-based positives"),
    ("rambo/table2", "RaMBO (ResNet-50, 512) log log", "no batch memory"),
    ("topk/table1_cub", "Lifted Struct Loss", "pair batches"),
    ("suprank/table5", "ΣTL_SH [5]", "level 2 skipped"),
    ("rambo/table5", "Faster R-CNN ResNet50, VOC 07", "lr 0.01"),
    ("suprank/table4", "ROADMAP (ours) DeiT-S", "ROADMAP_pp_inat"),
    ("suprank/table1", "ROADMAP", "best test epoch"),
    ("smooth_ap/table4", "VGGFace2 +Smooth-AP", "random base classifier"),
    ("smooth_ap/table4", "ArcFace +Smooth-AP", "no base loss"),
]


@pytest.fixture(scope="module")
def plans():
    """config.yaml's tables planned without and with variant rows."""
    args = (CONFIG["tables"], {}, CONFIG["datasets"])
    return make_plan(*args), make_plan(*args, variants=True)


def _strip_variants(src, dst):
    """A copy of the specs folder ``src`` at ``dst`` with every row's ``variants`` removed."""
    shutil.copytree(src, dst)
    for path in dst.glob("*/*.yaml"):
        spec = yaml.safe_load(path.read_text())
        if any("variants" in row for row in spec.get("rows") or ()):
            for row in spec["rows"]:
                row.pop("variants", None)
            path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False))


def test_variants_on_follows_the_table_over_its_paper():
    assert not variants_on(None, "pnp", "table3") and not variants_on(False, "pnp", "table3")
    assert variants_on(True, "pnp", "table3")
    assert variants_on({"pnp": True}, "pnp", "table3") and not variants_on({"pnp": True}, "topk", "table1_cub")
    assert not variants_on({"pnp": True, "pnp/table3": False}, "pnp", "table3")
    assert variants_on({"pnp": False, "pnp/table3": True}, "pnp", "table3")


def test_without_variants_the_plan_is_the_one_of_specs_without_declarations(plans, tmp_path):
    """Off (the default), the declarations change nothing: runs, ids, cells and specs as if never written."""
    _strip_variants(SPECS_DIR, tmp_path / "specs")
    stripped = make_plan(CONFIG["tables"], {}, CONFIG["datasets"], specs_dir=tmp_path / "specs")
    off = plans[0]
    assert sorted(off["runs"]) == sorted(stripped["runs"])
    for key, table in off["tables"].items():
        assert table["cells"] == stripped["tables"][key]["cells"], key
        assert table["spec"]["rows"] == stripped["tables"][key]["spec"]["rows"], key


def test_variants_add_rows_and_keep_every_paper_cell_and_run(plans):
    off, on = plans
    assert set(off["runs"]) < set(on["runs"])
    for key, table in off["tables"].items():
        cells_on = on["tables"][key]["cells"]
        assert cells_on[:len(table["cells"])] == table["cells"], key  # paper rows first, unchanged
        assert all(c.get("variant") for c in cells_on[len(table["cells"]):]), key


@pytest.mark.parametrize("key, method, label", DISAGREEMENTS)
def test_each_disagreement_has_its_variant_row(plans, key, method, label):
    spec = plans[1]["tables"][key]["spec"]
    rows = [r for r in spec["rows"] if "variant" in r and spec["rows"][r["variant"]["of"]]["method"] == method]
    assert any(label in r["variant"]["label"] for r in rows), [r["method"] for r in rows]
    assert all(r["variant"]["source"] for r in rows)


def _cells(plan, key, method):
    table = plan["tables"][key]
    rows = {r: row for r, row in enumerate(table["spec"]["rows"])}
    return {table["spec"]["columns"][c["column"]]["key"]: c for c in table["cells"]
            if rows[c["row"]]["method"] == method}


def _differences(a, b, prefix=""):
    """The dotted keys where runs ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {d for k in set(a) | set(b) for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")}
    return set() if a == b else {prefix.rstrip(".")}


def test_a_variant_run_is_its_main_run_with_the_declared_change_only(plans):
    on = plans[1]
    main = _cells(on, "rambo/table5", "Faster R-CNN ResNet50, VOC 07")
    variant = _cells(on, "rambo/table5", "Faster R-CNN ResNet50, VOC 07 · CE at lr 0.01 (mmdet's rate for 16 "
                                         "images, unscaled)")
    assert variant["rambo"]["pending"] == SAME_AS_MAIN and not variant["rambo"]["run_ids"]
    for main_id, variant_id in zip(main["ce"]["run_ids"], variant["ce"]["run_ids"], strict=True):  # one per seed
        # the loss group (no parameters in a detector's loss) copies net's rate where the setup gives it none
        assert _differences(on["runs"][main_id], on["runs"][variant_id]) == {"optimizer.groups.net.lr",
                                                                             "optimizer.groups.loss.lr"}
        assert on["runs"][variant_id]["optimizer"]["groups"]["net"]["lr"] == 0.01
    topk = _cells(on, "topk/table1_sop", "Proxy NCA Loss")
    topk_variant = _cells(on, "topk/table1_sop", "Proxy NCA Loss · code's pair batches (2 per class, batch 32)")
    main_run, variant_run = (on["runs"][c["p1"]["run_ids"][0]] for c in (topk, topk_variant))
    assert {d.split(".")[0] for d in _differences(main_run, variant_run)} == {"sampler"}
    assert variant_run["sampler"]["samples_per_class"] == 2 and variant_run["sampler"]["batch_size"] == 32
    assert "rows[8].variants[0].run" in on["provenance"][topk_variant["p1"]["run_ids"][0]]["sampler.batch_size"]


def test_a_selection_variant_shows_the_main_rows_own_runs(plans):
    on = plans[1]
    main = _cells(on, "suprank/table1", "ROADMAP")
    variant = _cells(on, "suprank/table1", "ROADMAP · best test epoch (select best_test)")
    assert {k: c["run_ids"] for k, c in main.items()} == {k: c["run_ids"] for k, c in variant.items()}
    assert all(c["select"] == "best_test" for c in variant.values())


def _spec_dir(tmp_path, paper, table, edit):
    """A specs folder with ``paper/table`` edited by ``edit(spec)``."""
    root = tmp_path / "specs"
    (root / paper).mkdir(parents=True)
    spec = yaml.safe_load((SPECS_DIR / paper / f"{table}.yaml").read_text())
    edit(spec)
    (root / paper / f"{table}.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    return root


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["rows"][-1]["variants"].append(copy.deepcopy(s["rows"][-1]["variants"][0])),
     r"rows\[13\]\.variants\[1\]\.label: .* labels two variants"),
    (lambda s: s["rows"][-1]["variants"][0].update(columns=["r5"]),
     r"rows\[13\]\.variants\[0\]: 'r5': no column has this group or key"),
    (lambda s: s["rows"][-1]["variants"][0].update(run={"loss": {"index_block": 4}}),
     r"rows\[13\]\.variants\[0\]\.run"),
    (lambda s: s["rows"][-1]["variants"][0].pop("source"), r"rows\[13\]\.variants\[0\].*source"),
    (lambda s: s["rows"][-1]["variants"][0].pop("run"), r"rows\[13\]\.variants\[0\]"),
    (lambda s: s["rows"][0].update(variants=s["rows"][-1]["variants"]), r"rows\[0\]"),  # a cited row
])
def test_a_wrong_declaration_fails_the_plan_naming_the_spec_and_key(tmp_path, edit, message):
    specs = _spec_dir(tmp_path, "pnp", "table3", edit)
    with pytest.raises(PlanError, match=message) as err:
        make_plan({"pnp": ["table3"]}, specs_dir=specs, variants=True)
    assert "pnp/table3.yaml" in str(err.value)


def test_a_declarations_form_is_checked_with_variants_off_too(tmp_path):
    """Off, a variant's runs are not resolved (nor its loss keys checked), but its form is: labels, columns, keys."""
    specs = _spec_dir(tmp_path, "pnp", "table3", lambda s: s["rows"][-1]["variants"][0].update(columns=["r5"]))
    with pytest.raises(PlanError, match=r"pnp/table3.yaml: rows\[13\]\.variants\[0\]: 'r5'"):
        make_plan({"pnp": ["table3"]}, specs_dir=specs)


@pytest.mark.parametrize("variants, message", [
    ({"pnp/table9": True}, r"config variants\.pnp/table9: no table pnp/table9 in the config's tables"),
    ({"smooth": True}, r"config variants\.smooth: no paper smooth"),
    ({"pnp/table1": True}, r"config variants\.pnp/table1: the spec of pnp/table1 declares no variant rows; "
                           r"tables that do: pnp/table3"),
])
def test_a_wrong_variants_setting_names_the_config_key(variants, message):
    with pytest.raises(PlanError, match=message):
        make_plan({"pnp": ["table1", "table3"]}, variants=variants)


def test_the_config_schema_refuses_a_variants_setting_of_another_type():
    config = {**copy.deepcopy(CONFIG), "tables": {"pnp": ["table3"]}, "variants": "yes"}
    with pytest.raises(PlanError, match=r"config: variants: 'yes' is not of type 'boolean', 'object' .*--configfile"):
        plan_from_config(config)  # what `snakemake --config variants=true` gives: text, and the hint
    config["variants"] = {"pnp": True}
    assert any(r["variant"] for r in [row for row in plan_from_config(config)["tables"]["pnp/table3"]["spec"]["rows"]
                                      if "variant" in row])


def _metrics(runs_dir, rid, r1, best=None):
    (runs_dir / rid).mkdir(parents=True, exist_ok=True)
    record = {"metrics": {"R@1": r1, "mAP@R": r1 / 2}, "select": "last"}
    if best is not None:
        record["best_test"] = {"metrics": {"R@1": best, "mAP@R": best / 2}, "source": "curve", "select_by": "R@1",
                               "epoch": 2}
    (runs_dir / rid / "metrics.json").write_text(json.dumps(record))


def test_a_variant_row_renders_with_its_delta_to_the_paper_and_to_the_main_row(tmp_path):
    plan = make_plan({"suprank": ["table1"]}, variants=True)
    table = plan["tables"]["suprank/table1"]
    runs = tmp_path / "runs"
    for rid in plan["runs"]:
        _metrics(runs, rid, 0.70, best=0.72)
    rows = render(table, runs, tmp_path / "out" / "table1")
    main = next(r for r in rows if r["method"] == "ROADMAP" and r["column"] == "SOP R@1")
    variant = next(r for r in rows if r["method"].startswith("ROADMAP · best test") and r["column"] == "SOP R@1")
    assert (main["ours"], main["select"], main["variant"], main["diff_main"]) == (70.0, "last", "", None)
    assert variant["ours"] == 72.0 and variant["select"] == "best_test"
    assert variant["diff"] == pytest.approx(72.0 - main["paper"]) and variant["diff_main"] == pytest.approx(2.0)
    assert variant["paper"] == main["paper"] and not variant["ours_mark"] and not variant["paper_mark"]
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "SOP R@1 Δ main" in md and "Variant rows (config `variants`)" not in md  # that's the index's words
    assert "Variant row 'ROADMAP · best test epoch (select best_test)': 'ROADMAP' with shows the" in md
    with open(tmp_path / "out" / "table1.csv") as fh:
        assert {"variant", "diff_main"} <= set(next(csv.DictReader(fh)))
    assert r"$\Delta$ main" in (tmp_path / "out" / "table1.tex").read_text()
    assert len(scatter_points(tmp_path / "out" / "table1.csv")) == 5 * 4  # the paper rows, not the variant row
    page = table_html(table, TablePlan.from_json(table).kind.read_rows(tmp_path / "out" / "table1.csv"))
    assert "<th>Δ main</th>" in page and "<td>+2.0</td>" in page


def test_without_variants_a_rendered_table_has_no_variant_columns(tmp_path):
    plan = make_plan({"suprank": ["table1"]})
    for rid in plan["runs"]:
        _metrics(tmp_path / "runs", rid, 0.70)
    render(plan["tables"]["suprank/table1"], tmp_path / "runs", tmp_path / "t")
    assert "Δ main" not in (tmp_path / "t.md").read_text()
    with open(tmp_path / "t.csv") as fh:
        assert not {"variant", "diff_main"} & set(next(csv.DictReader(fh)))


def test_the_index_counts_variant_cells_apart(tmp_path):
    plan = make_plan({"rambo": ["table5"]}, variants=True)
    runs = tmp_path / "runs"
    for rid in plan["runs"]:
        (runs / rid).mkdir(parents=True)
        (runs / rid / "metrics.json").write_text(json.dumps({"metrics": {"AP50": 0.75}}))
    render(plan["tables"]["rambo/table5"], runs, tmp_path / "tables" / "rambo" / "table5")
    entry = build_index(plan, tmp_path)["tables"][0]
    # 4 rows x 2 columns of the paper; 4 variant rows that change the CE column only
    assert (entry["cells"], entry["reproduced"], entry["variant_cells"], entry["variant_reproduced"]) == (8, 8, 4, 4)
    text = index_markdown(build_index(plan, tmp_path))
    assert "4 of 4 cells reproduced, counted apart" in text and "| 8 (+4 variant, 4 reproduced) |" in text


def test_cost_gives_the_hours_of_the_runs_only_variant_rows_need(plans):
    off, on = plans
    cost_off, cost_on = plan_cost(off, results="/nonexistent"), plan_cost(on, results="/nonexistent")
    assert cost_off["total"]["variants"]["runs"] == 0
    extra = set(on["runs"]) - set(off["runs"])
    assert cost_on["total"]["variants"]["runs"] == len(extra)
    assert cost_on["total"]["gpu_h"] == pytest.approx(cost_off["total"]["gpu_h"] + cost_on["total"]["variants"]["gpu_h"])
    assert cost_on["tables"]["suprank/table1"]["variants"]["runs"] == 0  # a selection variant trains nothing
    assert cost_on["tables"]["rambo/table5"]["variants"]["runs"] == 12  # 4 rows x 3 seeds, CE column
    assert "variant rows:" in to_text(cost_on) and "variant rows:" not in to_text(cost_off)


def test_expand_variants_appends_rows_after_the_papers():
    spec = {"rows": [{"method": "A", "loss": {"name": "x"}, "paper": [1.0],
                      "variants": [{"label": "v", "source": "s", "run": {"epochs": 2}}]},
                     {"method": "B", "loss": {"name": "x"}, "paper": [2.0]}]}
    assert expand_variants(spec, False)["rows"] == [{k: v for k, v in spec["rows"][0].items() if k != "variants"},
                                                    spec["rows"][1]]
    rows = expand_variants(spec, True)["rows"]
    assert [r["method"] for r in rows] == ["A", "B", "A · v"]
    assert rows[2]["variant"] == {"label": "v", "source": "s", "run": {"epochs": 2}, "of": 0, "at": "rows[0].variants[0]"}
    assert "variants" in spec["rows"][0]  # the spec given is not changed
