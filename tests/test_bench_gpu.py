"""bench gpu: its parts' arithmetic, the GPU page, and its whole CPU path at tiny size."""

import json
import time

import pytest

from rankrepro.bench import gpu


def test_cub_epoch_is_23_batches_of_256():
    assert gpu.CUB_BATCHES == 23  # ceil(5,864 / 256)


def test_sized_scales_crop_resize_and_backbone():
    run = {"model": {"backbone": "resnet50"},
           "images": {"train_crop": 224, "test_crop": 224, "train_resize": None, "test_resize": 256}}
    out = gpu.sized(run, gpu.SIZES["tiny"])
    assert out["images"] == {"train_crop": 32, "test_crop": 32, "train_resize": None, "test_resize": 36}
    assert out["model"]["backbone"] == "resnet_tiny" and run["model"]["backbone"] == "resnet50"
    assert gpu.sized(run, gpu.SIZES["full"]) is run
    assert gpu.cache_side(out) == 36 and gpu.cache_side({"images": {"test_resize": [256, 256]}}) == 256


def test_rows_past_the_deadline_are_skipped_and_named():
    cases = [{"network": "resnet101", "images": {"train_crop": 224}}]
    part = gpu.part_rows(cases, gpu.SIZES["tiny"], {}, "cpu", time.monotonic() - 1)
    assert part["rows"] == [] and part["skipped"][0]["network"] == "resnet101"
    assert "0 s left" in part["skipped"][0]["why"]


def test_bare_model_is_torchvision_resnet50_with_the_embedding_as_fc():
    model = gpu.bare_model("resnet50", 512)
    assert model.fc.in_features == 2048 and model.fc.out_features == 512


def _row(backbone, crop=224):
    return {"device": "cuda", "backbone": backbone, "pooling": "avg", "crop": crop, "setup_batch": 256, "batch": 256,
            "full_ips": 2100.0, "model_ips": 2800.0, "inference_ips": 9000.0, "workers": 8, "steps": 20, "warmup": 5}


def test_the_gpu_page_has_no_cpu_column_and_names_the_profile():
    """The CUDA branch of render (no GPU here): figures in one column, the efficiency, the profile."""
    record = {"machine": {"cpu": "x", "cpus_usable": 16, "torch": "t", "cuda": "NVIDIA H100 80GB HBM3"},
              "device": "cuda", "size": "full", "budget_s": 450.0, "total_s": 400.0,
              "sizes": {"backbone": None, "crop": None, "batch": None, "bare": "resnet50"},
              "gpu": "NVIDIA H100 80GB HBM3 (h100)", "profile": "profiles/throughput/h100.yaml",
              "parts": {"a": {"full_ips": 2100.0, "model_ips": 2800.0}, "b": {"model_ips": 3000.0},
                        "c": {"rows": [_row("resnet50")], "skipped": [{"network": "vit_base", "crop": 224,
                                                                        "why": "10 s left"}]},
                        "f": {"error": "RuntimeError: out of memory"}}}
    text = gpu.render(record)
    assert "| a | trainer's step with loading from the cache (img/s) | 2,100.0 |\n" in text
    assert "Trainer's efficiency a / b: 70% with loading, 93% on one loaded batch" in text
    assert "- skipped vit_base 224²: 10 s left" in text and "| f | detector's step with loading (img/s) | failed: " \
        "RuntimeError: out of memory |" in text
    assert "Throughput profile written: `profiles/throughput/h100.yaml`." in text and "not measured" not in text


def test_bench_gpu_is_a_bench_of_the_command_line():
    from rankrepro.cli import build_parser

    args = build_parser().parse_args(["bench", "gpu", "--device", "cpu"])
    assert args.what == "gpu"


@pytest.mark.slow
def test_the_cpu_path_runs_every_part_at_tiny_size(tmp_path):
    record = gpu.run(tmp_path, device="cpu")
    parts = record["parts"]
    assert not [name for name, part in parts.items() if "error" in part], parts
    assert set(parts) == set("abcdefg")
    assert parts["a"]["full_ips"] > 0 and parts["b"]["model_ips"] > 0 and parts["c"]["rows"]
    assert set(parts["d"]["stages"]["ours-ranked"]["values"]) == {"R@1", "R@10", "R@100", "R@1000", "mAP@R"}
    assert set(parts["g"]["costs"]) == {"checkpoint", "test_curve", "loader_refill", "host_syncs", "adam_not_fused"}
    assert parts["g"]["costs"]["checkpoint"]["mb"] > 0 and "profile" not in record
    text = (tmp_path / "gpu.md").read_text()
    assert "Every GPU figure: not measured: " in text and "| f | detector's step" in text
    assert json.loads((tmp_path / "gpu.json").read_text())["size"] == "tiny"
