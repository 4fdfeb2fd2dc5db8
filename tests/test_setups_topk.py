"""Top-k precision ("Sampling Wisely", ICCV 2019) training setups
(src/rankrepro/plan/setups/topk.yaml) and Table 1 specs (src/rankrepro/tables/specs/topk/):
topk_base resolves once a dataset, backbone, sampler, epochs and metrics are given; the six
Table 1 setups (DenseNet201 and BN-Inception on CUB, Cars, SOP) resolve with every row's loss and
hold the paper's values (or, where the paper is silent, the official code's, as the comments in
the yaml say); each Table 1 block plans ten runs, no cell pending. Quotes:
../shared/papers/topk_precision_iccv2019.txt; code: ../shared/spec/reference/losses.md section 4."""

import pytest
import yaml

from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.planned import load_planned
from rankrepro.plan.setups import SETUPS_DIR, load_setups
from rankrepro.plan.specs import load_spec, spec_names
from setuputil import DEMO, assert_demo_overrides_applied, run_of
LK = {"name": "topk_precision", "k": 5, "margin": 0.1}  # 4.4: "We set gamma = 0.1 and k = 5"

DATASETS = ("cub", "cars", "sop")
TABLES = [f"table1_{d}" for d in DATASETS]
#: Table 1 setup -> dataset
SETUPS = {f"topk_{net}_{d}": d for net in ("densenet201", "bninception") for d in DATASETS}
#: the components the Table 1 setups brought: kind -> names
COMPONENTS = {"backbone": {"densenet201", "bninception"}, "sampler": {"up_to_m_per_class"}}
METHODS = ["Uniform Triplet", "Hard Mining Triplet", "Semi Hard Triplet", "Distance Weighted", "Contrastive Loss",
           "Lifted Struct Loss", "N-Pair Loss", "Angular Loss", "Proxy NCA Loss", "Ours ℓ_k"]
#: a completion of topk_base with other registered components (what a dataset setup adds)
COMPLETION = {"dataset": "cub", "model": {"backbone": "resnet50", "embed_dim": 64},
              "sampler": {"name": "m_per_class", "batch_size": 66, "samples_per_class": 11},
              "epochs": 100, "eval": {"metrics": ["P@1", "R@1"]}}  # R@1: the base selects the best epoch by it


@pytest.fixture(scope="module")
def plan():
    return make_plan({"topk": TABLES})


@pytest.fixture(scope="module")
def setups():
    return yaml.safe_load((SETUPS_DIR / "topk.yaml").read_text())


# ------------------------------------------------------------------------------ setups


def test_the_file_holds_the_base_and_the_table1_setups(setups):
    assert set(setups) == {"topk_base", *SETUPS}


def test_the_components_are_registered_and_the_setups_not_planned():
    cat = catalog.load()
    assert all(name in cat[kind] for kind, names in COMPONENTS.items() for name in names)
    assert cat["sampler"]["up_to_m_per_class"]["parameters"] == {
        "batch_size": {"required": True, "types": ["integer"]},
        "samples_per_class": {"required": True, "types": ["integer"]}}
    assert not set(SETUPS) & load_planned()["setups"] and set(SETUPS) <= set(load_setups())


def test_the_base_resolves_once_completed(planner):
    run = planner.resolve("topk_base", [("completion", COMPLETION), ("loss", {"loss": LK})])
    model = run["model"]
    # 4.4: ImageNet-pretrained, "a fully connected layer as embedding layer and normalize its output";
    # code: average pooling, no LayerNorm, BatchNorm not frozen
    assert model["pretrained"] == "imagenet" and model["projection"] and not model["layernorm"]
    assert model["pooling"]["name"] == "avg" and not model["freeze_bn"]
    # 4.4: "resized to 256x256 and then randomly cropped to 227x227 ... we only center crop during test"
    images = run["images"]
    assert images["train_resize"] == [256, 256] and images["train_crop"] == 227
    assert images["test_resize"] == [256, 256] and images["test_crop"] == 227 and images["rrc_scale"] == [0.08, 1.0]
    # 4.4: "We use the ADAM optimizer"; code: eps 1e-2, wd 5e-4, backbone 1e-3, embedding 1e-5, loss 1e-3
    opt = run["optimizer"]
    assert opt["name"] == "adam" and opt["eps"] == 1e-2 and opt["weight_decay"] == 5e-4
    assert (opt["groups"]["backbone"]["lr"], opt["groups"]["head"]["lr"], opt["groups"]["loss"]["lr"]) == (1e-3, 1e-5, 1e-3)
    # code: MultiStepLR gamma 0.1, no warm-up, float32
    assert run["schedule"]["name"] == "multistep" and run["schedule"]["gamma"] == 0.1
    assert run["warmup_epochs"] == 0 and run["amp"] == "none"
    assert run["loss"] == {**LK, "memory": None, "reduction": "class_sum", "last_group_only": False,
                           "official_hard_topk": False}


