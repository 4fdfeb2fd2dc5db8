"""'Under one roof' (issue 36): the leaderboard table kind (rows from the loss registry), its recipes
(setups/roof.yaml), the config's ``benchmarks`` switch (off: plans unchanged), its cost per seed count and its
first page."""

import copy
import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from rankrepro import catalog as catalog_mod
from rankrepro.losses.registry import FAMILIES, LOSSES, register
from rankrepro.plan.build import PlanFiles, make_plan, plan_from_config
from rankrepro.plan.cost import leaderboard_cost, plan_cost, to_text
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import apply_per_loss
from rankrepro.plan.targets import WorkflowTargets
from rankrepro.tables import plots
from rankrepro.tables.index import build_index
from rankrepro.tables.index import to_markdown as index_markdown
from rankrepro.tables.kinds.base import TableError
from rankrepro.tables.kinds.leaderboard import loss_rows, rank_rows
from rankrepro.tables.leaderboard_summary import summary_rows, write_summary
from rankrepro.tables.render import render
from rankrepro.tables.significance import noise_verdicts, verdict_text, welch

ROOT = Path(__file__).resolve().parents[1]
ROOF = ["cub", "cars", "sop", "inat_base", "inshop"]
RUNTIME = {"device": "cuda", "num_workers": 8, "eval_batch_size": 256, "image_cache": True,
           "evaluate_in_train_job": False, "runs_per_job": 1, "keep_model": True, "curves": True}


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
    assert len(cells) == len(table["spec"]["columns"]) >= 2
    assert all(c["run_ids"] == cells[0]["run_ids"] for c in cells)  # every metric of the same runs
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
    # rank, loss, per metric ours and its verdict against the column's best, the papers' numbers (none for Sup-AP
    # on CUB), then the best-on-test numbers
    assert body[0] == "| 1 | sup_ap | 62.0 ± 2.0 | best | 30.0 ± 0.0 | best | — | — | 72.0 ± 2.0 | 30.0 ± 0.0 |"
    assert body[1].startswith("| 2 | triplet | 52.0 ± 2.0 | < (p 0.0036) | 30.0 ± 0.0 | best |")  # equal means
    assert body[2].startswith("| — | angular | — | — |")
    assert "Replica data" in md
    with open(tmp_path / "out" / "cub.csv") as f:
        rows = list(csv.DictReader(f))
    sup = [r for r in rows if r["method"] == "sup_ap"]
    assert [(r["metric"], r["ours"], r["std"], r["rank"], r["paper"]) for r in sup] == [
        ("R@1", "62.0", "2.0", "1", ""), ("mAP@R", "30.0", "0.0", "1", "")]
    assert (sup[0]["family"], sup[0]["hierarchical"]) == ("rank", "False")
    assert (tmp_path / "out" / "cub.tex").is_file()


# ----------------------------------------------------------------------------------- significance


def _df4_two_sided_p(t):
    """The two-sided p of Student's t with 4 degrees of freedom, closed form:
    F(t) = 1/2 + 3/8 * u * (1 - t² / (12 (1 + t²/4))), u = t / sqrt(1 + t²/4); p = 2 (1 - F(|t|))."""
    t = abs(t)
    u = t / math.sqrt(1 + t * t / 4)
    return 2 * (1 - (0.5 + 3 / 8 * u * (1 - t * t / (12 * (1 + t * t / 4)))))


