"""PNP loss (AAAI 2022) training setups (src/rankrepro/plan/setups/pnp.yaml) and table
specs (src/rankrepro/tables/specs/pnp/): every setup resolves through the planner with a loss
the paper trains on it, its key values are the paper's (or, where the paper is silent, the
official code's, as the comments in the yaml say), every spec plans with the paper's run
count and shares runs where the paper reuses a result, and the demo profile's overrides still
apply. Quotes: ../shared/papers/pnp_loss_aaai2022.txt; code: ../shared/spec/reference/losses.md
section 2 (and section 1.2 for Smooth-AP's VehicleID / iNaturalist code)."""

import pytest
import yaml

from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.complete import run_id
from rankrepro.plan.planned import load_planned
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.setups import SETUPS_DIR
from rankrepro.plan.specs import load_spec, spec_names
from setuputil import DEMO, assert_demo_overrides_applied, run_of

# "we directly set tau in Eq. 3 to 0.01"; alpha 4: code README's best run --variant PNP-D_q --alpha 4
PNP_DQ = {"name": "pnp_dq", "alpha": 4.0, "tau": 0.01}
PNP_IU = {"name": "pnp_iu", "tau": 0.01}
SMOOTH_AP = {"name": "smooth_ap", "tau": 0.01}

#: setup -> (dataset, batch size, the losses the paper trains on it)
SETUPS = {
    "pnp_base": (None, None, ()),
    "pnp_sop_112": ("sop", 112, ({"name": "pnp_o", "tau": 0.01}, PNP_IU, {"name": "pnp_ib", "b": 4.0, "tau": 0.01},
                                 {"name": "pnp_ds", "tau": 0.01}, PNP_DQ)),
    "pnp_sop_384": ("sop", 384, (PNP_DQ,)),
    "pnp_vehicleid_112": ("vehicleid", 112, ({"name": "pnp_ib", "b": 1.0, "tau": 0.01}, PNP_DQ)),
    "pnp_vehicleid_384": ("vehicleid", 384, (PNP_DQ,)),
    "pnp_inat_224": ("inat", 224, (PNP_DQ,)),
    "pnp_sop_merge3": ("sop_merge3", 112, (SMOOTH_AP, PNP_IU, PNP_DQ)),
    "pnp_vehicleid_merge3": ("vehicleid_merge3", 112, (SMOOTH_AP, PNP_IU, PNP_DQ)),
}
TRAINED = sorted(s for s, (d, _, _) in SETUPS.items() if d)
TABLES = [t for p, t in spec_names() if p == "pnp"]


@pytest.fixture(scope="module")
def plan():
    return make_plan({"pnp": TABLES})


def test_the_file_holds_exactly_these_setups():
    data = yaml.safe_load((SETUPS_DIR / "pnp.yaml").read_text())
    assert set(data) == set(SETUPS) and all(name.startswith("pnp_") for name in data)
    assert not set(SETUPS) & load_planned()["setups"]


@pytest.mark.parametrize("setup", TRAINED)
def test_every_setup_resolves_with_the_losses_the_paper_trains_on_it(setup):
    dataset, batch, losses = SETUPS[setup]
    assert losses
    for loss in losses:
        run = resolve_run(setup, loss)
        assert run["dataset"] == dataset and run["loss"]["name"] == loss["name"] and run["loss"]["tau"] == 0.01
        assert run["loss"]["include_query"]  # the official codes keep the query in its own list
        assert run["sampler"]["batch_size"] == batch and run["eval"]["metrics"]
        if loss["name"] == "pnp_dq":
            assert run["loss"]["alpha"] == 4.0 and not run["loss"]["dq_legacy_sign"]  # eq. 13's sign (fixed code)


