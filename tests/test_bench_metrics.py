"""The metrics benchmark runs end to end on a tiny configuration and writes its table."""

from __future__ import annotations

import pytest

pytest.importorskip("faiss")

from rankrepro.bench import metrics as bench  # noqa: E402


@pytest.mark.slow
def test_bench_tiny(tmp_path):
    rows = bench.run(tmp_path, shapes=[("tiny", 1200, 200, 4), ("tail", 1500, 40, 3)], dim=16, isolate=False,
                     repeats=2)
    assert [(r["shape"], r["stage"]) for r in rows] == [(s, st) for s in ("tiny", "tail") for st in bench.STAGES]
    text = (tmp_path / "metrics.md").read_text()
    assert "| tiny (1,200 × 16, 200 classes) | floor |" in text
    assert text.count("identical (to 1e-12)") == 2  # ours == PML on both shapes
    by = {(r["shape"], r["stage"]): r for r in rows}
    for shape in ("tiny", "tail"):
        ours, ref = by[(shape, "ours-ranked")]["values"], by[(shape, "pml")]["values"]
        assert ours == pytest.approx(ref, abs=1e-12)
        assert set(by[(shape, "ours-full")]["values"]) == set(bench.FULL)
        assert all(r["seconds"] > 0 and r["cpu"] > 0 and r["peak_mib"] > 0 for r in rows)
    assert by[("tiny", "floor")]["runs"] == 2 and "best of 2" in text


def test_bench_data_shapes():
    x, labels = bench.make_data(5000, 900, 12, 8)
    assert x.shape == (5000, 8) and labels.shape == (5000, 2)
    counts = __import__("numpy").bincount(labels[:, 0])
    assert len(counts) == 900 and counts.min() >= 2
    # tree: each fine class has a single super-class
    pairs = {tuple(p) for p in labels.tolist()}
    assert len(pairs) == 900


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_bench_tiny_on_cuda(tmp_path):
    rows = bench.run(tmp_path, shapes=[("tiny", 1200, 200, 4)], dim=16, isolate=False, repeats=1, device="cuda")
    text = (tmp_path / "metrics-cuda.md").read_text()
    assert "on the GPU" in text and "identical (to 1e-12)" in text  # ours on the GPU == PML's CustomKNN there
    assert all(r["seconds"] > 0 and r["peak_mib"] > 0 for r in rows)
    cpu = {r["stage"]: r["values"] for r in bench.run(tmp_path / "cpu", shapes=[("tiny", 1200, 200, 4)], dim=16,
                                                        isolate=False, repeats=1, stages=("ours-ranked", "ours-full"))}
    for r in rows:
        if r["stage"] in cpu:
            assert r["values"] == pytest.approx(cpu[r["stage"]], abs=1e-4)
