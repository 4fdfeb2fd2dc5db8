"""RaMBO (CVPR 2020) retrieval setups (src/rankrepro/plan/setups/rambo.yaml) and table
specs (src/rankrepro/tables/specs/rambo/): every setup resolves through the planner, its key
values are the paper's (section 5.1, supplement A and Table 9; where the paper defers to
FastAP's defaults or is silent, the comments in the yaml say so), every spec plans, and the
demo profile's overrides still apply. Quotes: ../shared/papers/rambo_blackbox_rank_cvpr2020.txt."""

import re

import pytest

from rankrepro.plan.build import make_plan
from rankrepro.plan.planned import load_planned
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.specs import load_spec, spec_names
from setuputil import assert_demo_overrides_applied, run_of

RAMBO_RECALL = {"name": "rambo_recall"}

#: setup -> (dataset, the Table 7 "Full RaMBO" weight_fn, Table 9 column)
SETUPS = {
    "rambo_sop": ("sop", "loglog", "sop"),
    "rambo_inshop": ("inshop", "log", "inshop"),
    "rambo_cub": ("cub", "loglog", "cub"),
}
TABLES = ["table1", "table2", "table3", "table4", "table5", "table7", "table8", "table9"]


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_setup_resolves(setup):
    dataset, weight_fn, _ = SETUPS[setup]
    for loss in ({"name": "rambo_recall"}, {"name": "rambo_map"}):
        run = resolve_run(setup, loss)
        assert run["dataset"] == dataset and run["loss"]["name"] == loss["name"]
    assert resolve_run(setup, {"name": "rambo_recall"})["loss"]["weight_fn"] == weight_fn


def test_the_setups_are_not_planned():
    assert not set(SETUPS) & load_planned()["setups"]


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_shared_training(planner, setup):
    run = run_of(planner, setup, RAMBO_RECALL)
    model = run["model"]
    # 5.1 "a pretrained ResNet50 in which we replace the final softmax layer with a fully connected
    # embedding layer which produces a 512-dimensional vector ... We normalize each vector"
    assert model["backbone"] == "resnet50" and model["pretrained"] == "imagenet"
    assert model["projection"] and model["embed_dim"] == 512 and not model["layernorm"]
    # 5.1 "we resize images to 256x256 and randomly crop and flip them to 224x224 during training,
    # using a single center crop on evaluation"
    img = run["images"]
    assert img["train_resize"] == [256, 256] and img["train_crop"] == 224
    assert img["rrc_scale"][0] == img["rrc_scale"][1] == (224 / 256) ** 2 and img["rrc_ratio"] == [1.0, 1.0]
    assert img["test_resize"] == [256, 256] and img["test_crop"] == 224
    # A "ADAM optimizer with a weight decay value of 4x10^-4 and batch size 128"
    opt = run["optimizer"]
    assert opt["name"] == "adam" and opt["weight_decay"] == 4e-4 and run["sampler"]["batch_size"] == 128
    # A "higher learning rates for the embedding layer" (FastAP's default lrmult 10)
    assert opt["groups"]["head"]["lr"] == pytest.approx(10 * opt["groups"]["backbone"]["lr"])
    # A "at most 80 epochs with a learning rate drop by 70% after 35 epochs"
    assert run["epochs"] == 80 and run["warmup_epochs"] == 0
    assert run["schedule"] == {"name": "multistep", "milestones": [35], "gamma": 0.3}
    # A "a batch memory of length 3", 4.3 "It stores the scores for elements of the last tau previous
    # batches": the official BatchMemoryRecallLoss's score rows, with RecallLoss's row-count scaling
    assert run["loss"]["batch_memory"] == 3 and run["loss"]["length"] == "rows"
    assert run["loss"]["memory"] is None
    # 5.1 "The obvious similarity of each element with itself is disregarded"
    assert run["loss"]["include_query"] is False


#: a number as Table 9 prints it: "0.02", "3×10^{-6}", "10^{-5}"
PRINTED = re.compile(r"^(?:(?P<mantissa>\d+(?:\.\d+)?)×)?10\^\{(?P<exponent>-?\d+)\}$")


