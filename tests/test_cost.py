"""The GPU-hour estimate (rankrepro.plan.cost) of a hand-made plan equals a hand computation."""

import json

import pytest
import yaml

from rankrepro.plan.cost import ProfileError, images_per_s, load_profile, plan_cost, split_images


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
    assert cost["total"] == {"gpu_h": pytest.approx(a + b + c), "runs": 4, "not_estimated": 1}


def test_counts_fall_back_to_the_declared_then_to_the_same_images(tmp_path):
    facts = {"sop_merge3": {"derived_from": "sop", "source": None}, "sop": {"source": "sop"}}
    counts, where = split_images("sop_merge3", facts, tmp_path)
    assert counts["train"] == 59_551 and "sop" in where
    assert split_images("vehicleid", {}, tmp_path)[0]["train"] == 110_178


def test_an_unknown_gpu_kind_names_the_profiles_folder(profiles):
    with pytest.raises(ProfileError, match=rf"'a100'.*{profiles}.*toy"):
        load_profile("a100", profiles)


def test_a_backbone_missing_from_the_profile_is_an_error_naming_the_file(profiles):
    profile = load_profile("toy", profiles)
    with pytest.raises(ProfileError, match=r"toy.yaml: train: no figure for backbone 'vit_base'.*resnet50"):
        images_per_s(profile, "train", "vit_base", 224)


def test_the_shipped_h100_profile_covers_every_backbone_of_config_yaml():
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.schema import load_yaml
    from rankrepro.plan.cost import PROFILES_DIR

    cost = plan_cost(plan_from_config(load_yaml(PROFILES_DIR.parents[1] / "config.yaml")), "h100", "/nonexistent")
    assert cost["total"]["gpu_h"] > 0 and not load_profile("h100")["measured"]
