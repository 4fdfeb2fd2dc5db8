"""Toy figures of rankrepro.synthetic: PNP Fig. 6 and SupRank Figs. 10/11, at the demo scale."""

import json
import math

import numpy as np
import pytest

from rankrepro import synthetic
from rankrepro.synthetic import suprank_fig10_11 as sr


def _numbers(obj):
    """Every int/float leaf of a JSON record (bools excluded)."""
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [obj]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return []


def _run_twice(name, tmp_path_factory):
    a = tmp_path_factory.mktemp(name) / name
    b = tmp_path_factory.mktemp(name + "_again") / name
    synthetic.run(name, a, scale="demo", seed=3)
    synthetic.run(name, b, scale="demo", seed=3)
    return a, b


@pytest.fixture(scope="module")
def pnp_runs(tmp_path_factory):
    return _run_twice("pnp_fig6", tmp_path_factory)


@pytest.fixture(scope="module")
def suprank_runs(tmp_path_factory):
    return _run_twice("suprank_fig10_11", tmp_path_factory)


@pytest.mark.parametrize("runs", ["pnp_runs", "suprank_runs"])
def test_files_finite_and_deterministic(runs, request):
    import matplotlib.image

    a, b = request.getfixturevalue(runs)
    for suffix in (".json", ".md", ".png"):
        assert a.with_suffix(suffix).stat().st_size > 0
    img = matplotlib.image.imread(a.with_suffix(".png"))
    assert img.ndim == 3 and min(img.shape[:2]) > 100
    ra, rb = (json.loads(p.with_suffix(".json").read_text()) for p in (a, b))
    assert ra["scale"] == "demo" and ra["seed"] == 3 and ra["choices"]
    nums = _numbers(ra["ours"])
    assert nums and all(math.isfinite(x) for x in nums)
    assert _numbers(ra) == _numbers(rb)  # same seed -> the same numbers
    assert ra["ours"] == rb["ours"]
    assert a.with_suffix(".png").name in a.with_suffix(".md").read_text()


def test_pnp_fig6_metrics_in_range(pnp_runs):
    rec = json.loads(pnp_runs[0].with_suffix(".json").read_text())
    for label in ("PNP-I_b", "PNP-D_q"):
        (run,) = rec["ours"]["runs"][label]
        for split in ("test", "train"):
            ev = run[split]
            for k in ("R@1", "mAP@R", "NMI"):
                assert 0.0 <= ev[k] <= 1.0
            assert 0.0 <= ev["dists@intra"] <= 2.0 and 0.0 <= ev["dists@inter"] <= 2.0
            assert len(ev["circ_std_per_class"]) == 4 and all(s >= 0 for s in ev["circ_std_per_class"])
        # the network learnt the training classes
        assert run["train"]["R@1"] > 0.8


def test_pnp_fig6_circular_std():
    from rankrepro.synthetic.pnp_fig6 import circular_std, make_data

    assert circular_std(np.array([[1.0, 0.0]] * 5)) == pytest.approx(0.0, abs=1e-6)
    a = np.array([-0.3, 0.3])
    r = math.cos(0.3)  # mean resultant length of two angles +-0.3
    assert circular_std(np.stack([np.cos(a), np.sin(a)], 1)) == pytest.approx(math.sqrt(-2 * math.log(r)))
    (xtr, ytr), (xte, yte) = make_data(10, np.random.default_rng(0))
    assert xtr.shape == (40, 2) and xte.shape == (40, 2)
    assert sorted(set(ytr)) == sorted(set(yte)) == [0, 1, 2, 3]


def test_average_precision_and_gap_by_hand():
    # P N P N: AP = (1 + 2/3) / 2
    assert sr.average_precision([4, 3, 2, 1], [1, 0, 1, 0]) == pytest.approx(5 / 6)
    # the illustration: each batch perfectly ranked, global list P P N N N P P N N N
    d = sr.decomposability_gap(sr._toy_lists(sr.TOY_UNCAL))
    assert d["batch_ap"] == [1.0, 1.0]
    assert d["global_ap"] == pytest.approx((1 + 1 + 3 / 6 + 4 / 7) / 4)
    assert d["dg"] == pytest.approx(1 - (1 + 1 + 3 / 6 + 4 / 7) / 4)
    assert sr.decomposability_gap(sr._toy_lists(sr.TOY_CAL))["dg"] == pytest.approx(0.0)


def test_worst_case_closed_form_by_hand():
    # K = 2 batches of 1 positive and 2 negatives, juxtaposed: P N N P N N -> AP = (1 + 2/4) / 2 = 0.75
    assert sr.bound_eq26([1, 1], [2, 2]) == pytest.approx(0.25)
    assert sr.juxtaposed_gap([1, 1], [2, 2])["dg"] == pytest.approx(0.25)
    assert sr.brute_force_min_ap([1, 1], [2, 2]) == pytest.approx(0.75)
    # eq. 26 equals the computed juxtaposed DG for alike batches of any size
    for k, p, n in ((3, 2, 5), (5, 1, 7)):
        assert sr.bound_eq26([p] * k, [n] * k) == pytest.approx(sr.juxtaposed_gap([p] * k, [n] * k)["dg"])
    # unequal batches: the worst ranking juxtaposes them in the worst order, not the given one
    assert sr.bound_eq26([2, 1], [1, 2]) == pytest.approx(1 / 12)
    assert 1 - sr.brute_force_min_ap([2, 1], [1, 2]) == pytest.approx(sr.bound_eq26([1, 2], [2, 1])) == pytest.approx(0.3)


def test_eq27_limits():
    pos, neg = [2, 2, 2], [3, 3, 3]
    # every item respects the L_DG thresholds: no gap possible
    assert sr.bound_eq27([2, 2, 2], [0, 0, 0], [0, 0, 0], pos, neg) == pytest.approx(0.0)
    # every item violates them: eq. 27 falls back to eq. 26
    assert sr.bound_eq27([0, 0, 0], [2, 2, 2], [3, 3, 3], pos, neg) == pytest.approx(sr.bound_eq26(pos, neg))


def test_suprank_record(suprank_runs):
    rec = json.loads(suprank_runs[0].with_suffix(".json").read_text())
    ours = rec["ours"]
    for w in ours["worst_case"]:
        assert w["eq26"] == pytest.approx(w["juxtaposed_dg"])
        assert 0.0 <= w["eq26"] < 1.0
    for b in ours["brute_force"]:
        assert b["brute_force_max_dg"] == pytest.approx(b["eq26_worst_order"])
    for label, final in ours["training_final"].items():
        assert 0.0 <= final["global_map"]["mean"] <= 1.0 and 0.0 <= final["mean_batch_map"]["mean"] <= 1.0
        assert final["eq26_violations"] == 0
        assert -1.0 <= final["dg"]["mean"] <= final["bound_eq26"]["mean"]