@pytest.mark.parametrize("setup", TRAINED)
def test_the_papers_common_settings(planner, setup):
    run = run_of(planner, setup, PNP_DQ)
    # "the convolutional layers of ResNet-50 pretrained on ImageNet"; 512-d ("dimension (512)")
    model = run["model"]
    assert model["backbone"] == "resnet50" and model["pretrained"] == "imagenet"
    assert model["projection"] and model["embed_dim"] == 512 and not model["layernorm"]
    assert model["freeze_bn"]  # code: resnet50_frozen_normalize
    # "Adam ... initial learning rate 10^-5, weight decay 4x10^-4"
    opt = run["optimizer"]
    assert opt["name"] == "adam" and opt["groups"]["backbone"]["lr"] == opt["groups"]["head"]["lr"] == 1e-5 and opt["weight_decay"] == 4e-4
    # "randomly sample k classes and |P| samples per class"; Fig. 8(c): |P| = 4 is best; SOP: the code's
    # class_random (the only dataset the code trains), the others Smooth-AP's m_per_class
    sop = run["dataset"].startswith("sop")
    assert run["sampler"]["name"] == ("class_random" if sop else "m_per_class")
    assert run["sampler"]["samples_per_class"] == 4
    # "randomly crop them to 224x224 ... a single center crop of 224x224"; code RandomResizedCrop(224),
    # test Resize(256) + CenterCrop(224)
    images = run["images"]
    assert images["train_crop"] == 224 and images["test_crop"] == 224 and images["test_resize"] == 256
    assert images["train_resize"] is None and images["rrc_scale"] == [0.08, 1.0]
    # "We use 0 as the fixed random seed for all experiments"; code: MultiStepLR gamma 0.3, float32
    assert run["seed"] == 0 and run["schedule"]["name"] == "multistep" and run["schedule"]["gamma"] == 0.3
    assert run["warmup_epochs"] == 0 and run["amp"] == "none" and run["loss"]["memory"] is None


def test_the_assumed_batch_is_described():
    setups = yaml.safe_load((SETUPS_DIR / "pnp.yaml").read_text())
    assert setups["pnp_base"]["images"]["train_resize"] is None  # the code's RandomResizedCrop, not the paper's
    for merged in ("pnp_sop_merge3", "pnp_vehicleid_merge3"):  # Tables 6-7 give no batch size
        assert "batch 112 assumed" in setups[merged]["description"]


@pytest.mark.parametrize("batch", [112, 384])
def test_sop(planner, batch):
    run = run_of(planner, f"pnp_sop_{batch}", PNP_DQ)
    # code README best run: --data_sampler class_random --bs 384 --samples_per_class 4 --n_epochs 400;
    # class_random draws classes (and images) with replacement (datasampler/class_random_sampler.py)
    assert run["sampler"] == {"name": "class_random", "batch_size": batch, "samples_per_class": 4,
                              "replace_classes": True}
    assert run["epochs"] == 400 and run["schedule"]["milestones"] == [120, 220, 250, 280]
    # Table 1: R@1/10/100/1K, dists@intra, dists@inter, NMI; Table 3: R@1/10/100/1K
    assert run["eval"]["metrics"] == ["R@1", "R@10", "R@100", "R@1000", "dists@intra", "dists@inter", "NMI"]


@pytest.mark.parametrize("batch", [112, 384])
def test_vehicleid(planner, batch):
    run = run_of(planner, f"pnp_vehicleid_{batch}", PNP_DQ)
    assert run["sampler"] == {"name": "m_per_class", "batch_size": batch, "samples_per_class": 4,
                              "reduce_per_class": None}
    # no PNP VehicleID code: Smooth-AP's ("the same setting with (Brown et al. 2020)")
    assert run["epochs"] == 400 and run["schedule"]["milestones"] == [200, 300]
    # Tables 2 / 4: R@1, R@5 per test list; Table 2: dists and NMI
    assert run["eval"]["metrics"] == ["R@1", "R@5", "dists@intra", "dists@inter", "NMI"]
    assert catalog.load()["dataset"]["vehicleid"]["facts"]["protocol"] == "vehicleid"


def test_inat(planner):
    run = run_of(planner, "pnp_inat_224", PNP_DQ)
    # Table 5: "the same batch size (224)"; one learning rate (Smooth-AP's last layer x2 not followed)
    assert run["sampler"] == {"name": "m_per_class", "batch_size": 224, "samples_per_class": 4,
                              "reduce_per_class": None}
    assert run["optimizer"]["groups"]["head"]["lr"] == 1e-5
    # Smooth-AP code main.py iNaturalist override: 90 epochs, milestones [40, 70]
    assert run["epochs"] == 90 and run["schedule"]["milestones"] == [40, 70]
    assert run["eval"]["metrics"] == ["R@1", "R@4", "R@16", "R@32"]


