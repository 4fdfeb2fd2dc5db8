"""Training batches (runtime.runs_per_job): which runs one job trains, and how the job stages them,
survives a failing run, and writes each run's folder itself."""

import json
from collections import Counter
from pathlib import Path

import pytest

from rankrepro.engine.batch import STAGED_FILES, PublishError, is_staged, publish, run_files
from rankrepro.plan.complete import run_id as hash_id
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


# -- a batch job at run time: staged runs, failures, the runs' folders (rankrepro.engine.batch) ---------

def _fake_trainer(fail=(), calls=None):
    """Stands in for the batch command's train-and-evaluate of one run: writes its files (metrics.json
    names the run), or raises for a run in ``fail``; records the runs it was called for."""

    def train_one(args, run_json, out_dir, evaluate_out):
        rid = Path(run_json).parent.name
        assert json.loads(Path(run_json).read_text())["id"] == rid  # written from its plan file first
        if calls is not None:
            calls.append(rid)
        (out_dir / "model.pt").write_text("weights")
        (out_dir / "history.csv").write_text("epoch\n1\n")
        if rid in fail:
            raise RuntimeError("impossible setting: batch_size 0")
        Path(evaluate_out).write_text(json.dumps({"run_id": rid, "metrics": {"R@1": 0.5}}))

    return train_one


def _plans(tmp_path, seeds=(1, 2, 3)):
    """Plan files results/plan/runs/<id>.json of runs sop/loss a with ``seeds`` (the id their hash): their ids."""
    folder = tmp_path / "plan" / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for seed in seeds:
        run = {"dataset": "sop", "loss": {"name": "a"}, "seed": seed, "eval": {}}
        rid = hash_id(run)
        (folder / f"{rid}.json").write_text(json.dumps({**run, "id": rid}))
        ids.append(rid)
    return ids


def _batch_command(tmp_path, *run_ids, keep_model=False):
    return ["train-batch", "--runs", *(str(tmp_path / "plan" / "runs" / f"{rid}.json") for rid in run_ids),
            "--staged", str(tmp_path / "staged"), "--runs-dir", str(tmp_path / "runs"), "--manifest", "unused",
            "--device", "cpu", *([] if keep_model else ["--no-model"])]


def test_a_failing_run_keeps_the_finished_ones_and_a_retry_trains_only_it(tmp_path, monkeypatch, capsys):
    """Issue 23: the second of three runs fails. Runs 1 and 3 are staged, complete with their metrics;
    the job fails naming run 2 and its error and writes no run folder (Snakemake would delete a failed job's
    outputs); the retry trains run 2 alone, then writes the three folders (issue 37: the job's own outputs)."""
    from rankrepro import cli
    from rankrepro.cli import runs as cli_runs

    ids, staged, runs_dir = _plans(tmp_path), tmp_path / "staged", tmp_path / "runs"
    calls = []
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer(fail={ids[1]}, calls=calls))
    with pytest.raises(SystemExit) as failed:
        cli.main(_batch_command(tmp_path, *ids))
    message = str(failed.value.code)
    assert "1 of 3 runs failed" in message and f"{ids[1]}: RuntimeError: impossible setting: batch_size 0" in message
    assert ids[0] not in message.split("\n", 1)[1]
    assert calls == ids and not runs_dir.exists()
    assert is_staged(staged / ids[0]) and is_staged(staged / ids[2]) and not is_staged(staged / ids[1])
    assert json.loads((staged / ids[2] / "metrics.json").read_text())["run_id"] == ids[2]
    assert "impossible setting" in capsys.readouterr().err  # its traceback, in the job's log

    calls.clear()
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer(calls=calls))
    assert cli.main(_batch_command(tmp_path, *ids)) == 0
    assert calls == [ids[1]]
    for rid in ids:  # run.json (the plan file's record), history.csv, metrics.json; no model.pt (--no-model)
        assert sorted(p.name for p in (runs_dir / rid).iterdir()) == ["history.csv", "metrics.json", "run.json"]
        assert json.loads((runs_dir / rid / "run.json").read_text()) == {
            "dataset": "sop", "loss": {"name": "a"}, "seed": ids.index(rid) + 1, "eval": {}, "id": rid}
    assert not staged.exists() or not any(staged.iterdir())


def test_a_batch_keeps_the_models_when_asked(tmp_path, monkeypatch):
    from rankrepro import cli
    from rankrepro.cli import runs as cli_runs

    ids = _plans(tmp_path, seeds=(1,))
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer())
    assert cli.main(_batch_command(tmp_path, *ids, keep_model=True)) == 0
    assert (tmp_path / "runs" / ids[0] / "model.pt").read_text() == "weights"


def test_a_run_whose_plan_file_was_edited_fails_naming_it_and_the_others_train(tmp_path, monkeypatch):
    from rankrepro import cli
    from rankrepro.cli import runs as cli_runs

    ids = _plans(tmp_path, seeds=(1, 2))
    edited = tmp_path / "plan" / "runs" / f"{ids[0]}.json"
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "seed": 9}))
    calls = []
    monkeypatch.setattr(cli_runs, "_train", _fake_trainer(calls=calls))
    with pytest.raises(SystemExit, match=rf"{ids[0]}: PlanError: {edited}: its content hashes to .*, not to its id"):
        cli.main(_batch_command(tmp_path, *ids))
    assert calls == [ids[1]] and is_staged(tmp_path / "staged" / ids[1]) and not (tmp_path / "runs").exists()


