"""Training batches (runtime.runs_per_job): which runs one job trains."""

import pytest

from rankrepro.plan.batches import BatchError, train_batches

RUNS = {"sop-a-1": ("sop", None), "sop-b-2": ("sop", None), "sop-c-3": ("sop", None),
        "sop-d-4": ("sop", "cache"), "cub-a-5": ("cub", None)}


def key(rid):
    return RUNS[rid]


def test_runs_of_one_dataset_and_cache_are_cut_in_order():
    assert train_batches(RUNS, 2, key) == {
        "cub_0": ["cub-a-5"],
        "sop_0": ["sop-d-4"],  # groups in the order of their keys' repr: "('sop', 'cache')" < "('sop', None)"
        "sop_1": ["sop-a-1", "sop-b-2"], "sop_2": ["sop-c-3"],
    }


def test_every_run_is_in_exactly_one_batch_of_at_most_n():
    for n in (1, 2, 3, 10):
        batches = train_batches(RUNS, n, key)
        members = [rid for ids in batches.values() for rid in ids]
        assert sorted(members) == sorted(RUNS) and all(1 <= len(ids) <= n for ids in batches.values())
        assert all(len({key(rid) for rid in ids}) == 1 for ids in batches.values())


def test_the_batches_do_not_depend_on_the_order_of_the_plan():
    assert train_batches(list(reversed(list(RUNS))), 2, key) == train_batches(RUNS, 2, key)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "3", True])
def test_a_bad_batch_size_names_the_key(bad):
    with pytest.raises(BatchError, match="runtime.runs_per_job"):
        train_batches(RUNS, bad, key)
