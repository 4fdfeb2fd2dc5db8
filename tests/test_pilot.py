"""The pilot (rankrepro.bench.pilot, issue 35 item 1): signatures, the CPU batch, the filled replica, the measured
profile and its fit, by hand; (slow) the CPU path on the demo configuration."""

import json
import math

import pandas as pd
import pytest
import torch
import yaml

from rankrepro.bench import pilot
from rankrepro.data.manifest import read_manifest, write_manifest
from rankrepro.plan.cost import PRECISION_SUFFIX, load_profile_file


def _run(batch=64, loss="smooth_ap", amp="fp16", crop=224, backbone="resnet50", m=None, dataset="sop"):
    sampler = {"name": "m_per_class" if m else "shuffle", "batch_size": batch,
               **({"samples_per_class": m} if m else {})}
    return {"task": "retrieval", "dataset": dataset, "model": {"backbone": backbone}, "amp": amp,
            "loss": {"name": loss}, "images": {"train_crop": crop, "test_crop": crop}, "sampler": sampler}


def test_runs_that_train_alike_share_one_signature():
    runs = {"b": _run(), "a": _run(dataset="cub"), "c": _run(batch=32), "d": _run(amp="none"),
            "e": _run(loss="fastap"), "f": _run()}
    groups = pilot.signatures(runs)
    # a, b, f: the same task, backbone, crop, batch, loss, amp, sampler (the dataset is no part of it)
    assert [g["runs"] for g in groups] == [["a", "b", "f"], ["c"], ["d"], ["e"]]
    assert groups[0]["run"] is runs["a"]
    assert groups[0]["signature"] == ("retrieval", "resnet50", 224, 64, 'smooth_ap', "fp16", "shuffle")


def test_the_cpu_batch_is_what_half_the_memory_holds_in_whole_classes():
    # 10,000 MB: half is 5,000, less 1,500 of base: 3,500 / 50 MB per 224² image = 70, whole classes of 4: 68
    assert pilot.cpu_batch(_run(batch=256, m=4), 10_000) == 68
    assert pilot.cpu_batch(_run(batch=32, m=4), 10_000) == 32  # the run's own when it fits
    # 448²: 200 MB per image, 3,500 / 200 = 17 -> 16
    assert pilot.cpu_batch(_run(batch=256, m=4, crop=448), 10_000) == 16
    assert pilot.cpu_batch(_run(batch=256, m=4), 2_000) == 4  # nothing left: one class
    assert pilot.cpu_batch(_run(batch=256), 2_000) == 1


def test_a_replica_is_filled_with_copies_whose_classes_are_new(tmp_path):
    table = pd.DataFrame({"path": ["a.jpg", "b.jpg", "c.jpg", "t.jpg", "u.jpg"],
                          "split": ["train"] * 3 + ["test"] * 2,
                          "label": [0, 0, 1, 5, -1], "level_1": [0, 0, 0, 1, -1]})
    write_manifest(tmp_path / "m", table, {"dataset": "toy", "root": str(tmp_path), "levels": ["f", "c"]})
    out = pilot.fill_replica(tmp_path / "m", tmp_path / "filled", "train", images=7, classes=4)
    filled = read_manifest(out)
    train = filled.split("train").table
    # copies: max(ceil(7 / 3), ceil(4 / 2)) = 3; copy j shifts level 0 by 6 j (largest 5), level 1 by 2 j (largest 1)
    assert list(train["path"]) == ["a.jpg", "b.jpg", "c.jpg"] * 3
    assert list(train["label"]) == [0, 0, 1, 6, 6, 7, 12, 12, 13]
    assert list(train["level_1"]) == [0, 0, 0, 2, 2, 2, 4, 4, 4]
    assert list(filled.split("test").table["label"]) == [5, -1]  # the other splits as they were
    assert filled.meta["counts"]["train"] == {"images": 9, "classes": 6}


def _row(backbone="resnet50", amp="fp16", crop=224, train=100.0, infer=300.0, error=None, **more):
    return {"backbone": backbone, "amp": amp, "train_crop": crop, "test_crop": crop, "images_per_s": train,
            "inference_images_per_s": infer, "error": error, "out_of_memory": False, **more}


def test_the_measured_profile_keeps_the_slowest_signature_per_backbone_and_precision(tmp_path):
    rows = [_row(train=100.0, infer=300.0), _row(train=80.0, infer=350.0), _row(amp="none", train=50.0, infer=90.0),
            _row(backbone="vit_base", error="OutOfMemoryError: CUDA out of memory")]
    profile = pilot.profile_of(rows, "NVIDIA H100", "2026-11-28", 80.0)
    assert profile["train"] == {"resnet50": {224: 80.0}} and profile["inference"] == {"resnet50": {224: 300.0}}
    assert profile["train_fp32"] == {"resnet50": {224: 50.0}} and profile["inference_fp32"] == {"resnet50": {224: 90.0}}
    assert profile["measured"] is True and profile["device"] == "NVIDIA H100" and profile["date"] == "2026-11-28"
    path = tmp_path / "throughput.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert load_profile_file(path)["train"]["resnet50"][224] == 80.0  # cost reads it


