"""The loss benchmark (rankrepro.bench.losses) on a tiny configuration."""

from __future__ import annotations

import csv

import pytest

from rankrepro.bench import losses as bench
from rankrepro.timing import bench_labels, build_with_sizes

TINY = dict(batch_sizes=(8, 16), dim=8, m=4, num_classes=20, num_coarse=4, repeats=1, warmup=1, threads=1,
            devices=["cpu"])


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tiny_benchmark_writes_markdown_and_csv(tmp_path):
    names = ["smooth_ap", "triplet", "csl", "pml_smooth_ap", "pml_pnp_dq"]
    rows = bench.run(tmp_path, names=names, **TINY)
    md = (tmp_path / "losses.md").read_text()
    table = read_csv(tmp_path / "losses.csv")
    assert len(rows) == len(table) == len(names) * 2
    assert "| loss | B | device | ms | peak MB | speed-up vs PML | memory ratio vs PML | note |" in md
    for name in names:
        for b in (8, 16):
            r = next(r for r in table if r["loss"] == name and r["batch_size"] == str(b) and r["device"] == "cpu")
            assert float(r["ms"]) > 0 and float(r["peak_mb"]) >= 0, r
            assert f"| {name} | {b} | cpu |" in md
    smooth = [r for r in table if r["loss"] == "smooth_ap"]
    assert all(float(r["speedup_vs_pml"]) > 0 and float(r["memory_ratio_vs_pml"]) > 0 for r in smooth)
    # the PML reference materialises B x B x B tensors: more memory than ours at B = 16
    assert float(smooth[-1]["memory_ratio_vs_pml"]) > 1
    assert not any(r["speedup_vs_pml"] for r in table if r["loss"] == "triplet")


def test_caps_budget_and_errors_are_reported(tmp_path):
    rows = bench.run(tmp_path, names=["triplet", "no_such_loss"], slow_s=0.0, **TINY)
    by = {(r.loss, r.batch_size): r for r in rows}
    assert by[("triplet", 8)].ms is not None and by[("triplet", 8)].note.startswith("capped")
    assert by[("triplet", 16)].ms is None and by[("triplet", 16)].note.startswith("skipped")
    assert by[("no_such_loss", 8)].note.startswith("error: UnknownNameError: unknown loss")
    rows = bench.run(tmp_path, names=["triplet"], budget_s=0.0, **TINY)
    assert all(r.ms is None and "budget" in r.note for r in rows)
    assert "budget" in (tmp_path / "losses.md").read_text()


def test_labels_and_sizes_helpers():
    y = bench_labels(16, 4, 20, 4)
    assert y.shape == (16, 2) and (y[:, 0].view(4, 4) == y[::4, 0].unsqueeze(1)).all()
    assert (y[:, 1] == y[:, 0] // 5).all()
    with pytest.raises(ValueError, match="multiple"):
        bench_labels(10, 4, 20, 4)
    loss = build_with_sizes("sum_nsm", [20, 4], 8)
    assert loss.num_classes_per_level == [20, 4] and loss.embedding_size == 8


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_tiny_benchmark_on_cuda(tmp_path):
    rows = bench.run(tmp_path, names=["smooth_ap", "pml_smooth_ap"], **{**TINY, "devices": ["cuda"]})
    assert all(r.device == "cuda" and r.ms > 0 and r.peak_mb > 0 for r in rows)
    assert all(r.speedup for r in rows if r.loss == "smooth_ap")
