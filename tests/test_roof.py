"""'Under one roof' (issue 36): the leaderboard table kind (rows from the loss registry), its recipes
(setups/roof.yaml), the config's ``benchmarks`` switch (off: plans unchanged), its cost per seed count and its
first page."""

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rankrepro import catalog as catalog_mod
from rankrepro.losses.registry import LOSSES, register
from rankrepro.plan.build import make_plan, plan_from_config
from rankrepro.plan.cost import leaderboard_cost, plan_cost, to_text
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import apply_per_loss
from rankrepro.tables.kinds.leaderboard import rank_rows
from rankrepro.tables.render import render

ROOT = Path(__file__).resolve().parents[1]
ROOF = ["cub", "cars", "sop", "inat_base", "inshop"]


class ToyRoofLoss(torch.nn.Module):
    """A retrieval loss registered by a test only."""

    def __init__(self, margin: float = 0.25):
        super().__init__()
        self.margin = margin

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        return embeddings.sum() * 0


class ToyHierarchicalLoss(ToyRoofLoss):
    """A loss declaring that it needs hierarchical labels."""

    hierarchical = True


@pytest.fixture
def toy_catalog(monkeypatch):
    """The committed catalog with the toy losses, registered through the registry (undone after the test)."""
    LOSSES.names()  # import every loss module first
    monkeypatch.setattr(LOSSES, "_entries", dict(LOSSES._entries))
    register("toy_roof")(ToyRoofLoss)
    register("toy_hier_roof")(ToyHierarchicalLoss)
    cat = copy.deepcopy(catalog_mod.load())
    cat["loss"].update({name: LOSSES.get(name).as_json() for name in ("toy_roof", "toy_hier_roof")})
    return cat


def _rows(plan, key):
    return [row["method"] for row in plan["tables"][key]["spec"]["rows"]]


def _runs_of(plan, key, loss):
    table = plan["tables"][key]
    r = _rows(plan, key).index(loss)
    cells = [c for c in table["cells"] if c["row"] == r]
    assert len(cells) == 2 and cells[0]["run_ids"] == cells[1]["run_ids"]  # R@1 and mAP@R of the same runs
    return [plan["runs"][rid] for rid in cells[0]["run_ids"]]


# ------------------------------------------------------------------------------------------- rows


def test_a_registered_loss_is_a_row_without_a_spec_edit(toy_catalog):
    plan = make_plan({"roof": ["cub"]}, catalog=toy_catalog)
    assert "toy_roof" in _rows(plan, "roof/cub")
    runs = _runs_of(plan, "roof/cub", "toy_roof")
    assert [r["seed"] for r in runs] == [0, 1, 2]
    assert all(r["loss"] == {"name": "toy_roof", "margin": 0.25, "memory": None} for r in runs)  # its default
    assert "toy_roof" not in _rows(make_plan({"roof": ["cub"]}), "roof/cub")  # the committed catalog: no toy


def test_a_hierarchical_loss_is_a_row_only_where_labels_have_levels(toy_catalog):
    plan = make_plan({"roof": ["cub", "sop"]}, catalog=toy_catalog)
    cub, sop = _rows(plan, "roof/cub"), _rows(plan, "roof/sop")
    assert "toy_hier_roof" in sop and "toy_hier_roof" not in cub  # SOP: class, super-class; CUB: class
    assert {"sup_hap", "happier", "csl", "sum_nsm", "sup_ndcg"} <= set(sop) - set(cub)
    assert set(cub) <= set(sop)


def test_only_retrieval_losses_are_rows():
    plan = make_plan({"roof": ["cub"]})
    assert "faster_rcnn" not in _rows(plan, "roof/cub")  # task: detection
    assert _rows(plan, "roof/cub") == sorted(_rows(plan, "roof/cub"))


def test_the_catalog_records_which_losses_need_hierarchical_labels():
    declared = {name for name, entry in catalog_mod.load()["loss"].items() if entry.get("hierarchical")}
    assert declared == {"csl", "happier", "happier_f", "rod_ndcg", "smooth_hap", "smooth_ndcg", "sum_nca_pp",
                        "sum_nsm", "sum_triplet_sh", "sup_hap", "sup_ndcg"}
    assert "hierarchical" not in LOSSES.get("sup_ap").as_json()  # a composed builder of a flat head


# ---------------------------------------------------------------------------------------- recipes


