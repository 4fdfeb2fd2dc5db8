"""Training batches (runtime.runs_per_job): which runs one job trains, and how the job stages them,
survives a failing run, and hands each run to its own train job."""

import json
from collections import Counter
from pathlib import Path

import pytest

from rankrepro.engine.batch import STAGED_FILES, AdoptError, adopt, is_staged
from rankrepro.plan.batches import BatchError, train_batches
from rankrepro.plan.build import plan_from_config, write_plan
from rankrepro.plan.merge import deep_merge
from rankrepro.plan.model import Plan
from rankrepro.plan.schema import load_yaml_mapping
from rankrepro.plan.targets import WorkflowTargets

ROOT = Path(__file__).resolve().parents[1]

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


def test_the_demo_trains_a_dataset_in_at_most_two_batches(tmp_path, monkeypatch):
    """profiles/demo/demo.yaml's runtime.runs_per_job: fewer, larger train_batch processes (each pays its imports,
    ~5 s): the demo's 245 runs in 18 batches (29 with runs_per_job 12), SOP's 62 runs in two."""
    monkeypatch.chdir(tmp_path)  # no prepared manifest here: the plan reads none
    config = deep_merge(load_yaml_mapping(ROOT / "config.yaml"), load_yaml_mapping(ROOT / "profiles/demo/demo.yaml"))
    plan_json = plan_from_config(config)
    targets = WorkflowTargets(Plan.from_json(plan_json), config, write_plan(plan_json, tmp_path / "plan"))
    per_dataset = Counter(targets.run(ids[0])["dataset"] for ids in targets.batches.values())
    assert per_dataset["sop"] == 2 and max(per_dataset.values()) == 2, per_dataset
    assert len(targets.batches) == 18 and sum(map(len, targets.batches.values())) == len(targets.plan.runs)


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


# -- a job that trains then evaluates (train --evaluate-out, train-batch): a failed evaluation retrains nothing ------

class _FakeTraining:
    """Stands in for the training loop and the evaluation of ``rankrepro.cli.runs``: counts the trainings (each
    writes a model of its own number) and fails the evaluations while ``failing``."""

    def __init__(self, monkeypatch):
        from rankrepro.cli import runs as cli_runs
        from rankrepro.engine import loop

        self.trained, self.failing = 0, True
        monkeypatch.setattr(loop, "train", self.train)
        monkeypatch.setattr(cli_runs, "_evaluate", self.evaluate)

    def train(self, run, manifest, out_dir, settings, *, run_id, task):
        self.trained += 1
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "model.pt").write_text(f"weights of training {self.trained}")
        (out_dir / "history.csv").write_text("epoch\n1\n")
        return out_dir / "model.pt"

    def evaluate(self, args, run_json, model, out, image_cache, curve, history):
        if self.failing:
            raise RuntimeError("the evaluation failed")
        Path(out).write_text(json.dumps({"model": Path(model).read_text()}))
        Path(curve).write_text("png")


def _runs(tmp_path, ids, eval_datasets=()):
    """``runs/<id>/run.json`` of each run (evaluated on ``eval_datasets`` too) and a manifests folder."""
    for rid in ids:
        (tmp_path / "runs" / rid).mkdir(parents=True)
        record = {"id": rid, "eval": {"datasets": list(eval_datasets)}}
        (tmp_path / "runs" / rid / "run.json").write_text(json.dumps(record))
    (tmp_path / "manifests" / "sop").mkdir(parents=True)
    return tmp_path / "runs"


def _train_command(runs_dir, rid, manifests):
    folder = runs_dir / rid
    return ["train", "--run", str(folder / "run.json"), "--manifest", str(manifests / "sop"), "--device", "cpu",
            "--evaluate-out", str(folder / "metrics.json"), "--curve", str(folder / "curve.png")]


def test_a_failed_evaluation_in_a_batch_keeps_the_training_and_the_retry_only_evaluates(tmp_path, monkeypatch):
    """Issue 33: each retry of a batch whose evaluation failed trained the run again from scratch."""
    from rankrepro import cli

    fake = _FakeTraining(monkeypatch)
    runs_dir, staged, record = _runs(tmp_path, ["sop-a-1"]), tmp_path / "staged", tmp_path / "sop_0" / "batch.json"
    command = [*_batch_command(runs_dir, staged, record, "sop-a-1")]
    command[command.index("unused")] = str(tmp_path / "manifests" / "sop")
    with pytest.raises(SystemExit, match="sop-a-1: RuntimeError: the evaluation failed"):
        cli.main(command)
    assert fake.trained == 1 and (staged / "sop-a-1" / "trained" / "model.pt").is_file()
    fake.failing = False
    assert cli.main(command) == 0
    assert fake.trained == 1  # the retry evaluated the kept model
    assert json.loads((staged / "sop-a-1" / "metrics.json").read_text()) == {"model": "weights of training 1"}
    assert not (staged / "sop-a-1" / "trained").exists() and is_staged(staged / "sop-a-1")


def test_a_failed_evaluation_in_a_train_job_keeps_the_model_snakemake_deletes(tmp_path, monkeypatch, capsys):
    """runtime.evaluate_in_train_job: Snakemake deletes a failed job's outputs (model.pt, history.csv); the kept
    training survives it, the retry evaluates it, and after a success the next training starts anew."""
    from rankrepro import cli

    fake = _FakeTraining(monkeypatch)
    runs_dir = _runs(tmp_path, ["sop-a-1"])
    folder, command = runs_dir / "sop-a-1", _train_command(runs_dir, "sop-a-1", tmp_path / "manifests")
    with pytest.raises(RuntimeError, match="the evaluation failed"):
        cli.main(command)
    for name in ("model.pt", "history.csv"):  # what Snakemake does to a failed job's outputs
        (folder / name).unlink()
    fake.failing = False
    assert cli.main(command) == 0 and fake.trained == 1
    assert (folder / "model.pt").read_text() == "weights of training 1" and (folder / "history.csv").is_file()
    assert json.loads((folder / "metrics.json").read_text()) == {"model": "weights of training 1"}
    assert "evaluating the model trained by an earlier attempt" in capsys.readouterr().err
    assert not (folder / "trained").exists()
    assert cli.main(command) == 0 and fake.trained == 2  # --forcerun after a success: trained again


def test_an_eval_dataset_whose_meta_json_is_broken_fails_before_training_naming_it(tmp_path, monkeypatch):
    from rankrepro import cli
    from rankrepro.data.manifest import ManifestError

    fake = _FakeTraining(monkeypatch)
    runs_dir = _runs(tmp_path, ["sop-a-1"], eval_datasets=["cub"])
    (tmp_path / "manifests" / "cub").mkdir()
    (tmp_path / "manifests" / "cub" / "meta.json").write_text('{"protocol": "same-set",')
    with pytest.raises(ManifestError, match=r"manifests/cub/meta.json: not valid JSON \(Expecting property name "
                                            r"enclosed in double quotes, line 1 column 25\); delete .*manifests/cub "
                                            r"and prepare the dataset again"):
        cli.main(_train_command(runs_dir, "sop-a-1", tmp_path / "manifests"))
    assert fake.trained == 0
