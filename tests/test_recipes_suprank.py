"""SupRank Tables IV, V and VIII train as the official configurations (elias-ramzi/SupRank, commit d3d0e3c,
suprank/config/): every cell's run checked against the file its value comes from."""

from __future__ import annotations

import pytest

from rankrepro.plan.build import make_plan
from rankrepro.plan.schema import PlanError

ADAM10 = {"optimizer": "adam", "lr": 10.0, "weight_decay": 0.0, "lr_min": 0.1, "warmup_frozen": False}


@pytest.fixture(scope="module")
def plan():
    return make_plan({"suprank": ["table4", "table5", "table8"]})


def cell_run(plan: dict, table: str, method: str, column: str) -> dict:
    """The run of cell (row ``method``, column ``column``) of SupRank ``table``."""
    t = plan["tables"][f"suprank/{table}"]
    spec = t["spec"]
    r = next(i for i, row in enumerate(spec["rows"]) if row["method"] == method)
    c = next(i for i, col in enumerate(spec["columns"]) if col["key"] == column)
    cell = next(cell for cell in t["cells"] if cell["row"] == r and cell["column"] == c)
    return plan["runs"][cell["run_ids"][0]]


def follows(groups: dict, model_group: str) -> bool:
    """The loss group is a copy of ``model_group``'s settings (the official ``${optimizer.opt.<group>}``)."""
    return groups["loss"] == {**groups[model_group], "warmup_frozen": False}


def test_deit_trains_one_net_group_at_the_datasets_rate(plan):
    # optimizer/sop_deit.yaml, inat_deit.yaml: AdamW 1e-5 wd 5e-4 on "net", cosine to 0; cub_deit.yaml: 1e-6
    for column, lr in (("sop_r1", 1e-5), ("inat_r1", 1e-5), ("cub_r1", 1e-6)):
        run = cell_run(plan, "table4", "ROADMAP (ours) DeiT-S", column)
        opt = run["optimizer"]
        assert opt["name"] == "adamw" and set(opt["groups"]) == {"net", "loss"}, column
        net = opt["groups"]["net"]
        assert (net["lr"], net["weight_decay"], net["lr_min"]) == (lr, 5e-4, 0.0), column
        # fix 5: warmup_keys [backbone] -- DeiT has no group of that name, nothing is frozen in warm-up
        assert not net["warmup_frozen"] and run["warmup_epochs"] == 5
        # fix 3: loss/ROADMAP_pp_deit.yaml puts the proxies on ${optimizer.opt.net}, start 0.5 / offset 1.44 everywhere
        assert follows(opt["groups"], "net") and (run["loss"]["start"], run["loss"]["offset"]) == (0.5, 1.44)
        assert run["loss"]["memory"] is not None  # the column's memory (section VII-B)
    cub = cell_run(plan, "table4", "ROADMAP (ours) DeiT-S", "cub_r1")
    # fix 1: dataset/cub.yaml, RandomResizedCrop 224 / Resize 256 + CenterCrop 224 (not cub_big's 288 / 256)
    assert cub["images"]["train_crop"] == cub["images"]["test_crop"] == 224 and cub["images"]["test_resize"] == 256


def test_vit_on_cub_takes_its_own_optimizer(plan):
    cub = cell_run(plan, "table4", "ROADMAP (ours) ViT-B", "cub_r1")
    groups = cub["optimizer"]["groups"]
    # optimizer/cub_vit_base_512proj.yaml: AdamW backbone 1e-6, head 2e-6, wd 5e-4, cosine to 1e-6
    assert (groups["backbone"]["lr"], groups["head"]["lr"]) == (1e-6, 2e-6)
    assert groups["backbone"]["lr_min"] == groups["head"]["lr_min"] == 1e-6 and groups["backbone"]["warmup_frozen"]
    assert follows(groups, "head") and cub["images"]["test_resize"] == 256
    inat = cell_run(plan, "table4", "ROADMAP (ours) ViT-B", "inat_r1")["optimizer"]["groups"]
    # optimizer/inat_vit_base_512proj.yaml: 1e-5 / 2e-5; the proxies as ROADMAP_pp_inat's (our choice, no ViT config)
    assert (inat["backbone"]["lr"], inat["head"]["lr"]) == (1e-5, 2e-5) and inat["loss"] == ADAM10


def test_resnet_roadmap_proxies_per_dataset(plan):
    sop = cell_run(plan, "table4", "ROADMAP (ours)", "sop_r1")
    inat = cell_run(plan, "table4", "ROADMAP (ours)", "inat_r1")
    cub = cell_run(plan, "table4", "ROADMAP (ours)", "cub_r1")
    assert sop["optimizer"]["groups"]["loss"] == ADAM10  # loss/ROADMAP_pp_SOP.yaml
    assert inat["optimizer"]["groups"]["loss"] == ADAM10 and inat["loss"]["start"] == 0.0  # ROADMAP_pp_inat.yaml
    assert follows(cub["optimizer"]["groups"], "head")  # ROADMAP_pp.yaml: ${optimizer.opt.head}
    assert cub["model"]["pooling"]["name"] == "gem" and cub["images"]["test_resize"] == 288  # cub_big.yaml


