"""The GPU-hour estimate (rankrepro.plan.cost) of a hand-made plan equals a hand computation."""

import json

import numpy as np
import pytest
import yaml

from rankrepro.data.manifest import ManifestError
from rankrepro.plan.cost import (PROFILES_DIR, UNVERIFIED, ProfileError, images_per_s, load_profile, plan_cost,
                                 run_cost, split_images, to_text, train_class_sizes)
from rankrepro.plan.epochs import epoch_images

TOY_PROFILE = {"gpu": "toy", "measured": False,
               "train": {"resnet50": {224: 1000}, "densenet201": {224: 400}},
               "train_fp32": {"resnet50": {224: 500}, "densenet201": {224: 200}},
               "inference": {"resnet50": {224: 3000}, "densenet201": {224: 1200}},
               "inference_fp32": {"resnet50": {224: 2000}, "densenet201": {224: 600}}}


def _run(dataset, backbone, crop, epochs, amp="fp16", cap=None, batch=100, every=None, sampler=None):
    return {"dataset": dataset, "model": {"backbone": backbone}, "epochs": epochs, "amp": amp,
            "images": {"train_crop": crop, "test_crop": crop}, "sampler": {"batch_size": batch, **(sampler or {})},
            "max_batches_per_epoch": cap, "train_split": "train", "eval": {"metrics": ["R@1"], "every": every}}


@pytest.fixture
def profiles(tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "toy.yaml").write_text(yaml.safe_dump(TOY_PROFILE))
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
            "c": _run("toyset", "resnet50", 224, 5, cap=3), "d": _run("ijbc", "resnet50", 224, 1)}
    table = {"spec": {"caption": "t"}, "cells": []}
    return {"runs": runs, "datasets": {"toyset": {"facts": {}}, "ijbc": {"facts": {}}}, "synthetic": {},
            "tables": {"p/t1": {**table, "paper": "p", "table": "t1", "runs": ["a", "b"]},
                       "p/t2": {**table, "paper": "p", "table": "t2", "runs": ["a", "c", "d"]},
                       "q/t1": {**table, "paper": "q", "table": "t1", "runs": ["c"]}}}


def test_the_estimate_of_a_tiny_plan_equals_the_hand_computation(profiles, results):
    cost = plan_cost(_plan(), "toy", results, profiles)
    eval_h = lambda ips: 9000 / ips / 3600  # test + gallery images, one evaluation
    a = 3600 * 10 / 1000 / 3600 + 4 * eval_h(3000)                  # 10 h + 4 x 0.833 h: the test curve at epochs 4, 8, 10, then the evaluate job
    b = 3600 * 2 / (200 * 0.25) / 3600 + eval_h(600 * 0.25)         # amp none: the fp32 tables; 448²: a quarter
    c = 300 * 5 / 1000 / 3600 + eval_h(3000)                         # 3 batches of 100 per epoch
    runs = cost["runs"]
    assert runs["a"]["gpu_h"] == pytest.approx(a) and runs["b"]["gpu_h"] == pytest.approx(b)
    assert runs["c"]["gpu_h"] == pytest.approx(c)
    assert runs["d"]["gpu_h"] is None and "ijbc's train split" in runs["d"]["note"]  # a test-only dataset
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