def test_welch_by_hand():
    best, other, near = [60.0, 62.0, 64.0], [50.0, 54.0, 52.0], [58.0, 60.0, 62.0]  # 62 ± 2, 52 ± 2, 60 ± 2
    # t = (m_a - m_b) / sqrt(s_a²/n_a + s_b²/n_b) = 10 / sqrt(4/3 + 4/3) = 10 / sqrt(8/3) = 6.1237;
    # Welch's df = (4/3 + 4/3)² / ((4/3)²/2 + (4/3)²/2) = 4
    t, p = welch(best, other)
    assert t == pytest.approx(10 / math.sqrt(8 / 3)) and t == pytest.approx(6.1237, abs=1e-4)
    assert p == pytest.approx(_df4_two_sided_p(t)) and p == pytest.approx(0.0036022, abs=1e-6)
    t, p = welch(best, near)  # t = 2 / sqrt(8/3) = 1.2247, df 4
    assert t == pytest.approx(2 / math.sqrt(8 / 3)) and p == pytest.approx(_df4_two_sided_p(t))
    assert p == pytest.approx(0.28786, abs=1e-5)
    assert welch([5.0, 5.0], [5.0, 5.0]) == (0.0, 1.0)  # no spread on either side: no t
    assert welch([5.0, 5.0], [4.0, 4.0]) == (math.inf, 0.0)
    assert welch([100 * 0.2, 20.0], [20.0, 20.0]) == (0.0, 1.0)  # 20.000000000000004: one value
    with pytest.raises(ValueError, match="two values or more"):
        welch([1.0], [1.0, 2.0])


def test_noise_verdicts_by_hand():
    got = noise_verdicts([[50.0, 54.0, 52.0], [60.0, 62.0, 64.0], [58.0, 60.0, 62.0], None, [61.0]])
    assert [v for v, _ in got] == ["below", "best", "within noise", "", "n/a (one seed)"]
    assert got[0][1] == pytest.approx(0.0036022, abs=1e-6) and got[2][1] == pytest.approx(0.28786, abs=1e-5)
    assert [verdict_text(*v) for v in got] == ["< (p 0.0036)", "best", "≈ (p 0.29)", "—", "n/a (one seed)"]
    assert noise_verdicts([[3.0], [2.0]]) == [("best", None), ("n/a (one seed)", None)]  # the best with one seed
    assert noise_verdicts([[3.0, 3.0], [3.0, 3.0]]) == [("best", None), ("best", None)]  # equal means: both best
    assert noise_verdicts([None, None]) == [("", None), ("", None)]


def _fake_runs(tmp_path, table, r1, map_r=None):
    """metrics.json for the runs of ``table``'s losses in ``r1`` ({loss: R@1 per seed}; mAP@R: ``map_r`` or 0.3);
    the other losses' cells get no run (no number)."""
    names = [row["method"] for row in table["spec"]["rows"]]
    for cell in table["cells"]:
        method = names[cell["row"]]
        if method not in r1:
            cell["run_ids"] = []
            continue
        for seed, rid in enumerate(cell["run_ids"]):
            (tmp_path / "runs" / rid).mkdir(parents=True, exist_ok=True)
            metrics = {"R@1": r1[method][seed], "mAP@R": (map_r or {}).get(method, [0.3] * 3)[seed]}
            (tmp_path / "runs" / rid / "metrics.json").write_text(json.dumps(
                {"replica": False, "select": "last", "metrics": metrics}))


