"""RaMBO Figure 2 (mini-batch mAP estimate) and Table 6 (AP forward + backward time)."""

import json
import math

import numpy as np
import pytest
import torch

from rankrepro.metrics import compute
from rankrepro.synthetic import SYNTHETIC, run
from rankrepro.synthetic import rambo_fig2 as fig2
from rankrepro.synthetic import rambo_table6 as t6


def _pairs(classes=30, dim=2, seed=0):
    """Classes of 2 items in a few dimensions: a poor ranking, so the full-set mAP is low."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2 * classes, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, np.repeat(np.arange(classes), 2)


def test_fig2_demo_files_and_determinism(tmp_path):
    a = run("rambo_fig2", tmp_path / "a", scale="demo", seed=3)
    b = run("rambo_fig2", tmp_path / "b", scale="demo", seed=3)
    for suffix in (".json", ".md", ".png"):
        assert (tmp_path / ("a" + suffix)).stat().st_size > 0
    ja, jb = (json.loads((tmp_path / f"{k}.json").read_text()) for k in "ab")
    assert ja["ours"] == jb["ours"]
    assert a["ours"] == b["ours"] and a["choices"] and "rambo_fig2" in SYNTHETIC.names()
    ours = a["ours"]
    full = ours["full_map"]
    assert 0 < full < 1
    for curve in ours["curves"].values():
        assert curve
        for r in curve:
            assert math.isfinite(r["mean"]) and math.isfinite(r["std"]) and r["n_estimates"] >= 1
    last = ours["curves"]["uniform"][-1]
    assert last["batch_size"] == ours["n_items"] and last["mean"] == pytest.approx(full, abs=1e-12)
    assert last["std"] == 0.0
    # the paper's claim on this set: small batches overestimate the full-set mAP
    assert ours["curves"]["uniform"][0]["mean"] > full and ours["curves"]["per_class"][0]["mean"] > full
    c = run("rambo_fig2", tmp_path / "c", scale="demo", seed=4)
    assert c["ours"]["full_map"] != full


def test_full_batch_estimate_is_the_full_map():
    x, y = fig2.class_embeddings(6, 5, 8, 0.5, np.random.default_rng(1))
    est, draws = fig2.minibatch_map(x, y, y.size, 3, "uniform", np.random.default_rng(0))
    full = compute(x, y, metrics=["mAP"])["mAP"]
    assert draws == 3 and np.allclose(est, full, rtol=0, atol=1e-12)


def test_small_batches_overestimate_with_one_positive_per_query():
    """Classes of 2 (one positive per query), uniform batches: a query's AP in a batch holding its
    positive is 1 / rank', and rank' <= rank (removing items never moves it down); which pairs are
    complete is exchangeable, so E[batch mAP] >= full mAP. Also checked exactly per query."""
    x, y = _pairs()
    full = compute(x, y, metrics=["mAP"])["mAP"]
    assert full < 0.5
    for b in (6, 12):
        est, draws = fig2.minibatch_map(x, y, b, 300, "uniform", np.random.default_rng(b))
        assert est.size == 300 and draws >= 300
        assert est.mean() > full
    # per query and per batch: whole classes (m = class size) keep every positive of each query
    per_full = compute(x, y, metrics=["mAP"], per_query=True)["per_query"]["mAP"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        idx = fig2.sample_batch(y, 8, "per_class", rng, m_per_class=2)
        per_batch = compute(x[idx], y[idx], metrics=["mAP"], per_query=True)["per_query"]["mAP"]
        assert np.all(per_batch >= per_full[idx] - 1e-12)
        assert np.unique(y[idx], return_counts=True)[1].tolist() == [2] * 4


def test_sample_batch_checks():
    y = np.repeat(np.arange(3), 4)
    rng = np.random.default_rng(0)
    assert sorted(fig2.sample_batch(y, 12, "uniform", rng).tolist()) == list(range(12))
    with pytest.raises(ValueError, match="per_class batches"):
        fig2.sample_batch(y, 10, "per_class", rng)
    with pytest.raises(ValueError, match="sampler must be"):
        fig2.sample_batch(y, 4, "other", rng)


def test_table6_demo_structure(tmp_path):
    threads = torch.get_num_threads()
    rec = run("rambo_table6", tmp_path / "t", scale="demo", seed=0)
    assert torch.get_num_threads() == threads
    assert (tmp_path / "t.json").exists() and (tmp_path / "t.md").exists()
    assert json.loads((tmp_path / "t.json").read_text())["paper"] == rec["paper"]
    paper = rec["paper"]
    assert paper["length"] == [100_000, 1_000_000, 10_000_000, 100_000_000]
    assert paper["cpu_s"] == [0.033, 0.331, 3.86, 36.4] and paper["gpu_s"] == [0.0013, 0.007, 0.061, 0.62]
    rows = rec["ours"]["rows"]
    lengths = t6.SETTINGS["demo"]["lengths"]
    single = [r for r in rows if r["device"] == "cpu" and r["threads"] == 1]
    assert {(r["method"], r["length"]) for r in single} == {(m, n) for m in t6.METHODS for n in lengths}
    for r in single:
        assert r["skipped"] is None and len(r["times_s"]) == t6.SETTINGS["demo"]["repeats"][r["length"]]
        assert all(math.isfinite(t) and t > 0 for t in r["times_s"]) and r["min_s"] <= r["median_s"]
    assert any(p["op"] == "aten::sort" for p in rec["ours"]["profile"])
    md = (tmp_path / "t.md").read_text()
    assert "33 ms" in md and "1.3 ms" in md and "ours, CPU 1 thread: blackbox_ap" in md


def test_table6_memory_guard_skips_and_gradient_flows(monkeypatch):
    monkeypatch.setattr(t6, "MEMORY_BUDGET", 1_000_000)
    cfg = {"lengths": [1_000, 100_000], "repeats": {1_000: 1, 100_000: 1}}
    rows = t6.time_lengths("cpu", 1, ("blackbox_ap",), cfg, 0, 100_000)
    assert rows[0]["skipped"] is None and rows[0]["median_s"] > 0
    assert "budget" in rows[1]["skipped"] and rows[1]["times_s"] == []
    ref, labels = t6.make_list(1_000, 0)
    assert labels.sum() >= 1 and ref.shape == (1_000, 1)
    from rankrepro import losses

    for name in ("blackbox_ap", "rambo_map"):
        g = t6._call(name, ref, labels, losses.build(name))
        assert g.shape == (1, 1) and torch.isfinite(g).all() and g.abs().sum() > 0
