"""A training stopped as SLURM stops one at its time limit resumes at the same step (rankrepro.engine.preemption).

SLURM sends SIGTERM to every process of the job, then SIGKILL ``KillWait`` seconds later: the trainer saves a
checkpoint at the next step and exits non-zero; the retry (the same command) resumes there, and its model and
history equal those of a run trained straight through, bit for bit on CPU. Killed without warning (SIGKILL),
it resumes from its last timed checkpoint, at most ``runtime.checkpoint_minutes`` old.
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
from datautil import replica_archive
from test_train import tiny_run

from rankrepro.data import datasets
from rankrepro.engine.loader import TrainLoader
from rankrepro.engine.preemption import CheckpointTimer, EpochProgress, StopSignal
from rankrepro.record.runtime import TrainRuntime
from rankrepro.torchfile import load_plain

SRC = Path(__file__).resolve().parents[1] / "src"
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


# --- a real training in a subprocess, stopped as SLURM stops it --------------------------------------------------

@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """A SOP replica with 30 batches of 16 images per epoch (60 training classes of 8 images)."""
    root = tmp_path_factory.mktemp("sop60")
    replica_archive("sop", root / "replica.zip", classes_per_super=5, images_per_class=(8, 8), image_size=16)
    datasets.load("sop").prepare(root / "replica.zip", root / "manifest", data_root=root / "data", replica=True)
    return root / "manifest"


def _run_json(folder: Path) -> Path:
    run_json = folder / "runs" / "r" / "run.json"
    run_json.parent.mkdir(parents=True)
    run_json.write_text(json.dumps(tiny_run(epochs=EPOCHS)))
    return run_json


def _command(run_json: Path, manifest: Path, workers: int, minutes: float) -> list[str]:
    return [sys.executable, "-m", "rankrepro", "train", "--run", str(run_json), "--manifest", str(manifest),
            "--device", "cpu", "--threads", "1", "--no-progress", "--num-workers", str(workers),
            "--checkpoint-minutes", str(minutes)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(SRC)}


def _train(run_json, manifest, workers, minutes) -> subprocess.CompletedProcess:
    done = subprocess.run(_command(run_json, manifest, workers, minutes), env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _start(run_json, manifest, workers, minutes) -> subprocess.Popen:
    """The training as a job of its own: a new session, so that a signal reaches it and its workers."""
    return subprocess.Popen(_command(run_json, manifest, workers, minutes), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _checkpoint(run_json: Path) -> dict | None:
    path = run_json.parent / "checkpoint.pt"
    return load_plain(path, remedy="") if path.exists() else None


def _wait_for_a_timed_checkpoint(proc, run_json) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        state = _checkpoint(run_json)
        if state is not None and state["partial"] is not None:
            return state
        time.sleep(0.05)
    raise AssertionError("no timed checkpoint within 300 s")


def _outcome(run_json: Path):
    """The trained run's weights, loss state and history without its timings."""
    model = torch.load(run_json.parent / "model.pt", weights_only=True)
    with open(run_json.parent / "history.csv") as f:
        history = [{k: v for k, v in row.items() if k not in ("seconds", "images_per_s")} for row in csv.DictReader(f)]
    return model["state_dict"], model["criterion"], history


def _training_seconds(run_json: Path) -> float:
    with open(run_json.parent / "history.csv") as f:
        return sum(float(row["seconds"]) for row in csv.DictReader(f))


def _assert_same(a, b):
    (weights_a, loss_a, history_a), (weights_b, loss_b, history_b) = a, b
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    assert all(torch.equal(loss_a[k], loss_b[k]) for k in loss_a)
    assert history_a == history_b and len(history_a) == EPOCHS


@pytest.fixture(scope="module")
def straight(replica, tmp_path_factory):
    """By workers: the outcome of a run trained without interruption (per-epoch checkpoints only), and its
    training's seconds (the tests time their signals by it, whatever this machine's speed)."""
    cache = {}

    def outcome(workers: int):
        if workers not in cache:
            run_json = _run_json(tmp_path_factory.mktemp(f"straight{workers}"))
            _train(run_json, replica, workers, minutes=0)
            cache[workers] = _outcome(run_json), _training_seconds(run_json)
        return cache[workers]
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_job_stopped_at_its_time_limit_resumes_on_retry_exactly(tmp_path, replica, straight, workers):
    """SIGTERM to the job's processes mid-epoch; SIGKILL if still alive after KILL_WAIT s; then the retry."""
    reference, seconds = straight(workers)
    run_json, minutes = _run_json(tmp_path), seconds / 20 / 60  # frequent timed checkpoints: the training started
    job = _start(run_json, replica, workers, minutes)
    _wait_for_a_timed_checkpoint(job, run_json)
    os.killpg(job.pid, signal.SIGTERM)
    try:
        _, stderr = job.communicate(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        raise AssertionError(f"still running {KILL_WAIT} s after SIGTERM: SLURM would have killed it") from None
    assert job.returncode == 1, stderr[-3000:]
    stopped = re.search(r"stopped by SIGTERM at epoch (\d+) after (\d+) batches; saved .*checkpoint.pt", stderr)
    assert stopped, stderr[-3000:]
    partial = _checkpoint(run_json)["partial"]
    assert (partial["epoch"] + 1, partial["batches"]) == tuple(map(int, stopped.groups()))
    assert not (run_json.parent / "model.pt").exists()

    retry = _train(run_json, replica, workers, minutes)
    assert f"at epoch {partial['epoch'] + 1} after its first {partial['batches']} batches" in retry.stderr
    assert not (run_json.parent / "checkpoint.pt").exists()
    _assert_same(_outcome(run_json), reference)


@pytest.mark.slow
def test_a_killed_job_resumes_from_its_last_timed_checkpoint_exactly(tmp_path, replica, straight):
    """SIGKILL only (no chance to save): the retry resumes from a checkpoint at most the interval old."""
    reference, seconds = straight(2)
    run_json, interval = _run_json(tmp_path), seconds / 8
    job = _start(run_json, replica, 2, minutes=interval / 60)
    _wait_for_a_timed_checkpoint(job, run_json)
    time.sleep(1.5 * interval)  # past the next timed checkpoint, about a third into the training
    assert job.poll() is None, "the training ended before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    killed_at = time.time()
    job.communicate()
    saved_at = (run_json.parent / "checkpoint.pt").stat().st_mtime
    partial = _checkpoint(run_json)["partial"]
    # lost: at most the interval, plus the step during which it fell due and the save (~0.1 s here)
    assert killed_at - saved_at < interval + 1.0, (killed_at - saved_at, interval)
    assert partial is None or partial["batches"] > 0

    retry = _train(run_json, replica, 2, minutes=interval / 60)
    assert "resuming r from" in retry.stderr
    _assert_same(_outcome(run_json), reference)
