"""Recipe cards (rankrepro.recipe, `python -m rankrepro recipe`): one SupRank run checked by hand against
its spec (Table IV, DeiT-S, CUB), the origins shortened, the CLI's errors, every run of config.yaml's
full plan (without torch), the report's page, and the `recipes` rule (slow)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankrepro.cli import main
from rankrepro.plan.build import make_plan, write_plan
from rankrepro.plan.complete import leaf_paths
from rankrepro.plan.model import Plan, TablePlan
from rankrepro.plan.schema import dotted
from rankrepro.recipe import REQUIRED_KEYS, card_markdown, card_text, plan_cards, recipe_card, recipes_page
from rankrepro.recipe.card import GROUP_PARAMS
from rankrepro.recipe.origins import NOT_RECORDED, short_origin
from rankrepro.tables.formats import markdown_html

REPO = Path(__file__).resolve().parents[1]
TABLE4 = "src/rankrepro/tables/specs/suprank/table4.yaml"
DEIT = "ROADMAP (ours) DeiT-S"
#: the keys issue 24 asks of every card
ISSUE_KEYS = {"run_id", "dataset", "task", "model", "images", "sampler", "loss", "groups", "schedule", "epochs",
              "warmup_epochs", "select", "seed", "provenance"}


@pytest.fixture(scope="module")
def table4():
    return Plan.from_json(make_plan({"suprank": ["table4"]}))


def _deit_cub(plan: Plan) -> tuple[int, str]:
    """The DeiT-S ROADMAP row of Table IV and the run of its CUB cells."""
    table = plan.tables["suprank/table4"]
    row = next(i for i, r in enumerate(table.spec["rows"]) if r["method"] == DEIT)
    cub = next(i for i, c in enumerate(table.spec["columns"]) if c["group"] == "CUB")
    (rid,) = next(c["run_ids"] for c in table.cells if (c["row"], c["column"]) == (row, cub))
    return row, rid


def test_the_deit_s_cub_card_of_table_iv(table4):
    """Row `ROADMAP (ours) DeiT-S`: run block AdamW, net group lr 1e-5, wd 5e-4, cosine to 0; its
    column_runs.CUB sets the net lr to 1e-6 and the test resize to 256 (official optimizer/cub_deit.yaml,
    dataset/cub.yaml). No loss group: the proxies follow the net group."""
    row, rid = _deit_cub(table4)
    card = recipe_card(rid, table4.runs[rid], table4.provenance[rid], table4.tables)
    assert rid.startswith("cub-roadmap-") and (card["dataset"], card["task"]) == ("cub", "retrieval")
    net = {"optimizer": "adamw", "lr": 1e-6, "weight_decay": 5e-4, "lr_min": 0.0, "warmup_frozen": False}
    assert card["groups"] == {"net": {"params": GROUP_PARAMS["net"], **net},
                              "loss": {"params": GROUP_PARAMS["loss"], **net}}
    assert card["optimizer"] == {"name": "adamw", "weight_decay": 5e-4, "betas": [0.9, 0.999], "eps": 1e-8}
    assert card["model"]["backbone"] == "deit_small" and card["images"]["test_resize"] == 256
    assert (card["epochs"], card["warmup_epochs"], card["seed"], card["select"]) == (100, 5, 0, "last")
    prov = card["provenance"]
    assert prov["optimizer.groups.net.lr"] == f"{TABLE4}: rows[{row}].column_runs.CUB"
    assert prov["images.test_resize"] == f"{TABLE4}: rows[{row}].column_runs.CUB"
    assert prov["optimizer.groups.net.optimizer"] == f"{TABLE4}: rows[{row}].run (optimizer.name)"
    assert prov["optimizer.groups.net.lr_min"] == f"{TABLE4}: rows[{row}].run (schedule's floor)"  # its eta_min's
    assert prov["optimizer.groups.loss.lr"].startswith("the net group's settings (no loss group set")
    assert prov["model.name"] == "src/rankrepro/plan/setups/suprank.yaml: suprank_base"
    assert card["tables"] == [{"table": "suprank/table4", "title": table4.tables["suprank/table4"].title,
                               "cells": [{"row": row, "method": DEIT, "columns": ["CUB R@1", "CUB R@2", "CUB R@4",
                                                                                  "CUB R@8"], "reference": False}]}]
    text = card_text(card, table4.tables)
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert f"Used by suprank/table4 ({card['tables'][0]['title']}): {DEIT}: CUB R@1, R@2, R@4, R@8" in lines
    assert ("net the whole network (backbone and head) adamw 1e-06 0.0005 0.0 trained") in lines
    assert (f"groups.net.lr 1e-06 suprank/table4.yaml rows[{row}] ({DEIT}) column_runs.CUB") in lines
    assert "groups.loss.lr 1e-06 follows the net group" in lines
    assert "l2_features false default (RetrievalNet)" in lines
    assert "name retrieval_net suprank.yaml: suprank_base" in lines
    markdown = card_markdown(card, table4.tables)
    assert f"| | groups.net.lr `1e-06` | suprank/table4.yaml rows[{row}] ({DEIT}) column_runs.CUB |" in \
        markdown.replace("|  |", "| |")


def test_a_card_has_every_key_and_an_origin_for_every_value(table4):
    for rid, card in plan_cards(table4).items():
        assert ISSUE_KEYS <= set(card) and set(REQUIRED_KEYS) <= set(card)
        run = table4.runs[rid]
        assert {dotted(p) for p in leaf_paths(run)} <= set(card["provenance"])
        assert NOT_RECORDED not in card["provenance"].values()
        assert card["select"] in ("last", "best_test") and "every" in card["eval"]
        for group in card["groups"].values():
            assert set(group) == {"params", "optimizer", "lr", "weight_decay", "lr_min", "warmup_frozen"}
    json.dumps(plan_cards(table4))


def test_a_card_of_a_plan_without_provenance_says_so():
    plan = Plan.from_json(make_plan({"suprank": ["table4"]}))
    rid = next(iter(plan.runs))
    card = recipe_card(rid, plan.runs[rid])
    assert set(card["provenance"].values()) >= {NOT_RECORDED} and card["tables"] == []
    assert "Used by no table" in card_text(card)


SPEC = {"paper": "p", "table": "t", "caption": "c",
        "columns": [{"key": "a", "group": "Stanford Cars", "header": "R@1"}, {"key": "b", "group": "", "header": ""}],
        "rows": [{"method": "Ours (ViT)"}], "panels": [{"key": "inat", "title": "(a) iNaturalist"}]}


@pytest.mark.parametrize("origin, short", [
    ("src/rankrepro/plan/setups/suprank.yaml: suprank_inat", "suprank.yaml: suprank_inat"),
    ("src/rankrepro/plan/setups/suprank.yaml: suprank_inat: per_loss.roadmap",
     "suprank.yaml: suprank_inat: per_loss.roadmap"),
    ("src/rankrepro/tables/specs/p/t.yaml: rows[0].column_runs.CUB", "p/t.yaml rows[0] (Ours (ViT)) column_runs.CUB"),
    ("/abs/checkout/src/rankrepro/tables/specs/p/t.yaml: rows[0].loss", "p/t.yaml rows[0] (Ours (ViT)) loss"),
    ("src/rankrepro/tables/specs/p/t.yaml: columns[0].run", "p/t.yaml columns[0] (Stanford Cars R@1) run"),
    ("src/rankrepro/tables/specs/p/t.yaml: columns[1].run", "p/t.yaml columns[1] (b) run"),
    ("src/rankrepro/tables/specs/p/t.yaml: panels[0].values[2]", "p/t.yaml panels[0] ((a) iNaturalist) values[2]"),
    ("src/rankrepro/tables/specs/p/t.yaml: seeds", "p/t.yaml seeds"),
    ("src/rankrepro/tables/specs/q/other.yaml: rows[3].run", "other.yaml: rows[3].run"),  # not in this plan
    ("code default of model 'retrieval_net' (rankrepro.models.heads:RetrievalNet)", "default (RetrievalNet)"),
    ("code default of optimizer 'adam'", "default (adam)"),
    ("run schema default (src/rankrepro/plan/schemas/run.schema.yaml)", "default (run schema)"),
    ("run schema default", "default (run schema)"),
    ("src/rankrepro/plan/setups/pnp.yaml: pnp_base (optimizer.weight_decay)",
     "pnp.yaml: pnp_base (optimizer.weight_decay)"),
    ("src/rankrepro/tables/specs/p/t.yaml: rows[0].run (schedule's floor)",
     "p/t.yaml rows[0] (Ours (ViT)) run (schedule's floor)"),
    ("the head group's settings (no loss group set: the loss's parameters follow it, SupRank "
     "${optimizer.opt.head})", "follows the head group"),
    ("config run_overrides", "config run_overrides"),
    ("spec seeds", "the table's seeds"),
])
def test_origins_are_shortened_for_reading(origin, short):
    assert short_origin(origin, {"p/t": TablePlan("p", "t", SPEC)}) == short


def test_an_unknown_run_id_exits_2_naming_the_plan_and_close_ids(table4, tmp_path, capsys):
    plan_file = str(write_plan(table4.to_json(), tmp_path / "plan").plan)
    _, rid = _deit_cub(table4)
    with pytest.raises(SystemExit) as exit_:
        main(["recipe", rid[:-1], "--plan", plan_file])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"recipe: run '{rid[:-1]}' is not in {plan_file} ({len(table4.runs)} runs); close ids: {rid}")
    with pytest.raises(SystemExit) as exit_:
        main(["recipe", "nothing-like-it", "--plan", plan_file])
    assert exit_.value.code == 2 and "`--all` lists them" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["recipe", "--plan", plan_file])
    assert exit_.value.code == 2 and "give a RUN_ID or --all" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"recipe: .*missing\.json: not a readable plan file"):
        main(["recipe", rid, "--plan", str(tmp_path / "missing.json")])
    assert main(["recipe", rid, "--plan", plan_file, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == rid


def test_every_run_of_the_full_plan_has_a_card_without_torch(tmp_path):
    """`recipe --all --json` over config.yaml: a card per run, every required key, an origin for every value."""
    from test_plan import torch_blocked_env

    out = subprocess.run([sys.executable, "-m", "rankrepro", "recipe", "--all", "--json", "--config",
                          str(REPO / "config.yaml")], env=torch_blocked_env(tmp_path), capture_output=True,
                         text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    cards = json.loads(out.stdout)
    plan = subprocess.run([sys.executable, "-m", "rankrepro", "plan", "--config", str(REPO / "config.yaml"), "--out",
                           str(tmp_path / "plan")], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert plan.returncode == 0, plan.stderr
    runs = json.loads(next((tmp_path / "plan").glob("plan.*.json")).read_text())["runs"]
    assert list(cards) == list(runs) and len(cards) > 100
    for rid, card in cards.items():
        assert set(REQUIRED_KEYS) <= set(card) and card["run_id"] == rid, rid
        missing = {dotted(p) for p in leaf_paths(runs[rid])} - set(card["provenance"])
        assert not missing and NOT_RECORDED not in card["provenance"].values(), (rid, missing)
        assert card["tables"], rid  # every planned run is some table's


def test_the_report_page_groups_cards_by_paper_and_table(tmp_path):
    plan = Plan.from_json(make_plan({"suprank": ["table1", "table2"]}))
    shared = next(rid for rid in plan.tables["suprank/table2"].runs if rid in plan.tables["suprank/table1"].runs)
    page = recipes_page(plan_cards(plan), plan.tables)
    assert page.startswith("# Recipes\n") and page.count("\n## suprank\n") == 1
    assert page.index("### suprank/table1: ") < page.index("### suprank/table2: ")
    assert page.count(f"#### `{shared}`") == 1 and "card under suprank/table1" in page
    assert page.count("\n#### `") == len(plan.runs)
    html = markdown_html(page, title="recipes")
    assert "<h4><code>" in html and "<th>group</th>" in html
    plan_file = str(write_plan(plan.to_json(), tmp_path / "plan").plan)
    md, page_html = tmp_path / "recipes.md", tmp_path / "recipes.html"
    assert main(["recipe", "--all", "--markdown", "--plan", plan_file, "--out", str(md), "--html", str(page_html)]) == 0
    assert md.read_text() == page and page_html.read_text() == html


@pytest.mark.slow
def test_the_recipes_rule_writes_the_page_and_the_report_shows_it(tmp_path):
    from rankrepro.bench.plan import workflow_copy

    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    (wf / "subset.yaml").write_text(yaml.safe_dump({"tables": {**{p: [] for p in papers}, "suprank": ["table4"]}}))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

    def smk(*args, targets):
        result = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args, "--configfile",
                                 "config.yaml", "subset.yaml", "--", *targets], cwd=wf, capture_output=True, text=True,
                                env=env, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    assert "recipes" in smk("-n", targets=["results/README.md"]).stdout
    smk(targets=["results/recipes.md"])
    page = (wf / "results" / "recipes.md").read_text()
    assert "### suprank/table4: " in page and f"({DEIT}) column_runs.CUB" in page
    smk("--report", "report.html", targets=["results/recipes.html"])
    assert "Recipes" in (wf / "report.html").read_text()
