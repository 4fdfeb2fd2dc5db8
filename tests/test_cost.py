"""The GPU-hour estimate (rankrepro.plan.cost) of a hand-made plan equals a hand computation."""

import json

import pytest
import yaml

from rankrepro.data.manifest import ManifestError
from rankrepro.plan.cost import PROFILES_DIR, ProfileError, images_per_s, load_profile, plan_cost, split_images


def _run(dataset, backbone, crop, epochs, amp="fp16", cap=None, batch=100, every=None):
    return {"dataset": dataset, "model": {"backbone": backbone}, "epochs": epochs, "amp": amp,
            "images": {"train_crop": crop, "test_crop": crop}, "sampler": {"batch_size": batch},
            "max_batches_per_epoch": cap, "train_split": "train", "eval": {"metrics": ["R@1"], "every": every}}


@pytest.fixture
def profiles(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "toy.yaml").write_text(yaml.safe_dump({
        "gpu": "toy", "measured": False, "amp_factor": {"fp16": 1.0, "none": 0.5},
        "train": {"resnet50": {224: 1000}, "densenet201": {224: 400}},
        "inference": {"resnet50": {224: 3000}, "densenet201": {224: 1200}}}))
    return folder


@pytest.fixture
def results(tmp_path):
    meta = tmp_path / "results" / "manifests" / "toyset" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"replica": False, "counts": {"train": {"images": 3600}, "test": {"images": 7200},
                                                             "gallery": {"images": 1800}}}))
    return tmp_path / "results"


def _plan():
    runs = {"a": _run("toyset", "resnet50", 224, 10, every=4), "b": _run("toyset", "densenet201", 448, 2, amp="none"),
            "c": _run("toyset", "resnet50", 224, 5, cap=3), "d": _run("dyml_animal", "resnet50", 224, 1)}
    table = {"spec": {"caption": "t"}, "cells": []}
    return {"runs": runs, "datasets": {"toyset": {"facts": {}}, "dyml_animal": {"facts": {}}}, "synthetic": {},
            "tables": {"p/t1": {**table, "paper": "p", "table": "t1", "runs": ["a", "b"]},
                       "p/t2": {**table, "paper": "p", "table": "t2", "runs": ["a", "c", "d"]},
                       "q/t1": {**table, "paper": "q", "table": "t1", "runs": ["c"]}}}


def test_the_estimate_of_a_tiny_plan_equals_the_hand_computation(profiles, results):
    cost = plan_cost(_plan(), "toy", results, profiles)
    eval_h = lambda ips: 9000 / ips / 3600  # test + gallery images, one evaluation
    a = 3600 * 10 / 1000 / 3600 + 4 * eval_h(3000)                  # 10 h + 4 x 0.833 h: the test curve at epochs 4, 8, 10, then the evaluate job
    b = 3600 * 2 / (400 * 0.25 * 0.5) / 3600 + eval_h(1200 * 0.25)  # 448²: a quarter; amp none: half
    c = 300 * 5 / 1000 / 3600 + eval_h(3000)                         # 3 batches of 100 per epoch
    runs = cost["runs"]
    assert runs["a"]["gpu_h"] == pytest.approx(a) and runs["b"]["gpu_h"] == pytest.approx(b)
    assert runs["c"]["gpu_h"] == pytest.approx(c)
    assert runs["d"]["gpu_h"] is None and "dyml_animal" in runs["d"]["note"]
    assert cost["tables"]["p/t1"]["gpu_h"] == pytest.approx(a + b)
    assert cost["tables"]["p/t2"]["gpu_h"] == pytest.approx(a + c) and cost["tables"]["p/t2"]["not_estimated"] == 1
    assert cost["tables"]["p/t2"]["shared"] == 2  # a (with p/t1) and c (with q/t1)
    assert cost["papers"]["p"]["gpu_h"] == pytest.approx(a + b + c)  # a once
    assert cost["total"] == {"gpu_h": pytest.approx(a + b + c), "runs": 4, "not_estimated": 1,
                             "variants": {"gpu_h": 0, "runs": 0, "not_estimated": 0}}  # no variant rows


def test_counts_fall_back_to_the_declared_then_to_the_same_images(tmp_path):
    datasets = {"sop_merge3": {"facts": {"derived_from": "sop", "source": None}}, "sop": {"facts": {"source": "sop"}}}
    counts, where = split_images("sop_merge3", datasets, tmp_path)
    assert counts["train"] == 59_551 and "sop" in where
    assert split_images("vehicleid", {}, tmp_path)[0]["train"] == 110_178


def _manifest(results, name, replica, train=12, test=8):
    meta = results / "manifests" / name / "meta.json"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"replica": replica, "counts": {"train": {"images": train}, "test": {"images": test}}}))
    return meta


def _datasets(replica: bool) -> dict:
    """The plan's datasets: cub, and sop with sop_merge3 derived from it, from replicas or the real files."""
    return {"cub": {"facts": {}, "config": {"replica": replica}}, "sop": {"facts": {}, "config": {"replica": replica}},
            "sop_merge3": {"facts": {"derived_from": "sop"}, "config": {"replica": False}}}


