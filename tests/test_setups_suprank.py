"""SupRank (TPAMI) training setups (src/rankrepro/plan/setups/suprank.yaml): every table
setup resolves through the planner, its key values are the paper's (or, where the paper is
silent, the official code's, as the comments in the yaml say), and the demo profile's
overrides still apply to each. Quotes: ../shared/papers/suprank_tpami.txt."""

import pytest

from rankrepro import catalog
from rankrepro.plan.build import make_plan
from rankrepro.plan.planned import load_planned
from rankrepro.plan.planner import resolve_run
from setuputil import DEMO, assert_demo_overrides_applied, run_of

ROADMAP, HAPPIER = {"name": "roadmap"}, {"name": "happier"}
#: setup -> (dataset, a loss the paper trains on it)
SETUPS = {
    "suprank_inat": ("inat", ROADMAP),
    "suprank_cub": ("cub", ROADMAP),
    "suprank_sop_hier": ("sop", HAPPIER),
    "suprank_inat_base": ("inat_base", HAPPIER),
    "suprank_inat_full": ("inat_full", HAPPIER),
    "suprank_dyml_vehicle": ("dyml_vehicle", HAPPIER),
    "suprank_dyml_animal": ("dyml_animal", {"name": "happier_f"}),
    "suprank_dyml_product": ("dyml_product", HAPPIER),
    "suprank_hgldv2": ("gldv2_hier", HAPPIER),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_setup_resolves_with_its_loss_and_roadmap(setup):
    dataset, loss = SETUPS[setup]
    for lss in (loss, {"name": "roadmap"}):
        run = resolve_run(setup, lss)
        assert run["dataset"] == dataset and run["loss"]["name"] == lss["name"]
        assert run["eval"]["metrics"], setup


def test_the_setups_are_no_longer_planned():
    assert not set(SETUPS) & load_planned()["setups"]


# ------------------------------------------------------------------------ flat setups


def test_inat(planner):
    run = run_of(planner, "suprank_inat", ROADMAP)
    # VII-A: "ResNet-50 backbone with average pooling, a normalization layer without affine
    # parameters and a projection head that reduces the dimension from 2048 to 512"
    assert run["model"]["backbone"] == "resnet50" and run["model"]["pooling"]["name"] == "avg"
    assert run["model"]["layernorm"] and run["model"]["embed_dim"] == 512
    # VII-A: "a batch size of 256 by sampling 4 images per class"
    assert run["sampler"] == {"name": "m_per_class", "batch_size": 256, "samples_per_class": 4,
                              "reduce_per_class": None}
    # VII-A: "resolution 224x224 ... (random resize crop, horizontal flipping)"
    assert run["images"]["train_crop"] == 224 and run["images"]["test_crop"] == 224
    # VII-A: "Adam optimizer (with learning rate ... 1e-5 on iNaturalist, with cosine decay)
    # and train for 100 epochs"
    assert run["optimizer"]["name"] == "adam" and run["optimizer"]["groups"]["backbone"]["lr"] == 1e-5
    assert run["schedule"]["name"] == "cosine" and run["epochs"] == 100
    # official optimizer/inat.yaml: head 2x, wd 4e-4, cosine to 1e-6; loss/ROADMAP_pp_inat.yaml: the
    # proxies' own Adam (lr 10, wd 0, cosine to 0.1), Sup-AP start 0.0 and offset 1.0
    groups = run["optimizer"]["groups"]
    assert groups["head"]["lr"] == 2e-5 and run["optimizer"]["weight_decay"] == 4e-4
    assert groups["head"]["lr_min"] == groups["backbone"]["lr_min"] == run["schedule"]["eta_min"] == 1e-6
    assert groups["loss"] == {"optimizer": "adam", "lr": 10.0, "weight_decay": 0.0, "lr_min": 0.1, "warmup_frozen": False}
    assert (run["loss"]["start"], run["loss"]["offset"]) == (0.0, 1.0)
    assert run["loss"]["memory"] is None  # Tables I and II train without memory
    # Tables I/II: R@1, mAP@R; Table IV: R@1, 4, 16, 32
    assert {"R@1", "mAP@R", "R@4", "R@16", "R@32"} <= set(run["eval"]["metrics"])


def test_cub(planner):
    run = run_of(planner, "suprank_cub", ROADMAP)
    # VII-B: "ResNet-50 with GeM pooling [68] and layer normalization"
    assert run["model"]["backbone"] == "resnet50" and run["model"]["pooling"]["name"] == "gem"
    assert run["model"]["layernorm"] and run["model"]["embed_dim"] == 512  # Table IV: dim 512
    # VII-B: "use more recent settings [15, 6] for CUB and use images of size 256x256"
    assert run["images"]["train_crop"] == 256 and run["images"]["test_crop"] == 256
    # VII-A: batch 256 (4 per class), 100 epochs
    assert run["sampler"]["batch_size"] == 256 and run["sampler"]["samples_per_class"] == 4
    assert run["epochs"] == 100
    # VII-B: "We use ROADMAP with a memory [31]" (official full_memory: the 5,864 train images)
    assert run["loss"]["memory"] == {"size": 5864, "warmup_epochs": 5}
    assert run_of(planner, "suprank_cub", {"name": "smooth_ap"})["loss"]["memory"] is None  # the roadmap row's
    # official optimizer/cub.yaml (the paper gives no CUB rate)
    assert run["optimizer"]["groups"]["backbone"]["lr"] == 1e-6 and run["optimizer"]["groups"]["head"]["lr"] == 2e-6
    # Table IV: R@1, 2, 4, 8
    assert {"R@1", "R@2", "R@4", "R@8", "mAP@R"} <= set(run["eval"]["metrics"])


# ----------------------------------------------------------------- hierarchical setups


def test_sop_hier_is_the_sop_training(planner):
    # VII-C: "We report results using the experimental setting of Sec. VII-A"
    hier = run_of(planner, "suprank_sop_hier", HAPPIER)
    flat = run_of(planner, "suprank_sop", SETUPS["suprank_sop_hier"][1])
    assert {k: v for k, v in hier.items() if k != "eval"} == {k: v for k, v in flat.items() if k != "eval"}
    # VII-A: "the hierarchical sampling of [24] for SOP", batch 256 = 4 per class, lr 5e-5
    assert hier["sampler"]["name"] == "hierarchical" and hier["sampler"]["batch_size"] == 256
    assert hier["optimizer"]["groups"]["backbone"]["lr"] == 5e-5 and hier["epochs"] == 100
    # Table V: R@1, AP, H-AP, ASI, NDCG; Table IX: fine R@1 / AP and coarse AP
    assert {"R@1", "mAP@R", "AP_level0", "AP_level1", "mAP@R_level1", "H-AP", "ASI", "NDCG"} <= set(
        hier["eval"]["metrics"])


@pytest.mark.parametrize("setup, levels", [("suprank_inat_base", 2), ("suprank_inat_full", 7)])
def test_inat_hier(planner, setup, levels):
    run = run_of(planner, setup, SETUPS[setup][1])
    # VII-C: the setting of VII-A: iNat lr 1e-5, cosine, 100 epochs, batch 256 (4 per class), 224 px
    assert run["optimizer"]["groups"]["backbone"]["lr"] == 1e-5 and run["schedule"]["name"] == "cosine"
    assert run["epochs"] == 100 and run["sampler"]["batch_size"] == 256
    assert run["images"]["train_crop"] == 224 and run["model"]["embed_dim"] == 512
    assert len(catalog.load()["dataset"][run["dataset"]]["facts"]["levels"]) == levels
    metrics = set(run["eval"]["metrics"])
    # Table V: R@1, AP, H-AP, ASI, NDCG; Tables VI (iNat-full) / IX (iNat-base): AP at every level
    assert {"R@1", "mAP@R", "H-AP", "ASI", "NDCG"} <= metrics
    assert {f"AP_level{c}" for c in range(levels)} <= metrics
    assert {f"mAP@R_level{c}" for c in range(1, levels)} <= metrics
    if setup == "suprank_inat_base":
        assert "SwAP" in metrics  # Table XI: H-AP vs ΣwAP


# ------------------------------------------------------------------------------ DyML


@pytest.mark.parametrize("setup", ["suprank_dyml_vehicle", "suprank_dyml_animal"])
def test_dyml_vehicle_animal(planner, setup):
    run = run_of(planner, setup, SETUPS[setup][1])
    # the paper states no DyML setup; official README: model=dyml_resnet34 optimizer=dyml
    assert run["model"]["backbone"] == "resnet34" and run["model"]["pretrained"] == "none"
    assert not run["model"]["freeze_bn"] and run["model"]["embed_dim"] == 512
    opt = run["optimizer"]
    # official optimizer/dyml.yaml: one SGD group "net" (the proxies follow it)
    assert opt["name"] == "sgd" and set(opt["groups"]) == {"net", "loss"}
    assert opt["groups"]["net"]["lr"] == opt["groups"]["loss"]["lr"] == 0.1
    assert opt["nesterov"] and opt["momentum"] == 0.9 and opt["weight_decay"] == 1e-4
    assert run["epochs"] == 100 and run["warmup_epochs"] == 0 and run["schedule"]["eta_min"] == 1e-6
    assert run["sampler"]["batch_size"] == 256 and run["images"]["train_crop"] == 224
    # Table VIII: mAP, ASI, R@1 (metrics.protocols DEFAULT_METRICS["dyml"])
    assert run["eval"]["metrics"] == ["mAP", "ASI_level0", "R@1"]


def test_dyml_product(planner):
    run = run_of(planner, "suprank_dyml_product", HAPPIER)
    # official README: max_iter=20 warmup_step=5 optimizer=dyml_product model=dyml_resnet34_product
    assert run["model"]["backbone"] == "resnet34" and run["model"]["pretrained"] == "imagenet"
    assert run["model"]["freeze_bn"] and run["epochs"] == 20 and run["warmup_epochs"] == 5
    opt = run["optimizer"]
    assert opt["name"] == "sgd" and set(opt["groups"]) == {"backbone", "head", "loss"}  # suprank_dyml's net removed
    assert opt["groups"]["backbone"]["lr"] == 0.01 and opt["groups"]["head"]["lr"] == opt["groups"]["loss"]["lr"] == 0.02
    assert opt["groups"]["backbone"]["warmup_frozen"] and opt["nesterov"] and opt["momentum"] == 0.9
    assert run["schedule"]["eta_min"] == 1e-5
    assert run["eval"]["metrics"] == ["mAP", "ASI_level0", "R@1"]


# ----------------------------------------------------------------------------- H-GLDv2


def test_hgldv2(planner):
    run = run_of(planner, "suprank_hgldv2", HAPPIER)
    # VII-C3: "we use a ResNet-101 with GeM pooling and initialize a linear projection with a PCA"
    assert run["model"]["backbone"] == "resnet101" and run["model"]["pooling"]["name"] == "gem"
    # VII-C3: "We use a batch size of 256 and train for ~55k steps with Adam and a learning rate
    # of 1e-5 decayed using a cosine schedule"
    assert run["sampler"]["batch_size"] == 256
    # code dataset/gldv2_hier.yaml: MPerClassSampler(256, 4, reduce_per_class=8)
    assert run["sampler"] == {"name": "m_per_class", "batch_size": 256, "samples_per_class": 4,
                              "reduce_per_class": 8}
    assert run["optimizer"]["name"] == "adam" and run["optimizer"]["groups"]["backbone"]["lr"] == 1e-5
    assert run["schedule"]["name"] == "cosine"
    # an epoch: at most 8 images (2 groups of 4) of each of the 46,593 landmarks, 64 classes per batch
    steps = run["epochs"] * (46_593 * 2 // 64)  # an upper bound
    assert 50_000 <= steps <= 60_000
    # VII-C3: "We report the mAP@100 [36], and the hierarchical metrics H-AP, ASI and NDCG"
    assert run["eval"]["metrics"] == ["mAP@100", "H-AP", "ASI", "NDCG"]


def test_hgldv2_projection_init(planner):
    """VII-C3 "initialize a linear projection with a PCA": retrieval_net takes ``projection_init``."""
    assert "projection_init" in catalog.load()["model"]["retrieval_net"]["parameters"]
    assert run_of(planner, "suprank_hgldv2", HAPPIER)["model"]["projection_init"] == "pca"


# --------------------------------------------------------------------- Table IV transformers


def test_table_iv_transformers_keep_their_batchnorm_flag_false():
    """The official model configs of Table IV's transformer rows set ``freeze_batch_norm: False``
    (elias-ramzi/SupRank @ d3d0e3c model/deit_small.yaml, model/vit_base_512proj.yaml), where the ResNet
    rows' resnet_ln.yaml sets True: every run of the DeiT-S and ViT-B rows says False, the others True."""
    plan = make_plan({"suprank": ["table4"]})
    table = plan["tables"]["suprank/table4"]
    rows = {i: r["method"] for i, r in enumerate(table["spec"]["rows"])}
    by_backbone = {}
    for cell in table["cells"]:
        for rid in cell["run_ids"]:
            model = plan["runs"][rid]["model"]
            by_backbone.setdefault(model["backbone"], set()).add((rows[cell["row"]], model["freeze_bn"]))
    assert by_backbone["deit_small"] == {("ROADMAP (ours) DeiT-S", False)}
    assert by_backbone["vit_base"] == {("ROADMAP (ours) ViT-B", False)}
    assert {flag for _, flag in by_backbone["resnet50"]} == {True}


# -------------------------------------------------------------------------------- demo


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_demo_overrides_resolve(demo_planner, setup):
    """profiles/demo/demo.yaml's run_overrides apply to every setup (only keys every sampler takes)."""
    run = run_of(demo_planner, setup, SETUPS[setup][1])
    assert_demo_overrides_applied(run)
    assert run["warmup_epochs"] == DEMO["warmup_epochs"]
