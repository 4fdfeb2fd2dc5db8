"""A training stopped as SLURM stops one at its time limit resumes at the same step (rankrepro.engine.preemption).

SLURM sends SIGTERM to every process of the job, then SIGKILL ``KillWait`` seconds later: the trainer saves a
checkpoint at the next step and exits non-zero; the retry (the same command) resumes there, and its model, loss
state and history equal those of a run trained straight through, bit for bit on CPU. Killed without warning
(SIGKILL), it resumes from its last timed checkpoint, at most ``runtime.checkpoint_minutes`` old. Both for every
task (retrieval on a SOP replica, detection on the voc07 one), with 0 and 2 loader workers, stopped mid-epoch
(tests/interrupted_training.py signals the job at a given step).
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from datautil import replica_archive, voc07_manifest
from test_detection_task import tiny_run as tiny_detection_run
from test_train import tiny_run

from rankrepro.data import datasets
from rankrepro.engine.loader import TrainLoader
from rankrepro.engine.preemption import CheckpointTimer, EpochProgress, StopSignal
from rankrepro.record.runtime import TrainRuntime
from rankrepro.torchfile import load_plain

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
EPOCHS = 2
#: seconds SLURM waits between SIGTERM and SIGKILL (its KillWait default is 30)
KILL_WAIT = 20


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_timed_checkpoint_is_due_every_interval_after_the_last_one():
    clock = FakeClock()
    timer = CheckpointTimer(minutes=2, clock=clock)
    clock.now += 119.9
    assert not timer.due()
    clock.now += 0.1
    assert timer.due() and timer.due()  # due until a checkpoint is written
    clock.now += 50
    timer.restart()  # written at 170 s: the next is due at 290 s
    clock.now += 119
    assert not timer.due()
    clock.now += 1
    assert timer.due()


def test_no_timed_checkpoint_with_zero_minutes():
    clock = FakeClock()
    timer = CheckpointTimer(minutes=0, clock=clock)
    clock.now += 1e9
    assert not timer.due()


def test_sigterm_sets_the_flag_and_the_previous_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignal() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs at the next bytecode boundary of the main thread
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_epochs_progress_is_plain_data_and_counts_images_and_losses():
    progress = EpochProgress(epoch=3, seed=12345)
    progress.add(16, 0.5)
    progress.add(8, 0.25)
    state = progress.state()
    assert state == {"epoch": 3, "seed": 12345, "batches": 2, "seen": 24, "loss_sum": 10.0, "seconds": 0.0}
    assert EpochProgress.from_state(state) == progress


class RandomItems(torch.utils.data.Dataset):
    """Item i: (a number drawn from torch's RNG, i, i); counts the items loaded in this process."""

    def __init__(self, n):
        self.n, self.loaded = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.loaded.append(i)
        return torch.rand(1), i, i


def _epoch(dataset, batches, workers, skip, persistent=True):
    loader = TrainLoader(dataset, batches, num_workers=workers, device=torch.device("cpu"),
                         runtime=TrainRuntime(persistent_workers=persistent))
    out = [(labels.tolist(), images.flatten().tolist())
           for images, labels in loader.epoch(torch.Generator().manual_seed(7), skip=skip)]
    loader.close()
    return out


def test_a_resumed_epoch_skips_its_done_batches_without_loading_them():
    batches = [[0, 1], [2, 3], [4, 5], [6, 7]]
    dataset = RandomItems(8)
    assert [labels for labels, _ in _epoch(dataset, batches, workers=0, skip=3)] == [[6, 7]]
    assert dataset.loaded == [6, 7]


def test_with_workers_each_batch_draws_the_same_numbers_whatever_the_workers_or_the_skip():
    batches = [[0, 1], [2, 3], [4, 5], [6, 7], [0, 5]]
    whole = _epoch(RandomItems(8), batches, workers=2, skip=0)
    assert [labels for labels, _ in whole] == batches
    assert _epoch(RandomItems(8), batches, workers=1, skip=0, persistent=False) == whole
    assert _epoch(RandomItems(8), batches, workers=2, skip=2, persistent=False) == whole[2:]
    assert whole[0][1] != whole[1][1]


# --- a real training in a subprocess, stopped mid-epoch as SLURM stops it, for every task --------------------------

#: every task's training case: its replica (a fixture below), the run and its batches per epoch; each case is
#: stopped just before its STOP-th step, in the second epoch
CASES = {
    "retrieval": {"replica": "sop_replica", "run": lambda: tiny_run(epochs=EPOCHS), "batches": 30, "stop": 40},
    "detection": {"replica": "voc_replica", "batches": 3, "stop": 5,
                  "run": lambda: tiny_detection_run(epochs=EPOCHS, max_batches_per_epoch=None)},
}


@pytest.fixture(scope="module")
def sop_replica(tmp_path_factory):
    """A SOP replica with 30 batches of 16 images per epoch (60 training classes of 8 images)."""
    root = tmp_path_factory.mktemp("sop60")
    replica_archive("sop", root / "replica.zip", classes_per_super=5, images_per_class=(8, 8), image_size=16)
    datasets.load("sop").prepare(root / "replica.zip", root / "manifest", data_root=root / "data", replica=True)
    return root / "manifest"


@pytest.fixture(scope="module")
def voc_replica(tmp_path_factory):
    """The voc07 replica: 3 batches of 2 images per epoch."""
    return voc07_manifest(tmp_path_factory.mktemp("voc07"))


def _run_json(folder: Path, task: str) -> Path:
    run_json = folder / "runs" / "r" / "run.json"
    run_json.parent.mkdir(parents=True)
    run_json.write_text(json.dumps(CASES[task]["run"]()))
    return run_json


def _arguments(run_json: Path, manifest: Path, workers: int, minutes: float) -> list[str]:
    return ["train", "--run", str(run_json), "--manifest", str(manifest), "--device", "cpu", "--threads", "1",
            "--no-progress", "--num-workers", str(workers), "--checkpoint-minutes", str(minutes)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{TESTS}"}


def _train(run_json, manifest, workers, minutes) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "rankrepro", *_arguments(run_json, manifest, workers, minutes)],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _interrupted(sent: str, step: int, run_json, manifest, workers, minutes) -> subprocess.CompletedProcess:
    """The training as a job of its own (a new session), ``sent`` to all its processes before its ``step``-th
    step (tests/interrupted_training.py)."""
    return subprocess.run([sys.executable, str(TESTS / "interrupted_training.py"), sent, str(step),
                           *_arguments(run_json, manifest, workers, minutes)], env=_env(), capture_output=True,
                          text=True, timeout=600, start_new_session=True)


def _checkpoint(run_json: Path) -> dict | None:
    path = run_json.parent / "checkpoint.pt"
    return load_plain(path, remedy="") if path.exists() else None


def _outcome(run_json: Path):
    """The trained run's weights, loss state and history without its timings."""
    model = torch.load(run_json.parent / "model.pt", weights_only=True)
    with open(run_json.parent / "history.csv") as f:
        history = [{k: v for k, v in row.items() if k not in ("seconds", "images_per_s")} for row in csv.DictReader(f)]
    return model["state_dict"], model["criterion"], history


def _assert_same(a, b):
    (weights_a, loss_a, history_a), (weights_b, loss_b, history_b) = a, b
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    assert loss_a.keys() == loss_b.keys() and all(_equal(loss_a[k], loss_b[k]) for k in loss_a)
    assert history_a == history_b and len(history_a) == EPOCHS


def _equal(a, b) -> bool:
    """Tensors, or nested lists and dicts of them (RaMBO's memory), equal bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


@pytest.fixture(scope="module")
def straight(request, tmp_path_factory):
    """By task and workers: the outcome of a run trained without interruption (per-epoch checkpoints only)."""
    cache = {}

    def outcome(task: str, workers: int):
        if (task, workers) not in cache:
            run_json = _run_json(tmp_path_factory.mktemp(f"straight-{task}{workers}"), task)
            _train(run_json, request.getfixturevalue(CASES[task]["replica"]), workers, minutes=0)
            cache[task, workers] = _outcome(run_json)
        return cache[task, workers]
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("task", list(CASES))
def test_a_job_stopped_by_sigterm_mid_epoch_resumes_on_retry_exactly(request, tmp_path, straight, task, workers):
    """SIGTERM to the job's processes in the second epoch (no timed checkpoints): the trainer saves after the step
    it is in and exits 1 within SLURM's KillWait; the retry resumes there and ends bit-identical."""
    case, run_json = CASES[task], _run_json(tmp_path, task)
    replica = request.getfixturevalue(case["replica"])
    job = _interrupted("SIGTERM", case["stop"], run_json, replica, workers, minutes=0)
    job_ended = time.time()
    assert job.returncode == 1, job.stderr[-3000:]
    stopped = re.search(r"stopped by SIGTERM at epoch (\d+) after (\d+) batches; saved .*checkpoint.pt", job.stderr)
    assert stopped, job.stderr[-3000:]
    epoch, batches = divmod(case["stop"], case["batches"])
    assert tuple(map(int, stopped.groups())) == (epoch + 1, batches) and 0 < batches
    partial = _checkpoint(run_json)["partial"]
    assert (partial["epoch"], partial["batches"]) == (epoch, batches)
    assert not (run_json.parent / "model.pt").exists()
    sent_at = float(re.search(r"SIGTERM sent at ([\d.]+)", job.stderr).group(1))
    assert job_ended - sent_at < KILL_WAIT, "SLURM would have killed it before it saved"

    retry = _train(run_json, replica, workers, minutes=0)
    assert f"at epoch {epoch + 1} after its first {batches} batches" in retry.stderr
    assert not (run_json.parent / "checkpoint.pt").exists()
    _assert_same(_outcome(run_json), straight(task, workers))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("task", list(CASES))
def test_a_killed_job_resumes_from_its_last_timed_checkpoint_exactly(request, tmp_path, straight, task, workers):
    """SIGKILL to every process of the job (no chance to save) in the second epoch, with a timed checkpoint due
    after every step: the retry resumes from the timer's last checkpoint, one step back, and ends bit-identical."""
    case, run_json = CASES[task], _run_json(tmp_path, task)
    replica = request.getfixturevalue(case["replica"])
    every_step = 1e-9  # minutes: a timed checkpoint after every step
    job = _interrupted("SIGKILL", case["stop"], run_json, replica, workers, minutes=every_step)
    assert job.returncode == -signal.SIGKILL, job.stderr[-3000:]
    epoch, batches = divmod(case["stop"] - 1, case["batches"])
    partial = _checkpoint(run_json)["partial"]
    assert (partial["epoch"], partial["batches"]) == (epoch, batches) and 0 < batches

    retry = _train(run_json, replica, workers, minutes=every_step)
    assert f"at epoch {epoch + 1} after its first {batches} batches" in retry.stderr
    _assert_same(_outcome(run_json), straight(task, workers))