def test_the_page_says_which_loss_is_within_noise_of_the_best(tmp_path):
    table = make_plan({"roof": ["cub"]})["tables"]["roof/cub"]
    _fake_runs(tmp_path, table, {"sup_ap": [0.60, 0.62, 0.64], "triplet": [0.50, 0.54, 0.52],
                                 "contrastive": [0.58, 0.60, 0.62]},
               {"sup_ap": [0.30, 0.31, 0.32], "triplet": [0.32, 0.34, 0.36], "contrastive": [0.2, 0.2, 0.2]})
    render(table, tmp_path / "runs", tmp_path / "out" / "cub")
    md = (tmp_path / "out" / "cub.md").read_text()
    assert "| Rank | Loss | R@1 | R@1 vs best | mAP@R | mAP@R vs best |" in md
    assert "two-sided Welch t-test over seeds" in md and "alpha 0.05 [our choice]" in md
    # mAP@R: 34 ± 2 (triplet, best) vs 31 ± 1: t = 3 / sqrt(4/3 + 1/3) = 2.32, df = (5/3)² / ((4/3)²/2 + (1/3)²/2)
    # = 50/17 = 2.94, p = 0.104: within noise; R@1: as test_welch_by_hand
    assert "| 1 | sup_ap | 62.0 ± 2.0 | best | 31.0 ± 1.0 | ≈ (p 0.1) |" in md
    assert "| 2 | contrastive | 60.0 ± 2.0 | ≈ (p 0.29) | 20.0 ± 0.0 | < (p" in md
    assert "| 3 | triplet | 52.0 ± 2.0 | < (p 0.0036) | 34.0 ± 2.0 | best |" in md
    with open(tmp_path / "out" / "cub.csv") as f:
        rows = {(r["method"], r["metric"]): r for r in csv.DictReader(f)}
    assert (rows["contrastive", "R@1"]["vs_best"], rows["contrastive", "R@1"]["p_value"]) == ("within noise", "0.2879")
    assert rows["sup_ap", "R@1"]["vs_best"] == "best" and rows["sup_ap", "R@1"]["p_value"] == ""
    assert rows["angular", "R@1"]["vs_best"] == "" and rows["angular", "R@1"]["rank"] == ""
    tex = (tmp_path / "out" / "cub.tex").read_text()
    # not the runs-table layout: ours per metric, then the papers' numbers (CUB: RaMBO's and SupRank's quotes)
    assert "Rank & Loss & R@1 & mAP@R & R@1 (paper) & mAP@R (paper) \\\\" in tex and "paper &" not in tex
    assert r"1 & sup\_ap & \textbf{62.0 $\pm$ 2.0} & 31.0 $\pm$ 1.0$^{\approx}$ & -- & -- \\" in tex
    assert r"2 & contrastive & 60.0 $\pm$ 2.0$^{\approx}$ & 20.0 $\pm$ 0.0 & 26.4 & -- \\" in tex  # RaMBO's quote
    assert r"3 & triplet & 52.0 $\pm$ 2.0 & \textbf{34.0 $\pm$ 2.0} & 63.6 & -- \\" in tex  # SupRank's quote
    assert "Welch t-test" in tex and "≈" not in tex


def test_one_seed_says_no_test(tmp_path):
    table = make_plan({"roof": ["cub"]}, seeds={"roof/cub": [0]})["tables"]["roof/cub"]
    _fake_runs(tmp_path, table, {"sup_ap": [0.6], "triplet": [0.5]})
    render(table, tmp_path / "runs", tmp_path / "out" / "cub")
    md = (tmp_path / "out" / "cub.md").read_text()
    assert "| 1 | sup_ap | 60.0 | best | 30.0 | best |" in md
    assert "| 2 | triplet | 50.0 | n/a (one seed) | 30.0 | best |" in md


# ----------------------------------------------------------------------------- hierarchical columns


def test_hierarchical_metrics_are_columns_where_the_recipe_evaluates_them():
    plan = make_plan({"roof": ROOF})
    columns = {key.split("/")[1]: [c["metric"] for c in t["spec"]["columns"]] for key, t in plan["tables"].items()}
    assert columns["sop"] == columns["inat_base"] == ["R@1", "mAP@R", "H-AP", "ASI", "NDCG"]
    assert columns["cub"] == columns["cars"] == columns["inshop"] == ["R@1", "mAP@R"]  # In-shop's recipe: R@K, mAP@R