@pytest.mark.parametrize("merged, base", [("pnp_sop_merge3", "pnp_sop_112"),
                                          ("pnp_vehicleid_merge3", "pnp_vehicleid_112")])
def test_merged_sets_train_as_their_base(planner, merged, base):
    """Tables 6-7: the train classes merged by three, "we still use original test set"; the rest
    is the base setup's training."""
    run, ref = run_of(planner, merged, PNP_DQ), run_of(planner, base, PNP_DQ)
    assert run["dataset"] == base.split("_")[1] + "_merge3"
    assert catalog.load()["dataset"][run["dataset"]]["facts"]["derived_from"] == ref["dataset"]
    drop = ("dataset", "eval")
    assert {k: v for k, v in run.items() if k not in drop} == {k: v for k, v in ref.items() if k not in drop}


# ------------------------------------------------------------------------------- specs


def test_every_table_is_specified():
    assert {f"table{i}" for i in range(1, 8)} | {"fig8"} == set(TABLES)


def _table(plan, table):
    entry = plan["tables"][f"pnp/{table}"]
    return entry["spec"], entry["cells"], entry["runs"]


@pytest.mark.parametrize("table, rows, runs", [("table1", 5, 5), ("table2", 5, 5), ("table3", 14, 2), ("table4", 7, 2),
                                               ("table5", 6, 1), ("table6", 3, 3), ("table7", 3, 3)])
def test_every_spec_plans_with_the_papers_run_count(plan, table, rows, runs):
    spec, cells, run_ids = _table(plan, table)
    assert len(spec["rows"]) == rows and len(run_ids) == runs
    for cell in cells:
        row = spec["rows"][cell["row"]]
        if row.get("cited"):
            assert cell["pending"] == "cited from other work" and not cell["run_ids"]
        else:
            assert cell["pending"] is None and len(cell["run_ids"]) == 1


def _runs_by_method(plan, table):
    spec, cells, _ = _table(plan, table)
    return {spec["rows"][c["row"]]["method"]: c["run_ids"] for c in cells if c["column"] == 0}


def test_tables_share_runs_where_the_paper_reuses_a_result(plan):
    t1, t2 = _runs_by_method(plan, "table1"), _runs_by_method(plan, "table2")
    t3, t4 = _runs_by_method(plan, "table3"), _runs_by_method(plan, "table4")
    # Tables 3 / 4 "PNP-D_q (BS = 112)" print Tables 1 / 2's PNP-D_q numbers
    assert t3["PNP-D_q (BS = 112)"] == t1["PNP-D_q"] and t4["PNP-D_q (BS = 112)"] == t2["PNP-D_q"]
    assert t3["PNP-D_q (BS = 384)"] == [run_id(resolve_run("pnp_sop_384", PNP_DQ))]
    assert t4["PNP-D_q (BS = 384)"] == [run_id(resolve_run("pnp_vehicleid_384", PNP_DQ))]
    # Fig. 8(b): "b = 4 is the best on SOP while b = 1 is the best on VehicleID. ... We report the
    # best value for the comparison of different variants"
    assert plan["runs"][t1["PNP-I_b"][0]]["loss"]["b"] == 4.0 and plan["runs"][t2["PNP-I_b"][0]]["loss"]["b"] == 1.0
    assert len({rid for ids in list(t1.values()) + list(t2.values()) for rid in ids}) == 10


def test_robustness_tables_follow_the_printed_rows(plan):
    """The text names PNP-I_b, Tables 6 and 7 print PNP-I_u: the tables are followed."""
    for table, dataset in (("table6", "sop_merge3"), ("table7", "vehicleid_merge3")):
        runs = {m: plan["runs"][ids[0]] for m, ids in _runs_by_method(plan, table).items()}
        assert [r["loss"]["name"] for r in runs.values()] == ["smooth_ap", "pnp_iu", "pnp_dq"]
        assert all(r["dataset"] == dataset and r["sampler"]["batch_size"] == 112 for r in runs.values())
        assert "PNP-I_u" in {row["method"] for row in load_spec("pnp", table)["rows"]}


