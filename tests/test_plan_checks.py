"""Plan-time refusals of values that used to pass the plan and fail late (issue 33), each naming the key: a dataset
of another task, seeds numpy refuses, numbers that are not finite, a dataset given two sources."""

import json
import textwrap

import pytest

from rankrepro import catalog
from rankrepro.io import load_yaml
from rankrepro.plan.build import make_plan, plan_from_config
from rankrepro.plan.planner import Planner, resolve_run
from rankrepro.plan.schema import PlanError
from rankrepro.plan.setups import load_setups
from test_plan import _setups_copy, _spec_copy

TABLE1 = {"suprank": ["table1"]}
CONFIG = {"data_root": "d", "datasets": {}, "tracking": {"tracking_uri": "sqlite:///x.db", "experiment": "x"},
          "tables": TABLE1}
RAMBO_LOSS = {"name": "faster_rcnn", "classifier": "rambo_map"}
CELL = r"config run_overrides \(cell 'Fast-AP \[24\]' x sop_r1\)"


def config(**keys) -> dict:
    """A fresh minimal config (validation fills defaults in place) with ``keys`` added."""
    return {**json.loads(json.dumps(CONFIG)), **keys}


def config_from_yaml(tmp_path, text: str) -> dict:
    """The minimal config with the YAML ``text`` added, read as a config file is (YAML's .nan, .inf, 1.0e3)."""
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return config(**load_yaml(path))


# ------------------------------------------------------------------------------------------- datasets of a task


def test_the_catalog_records_the_task_of_each_protocol():
    protocols = catalog.load()["protocol"]
    assert protocols["voc07"]["task"] == "detection" and protocols["same-set"]["task"] == "retrieval"


@pytest.mark.parametrize("overrides, message", [
    ({"eval": {"datasets": ["voc07"]}}, CELL + r": eval.datasets\[0\]: dataset 'voc07' is a detection dataset "
                                        r"\(protocol 'voc07'\), the run's task is 'retrieval'"),
    ({"eval": {"datasets": ["cub", "voc0712"]}}, CELL + r": eval.datasets\[1\]: dataset 'voc0712' is a detection"),
    ({"dataset": "voc07"}, CELL + r": dataset: dataset 'voc07' is a detection dataset \(protocol 'voc07'\), the "
                           r"run's task is 'retrieval'"),
])
def test_a_retrieval_run_on_a_detection_dataset_fails_the_plan(overrides, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, overrides)


def test_a_detection_run_on_a_retrieval_dataset_fails_the_plan():
    assert resolve_run("rambo_voc_frcnn_rambo", RAMBO_LOSS)["dataset"] == "voc07"  # the setup plans
    with pytest.raises(PlanError, match=r"dataset: dataset 'sop' is a retrieval dataset \(protocol 'same-set'\), "
                                        r"the run's task is 'detection'"):
        resolve_run("rambo_voc_frcnn_rambo", RAMBO_LOSS, {"dataset": "sop"})


def test_eval_datasets_of_the_runs_task_still_plan():
    run = make_plan(TABLE1, {"eval": {"datasets": ["cub", "vggface2"]}})["runs"]
    assert all(r["eval"]["datasets"] == ["cub", "vggface2"] for r in run.values())


# ------------------------------------------------------------------------------------------- seeds


@pytest.mark.parametrize("keys, message", [
    ({"seeds": {"suprank/table1": [1000.0]}},
     r"config: seeds.suprank/table1\[0\]: 1000.0 is a float where an integer is expected \(write 1000\)"),
    ({"seeds": {"suprank/table1": [0, 1.5]}}, r"config: seeds.suprank/table1\[1\]: 1.5 is not of type 'integer'"),
    ({"seeds": {"suprank/table1": [2**32]}},
     r"config: seeds.suprank/table1\[0\]: 4294967296 is greater than the maximum of 4294967295"),
    ({"seeds": {"suprank/table1": [-1]}}, r"config: seeds.suprank/table1\[0\]: -1 is less than the minimum of 0"),
    ({"run_overrides": {"seed": 1.0}}, r"config run_overrides: seed: 1.0 is a float where an integer is expected"),
    ({"run_overrides": {"seed": 2**32}}, r"config run_overrides: seed: 4294967296 is greater than the maximum"),
    ({"run_overrides": {"seed": -3}}, r"config run_overrides: seed: -3 is less than the minimum of 0"),
    ({"run_overrides": {"seed": "7"}}, r"config run_overrides: seed: '7' is not of type 'integer' \(snakemake "
                                       r"--config passes nested values as text"),
    ({"run_overrides": {"per_task": {"detection": {"seed": 2.0}}}},
     r"config run_overrides: per_task.detection: seed: 2.0 is a float where an integer is expected"),
    ({"run_overrides": {"per_loss": {"smooth_ap": {"seed": 2**40}}}},
     r"config run_overrides: per_loss.smooth_ap.seed: 1099511627776 is greater than the maximum of 4294967295"),
    ({"synthetic": {"seed": 2.0}}, r"config: synthetic.seed: 2.0 is a float where an integer is expected"),
    ({"hgldv2": {"kmeans": {"seed": 2**31}}},
     r"config: hgldv2.kmeans.seed: 2147483648 is greater than the maximum of 2147483647"),
])
def test_a_seed_numpy_or_faiss_would_refuse_fails_the_plan_naming_the_key(keys, message):
    with pytest.raises(PlanError, match=message):
        plan_from_config(config(**keys))