def test_every_loss_trains_on_the_same_recipe_with_its_defaults():
    plan = make_plan({"roof": ["cub", "inat_base"]})
    roadmap = _runs_of(plan, "roof/cub", "roadmap")[0]
    assert roadmap["loss"]["memory"] is None  # suprank_cub's ROADMAP memory is its Table IV row's, not the recipe
    sup_ap = _runs_of(plan, "roof/inat_base", "sup_ap")[0]
    assert (sup_ap["loss"]["start"], sup_ap["loss"]["offset"]) == (0.5, 1.44)  # registered defaults, not iNat's 0 / 1
    for key in ("roof/cub", "roof/inat_base"):  # the proxies' one rule: SupRank's proxy Adam, on every dataset
        proxies = _runs_of(plan, key, "normalized_softmax")[0]["optimizer"]["groups"]["loss"]
        assert {k: proxies[k] for k in ("optimizer", "lr", "weight_decay", "lr_min")} == {
            "optimizer": "adam", "lr": 10.0, "weight_decay": 0.0, "lr_min": 0.1}
    for key in ("roof/cub", "roof/inat_base"):
        recipes = {json.dumps({k: v for k, v in run.items() if k not in ("loss", "seed")}, sort_keys=True)
                   for run in plan["runs"].values() if run["dataset"] == key.split("/")[1]}
        assert len(recipes) == 1, key  # every loss and seed: one recipe
        assert json.loads(recipes.pop())["eval"]["select"] == "last"


def test_a_null_per_loss_drops_the_entries_above_it():
    layers = [("a", {"per_loss": {"roadmap": {"epochs": 3}}}), ("b", {"per_loss": None}),
              ("c", {"loss": {"name": "roadmap"}})]
    assert apply_per_loss(layers, 2, {"roadmap": {}}) == [("a", {}), ("b", {}), ("c", {"loss": {"name": "roadmap"}})]
    kept = apply_per_loss([layers[0], layers[2]], 1, {"roadmap": {}})
    assert ("a: per_loss.roadmap", {"epochs": 3, "loss": {"name": "roadmap"}}) in kept


