"""Model selection on the test set (rankrepro.record.selection): the curve's epochs, the best epoch of a
hand-made curve whose best is not its last, per test set of a grouped protocol, and what a table reads."""

import math

import pytest

from rankrepro.record.selection import (best_on_test, curve_csv, curve_epochs, read_curve, select_by_of,
                                        selection_record, shown_metrics)


def test_the_curve_epochs_are_every_kth_and_the_last():
    assert curve_epochs(10, 3) == [3, 6, 9, 10]
    assert curve_epochs(4, 2) == [2, 4]
    assert curve_epochs(1, 1) == [1] and curve_epochs(5, 20) == [5]
    assert curve_epochs(10, None) == []


CURVE = [  # epochs 1..3 scored in training; epoch 4's row is replaced by the evaluate step's metrics
    {"epoch": 1, "seconds": 1.0, "R@1": 0.50, "R@10": 0.70},
    {"epoch": 2, "seconds": 1.0, "R@1": 0.60, "R@10": 0.72},
    {"epoch": 3, "seconds": 1.0, "R@1": 0.60, "R@10": 0.80},  # ties epoch 2: the first stays the best
    {"epoch": 4, "seconds": 1.0, "R@1": 0.99, "R@10": 0.99},
]
FINAL = {"R@1": 0.55, "R@10": 0.75}


def test_the_best_epoch_of_a_curve_whose_best_is_not_its_last():
    best = best_on_test(CURVE, FINAL, 4, "R@1")
    assert best == {"select_by": "R@1", "source": "curve", "epoch": 2, "epochs": {"R@1": 2, "R@10": 2},
                    "metrics": {"R@1": 0.60, "R@10": 0.72}}
    # picked by R@10 instead: epoch 3, where R@10 is highest
    assert best_on_test(CURVE, FINAL, 4, "R@10")["metrics"] == {"R@1": 0.60, "R@10": 0.80}


def test_the_final_metrics_stand_for_the_last_epoch_and_nan_is_never_best():
    final = {"R@1": 0.65, "R@10": 0.75}  # the evaluate step's number beats the curve's: the last is the best
    assert best_on_test(CURVE, final, 4, "R@1")["epochs"] == {"R@1": 4, "R@10": 4}
    nan_curve = [{"epoch": 1, "seconds": 1.0, "R@1": math.nan, "R@10": 0.9}]
    assert best_on_test(nan_curve, FINAL, 2, "R@1")["epoch"] == 2


def test_each_test_set_of_a_grouped_protocol_picks_its_own_epoch():
    """VehicleID: small / large each keep the epoch of their own best R@1 (Smooth-AP's code keeps a
    checkpoint per test list); a count outside any group keeps its final value."""
    curve = [{"epoch": 1, "seconds": 0.0, "small/R@1": 0.5, "small/R@5": 0.6, "large/R@1": 0.4, "large/R@5": 0.5,
              "n_queries": 10},
             {"epoch": 2, "seconds": 0.0, "small/R@1": 0.7, "small/R@5": 0.8, "large/R@1": 0.3, "large/R@5": 0.45,
              "n_queries": 10}]
    final = {"small/R@1": 0.6, "small/R@5": 0.7, "large/R@1": 0.45, "large/R@5": 0.55, "n_queries": 10}
    best = best_on_test(curve, final, 3, "R@1")
    assert best["epochs"] == {"small/R@1": 2, "small/R@5": 2, "large/R@1": 3, "large/R@5": 3, "n_queries": 3}
    assert best["metrics"] == {"small/R@1": 0.7, "small/R@5": 0.8, "large/R@1": 0.45, "large/R@5": 0.55,
                               "n_queries": 10}
    assert best["epoch"] is None  # no single epoch gives them all


def test_without_a_curve_the_best_is_the_last():
    assert best_on_test([], FINAL, 4, "R@1") == {"select_by": "R@1", "source": "last", "epoch": 4,
                                                 "epochs": {"R@1": 4, "R@10": 4}, "metrics": FINAL}


def test_the_metrics_json_record_and_what_a_table_shows():
    run = {"epochs": 4, "eval": {"metrics": ["R@1", "R@10"], "every": 1, "select": "best_test", "select_by": None}}
    assert select_by_of(run["eval"]) == "R@1"
    record = {"metrics": FINAL, **selection_record(run, FINAL, CURVE)}
    assert record["epoch"] == 4 and record["select"] == "best_test" and record["best_test"]["epoch"] == 2
    assert shown_metrics(record) == {"R@1": 0.60, "R@10": 0.72}
    assert shown_metrics(record, "last") == FINAL
    assert shown_metrics({"metrics": FINAL}) == FINAL == shown_metrics({"metrics": FINAL}, "best_test")  # older record
    with pytest.raises(ValueError, match="select must be one of last, best_test"):
        shown_metrics(record, "best")


def test_the_curve_file_round_trips(tmp_path):
    path = tmp_path / "curve.csv"
    path.write_text(curve_csv(CURVE))
    assert path.read_text().splitlines()[0] == "epoch,seconds,R@1,R@10"
    assert read_curve(path) == CURVE and isinstance(read_curve(path)[0]["epoch"], int)
    assert read_curve(tmp_path / "absent.csv") == []