def test_the_largest_seeds_plan():
    plan = plan_from_config(config(seeds={"suprank/table1": [2**32 - 1]}, hgldv2={"kmeans": {"seed": 2**31 - 1}}))
    assert {run["seed"] for run in plan["runs"].values()} == {2**32 - 1}


def test_a_float_seed_in_a_setup_names_the_setup_file(tmp_path):
    d = _setups_copy(tmp_path, "mine_sop:\n  extends: suprank_sop\n  seed: 1.0e+3\n")
    with pytest.raises(PlanError, match=r"mine.yaml: mine_sop.seed: 1000.0 is a float where an integer is expected"):
        load_setups(d)


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(seeds=[1.0]), r"table1.yaml: seeds\[0\]: 1.0 is a float where an integer is expected"),
    (lambda s: s.update(seeds=[2**32]), r"table1.yaml: seeds\[0\]: 4294967296 is greater than the maximum"),
    (lambda s: s["rows"][3].update(run={"seed": 2.0}), r"table1.yaml: rows\[3\].run.seed: 2.0 is a float"),
    (lambda s: s["rows"][3].update(column_runs={"sop_r1": {"seed": 2**33}}),
     r"table1.yaml: rows\[3\].column_runs.sop_r1.seed: 8589934592 is greater than the maximum of 4294967295"),
    (lambda s: s["columns"][0].update(run={"seed": 1e3}), r"table1.yaml: columns\[0\].run.seed: 1000.0 is a float"),
])
def test_a_bad_seed_in_a_table_spec_names_the_spec_and_key(tmp_path, edit, message):
    with pytest.raises(PlanError, match=message):
        make_plan(TABLE1, specs_dir=_spec_copy(tmp_path, edit))


def test_a_float_seed_given_to_the_planner_fails_naming_where_it_came_from():
    with pytest.raises(PlanError, match=r"spec seeds: seed: 3.0 is a float where an integer is expected"):
        Planner().resolve("suprank_sop", [("loss", {"loss": {"name": "smooth_ap"}})], seed=3.0)


# ------------------------------------------------------------------------------------------- finite numbers


@pytest.mark.parametrize("text, message", [
    ("runtime: {checkpoint_minutes: .nan}", r"config: runtime.checkpoint_minutes: nan is not a finite number"),
    ("runtime: {checkpoint_minutes: .inf}", r"config: runtime.checkpoint_minutes: inf is not a finite number"),
    ("cluster: {runtime_safety: .inf}", r"config: cluster.runtime_safety: inf is not a finite number"),
    ("hgldv2: {api: {min_interval_s: .nan}}", r"config: hgldv2.api.min_interval_s: nan is not a finite number"),
    ("run_overrides: {optimizer: {groups: {backbone: {lr: .nan}}}}",
     r"config run_overrides: optimizer.groups.backbone.lr: nan is not a finite number"),
    ("run_overrides: {grad_clip: .inf}", r"config run_overrides: grad_clip: inf is not a finite number"),
    ("run_overrides: {images: {rrc_scale: [0.5, .inf]}}",
     r"config run_overrides: images.rrc_scale\[1\]: inf is not a finite number"),
])
def test_a_number_that_is_not_finite_fails_the_plan_naming_the_key(tmp_path, text, message):
    with pytest.raises(PlanError, match=message):
        plan_from_config(config_from_yaml(tmp_path, text))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_component_parameter_that_is_not_finite_fails_the_plan(value):
    with pytest.raises(PlanError, match=rf"loss.tau: loss 'smooth_ap': tau must hold finite numbers, got {value}"):
        resolve_run("suprank_sop", {"name": "smooth_ap", "tau": value})
    with pytest.raises(PlanError, match=r"schedule.milestones: schedule 'multistep': milestones must hold finite"):
        resolve_run("suprank_sop", {"name": "smooth_ap"}, {"schedule": {"name": "multistep", "milestones": [value]}})