def printed_number(text: str) -> float:
    m = PRINTED.match(text)
    if m is None:
        return float(text)
    return float(m["mantissa"] or 1) * 10.0 ** int(m["exponent"])


def test_printed_numbers():
    assert printed_number("3×10^{-6}") == pytest.approx(3e-6) and printed_number("10^{-5}") == pytest.approx(1e-5)
    assert printed_number("0.02") == 0.02 and printed_number("4") == 4.0


def test_table9_values_are_the_setups(planner):
    """Supplement Table 9 (lr, margin, λ per dataset; a static table of the printed text) is what the
    setups train with."""
    spec = load_spec("rambo", "table9")
    assert spec["kind"] == "static"
    rows = {row["method"]: [printed_number(cell) for cell in row["cells"]] for row in spec["rows"]}
    assert set(rows) == {"lr", "margin", "λ"}
    setup_of = {column: setup for setup, (_, _, column) in SETUPS.items()}
    assert [c["key"] for c in spec["columns"]] == ["sop", "inshop", "cub"]
    for c, column in enumerate(spec["columns"]):
        run = run_of(planner, setup_of[column["key"]], RAMBO_RECALL)
        assert run["optimizer"]["groups"]["backbone"]["lr"] == pytest.approx(rows["lr"][c])
        assert run["loss"]["margin"] == rows["margin"][c]
        assert run["loss"]["lambda_val"] == rows["λ"][c]


def test_samplers(planner):
    # A "For the In-shop Clothes dataset we used 4 batches per pair of super-labels and 8 samples per
    # class within a batch. In the Online Products dataset we used 10 batches per pair of super-labels
    # along with 4 samples per class ... For CUB200, there are no super-labels and we just sample 4"
    # 5.1 "The classes are grouped into 23 superclasses (e.g. MEN/Denim, WOMEN/Dresses)": In-shop's
    # super-label is clothing type x gender (levels 1 and 2), SOP's its super-class (level 1)
    assert run_of(planner, "rambo_sop", RAMBO_RECALL)["sampler"] == {
        "name": "hierarchical", "batch_size": 128, "samples_per_class": 4, "batches_per_super_tuple": 10,
        "super_classes_per_batch": 2, "super_levels": [1]}
    assert run_of(planner, "rambo_inshop", RAMBO_RECALL)["sampler"] == {
        "name": "hierarchical", "batch_size": 128, "samples_per_class": 8, "batches_per_super_tuple": 4,
        "super_classes_per_batch": 2, "super_levels": [1, 2]}
    assert run_of(planner, "rambo_cub", RAMBO_RECALL)["sampler"] == {"name": "m_per_class", "batch_size": 128,
                                                                    "samples_per_class": 4,
                                                                    "reduce_per_class": None}


def test_metrics(planner):
    # Tables 2, 3, 4: R@K for K in {1, 10, 100, 1000}, {1, 2, 4, 8}, {1, 10, 20, 30, 50}
    assert run_of(planner, "rambo_sop", RAMBO_RECALL)["eval"]["metrics"] == ["R@1", "R@10", "R@100", "R@1000"]
    assert run_of(planner, "rambo_cub", RAMBO_RECALL)["eval"]["metrics"] == ["R@1", "R@2", "R@4", "R@8"]
    assert run_of(planner, "rambo_inshop", RAMBO_RECALL)["eval"]["metrics"] == ["R@1", "R@10", "R@20", "R@30", "R@50"]


# ------------------------------------------------------------------------------ specs


def test_every_rambo_spec_is_listed():
    assert {t for p, t in spec_names() if p == "rambo"} == set(TABLES)


@pytest.fixture(scope="module")
def plan():
    return make_plan({"rambo": TABLES})