def _stage(staged, rid, extra=()):
    (staged / rid).mkdir(parents=True)
    for name in (*STAGED_FILES, *extra):
        (staged / rid / name).write_text(name)


def test_publish_writes_each_run_folder_then_removes_the_staged_ones(tmp_path):
    staged, runs = tmp_path / "staged", tmp_path / "runs"
    _stage(staged, "sop-a-1", extra=["curve.csv"])
    _stage(staged, "sop-b-2")
    published = publish(["sop-a-1", "sop-b-2"], staged, runs, keep_model=False)
    # the test curve where there is one, then run.json, history.csv, metrics.json (last); no model.pt
    assert {rid: [p.name for p in files] for rid, files in published.items()} == {
        "sop-a-1": ["curve.csv", "run.json", "history.csv", "metrics.json"],
        "sop-b-2": ["run.json", "history.csv", "metrics.json"]}
    assert (runs / "sop-a-1" / "metrics.json").read_text() == "metrics.json" and not (runs / "sop-a-1" / "model.pt").exists()
    assert not any(staged.iterdir())
    assert run_files(keep_model=True) == ("run.json", "model.pt", "history.csv", "metrics.json")


def test_publish_writes_nothing_while_a_run_is_not_staged(tmp_path):
    staged, runs = tmp_path / "staged", tmp_path / "runs"
    _stage(staged, "sop-a-1")
    (staged / "sop-b-2").mkdir()
    (staged / "sop-b-2" / "model.pt").write_text("weights")
    with pytest.raises(PublishError, match=r"run sop-b-2 is not staged \(.*sop-b-2: run.json, history.csv, "
                                           r"metrics.json missing\)"):
        publish(["sop-a-1", "sop-b-2"], staged, runs)
    assert not runs.exists() and is_staged(staged / "sop-a-1")


def test_a_training_process_imports_no_matplotlib(tmp_path):
    """Issue 37: the training curve left the training job (one curves job per paper draws it)."""
    import subprocess
    import sys

    ids = _plans(tmp_path, seeds=(1,))
    script = f"""
import json, sys
from pathlib import Path
from rankrepro import cli
from rankrepro.cli import runs
from rankrepro.engine import loop

class Task:
    def evaluate(self, run, manifest, model, out, settings, run_id):
        Path(out).write_text(json.dumps({{"metrics": {{"R@1": 0.5}}}}))
        return {{"metrics": {{"R@1": 0.5}}}}

def train(run, manifest, out_dir, settings, *, run_id, task):
    (out_dir / "model.pt").write_text("weights")
    (out_dir / "history.csv").write_text("epoch,loss\\n1,0.5\\n")
    return out_dir / "model.pt"

runs._task = lambda run_json: (json.loads(Path(run_json).read_text()), Path(run_json).parent.name, Task())
loop.train = train
assert cli.main({_batch_command(tmp_path, *ids)!r}) == 0
print("matplotlib" in sys.modules)
"""
    (tmp_path / "manifests").mkdir()
    job = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert job.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "runs" / ids[0] / "metrics.json").is_file()


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

    def evaluate(self, args, run_json, model, out, image_cache):
        if self.failing:
            raise RuntimeError("the evaluation failed")
        Path(out).write_text(json.dumps({"model": Path(model).read_text()}))


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
            "--evaluate-out", str(folder / "metrics.json")]


def test_a_failed_evaluation_in_a_batch_keeps_the_training_and_the_retry_only_evaluates(tmp_path, monkeypatch):
    """Issue 33: each retry of a batch whose evaluation failed trained the run again from scratch."""
    from rankrepro import cli

    fake = _FakeTraining(monkeypatch)
    (rid,), staged = _plans(tmp_path, seeds=(1,)), tmp_path / "staged"
    (tmp_path / "manifests" / "sop").mkdir(parents=True)
    command = _batch_command(tmp_path, rid)
    command[command.index("unused")] = str(tmp_path / "manifests" / "sop")
    with pytest.raises(SystemExit, match=f"{rid}: RuntimeError: the evaluation failed"):
        cli.main(command)
    assert fake.trained == 1 and (staged / rid / "trained" / "model.pt").is_file()
    fake.failing = False
    assert cli.main(command) == 0
    assert fake.trained == 1  # the retry evaluated the kept model
    assert json.loads((tmp_path / "runs" / rid / "metrics.json").read_text()) == {"model": "weights of training 1"}
    assert not (staged / rid).exists()


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


def test_a_train_job_without_model_removes_it_once_evaluated(tmp_path, monkeypatch):
    """runtime.keep_model false (issue 37): the one-run job's model.pt is gone once metrics.json is written; the
    flag needs --evaluate-out (a separate evaluate job would read the model)."""
    from rankrepro import cli

    fake = _FakeTraining(monkeypatch)
    fake.failing = False
    runs_dir = _runs(tmp_path, ["sop-a-1"])
    folder, command = runs_dir / "sop-a-1", _train_command(runs_dir, "sop-a-1", tmp_path / "manifests")
    assert cli.main([*command, "--no-model"]) == 0
    assert json.loads((folder / "metrics.json").read_text()) == {"model": "weights of training 1"}
    assert not (folder / "model.pt").exists() and (folder / "history.csv").is_file()
    without = [a for a in command if a not in ("--evaluate-out", str(folder / "metrics.json"))]
    with pytest.raises(SystemExit, match="--no-model needs --evaluate-out"):
        cli.main([*without, "--no-model"])
    assert fake.trained == 1


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