@pytest.mark.parametrize("method, sop, inat", [
    ("NSM [11]", "adam10", "head"),          # norm_softmax_sop.yaml / norm_softmax.yaml
    ("ΣNSM [11]", "adam10", "head"),         # norm_softmax_sop_double.yaml / norm_softmax_seven.yaml
    ("NCA++ [15]", "head", "head"),          # proxy_nca_pp.yaml
    ("CSL [33]", "csl_sop", "head"),         # csl_sop.yaml (Adam 10, wd 0, the head's schedule) / csl_inat.yaml
    ("HAPPIER (ours)", "adam10", "adam10"),  # HAPPIER_SOP.yaml / HAPPIER_inat.yaml
    ("ROD-NDCG (ours)", "adam10", "adam10"),  # roadndcg_sop.yaml / roadndcg_inat.yaml
])
def test_fix_2_proxies_train_where_their_config_puts_them(plan, method, sop, inat):
    for column, expected in (("sop_r1", sop), ("full_r1", inat), ("base_r1", inat)):
        groups = cell_run(plan, "table5", method, column)["optimizer"]["groups"]
        if expected == "head":
            assert follows(groups, "head"), (method, column)
        elif expected == "adam10":
            assert groups["loss"] == ADAM10, (method, column)
        else:
            assert groups["loss"] == {**ADAM10, "lr_min": 0.0}, (method, column)  # SOP's cosine floor


def test_fix_4_inat_rank_losses_start_at_zero(plan):
    for method in ("ROD-NDCG (ours)", "HAPPIER (ours)", "HAPPIER_F (ours)"):
        assert (cell_run(plan, "table5", method, "base_r1")["loss"]["start"],
                cell_run(plan, "table5", method, "base_r1")["loss"]["offset"]) == (0.0, 1.0)
        assert cell_run(plan, "table5", method, "sop_r1")["loss"]["offset"] == 1.44
    # VII-C: HAPPIER_F's alpha is 5 on SOP, 3 on iNat-base/full (suprank_inat's per_loss)
    assert cell_run(plan, "table5", "HAPPIER_F (ours)", "sop_r1")["loss"]["alpha"] == 5.0
    assert cell_run(plan, "table5", "HAPPIER_F (ours)", "full_ap")["loss"]["alpha"] == 3.0


def test_fix_6_proxy_groups_have_no_weight_decay_and_their_own_floor(plan):
    run = cell_run(plan, "table5", "HAPPIER (ours)", "sop_r1")
    groups = run["optimizer"]["groups"]
    assert groups["head"]["weight_decay"] == 1e-4 and groups["head"]["lr_min"] == 0.0
    assert groups["loss"]["weight_decay"] == 0.0 and groups["loss"]["lr_min"] == 0.1


def test_fix_7_sum_triplet_mines_all_triplets_as_the_official_configs(plan):
    assert cell_run(plan, "table5", "ΣTL_SH [5]", "sop_r1")["loss"]["mining"] == "all"
    assert cell_run(plan, "table5", "Triplet SH [5]", "sop_r1")["loss"]["mining"] == "easy_semihard"


def test_per_loss_in_the_overrides_comes_after_the_setups():
    # (a row's own loss keys win over per_loss: the DeiT-S row's start 0.5 on iNaturalist, above)
    plan = make_plan({"suprank": ["table5"]}, {"per_loss": {"happier": {"loss": {"start": 0.25}}}})
    runs = plan["runs"].values()
    assert {r["loss"]["start"] for r in runs if r["loss"]["name"] == "happier"} == {0.25}
    assert {r["loss"]["start"] for r in runs if r["loss"]["name"] == "rod_ndcg"} == {0.0, 0.5}  # iNat, SOP


def test_a_column_runs_selector_must_name_a_column(tmp_path):
    from rankrepro.io import load_yaml
    from rankrepro.plan.specs import SPECS_DIR

    spec = load_yaml(SPECS_DIR / "suprank" / "table4.yaml")
    spec["rows"][-1]["column_runs"]["CUBB"] = spec["rows"][-1]["column_runs"].pop("CUB")
    (tmp_path / "suprank").mkdir()
    import yaml

    (tmp_path / "suprank" / "table4.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    with pytest.raises(PlanError, match=r"table4.yaml: rows\[22\].column_runs.CUBB: no column has this group or key"):
        make_plan({"suprank": ["table4"]}, specs_dir=tmp_path)


def test_a_per_loss_entry_of_a_spec_block_must_name_a_loss(tmp_path):
    import yaml

    from rankrepro.io import load_yaml
    from rankrepro.plan.specs import SPECS_DIR

    spec = load_yaml(SPECS_DIR / "suprank" / "table4.yaml")
    spec["columns"][0]["run"]["per_loss"] = {"roadmapp": {"loss": {"lam": 0.2}}}
    (tmp_path / "suprank").mkdir()
    (tmp_path / "suprank" / "table4.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    with pytest.raises(PlanError, match=r"table4.yaml: columns\[0\].run: per_loss.roadmapp: unknown loss 'roadmapp'"):
        make_plan({"suprank": ["table4"]}, specs_dir=tmp_path)