def test_the_specs_plan(plan):
    tables = plan["tables"]
    # Tables 2-4: RaMBO log and log log, three restarts each (section 5)
    for t in ("table2", "table3", "table4"):
        assert len(tables[f"rambo/{t}"]["runs"]) == 2 * 3
    # Table 7: three rows x three datasets x three seeds; Full RaMBO = Tables 2-4's runs
    assert len(tables["rambo/table7"]["runs"]) == 3 * 3 * 3
    shared = set(tables["rambo/table7"]["runs"]) & set().union(
        *(tables[f"rambo/{t}"]["runs"] for t in ("table2", "table3", "table4")))
    assert len(shared) == 3 * 3
    # Tables 5 and 8 (detection): 8 cells and 5 rows x three seeds, sharing Table 5's first row (2 x 3 runs)
    assert len(plan["runs"]) == 3 * 6 + 6 * 3 + (8 + 5 - 2) * 3
    assert {run["seed"] for run in plan["runs"].values()} == {0, 1, 2}
    assert {run["dataset"] for run in plan["runs"].values()} == {"sop", "cub", "inshop", "voc07", "voc0712"}


def test_table7_ablations(plan):
    cells = plan["tables"]["rambo/table7"]["cells"]
    runs = plan["runs"]
    by_row = {r: [runs[i] for c in cells if c["row"] == r for i in c["run_ids"]] for r in range(3)}
    assert all(run["loss"]["batch_memory"] == 3 for run in by_row[0])
    assert all(run["loss"]["batch_memory"] == 0 for run in by_row[1])  # "No batch memory"
    assert all(run["loss"]["margin"] == 0.0 and run["loss"]["batch_memory"] == 3 for run in by_row[2])  # "No margin"
    assert all(run["loss"]["memory"] is None and run["loss"]["length"] == "rows" for r in by_row.values() for run in r)
    full = {run["dataset"]: run["loss"]["weight_fn"] for run in by_row[0]}
    assert full == {"cub": "loglog", "inshop": "log", "sop": "loglog"}


def test_detection_tables_plan_every_cell(plan):
    """Tables 5 and 8 (Faster R-CNN on Pascal VOC): every cell has its three restarts; Table 8's cross-entropy
    and lambda 0.5 + margin rows are Table 5's first row."""
    t5, t8 = (plan["tables"][f"rambo/{t}"] for t in ("table5", "table8"))
    assert all(c["run_ids"] and not c.get("pending") for t in (t5, t8) for c in t["cells"])
    assert len(t5["runs"]) == 8 * 3 and len(t8["runs"]) == 5 * 3 and len(set(t5["runs"]) & set(t8["runs"])) == 2 * 3
    assert not load_planned()["setups"] and not load_planned()["losses"]


def test_the_detection_ce_baseline_lr_is_mmdets_scaled_to_batch_8():
    """Paper 5.2: one GPU, batch 8; the CE baseline is mmdet's recipe, whose VOC config has lr 0.01 for 8 GPUs x 2
    images and whose guide (GETTING_STARTED.md, v1 era) scales the rate with the batch: 0.01 x 8 / 16 = 0.005.
    The RaMBO setup keeps the paper's 0.1 (5.2 "The initial learning rate 0.1")."""
    ce = resolve_run("rambo_voc_frcnn_ce", {"name": "faster_rcnn"})
    assert ce["sampler"]["batch_size"] == 8
    assert ce["optimizer"]["groups"]["net"]["lr"] == pytest.approx(0.01 * 8 / 16)
    rambo = resolve_run("rambo_voc_frcnn_rambo", {"name": "faster_rcnn"})
    assert rambo["optimizer"]["groups"]["net"]["lr"] == 0.1 and rambo["sampler"]["batch_size"] == 8


@pytest.mark.parametrize("table", ["table1", "table9"])
def test_static_tables_have_no_runs(plan, table):
    entry = plan["tables"][f"rambo/{table}"]
    assert entry["spec"]["kind"] == "static" and entry["runs"] == [] and entry["cells"] == []
    assert "datasets" not in entry


# -------------------------------------------------------------------------------- demo


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_demo_overrides_resolve(demo_planner, setup):
    """profiles/demo/demo.yaml's run_overrides apply to every setup."""
    assert_demo_overrides_applied(run_of(demo_planner, setup, RAMBO_RECALL))