def test_dyml_is_estimated_from_its_unverified_training_counts_and_says_so(profiles, tmp_path):
    counts, where = split_images("dyml_vehicle", {}, tmp_path)
    assert counts == {"train": 343_100} and UNVERIFIED in where
    run = _run("dyml_product", "resnet50", 224, 2)
    plan = {"runs": {"p": run, "t": _run("toyset", "resnet50", 224, 1)},
            "datasets": {"dyml_product": {"facts": {}}, "toyset": {"facts": {}}}, "synthetic": {},
            "tables": {"s/t8": {"spec": {"caption": "t"}, "cells": [], "paper": "s", "table": "t8", "runs": ["p"]}}}
    results = tmp_path / "results"
    meta = results / "manifests" / "toyset" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"replica": False, "counts": {"train": {"images": 10}, "test": {"images": 10}}}))
    cost = plan_cost(plan, "toy", results, profiles)
    p = cost["runs"]["p"]
    assert p["gpu_h"] == pytest.approx(747_500 * 2 / 1000 / 3600)  # training only: no test count
    assert p["unverified"] and "evaluation not counted" in p["note"] and not cost["runs"]["t"]["unverified"]
    assert cost["total"]["not_estimated"] == 0
    text = to_text(cost, per_run=True)
    assert "1 runs rest on unverified image counts (dyml_product" in text and "1 of them without their evaluation" in text
    assert "(evaluation not counted: no image count for dyml_product's test splits)" in text
    # once prepared, the manifest's counts replace them and nothing is marked
    meta = results / "manifests" / "dyml_product" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"replica": False, "counts": {"train": {"images": 1000}, "test": {"images": 500}}}))
    again = plan_cost(plan, "toy", results, profiles)
    assert not again["runs"]["p"]["unverified"] and not again["runs"]["p"]["note"]
    assert "unverified" not in to_text(again)


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
    ({"train_fp32": {"resnet50": {224: 0}}}, r"train_fp32.resnet50.224: 0 is not a positive number \(images/s\)"),
    ({"inference_fp32": None}, r"inference_fp32: a mapping \{backbone: \{crop size: images/s\}\}, not NoneType"),
    ({"inference_fp32": {"resnet50": [1]}}, r"inference_fp32.resnet50: a non-empty mapping of positive numbers"),
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
    assert without["total"]["gpu_h"] > 500  # the real datasets' figure (782), not the replicas' (about 1 GPU-h)


# -- precision ------------------------------------------------------------------------------------


def test_a_run_without_mixed_precision_is_charged_at_the_fp32_rate(profiles):
    """One ResNet-50 run, 2 epochs of 3,600 images and 9,000 evaluation images, under each amp."""
    profile = load_profile("toy", profiles)
    counts = {"train": 3600, "test": 9000}
    fp16, bf16, none = (run_cost(_run("toyset", "resnet50", 224, 2, amp=amp), profile, counts)
                        for amp in ("fp16", "bf16", "none"))
    # mixed precision: 7,200 / 1,000 img/s = 7.2 s of training, 9,000 / 3,000 = 3 s of evaluation
    assert fp16["gpu_h"] == bf16["gpu_h"] == pytest.approx((7.2 + 3) / 3600)
    # float32: 7,200 / 500 = 14.4 s, 9,000 / 2,000 = 4.5 s
    assert (none["train_ips"], none["infer_ips"]) == (500, 2000)
    assert none["gpu_h"] == pytest.approx((14.4 + 4.5) / 3600)


def test_the_shipped_profile_charges_float32_at_two_thirds_of_mixed_precision():
    """ResNet-50 at 224² on an H100: 2,616 images/s with amp, 1,753 without (issue 35's published pair); every
    backbone has both figures, in that ratio (the profile's comment: assumed beyond ResNet-50)."""
    profile = load_profile("h100")
    assert images_per_s(profile, "train", "resnet50", 224, "fp16") == 2616
    assert images_per_s(profile, "train", "resnet50", 224, "none") == 1753
    for phase in ("train", "inference"):
        assert profile[phase].keys() == profile[f"{phase}_fp32"].keys()
        for backbone, sizes in profile[phase].items():
            for size, ips in sizes.items():
                ratio = profile[f"{phase}_fp32"][backbone][size] / ips
                assert ratio == pytest.approx(1753 / 2616, abs=0.03), (phase, backbone)
    # the ratios between backbones are timm's (RTX 3090, AMP, channels-last): ResNet-101 747.89 / 1,218.01
    assert profile["train"]["resnet101"][224] == round(2616 * 747.89 / 1218.01)