def test_the_specs_per_loss_block_applies_to_its_loss_only(tmp_path):
    spec = yaml.safe_load((ROOT / "src/rankrepro/tables/specs/roof/cub.yaml").read_text())
    spec["per_loss"] = {"proxy_nca": {"epochs": 7}}
    (tmp_path / "roof").mkdir()
    (tmp_path / "roof" / "cub.yaml").write_text(yaml.safe_dump(spec))
    plan = make_plan({"roof": ["cub"]}, specs_dir=tmp_path)
    assert {r["epochs"] for r in _runs_of(plan, "roof/cub", "proxy_nca")} == {7}
    assert {r["epochs"] for r in _runs_of(plan, "roof/cub", "triplet")} == {100}
    spec["per_loss"] = {"no_such_loss": {"epochs": 7}}
    (tmp_path / "roof" / "cub.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(PlanError, match=r"roof/cub.yaml: per_loss.no_such_loss: unknown loss"):
        make_plan({"roof": ["cub"]}, specs_dir=tmp_path)


# ------------------------------------------------------------------------------------- the switch


def _config(**extra):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["tables"] = {"topk": ["table1_cub"]}
    return {**config, **extra}


def test_the_benchmark_is_off_by_default_and_adds_only_its_tables():
    off = plan_from_config(_config())
    assert "roof" not in {t["paper"] for t in off["tables"].values()}
    assert not yaml.safe_load((ROOT / "config.yaml").read_text()).get("benchmarks")  # off in config.yaml
    assert plan_from_config(_config(benchmarks={})) == off
    on = plan_from_config(_config(benchmarks={"roof": ["cub"]}))
    assert set(on["tables"]) == set(off["tables"]) | {"roof/cub"}
    assert on["tables"]["topk/table1_cub"] == off["tables"]["topk/table1_cub"]
    assert set(off["runs"]) <= set(on["runs"])
    one_seed = plan_from_config(_config(benchmarks={"roof": ["cub"]}, seeds={"roof/cub": [0]}))
    assert len(one_seed["tables"]["roof/cub"]["runs"]) * 3 == len(on["tables"]["roof/cub"]["runs"]) == 90


@pytest.mark.parametrize("value, message", [
    ({"roof": ["cub", "nope"]}, r"config benchmarks.roof\[1\]: 'nope' is no table of the roof benchmark; it has: "
                                r"cars, cub, inat_base, inshop, sop"),
    ({"roof": "cub"}, r"config: benchmarks.roof: 'cub' is not of type 'array'"),
    ({"other": ["cub"]}, r"config: benchmarks: .*'other'"),
])
def test_a_bad_switch_value_names_the_key(value, message):
    with pytest.raises(PlanError, match=message):
        plan_from_config(_config(benchmarks=value))


def test_the_plan_command_names_the_file_of_a_bad_switch(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(_config(benchmarks={"roof": ["nope"]})))
    out = subprocess.run([sys.executable, "-m", "rankrepro", "plan", "--config", str(path), "--out",
                          str(tmp_path / "plan")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert f"{path}: config benchmarks.roof[0]: 'nope' is no table" in out.stderr
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------------------------------- cost


def test_leaderboard_cost_per_seed_count_by_hand():
    spec = {"kind": "leaderboard", "seeds": [0, 1, 2], "rows": [{}, {}], "caption": "c"}
    plan = Plan.from_json({"runs": {}, "datasets": {}, "tables": {
        "roof/x": {"paper": "roof", "table": "x", "spec": spec, "cells": [], "runs": []}}})
    out = leaderboard_cost(plan, {"roof/x": {"gpu_h": 6.0, "not_estimated": 0}})
    assert out == {"roof/x": {"seeds": 3, "per_seed": 2.0, "rows": 2, "not_estimated": 0,
                              "by_seeds": {1: 2.0, 3: 6.0}}}


def test_cost_lists_each_leaderboard_for_one_and_three_seeds():
    three = plan_cost(make_plan({"roof": ["cub", "sop"]}))
    one = plan_cost(make_plan({"roof": ["cub", "sop"]}, seeds={"roof/cub": [5], "roof/sop": [5]}))
    for key in ("roof/cub", "roof/sop"):
        assert three["leaderboards"][key]["by_seeds"][3] == pytest.approx(three["tables"][key]["gpu_h"])
        assert one["tables"][key]["gpu_h"] > 0
        assert three["leaderboards"][key]["by_seeds"][1] == pytest.approx(one["tables"][key]["gpu_h"])
    text = to_text(three)
    assert "leaderboards (GPU-h by seeds per dataset" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("roof/cub"))
    assert "1 seed:" in line and "3 seeds:" in line and "(30 losses, planned with 3)" in line
    assert "leaderboards" not in to_text(plan_cost(make_plan({"topk": ["table1_cub"]})))


# ------------------------------------------------------------------------------------------- page


def test_rank_rows_by_hand():
    rows = [{"ours": v} for v in (70.0, 1.0, 80.0, 2.0, 70.0, 3.0, None, None)]  # 4 rows x 2 columns
    rank_rows(rows, 2)
    assert [rows[i]["rank"] for i in range(0, 8, 2)] == [2, 1, 2, None]
    assert rows[1]["rank"] == rows[0]["rank"]


def test_the_page_ranks_the_losses_by_mean_over_seeds(tmp_path):
    table = make_plan({"roof": ["cub"]})["tables"]["roof/cub"]
    names = [row["method"] for row in table["spec"]["rows"]]
    r1 = {"triplet": [0.50, 0.54, 0.52], "sup_ap": [0.60, 0.62, 0.64]}  # means 52.0 ± 2.0, 62.0 ± 2.0
    for cell in table["cells"]:
        method = names[cell["row"]]
        if method not in r1:
            continue
        for seed, rid in enumerate(cell["run_ids"]):
            (tmp_path / "runs" / rid).mkdir(parents=True, exist_ok=True)
            best = {"epoch": 20, "select_by": "R@1", "source": "curve",
                    "metrics": {"R@1": r1[method][seed] + 0.1, "mAP@R": 0.3}}  # best on test: shown, not ranked on
            (tmp_path / "runs" / rid / "metrics.json").write_text(json.dumps(
                {"replica": True, "select": "last", "best_test": best,
                 "metrics": {"R@1": r1[method][seed], "mAP@R": 0.3}}))
    for cell in table["cells"]:  # unfinished losses: no number, no rank
        if names[cell["row"]] not in r1:
            cell["run_ids"] = []
    render(table, tmp_path / "runs", tmp_path / "out" / "cub")
    md = (tmp_path / "out" / "cub.md").read_text()
    body = [ln for ln in md.splitlines() if ln.startswith("| ") and "Rank" not in ln]
    assert body[0] == "| 1 | sup_ap | 62.0 ± 2.0 | 30.0 ± 0.0 | 72.0 ± 2.0 | 30.0 ± 0.0 |"
    assert body[1].startswith("| 2 | triplet | 52.0 ± 2.0 |")
    assert body[2].startswith("| — | angular | — |")
    assert "Replica data" in md
    with open(tmp_path / "out" / "cub.csv") as f:
        rows = list(csv.DictReader(f))
    sup = [r for r in rows if r["method"] == "sup_ap"]
    assert [(r["metric"], r["ours"], r["std"], r["rank"], r["paper"]) for r in sup] == [
        ("R@1", "62.0", "2.0", "1", ""), ("mAP@R", "30.0", "0.0", "1", "")]
    assert (tmp_path / "out" / "cub.tex").is_file()
