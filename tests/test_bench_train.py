"""bench train: the backbones of the setups, and the table of a tiny CPU measurement."""

import pytest

from rankrepro.bench import train as bench


def test_the_cases_cover_every_backbone_the_setups_use():
    backbones = {r["model"]["backbone"] for r in bench.cases()}
    assert backbones >= {"resnet34", "resnet50", "resnet101", "densenet201", "bninception", "deit_small", "vit_base"}


@pytest.mark.slow
def test_a_cpu_measurement_renders_with_gpu_not_measured(tmp_path, monkeypatch):
    tiny = [dict(r, model=dict(r["model"], backbone="resnet_tiny")) for r in bench.cases()[:1]]
    monkeypatch.setattr(bench, "cases", lambda config: tiny)
    record = bench.run(tmp_path, device="cpu", cpu_steps=1)
    text = (tmp_path / "train.md").read_text()
    assert record["cpu"][0]["full_ips"] > 0 and "## GPU\n\nnot measured: " in text
    assert "| resnet_tiny |" in text and "2,000 images/s" in text


def test_gpu_kind_names_the_profile():
    assert bench.gpu_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert bench.gpu_kind("NVIDIA H200") == "h200"