def test_a_profile_of_the_old_form_says_what_replaced_its_amp_factor(profiles):
    path = profiles / "toy.yaml"
    old = {k: v for k, v in TOY_PROFILE.items() if not k.endswith("_fp32")}
    path.write_text(yaml.safe_dump({**old, "amp_factor": {"fp16": 1.0, "none": 1.0}}))
    with pytest.raises(ProfileError, match=rf"^{path}: no 'train_fp32' \(its amp_factor is no longer read"):
        load_profile("toy", profiles)


def test_the_profile_bench_train_writes_is_read_with_its_float32_tables(tmp_path):
    from rankrepro.bench.train import write_profile

    rows = [{"backbone": "resnet50", "crop": 224, "full_ips": 2000.0, "inference_ips": 6000.0}]
    path = write_profile(rows, 0.5, "NVIDIA H100 80GB HBM3", tmp_path)
    profile = load_profile(path.stem, tmp_path)
    assert images_per_s(profile, "train", "resnet50", 224, "none") == 1000.0
    assert images_per_s(profile, "inference", "resnet50", 224, "none") == 3000.0
    assert images_per_s(profile, "train", "resnet50", 224, "fp16") == 2000.0


# -- the sampler's epoch --------------------------------------------------------------------------


def _m_per_class(cap=None, batch=4, m=2):
    return _run("toyset", "resnet50", 224, 1, batch=batch,
                sampler={"name": "m_per_class", "samples_per_class": m, "reduce_per_class": cap})


def test_a_per_class_cap_shortens_the_epoch_to_whole_batches_of_its_groups():
    """Classes of 10, 9, 3, 8 and 5 images (35), batches of 2 classes x 2 images."""
    sizes = [10, 9, 3, 8, 5]
    # cap 4: min(n, 4) // 2 = 2, 2, 1, 2, 2 groups (9): 4 batches of 2 distinct classes, 16 images
    assert epoch_images(_m_per_class(cap=4), 35, sizes) == 16
    # no cap: 5, 4, 1, 4, 2 groups (16): 8 batches, 32 images (the sampler's greedy passes may stop earlier)
    assert epoch_images(_m_per_class(), 35, sizes) == 32
    # one class holding most groups: 5 + 1 groups fill only one batch of 2 distinct classes
    assert epoch_images(_m_per_class(), 12, [10, 2]) == 4
    # max_batches_per_epoch still cuts it: 3 batches of 4
    assert epoch_images({**_m_per_class(cap=4), "max_batches_per_epoch": 3}, 35, sizes) == 12
    # another sampler: every image
    assert epoch_images(_run("toyset", "resnet50", 224, 1), 35, None) == 35


def test_the_capped_epoch_equals_the_samplers_own_length():
    from rankrepro.data.samplers import MPerClassBatchSampler

    sizes = [10, 9, 3, 8, 5]
    labels = np.repeat(np.arange(len(sizes)), sizes)
    for seed in range(5):
        sampler = MPerClassBatchSampler(labels, 4, 2, reduce_per_class=4, seed=seed)
        assert sum(len(b) for b in sampler) == epoch_images(_m_per_class(cap=4), 35, sizes)


def test_h_gldv2_is_counted_with_its_cap_from_the_published_counts(paper_plan):
    """No manifest: 970,981 images over 46,593 landmarks spread evenly (20 or 21 each), every landmark gives its
    8 images, 2 groups of 4: 93,186 groups make 1,456 batches of 64 landmarks, 372,736 images an epoch."""
    cost = plan_cost(paper_plan, "h100", "/nonexistent")
    hgldv2 = [r for rid, r in cost["runs"].items() if paper_plan["runs"][rid]["dataset"] == "gldv2_hier"]
    assert hgldv2 and all(r["train_images"] == 970_981 and r["epoch_images"] == 372_736 for r in hgldv2)
    run = next(r for r in paper_plan["runs"].values() if r["dataset"] == "gldv2_hier")
    assert run["sampler"]["reduce_per_class"] == 8 and run["epochs"] == 38  # what the figures above assume
    assert hgldv2[0]["train_h"] == pytest.approx(372_736 * 38 / 1606 / 3600)  # ResNet-101, fp16