def test_a_manifest_counts_only_when_prepared_from_the_configs_source(tmp_path):
    meta = _manifest(tmp_path, "cub", replica=True)
    merged = _manifest(tmp_path, "sop_merge3", replica=True)
    # the config's real CUB: the demo's replica manifest is ignored, and the message says so
    counts, where = split_images("cub", _datasets(replica=False), tmp_path)
    assert counts == {"train": 5_864, "test": 5_924}
    assert where == f"cub's declared counts (the replica manifest {meta} is not the config's source)"
    counts, where = split_images("sop_merge3", _datasets(replica=False), tmp_path)
    assert counts["train"] == 59_551 and str(merged) in where
    # a config on replicas reads them; a derived dataset follows its base's source
    assert split_images("cub", _datasets(replica=True), tmp_path) == ({"train": 12, "test": 8},
                                                                     f"replica manifest {meta}")
    assert split_images("sop_merge3", _datasets(replica=True), tmp_path)[0] == {"train": 12, "test": 8}
    # a real manifest counts for a real config, not for one on replicas
    real = _manifest(tmp_path, "cub", replica=False, train=5_864, test=5_924)
    assert split_images("cub", _datasets(replica=False), tmp_path)[1] == f"manifest {real}"
    assert "is not the config's source" in split_images("cub", _datasets(replica=True), tmp_path)[1]


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not valid JSON"),
    ('{"replica": true}', "no 'counts'"),
    ('{"replica": true, "counts": [1, 2]}', "no 'counts'"),
    ('{"replica": true, "counts": {"train": {"n": 3}}}', "no 'counts'"),
    ('{"replica": true, "counts": {"train": {"images": -3}}}', "counts: image counts are whole numbers >= 0"),
    ('[1]', "a JSON list, not the object"),
])
def test_a_manifest_whose_counts_cannot_be_read_names_its_meta_json(tmp_path, text, problem):
    meta = _manifest(tmp_path, "cub", replica=True)
    meta.write_text(text)
    with pytest.raises(ManifestError, match=rf"^{meta}: {problem}"):
        split_images("cub", _datasets(replica=True), tmp_path)


def test_an_unknown_gpu_kind_names_the_profiles_folder(profiles):
    with pytest.raises(ProfileError, match=rf"'a100'.*{profiles}.*toy"):
        load_profile("a100", profiles)


def test_a_backbone_missing_from_the_profile_is_an_error_naming_the_file(profiles):
    profile = load_profile("toy", profiles)
    with pytest.raises(ProfileError, match=r"toy.yaml: train: no figure for backbone 'vit_base'.*resnet50"):
        images_per_s(profile, "train", "vit_base", 224)


@pytest.mark.parametrize("change, problem", [
    ({"train": {"resnet50": {224: 0}}}, r"train.resnet50.224: 0 is not a positive number \(images/s\)"),
    ({"train": {"resnet50": {224: -5}}}, r"train.resnet50.224: -5 is not a positive number"),
    ({"inference": {"resnet50": {224: "fast"}}}, r"inference.resnet50.224: 'fast' is not a positive number"),
    ({"inference": {"resnet50": {224: float("nan")}}}, r"inference.resnet50.224: nan is not a positive number"),
    ({"train": {"resnet50": {}}}, r"train.resnet50: a non-empty mapping of positive numbers"),
    ({"train": {"resnet50": {"big": 10}}}, r"train.resnet50: crop size 'big' is not a positive whole number"),
    ({"train": ["resnet50"]}, r"train: a mapping \{backbone: \{crop size: images/s\}\}, not list"),
    ({"amp_factor": {"fp16": 0}}, r"amp_factor.fp16: 0 is not a positive number \(a factor\)"),
    ({"amp_factor": None}, r"amp_factor: a non-empty mapping"),
])
def test_a_malformed_profile_is_refused_naming_the_file_and_key(profiles, change, problem):
    path = profiles / "toy.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **change}))
    with pytest.raises(ProfileError, match=rf"^{path}: {problem}"):
        load_profile("toy", profiles)


@pytest.mark.parametrize("text", ["", "- 1\n- 2\n", "just words\n"])
def test_a_profile_that_is_not_a_mapping_is_refused_naming_the_file(profiles, text):
    (profiles / "toy.yaml").write_text(text)
    with pytest.raises(ProfileError, match=rf"^{profiles / 'toy.yaml'}: a throughput profile is a mapping"):
        load_profile("toy", profiles)


@pytest.fixture(scope="module")
def paper_plan():
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.schema import load_yaml

    return plan_from_config(load_yaml(PROFILES_DIR.parents[1] / "config.yaml"))


def test_the_shipped_h100_profile_covers_every_backbone_of_config_yaml(paper_plan):
    cost = plan_cost(paper_plan, "h100", "/nonexistent")
    assert cost["total"]["gpu_h"] > 0 and not load_profile("h100")["measured"]


def test_the_demos_replica_manifests_do_not_change_the_papers_estimate(paper_plan, tmp_path):
    """After the demo (replica manifests of every dataset in results/), config.yaml's estimate is the one without
    a results folder: a replica's counts never stand in for a real dataset's."""
    for name in paper_plan["datasets"]:
        _manifest(tmp_path, name, replica=True, train=40, test=20)
    without = plan_cost(paper_plan, "h100", tmp_path / "nonexistent")
    after_demo = plan_cost(paper_plan, "h100", tmp_path)
    assert after_demo["total"] == without["total"] and after_demo["tables"] == without["tables"]
    assert without["total"]["gpu_h"] > 1000  # the real datasets' figure, not the replicas' (about 1 GPU-h)