def test_vehicleid_columns_read_the_protocols_subsets(plan):
    for table in ("table2", "table4", "table7"):
        spec, _, _ = _table(plan, table)
        assert [c["metric"] for c in spec["columns"]][:6] == [f"{s}/R@{k}" for s in ("small", "medium", "large")
                                                              for k in (1, 5)]
    spec, _, _ = _table(plan, "table2")
    assert [c["metric"] for c in spec["columns"]][6:] == ["large/dists@intra", "large/dists@inter", "large/NMI"]


def test_fig8_sweeps_share_the_tables_runs(plan):
    spec = load_spec("pnp", "fig8")
    assert spec["kind"] == "sweep" and len(spec["panels"]) == 6
    assert all(v is None for panel in spec["panels"] for v in panel["paper"])  # the figure is an image
    fig = plan["tables"]["pnp/fig8"]
    t1, t2 = _runs_by_method(plan, "table1"), _runs_by_method(plan, "table2")
    at = {(c["panel"], c["value"]): c["run_ids"] for c in fig["cells"]}
    assert at[("alpha_sop", 4.0)] == t1["PNP-D_q"]
    # the |P| sweep on SOP trains the label-based loss (the official index blocks would need the swept |P|):
    # its |P| = 4 point is Table 1's run but for index_blocks
    p4, table1 = plan["runs"][at[("p_sop", 4)][0]], plan["runs"][t1["PNP-D_q"][0]]
    assert p4["loss"]["index_blocks"] is None and table1["loss"]["index_blocks"] == 4
    assert {**p4, "loss": {**p4["loss"], "index_blocks": 4}} == table1
    assert at[("alpha_vehicleid", 4.0)] == at[("p_vehicleid", 4)] == t2["PNP-D_q"]
    assert at[("b_sop", 4.0)] == t1["PNP-I_b"] and at[("b_vehicleid", 1.0)] == t2["PNP-I_b"]
    for (panel, value), ids in at.items():  # "the batch size is set to 112 for all experiments in this section"
        run = plan["runs"][ids[0]]
        assert run["sampler"]["batch_size"] == 112 and run["seed"] == 0
        if panel.startswith("p_"):
            assert run["sampler"]["samples_per_class"] == value
        else:
            assert run["loss"]["alpha" if panel.startswith("alpha") else "b"] == value


# -------------------------------------------------------------------------------- demo


@pytest.mark.parametrize("setup", TRAINED)
def test_demo_overrides_resolve(demo_planner, setup):
    """profiles/demo/demo.yaml's run_overrides apply to every setup (only keys every sampler takes)."""
    for loss in SETUPS[setup][2]:
        run = run_of(demo_planner, setup, loss)
        assert_demo_overrides_applied(run)
        assert run["sampler"]["samples_per_class"] == DEMO["sampler"]["samples_per_class"]


def test_pnp_index_blocks_follow_the_samples_per_class():
    """SOP: the official index-based loss (blocks of |P| = 4, pnp_sop_112's per_loss) with its class_random
    sampler; a sampler drawing another |P| would split the blocks: the plan fails naming both origins."""
    from rankrepro.plan.build import make_plan
    from rankrepro.plan.schema import PlanError

    plan = make_plan({"pnp": ["table1"]})
    pnp = [r for r in plan["runs"].values() if r["loss"]["name"].startswith("pnp_") and r["dataset"] == "sop"]
    assert pnp and all(r["loss"]["index_blocks"] == r["sampler"]["samples_per_class"] == 4 for r in pnp)
    with pytest.raises(PlanError, match=r"pnp.yaml: pnp_sop_112: per_loss.pnp_\w+ \(cell .*\): loss.index_blocks: "
                                        r"index_blocks 4 must equal the sampler's samples_per_class 8 "
                                        r"\(config run_overrides\)"):
        make_plan({"pnp": ["table1"]}, {"sampler": {"samples_per_class": 8}})