def test_h_gldv2_is_counted_with_the_manifests_own_classes(paper_plan, tmp_path):
    """A prepared (real) H-GLDv2 manifest: 64 landmarks of 8 images (2 groups of 4 each), 10 of 3 (none) and one
    of 12 (capped to 8: 2 groups): 130 groups, at most 2 per landmark, fill 2 batches of 64 distinct landmarks."""
    run = next(r for r in paper_plan["runs"].values() if r["dataset"] == "gldv2_hier")
    folder = tmp_path / "manifests" / "gldv2_hier"
    folder.mkdir(parents=True)
    sizes = [8] * 64 + [3] * 10 + [12]
    labels = np.repeat(np.arange(len(sizes)), sizes)
    rows = [f"train/{i}.jpg,train,{label}" for i, label in enumerate(labels)] + ["index/0.jpg,gallery,0"]
    (folder / "manifest.csv").write_text("path,split,label\n" + "\n".join(rows) + "\n")
    (folder / "meta.json").write_text(json.dumps({"replica": False, "counts": {
        "train": {"images": len(labels)}, "gallery": {"images": 1}}}))
    found = train_class_sizes(run, paper_plan["datasets"], tmp_path)
    assert sorted(found) == sorted(sizes)
    # groups: 64 x 2 + 10 x 0 + 1 x 2 = 130; batches of 64 distinct landmarks: 2 (130 // 64, each landmark has 2)
    assert epoch_images(run, len(labels), found) == 2 * 256
    cost = plan_cost({**paper_plan, "runs": {"h": run}}, "h100", tmp_path)
    assert cost["runs"]["h"]["epoch_images"] == 512 and cost["runs"]["h"]["train_images"] == len(labels)


def test_a_manifest_whose_labels_cannot_be_read_names_its_csv(paper_plan, tmp_path):
    run = next(r for r in paper_plan["runs"].values() if r["dataset"] == "gldv2_hier")
    folder = tmp_path / "manifests" / "gldv2_hier"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"replica": False, "counts": {"train": {"images": 2}}}))
    (folder / "manifest.csv").write_text("path,split\na.jpg,train\n")
    with pytest.raises(ManifestError, match=rf"^{folder / 'manifest.csv'}: cannot read its split and label"):
        train_class_sizes(run, paper_plan["datasets"], tmp_path)


def test_cost_prices_with_a_profile_file_given_instead_of_the_gpu_kind(profiles, results, tmp_path):
    """`cost --profile FILE` (the pilot's results/pilot/throughput.yaml): its figures, not the gpu kind's."""
    measured = tmp_path / "pilot" / "throughput.yaml"
    measured.parent.mkdir()
    measured.write_text(yaml.safe_dump({**TOY_PROFILE, "measured": True, "train": {"resnet50": {224: 2000}}}))
    cost = plan_cost(_plan(), "toy", results, profiles, profile_file=measured)
    # run c: 3 batches of 100 x 5 epochs at 2,000 images/s (the file's), one evaluation of 9,000 at 3,000
    assert cost["runs"]["c"]["gpu_h"] == pytest.approx(1500 / 2000 / 3600 + 9000 / 3000 / 3600)
    assert cost["measured"] is True and cost["profile"] == str(measured)


def test_cost_cli_names_a_missing_profile_file(tmp_path, capsys):
    from rankrepro.cli import main

    with pytest.raises(SystemExit) as done:
        main(["cost", "--profile", str(tmp_path / "absent.yaml")])
    assert str(done.value.code).startswith("cost: throughput profile ") and "absent.yaml does not exist" in \
        str(done.value.code)