def test_the_setups_hold_the_papers_values(setups):
    cub, cars, sop = (setups[f"topk_densenet201_{d}"] for d in DATASETS)
    assert cub["extends"] == "topk_base" and cars["extends"] == sop["extends"] == "topk_densenet201_cub"
    # Table 1 caption: "The network backbone is densenet201"; 4.4: "The embedding dimension is 64
    # in [32] and [15] and 512 in [29]"
    assert cub["model"] == {"backbone": "densenet201", "embed_dim": 64} and sop["model"] == {"embed_dim": 512}
    assert "model" not in cars
    # 4.4: "A training batch contains 64 images ... we randomly sample 11 images" per class
    assert cub["sampler"] == {"name": "up_to_m_per_class", "batch_size": 64, "samples_per_class": 11}
    # code SCHEDULER_STEP per dataset
    assert [b["schedule"]["milestones"] for b in (cub, cars, sop)] == [[8, 20, 70], [10, 30, 70], [15, 100, 200]]
    assert [b["dataset"] for b in (cub, cars, sop)] == list(DATASETS)
    for d in DATASETS:  # 4.4: "the Inception with BN layer"; same recipe otherwise
        body = setups[f"topk_bninception_{d}"]
        # code models/bn_inception.py: every BatchNorm2d(..., momentum=0.9); densenet201: torchvision's 0.1
        assert body["extends"] == f"topk_densenet201_{d}"
        assert body["model"] == {"backbone": "bninception", "bn_momentum": 0.9}
    assert setups["topk_base"]["model"]["bn_momentum"] is None


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_the_setups_resolve_with_every_row(planner, setup):
    dataset = SETUPS[setup]
    spec = load_spec("topk", f"table1_{dataset}")
    for row in spec["rows"]:
        run = run_of(planner, setup, row["loss"])
        assert run["dataset"] == dataset and run["loss"]["name"] == row["loss"]["name"]
        model = run["model"]
        assert model["backbone"] == setup.split("_")[1] and model["pretrained"] == "imagenet"
        assert model["embed_dim"] == (512 if dataset == "sop" else 64)  # 4.4: 64 (CUB, Cars), 512 (SOP)
        assert model["pooling"]["name"] == "avg" and model["projection"] and not model["freeze_bn"]
        assert model["bn_momentum"] == (0.9 if "bninception" in setup else None)
        # 4.4: 64 images per batch, 11 per class at most
        assert run["sampler"] == {"name": "up_to_m_per_class", "batch_size": 64, "samples_per_class": 11}
        assert run["images"]["train_crop"] == run["images"]["test_crop"] == 227  # 4.4: 227x227 crops
        assert run["epochs"] > run["schedule"]["milestones"][-1]
        assert {c["metric"] for c in spec["columns"]} <= set(run["eval"]["metrics"])


# ------------------------------------------------------------------------------- specs


def test_table1_is_specified_per_dataset_block():
    assert {t for p, t in spec_names() if p == "topk"} == set(TABLES)


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_specs_rows_and_columns(dataset):
    spec = load_spec("topk", f"table1_{dataset}")
    assert [r["method"] for r in spec["rows"]] == METHODS and not any(r.get("cited") for r in spec["rows"])
    assert {c["setup"] for c in spec["columns"]} == {f"topk_densenet201_{dataset}"}
    level = "_level1" if dataset == "sop" else ""  # caption: SOP NMI and F1 "computed by 12 super categories"
    assert [c["metric"] for c in spec["columns"]] == ["P@1", "P@3", "P@5", "P@10", "R@3", "R@5", "R@10",
                                                      f"NMI{level}", "mAP", f"F1{level}"]
    losses = {r["method"]: r["loss"] for r in spec["rows"]}
    assert losses["Ours ℓ_k"] == LK
    assert [losses[m]["mining"] for m in METHODS[:4]] == ["uniform", "hard", "semihard", "distance_weighted"]
    assert losses["Proxy NCA Loss"] == {"name": "proxy_nca_pp", "temperature": pytest.approx(1 / 9)}
    assert [losses[m]["name"] for m in METHODS[4:8]] == ["contrastive", "lifted_structure", "npair", "angular"]


def test_the_three_blocks_train_the_same_losses():
    losses = [[r["loss"] for r in load_spec("topk", t)["rows"]] for t in TABLES]
    assert losses[0] == losses[1] == losses[2]


@pytest.mark.parametrize("table", TABLES)
def test_every_cell_is_a_run_of_its_setup(plan, table):
    entry = plan["tables"][f"topk/{table}"]
    assert len(entry["cells"]) == 100 and len(entry["runs"]) == 10
    assert all(c["pending"] is None and len(c["run_ids"]) == 1 for c in entry["cells"])
    dataset = table.split("_")[1]
    runs = [plan["runs"][rid] for rid in entry["runs"]]
    assert {r["dataset"] for r in runs} == {dataset} and {r["model"]["backbone"] for r in runs} == {"densenet201"}


def test_the_three_blocks_are_thirty_runs(plan):
    """One run per row and block (30 in all, none shared)."""
    assert len(plan["runs"]) == 30 and {r["dataset"] for r in plan["runs"].values()} == set(DATASETS)


def test_demo_overrides_resolve_the_setups(demo_planner):
    """profiles/demo/demo.yaml's run_overrides (a registered backbone, a small batch) apply to every setup
    and every Table 1 row: the sampler keeps its name and takes the demo's batch."""
    for setup in SETUPS:
        run = run_of(demo_planner, setup, LK)
        assert_demo_overrides_applied(run)
        assert run["sampler"] == {"name": "up_to_m_per_class", **DEMO["sampler"]}
    plan = make_plan({"topk": TABLES}, DEMO)
    assert len(plan["runs"]) == 30
    assert all(c["pending"] is None for t in plan["tables"].values() for c in t["cells"])