def test_a_peak_fits_the_cluster_gpus_memory_or_says_why_not():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert pilot.fits({"peak_mib": 70_000, "out_of_memory": False, "error": None}, cuda, 80) == "fits"
    assert pilot.fits({"peak_mib": 80_000, "out_of_memory": False, "error": None}, cuda, 80) == "does not fit"
    assert pilot.fits({"peak_mib": 1, "out_of_memory": True, "error": "x"}, cuda, 80).startswith("does not fit")
    assert pilot.fits({"peak_mib": 1, "out_of_memory": False, "error": None, "batch": 8, "run_batch": 256}, cpu,
                      80) == "not known (CPU, batch 8 of 256)"


def test_an_error_is_a_row_not_the_pilots_end(tmp_path):
    row = pilot.measure({"run": _run(), "runs": ["a"]}, tmp_path / "no-manifest", torch.device("cpu"), 4, warmup=0,
                        steps=1, eval_steps=1, workers=0)
    assert row["error"] and not row["out_of_memory"] and row["peak_mib"] > 0


def test_an_out_of_memory_error_is_recognised():
    assert pilot.is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert pilot.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 8 GB"))
    assert not pilot.is_out_of_memory(ValueError("3 images give no batch of 4"))


@pytest.mark.slow
def test_the_pilot_runs_the_demo_on_cpu_at_a_reduced_batch(tmp_path, monkeypatch, capsys):
    """The CPU path on the demo configuration (config.yaml, then profiles/demo/demo.yaml), its first two
    signatures, on replicas at the real image size (no prepared manifest): the batch reduced to what a machine of
    1,800 MB holds (one class of 2), the report and a profile that `cost --profile` reads."""
    from rankrepro.cli import main
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.merge import deep_merge
    from rankrepro.plan.model import Plan
    from rankrepro.io import load_yaml_mapping

    config = deep_merge(load_yaml_mapping("config.yaml"), load_yaml_mapping("profiles/demo/demo.yaml"))
    plan = Plan.from_json(plan_from_config(config))
    keep = {rid for g in pilot.signatures(plan.runs)[:2] for rid in g["runs"]}
    plan.runs = {rid: run for rid, run in plan.runs.items() if rid in keep}
    # the demo's top-k Table 1 on CUB: resnet_tiny, amp none, as the two signatures measured (top-k's)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump({**config, "tables": {"topk": ["table1_cub"]}}))
    monkeypatch.setattr(pilot, "available_mb", lambda: 1_800)
    record = pilot.run(plan, out_dir=tmp_path / "pilot", results=tmp_path / "results", device="cpu", steps=1,
                       eval_steps=1)
    assert len(record["rows"]) == 2
    for row in record["rows"]:
        assert row["error"] is None, row["error"]
        assert row["batch"] == 2 and row["run_batch"] == 8  # the demo's batch 8, reduced to one class of 2
        assert row["images_per_s"] > 0 and row["first_step_s"] > 0 and 0 <= row["loader_share"] < 1
        assert row["embed_dim"] == 8 and row["peak_mib"] > 0  # the demo's embed_dim
        assert row["source"] == f"replica at {pilot.REPLICA_IMAGE_SIZE} px (data absent)"
        assert row["fits"] == "not known (CPU, batch 2 of 8)"
    page = (tmp_path / "pilot" / "report.md").read_text()
    assert "the batch reduced to what this machine's memory holds" in page and "Data absent" in page
    assert json.loads((tmp_path / "pilot" / "report.json").read_text())["device"] == "cpu"
    profile = load_profile_file(tmp_path / "pilot" / "throughput.yaml")
    assert profile["measured"] is True and profile["device"] == "cpu"
    suffix = PRECISION_SUFFIX[record["rows"][0]["amp"]]  # the first two signatures: top-k's, amp none
    assert profile["train" + suffix]["resnet_tiny"][32] == round(min(r["images_per_s"] for r in record["rows"]), 2)
    assert not math.isnan(profile["inference" + suffix]["resnet_tiny"][32])
    main(["cost", "--config", str(tmp_path / "demo.yaml"), "--profile", str(tmp_path / "pilot" / "throughput.yaml"),
          "--results", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert f"({tmp_path / 'pilot' / 'throughput.yaml'}, measured)" in out and "not estimated" not in out