def test_a_metric_the_recipe_does_not_evaluate_fails_at_plan_time(tmp_path):
    spec = yaml.safe_load((ROOT / "src/rankrepro/tables/specs/roof/cub.yaml").read_text())
    spec["metrics"].append({"metric": "H-AP", "header": "H-AP"})
    (tmp_path / "roof").mkdir()
    (tmp_path / "roof" / "cub.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(PlanError, match=r"roof/cub.yaml: metrics\[2\]: 'H-AP' is not evaluated by setup 'roof_cub'"):
        make_plan({"roof": ["cub"]}, specs_dir=tmp_path)


def test_no_leaderboard_may_be_named_summary(tmp_path):
    spec = yaml.safe_load((ROOT / "src/rankrepro/tables/specs/roof/cub.yaml").read_text())
    spec["table"] = "summary"
    (tmp_path / "roof").mkdir()
    (tmp_path / "roof" / "summary.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(PlanError, match=r"table: 'summary' is the name of the benchmark's summary"):
        make_plan({"roof": ["summary"]}, specs_dir=tmp_path)


# ------------------------------------------------------------------------------------------ families


def test_every_retrieval_loss_declares_a_family_and_the_catalog_records_it():
    losses = catalog_mod.load()["loss"]
    assert {name: entry.get("family") for name, entry in losses.items()
            if entry.get("task", "retrieval") == "retrieval" and entry.get("family") not in FAMILIES} == {}
    families = {name: entry.get("family") for name, entry in losses.items()}
    assert (families["triplet"], families["proxy_nca_pp"], families["sup_ap"], families["roadmap"]) == (
        "pair", "proxy", "rank", "rank")  # proxy_nca_pp: compose's family=; roadmap: its rank head's
    assert (families["sum_triplet_sh"], families["csl"], families["happier"]) == ("pair", "proxy", "rank")
    assert "family" not in losses["faster_rcnn"]


def test_a_loss_class_declares_its_family_once(toy_catalog):
    class ToyProxy(ToyRoofLoss):
        family = "proxy"

    register("toy_proxy")(ToyProxy)
    assert LOSSES.get("toy_proxy").as_json()["family"] == "proxy"
    assert "family" not in toy_catalog["loss"]["toy_roof"]  # declares none
    rows = loss_rows({**toy_catalog, "loss": {**toy_catalog["loss"], "toy_proxy": LOSSES.get("toy_proxy").as_json()}},
                     "cub", 2)
    assert {r["method"]: r["family"] for r in rows}["toy_proxy"] == "proxy"


# --------------------------------------------------------------------------------- summary, plot


def _leaderboard_csv(path, ranks):
    """A leaderboard's CSV with the columns the summary and the plot read: {loss: (rank, R@1, mAP@R, family)}."""
    rows = [{"method": loss, "metric": metric, "ours": value, "std": 1.0 if value != "" else "", "rank": rank,
             "family": family, "hierarchical": loss.startswith("h_"), "replica": False}
            for loss, (rank, r1, map_r, family) in ranks.items() for metric, value in (("R@1", r1), ("mAP@R", map_r))]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_summary_mean_rank_by_hand(tmp_path):
    a = _leaderboard_csv(tmp_path / "cub.csv", {"x": (1, 60, 30, "pair"), "y": (2, 50, 20, "rank"),
                                                 "z": (2, 50, 25, "proxy")})
    b = _leaderboard_csv(tmp_path / "sop.csv", {"x": (3, 40, 20, "pair"), "y": (1, 70, 30, "rank"),
                                                 "z": (2, 60, 25, "proxy"), "h_w": (4, 10, 5, "rank")})
    c = _leaderboard_csv(tmp_path / "cars.csv", {"x": (1, 60, 30, "pair"), "y": ("", "", "", "rank")})
    datasets, rows = summary_rows([a, b, c])
    assert datasets == ["cub", "sop", "cars"]
    # x: (1 + 3 + 1) / 3 = 1.67; y: (2 + 1) / 2 = 1.5, cars has no number: not counted; z: (2 + 2) / 2 = 2 (a tie
    # on cub shares rank 2); h_w: 4 on sop alone (no row on cub or cars)
    assert [(r["loss"], r["cub"], r["sop"], r["cars"], r["datasets"], r["mean_rank"]) for r in rows] == [
        ("y", 2, 1, None, 2, 1.5), ("x", 1, 3, 1, 3, 1.67), ("z", 2, 2, None, 2, 2.0), ("h_w", None, 4, None, 1, 4.0)]
    write_summary("roof", [a, b, c], tmp_path / "out" / "summary", html_out=tmp_path / "out" / "summary.html")
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| Loss | Family | cub | sop | cars | Datasets | Mean rank |" in md
    assert "| y | rank | 2 | 1 | — | 2 | 1.50 |" in md and "| h_w | rank | — | 4 | — | 1 | 4.00 |" in md
    assert "equal means share a rank" in md and "not counted" in md
    header = (tmp_path / "out" / "summary.csv").read_text().splitlines()[0]
    assert header == "loss,family,cub,sop,cars,datasets,mean_rank"
    assert "<table>" in (tmp_path / "out" / "summary.html").read_text()


def test_summary_and_plot_name_a_csv_that_is_no_leaderboards(tmp_path):
    other = tmp_path / "table1.csv"
    other.write_text("method,column,metric,ours\nA,CUB R@1,R@1,60.0\n")
    with pytest.raises(TableError, match=r"table1.csv: no 'rank' column: not a leaderboard's CSV"):
        summary_rows([other])
    with pytest.raises(TableError, match=r"table1.csv: not a leaderboard's CSV with R@1 and mAP@R"):
        plots.leaderboard_plot(other, tmp_path / "x.png", "x")
    assert not (tmp_path / "x.png").exists()


def test_the_plot_draws_one_point_per_loss_coloured_by_family(tmp_path):
    path = _leaderboard_csv(tmp_path / "sop.csv", {"x": (1, 60, 30, "pair"), "h_y": (2, 50, 20, "rank"),
                                                   "z": ("", "", "", "proxy"), "new": (3, 40, 10, "")})
    points = plots.leaderboard_points(path)
    assert [(p["loss"], p["family"], p["hierarchical"], p["x"], p["y"], p["x_std"]) for p in points] == [
        ("x", "pair", False, 60.0, 30.0, 1.0), ("h_y", "rank", True, 50.0, 20.0, 1.0),
        ("new", "", False, 40.0, 10.0, 1.0)]
    out = plots.leaderboard_plot(path, tmp_path / "out" / "sop.png", "Leaderboard: SOP")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    cli = subprocess.run([sys.executable, "-m", "rankrepro", "plot", "leaderboard", "--tables", str(path), "--title",
                          "SOP", "--out", str(tmp_path / "cli.png")], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "cli.png").stat().st_size > 5000


# ---------------------------------------------------------------------------- index, report, targets


def test_the_index_lists_the_leaderboards_apart_and_counts_none_of_their_cells(tmp_path):
    plan = make_plan({"roof": ["cub"], "topk": ["table1_cub"]})
    table = plan["tables"]["roof/cub"]
    _fake_runs(tmp_path, table, {"sup_ap": [0.60, 0.62, 0.64]})
    (tmp_path / "tables" / "roof").mkdir(parents=True)
    render(table, tmp_path / "runs", tmp_path / "tables" / "roof" / "cub")
    write_summary("roof", [tmp_path / "tables" / "roof" / "cub.csv"], tmp_path / "tables" / "roof" / "summary")
    index = build_index(plan, tmp_path)
    assert [t["paper"] for t in index["tables"]] == ["topk"]
    assert [(e["table"], e["cells"], e["reproduced"], e["ncol"]) for e in index["leaderboards"]] == [("cub", 60, 2, 2)]
    topk_cells = index["tables"][0]["cells"]
    assert (index["total"]["tables"], index["total"]["cells"], index["total"]["reproduced"]) == (1, topk_cells, 0)
    md = index_markdown(index)
    assert "## Leaderboards" in md and "[roof](tables/roof/summary.md)" in md
    assert "| roof | cub: Leaderboard: CUB-200-2011 | [md](tables/roof/cub.md)" in md
    assert "| 30 | 1 | 58 |" in md  # losses, ranked, pending cells
    assert md.index("## Leaderboards") > md.index("## Tables")
    assert "| roof |" not in md[:md.index("## Leaderboards")]


def test_the_report_shows_the_leaderboards_apart(tmp_path):
    plan = plan_from_config(_config(benchmarks={"roof": ["cub", "sop"]}))
    files = PlanFiles(Path("results/plan/plan.0123456789ab.json"),
                      {key: Path(f"results/plan/tables/{key}.0123.json") for key in plan["tables"]},
                      Path("results/plan/runs"))
    targets = WorkflowTargets(Plan.from_json(plan), {"data_root": "data", "runtime": RUNTIME}, files)
    report = targets.report_outputs()
    assert {"results/tables/roof/cub.png", "results/tables/roof/sop.png", "results/tables/roof/summary.html",
            "results/tables/topk/scatter.png"} <= set(report)
    assert "results/tables/roof/scatter.png" not in report  # no paper numbers to scatter
    assert {"results/tables/roof/summary.md", "results/tables/roof/summary.csv"} <= set(targets.index_inputs())
    assert targets.leaderboard_csvs(SimpleNamespace(paper="roof")) == ["results/tables/roof/cub.csv",
                                                                       "results/tables/roof/sop.csv"]
    assert targets.table_category(SimpleNamespace(paper="roof", table="cub")) == "Leaderboards"
    assert targets.table_category(SimpleNamespace(paper="topk", table="table1_cub")) == "topk"
    table = Plan.from_json(plan).table("roof/cub")
    _fake_runs(tmp_path, plan["tables"]["roof/cub"], {"sup_ap": [0.60, 0.62, 0.64]})
    render(plan["tables"]["roof/cub"], tmp_path / "runs", tmp_path / "cub")
    page = table.kind.html(table, table.kind.read_rows(tmp_path / "cub.csv"))
    assert "<th>R@1 vs best</th>" in page and "<td>62.0 ± 2.0</td>" in page and "Welch" in page


# ------------------------------------------------------------------------------------------ the demo


@pytest.mark.slow
def test_the_demo_renders_a_leaderboard_its_summary_and_its_plot(tmp_path):
    """Done-when of issue 36: with the benchmark on (CUB, one seed: the demo profile's), the demo renders the
    leaderboard page (and its report page), the summary and the plot, every cell filled."""
    import os

    from rankrepro.bench.plan import workflow_copy

    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    (wf / "subset.yaml").write_text(yaml.safe_dump({
        "tables": {p: [] for p in papers}, "synthetic": {"names": []}, "benchmarks": {"roof": ["cub"]}}))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--profile", "profiles/demo",
                             "--configfile", "profiles/demo/demo.yaml", "subset.yaml", "--",
                             *(f"results/tables/roof/{name}" for name in ("cub.md", "cub.png", "cub.html", "summary.md"))],
                            cwd=wf, capture_output=True, text=True, timeout=1500, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "TargetError" not in result.stderr  # results/tables/roof/summary.*: no table rule tries it
    tables = wf / "results" / "tables" / "roof"
    with open(tables / "cub.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60 and all(r["ours"] and r["rank"] and r["family"] for r in rows)  # 30 losses x 2 metrics
    assert {r["vs_best"] for r in rows} <= {"best", "n/a (one seed)"} and "best" in {r["vs_best"] for r in rows}
    page = (tables / "cub.md").read_text()
    assert "| Rank | Loss | R@1 | R@1 vs best |" in page and "Replica data" in page
    body = [ln.split(" | ") for ln in page.splitlines() if ln.startswith("| ") and "Rank" not in ln]
    assert len(body) == 30 and all(cells[2] != "—" for cells in body)  # every loss has ours
    assert "| R@1 (paper) |" in page  # and a paper's number where one reports it (tests/test_reported.py)
    assert any(cells[1] == "triplet" and cells[6].startswith("63.6 [") for cells in body)
    with open(tables / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert len(summary) == 30 and all(r["cub"] and r["datasets"] == "1" and r["mean_rank"] for r in summary)
    assert (tables / "cub.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<th>R@1 vs best</th>" in (tables / "cub.html").read_text()
