"""bench train: the backbones of the setups, and the table of a tiny CPU measurement."""

import pytest

from rankrepro.bench import train as bench


def test_the_cases_cover_every_network_the_setups_use():
    cases = bench.cases()
    networks = {r["network"] for r in cases}
    assert networks >= {"resnet34", "resnet50", "resnet101", "densenet201", "bninception", "deit_small", "vit_base",
                        "faster_rcnn/resnet50", "faster_rcnn/resnet101", "faster_rcnn/resnext101_32x4d"}
    # the profile rows the cost reads are the networks the bench writes (a detector's: faster_rcnn/<backbone>)
    assert {r["bench_dataset"] for r in cases} == {"sop", "voc07"}
    detector = next(r for r in cases if r["network"] == "faster_rcnn/resnet50")
    assert detector["loss"]["name"] == "faster_rcnn" and detector["setup_batch"] == 8  # its own loss and batch
    assert {r["loss"]["name"] for r in cases if r["bench_dataset"] == "sop"} == {"smooth_ap"}


@pytest.mark.slow
def test_the_task_bench_times_the_trainers_step_for_each_task(tmp_path):
    from rankrepro.bench.pipeline import TaskBench, bench_run, replica_manifest

    cases = bench.cases()
    for network, model in (("resnet50", {"backbone": "resnet_tiny"}), ("faster_rcnn/resnet50", {"min_size": 64,
                                                                                              "max_size": 96})):
        run = next(r for r in cases if r["network"] == network)
        manifest = replica_manifest(run["bench_dataset"], tmp_path / network.replace("/", "_"), classes_per_super=1,
                                    image_size=32)
        timed = TaskBench(bench_run(dict(run, model=dict(run["model"], **model)), 2, "none"), manifest, "cpu")
        try:
            assert timed.train(1, 1) > 0 and timed.train(1, 1, synthetic=True) > 0 and timed.infer(1, 1) > 0
        finally:
            timed.close()


@pytest.mark.slow
def test_a_cpu_measurement_renders_with_gpu_not_measured(tmp_path, monkeypatch):
    tiny = [dict(r, network="resnet_tiny", model=dict(r["model"], backbone="resnet_tiny")) for r in bench.cases()[:1]]
    monkeypatch.setattr(bench, "cases", lambda config: tiny)
    record = bench.run(tmp_path, device="cpu", cpu_steps=1)
    text = (tmp_path / "train.md").read_text()
    assert record["cpu"][0]["full_ips"] > 0 and "## GPU\n\nnot measured: " in text
    assert "| resnet_tiny |" in text and "2,000 images/s" in text


def test_gpu_kind_names_the_profile():
    assert bench.gpu_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert bench.gpu_kind("NVIDIA H200") == "h200"