# ------------------------------------------------------------------------------------------- dataset sources


@pytest.mark.parametrize("entry, message", [
    ({"replica": True, "extracted": "/data/sop"}, r"config datasets.sop.replica, datasets.sop.extracted: these give "
                                                  r"the files of sop 2 sources \(replica, extracted\); keep one"),
    ({"replica": True, "url": "https://example.org/sop.zip"}, r"config datasets.sop.replica, datasets.sop.url: .* 2 "
                                                              r"sources \(replica, download\)"),
    ({"extracted": "/data/sop", "checksum": "md5:00"}, r"config datasets.sop.extracted, datasets.sop.checksum: .* 2 "
                                                       r"sources \(extracted, download\)"),
    ({"replica": True, "extracted": "/x", "url": "https://example.org/sop.zip"},
     r"config datasets.sop.replica, datasets.sop.extracted, datasets.sop.url: .* 3 sources"),
])
def test_a_dataset_given_two_sources_fails_the_plan_naming_the_keys(entry, message):
    with pytest.raises(PlanError, match=message):
        plan_from_config(config(datasets={"sop": entry}))


@pytest.mark.parametrize("entry", [{"replica": True}, {"extracted": "/data/sop"},
                                   {"url": "https://example.org/sop.zip", "checksum": "md5:00"}, {"replica": False}])
def test_a_dataset_with_one_source_plans(entry):
    plan = plan_from_config(config(datasets={"sop": entry}))
    assert plan["datasets"]["sop"]["config"] == {"replica": False, "extracted": None, "url": None, "checksum": None,
                                                 **entry}


# --------------------------------------------------------------------------------- a plain random crop (images)


SOP_SMOOTH_AP = ("suprank_sop", {"name": "smooth_ap", "tau": 0.01})


@pytest.mark.parametrize("images, message", [
    ({"rrc_scale": None}, r"images.rrc_scale is null but images.rrc_ratio \(.*suprank.yaml.*\) is \[0.75, 1.33\]: "
                          r"both ranges \(a RandomResizedCrop\) or both null \(a plain random crop\)"),
    ({"rrc_ratio": None}, r"images.rrc_scale is \[0.16, 1.0\] but images.rrc_ratio .* is null"),
    ({"rrc_scale": None, "rrc_ratio": None, "train_resize": 200},
     r"images.train_resize: a plain random crop \(rrc_scale and rrc_ratio null\) of train_crop 224 \(.*\) needs "
     r"train_resize at least 224 on each side, got 200"),
    ({"rrc_scale": None, "rrc_ratio": None, "train_resize": [300, 220]}, r"at least 224 on each side, got \[300, 220\]"),
    ({"rrc_scale": None, "rrc_ratio": None, "train_resize": None}, r"at least 224 on each side, got null"),
])
def test_a_plain_random_crop_that_cannot_work_fails_the_plan(images, message):
    """Before, a lone null or a crop larger than the resized image planned and failed in a data-loader worker."""
    with pytest.raises(PlanError, match=message):
        resolve_run(*SOP_SMOOTH_AP, {"images": images})


def test_a_plain_random_crop_plans_and_crops_without_rescaling():
    from PIL import Image

    from rankrepro.data.transforms import train_transform

    run = resolve_run(*SOP_SMOOTH_AP, {"images": {"rrc_scale": None, "rrc_ratio": None, "train_resize": 256}})
    transform = train_transform(run["images"])
    # a 256 x 512 (w x h) image of vertical stripes 8 px wide: a 224 crop without rescaling keeps 8-px stripes
    stripes = Image.new("L", (256, 512))
    stripes.putdata([255 * ((x // 8) % 2) for _ in range(512) for x in range(256)])
    out = transform(stripes.convert("RGB"))
    assert out.shape == (3, 224, 224)
    row = out[0, 0]
    changes = (row[1:] != row[:-1]).nonzero().flatten()
    assert len(changes) >= 26 and set((changes[1:] - changes[:-1]).tolist()) == {8}
