"""Run resolution: merging, canonical ids."""

import pytest

from rankrepro.experiments.resolve import deep_merge, resolve_run, run_id


def test_deep_merge_is_recursive_and_replaces_renamed_components():
    base = {"a": 1, "sampler": {"name": "hierarchical", "batch_size": 256, "batches_per_super_tuple": 5}}
    assert deep_merge(base, {"sampler": {"batch_size": 32}})["sampler"] == {
        "name": "hierarchical", "batch_size": 32, "batches_per_super_tuple": 5}
    assert deep_merge(base, {"sampler": {"name": "m_per_class", "batch_size": 8}})["sampler"] == {
        "name": "m_per_class", "batch_size": 8}
    assert base["sampler"]["batch_size"] == 256  # inputs untouched


def test_run_id_is_readable_stable_and_order_independent():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    rid = run_id(run)
    assert rid.startswith("sop-smooth_ap-") and len(rid.rsplit("-", 1)[1]) == 10
    shuffled = dict(reversed(list(run.items())))
    assert run_id(shuffled) == rid
    assert run_id(resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.02})) != rid


def test_suprank_sop_setup_is_the_paper_setup():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    assert run["model"]["backbone"] == "resnet50" and run["model"]["embed_dim"] == 512
    assert run["model"]["layernorm"] and run["model"]["pooling"] == "avg"
    assert run["sampler"]["batch_size"] == 256 and run["sampler"]["samples_per_class"] == 4
    assert run["optimizer"]["lr_backbone"] == 5e-5 and run["schedule"]["name"] == "cosine"
    assert run["epochs"] == 100 and run["images"]["train_crop"] == 224


def test_unknown_eval_metric_fails_at_resolution():
    with pytest.raises(ValueError, match=r"eval.metrics: unknown metric 'mAP@X'"):
        resolve_run("suprank_sop", {"name": "smooth_ap"}, {"eval": {"metrics": ["R@1", "mAP@X"]}})
    run = resolve_run("suprank_sop", {"name": "smooth_ap"}, {"eval": {"metrics": ["R@1", "H-AP"]}})
    assert run["eval"]["metrics"] == ["R@1", "H-AP"] and run["eval"]["split"] == "test"
