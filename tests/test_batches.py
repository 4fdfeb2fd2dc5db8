"""Training batches (runtime.runs_per_job): which runs one job trains, and how the job stages them,
survives a failing run, and hands each run to its own train job."""

import json
from pathlib import Path

import pytest

from rankrepro.engine.batch import STAGED_FILES, AdoptError, adopt, is_staged
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


# -- a batch job at run time: staged runs, failures, adoption (rankrepro.engine.batch) ---------------

def _fake_trainer(fail=(), calls=None):
    """Stands in for the batch command's train-and-evaluate of one run: writes its files (metrics.json
    names the run), or raises for a run in ``fail``; records the runs it was called for."""

    def train_one(args, run_json, out_dir, evaluate_out, curve):
        rid = Path(run_json).parent.name
        if calls is not None:
            calls.append(rid)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "model.pt").write_text("weights")
        (out_dir / "history.csv").write_text("epoch\n1\n")
        if rid in fail:
            raise RuntimeError("impossible setting: batch_size 0")
        Path(evaluate_out).write_text(json.dumps({"run_id": rid, "metrics": {"R@1": 0.5}}))
        Path(curve).write_text("png")

    return train_one


def _batch_command(runs_dir, staged, record, *run_ids):
    return ["train-batch", "--runs", *(str(runs_dir / rid / "run.json") for rid in run_ids), "--staged", str(staged),
            "--out", str(record), "--manifest", "unused", "--device", "cpu"]


def test_a_failing_run_keeps_the_finished_ones_and_a_retry_trains_only_it(tmp_path, monkeypatch, capsys):
    """Issue 23: the second of three runs fails. Runs 1 and 3 are staged, complete with their metrics;
    the job fails naming run 2 and its error, without the batch record; the retry trains run 2 alone."""
    from rankrepro import cli
    from rankrepro.cli import runs as cli_runs

    runs_dir, staged, record = tmp_path / "runs", tmp_path / "staged", tmp_path / "sop_0" / "batch.json"
    ids = ["sop-a-1", "sop-b-2", "sop-c-3"]
    for rid in ids:
        (runs_dir / rid).mkdir(parents=True)
        (runs_dir / rid / "run.json").write_text(json.dumps({"id": rid}))
    calls = []
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer(fail={"sop-b-2"}, calls=calls))
    with pytest.raises(SystemExit) as failed:
        cli.main(_batch_command(runs_dir, staged, record, *ids))
    message = str(failed.value.code)
    assert "1 of 3 runs failed" in message and "sop-b-2: RuntimeError: impossible setting: batch_size 0" in message
    assert "sop-a-1" not in message.split("\n", 1)[1]
    assert calls == ids and not record.exists()
    assert is_staged(staged / "sop-a-1") and is_staged(staged / "sop-c-3") and not is_staged(staged / "sop-b-2")
    assert json.loads((staged / "sop-c-3" / "metrics.json").read_text())["run_id"] == "sop-c-3"
    assert "impossible setting" in capsys.readouterr().err  # its traceback, in the job's log

    calls.clear()
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer(calls=calls))
    assert cli.main(_batch_command(runs_dir, staged, record, *ids)) == 0
    assert calls == ["sop-b-2"]
    assert json.loads(record.read_text()) == {"runs": {rid: str(staged / rid) for rid in ids}}


def test_adopt_puts_a_staged_run_in_its_folder_once(tmp_path):
    staged, record = tmp_path / "staged", tmp_path / "batch.json"
    (staged / "sop-a-1").mkdir(parents=True)
    for name in STAGED_FILES:
        (staged / "sop-a-1" / name).write_text(name)
    record.write_text(json.dumps({"runs": {"sop-a-1": str(staged / "sop-a-1")}}))
    out = tmp_path / "runs" / "sop-a-1"
    assert [p.name for p in adopt(record, "sop-a-1", out)] == list(STAGED_FILES)
    assert all((out / name).read_text() == name for name in STAGED_FILES)
    assert not (staged / "sop-a-1").exists() and sorted(p.name for p in out.iterdir()) == sorted(STAGED_FILES)
    with pytest.raises(AdoptError, match=rf"run sop-a-1 is not staged .*snakemake --forcerun {record}"):
        adopt(record, "sop-a-1", out)
    with pytest.raises(AdoptError, match=rf"{record}: run sop-z-9 is not in this training batch; its runs: sop-a-1"):
        adopt(record, "sop-z-9", out)


def test_adopt_carries_the_test_curve_when_the_run_has_one(tmp_path):
    staged, record = tmp_path / "staged", tmp_path / "batch.json"
    (staged / "sop-a-1").mkdir(parents=True)
    for name in (*STAGED_FILES, "curve.csv"):
        (staged / "sop-a-1" / name).write_text(name)
    record.write_text(json.dumps({"runs": {"sop-a-1": str(staged / "sop-a-1")}}))
    out = tmp_path / "runs" / "sop-a-1"
    assert [p.name for p in adopt(record, "sop-a-1", out)] == ["curve.csv", *STAGED_FILES]  # metrics.json after it
    assert (out / "curve.csv").read_text() == "curve.csv"
