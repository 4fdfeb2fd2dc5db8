"""One GPU per job (rankrepro.gpu_claim) on a fake list of GPUs (RANKREPRO_GPUS): real processes claim distinct
GPUs, a killed job (and not its forked loader workers) frees its GPU for a waiting one, a scheduler's own
assignment is kept, and the train, evaluate and train-batch commands claim before they start."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankrepro.gpu_claim import SCHEDULER_VARIABLES, claim_gpu, listed_gpus, loader_workers
from rankrepro.record.runtime import RuntimeSettingError

CLAIMER = Path(__file__).with_name("gpu_claimer.py")


def _env(tmp_path, gpus: str) -> dict:
    """This process's environment without a scheduler's GPUs, with the fake GPUs ``gpus`` and a lock folder of
    the test's own."""
    env = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARIABLES}
    return {**env, "RANKREPRO_GPUS": gpus, "RANKREPRO_GPU_LOCKS": str(tmp_path / "locks")}


def _claimer(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CLAIMER), *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _line(stream, timeout: float = 60.0) -> str:
    """The next line of a process's pipe, failing after ``timeout`` seconds without one."""
    data, end = b"", time.monotonic() + timeout
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([stream], [], [], max(end - time.monotonic(), 0))
        assert ready, f"no line within {timeout} s (got {data!r})"
        byte = os.read(stream.fileno(), 1)
        assert byte, f"the process closed its pipe (got {data!r})"
        data += byte
    return data.decode().strip()


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_n_concurrent_jobs_get_n_distinct_gpus(tmp_path):
    env = _env(tmp_path, "0,1,2")
    procs = [_claimer(env) for _ in range(3)]
    try:
        assert sorted(_line(p.stdout) for p in procs) == ["0", "1", "2"]
    finally:
        _stop(*procs)


def test_a_job_finding_every_gpu_claimed_waits_and_a_killed_job_frees_its_gpu(tmp_path):
    env = _env(tmp_path, "7")
    first = _claimer(env)
    second = None
    try:
        assert _line(first.stdout) == "7"
        second = _claimer(env)
        waiting = _line(second.stderr)
        assert "all 1 GPUs are claimed" in waiting and f"pids {first.pid}," in waiting, waiting
        first.send_signal(signal.SIGKILL)
        assert _line(second.stdout) == "7"
    finally:
        _stop(first, *([second] if second else []))


def test_a_forked_loader_worker_does_not_keep_a_killed_jobs_gpu(tmp_path):
    env = _env(tmp_path, "7")
    first = _claimer(env, "fork")
    child, second = None, None
    try:
        assert _line(first.stdout) == "7"
        child = int(_line(first.stdout))
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        os.kill(child, 0)  # the worker outlives its job ...
        second = _claimer(env)
        assert _line(second.stdout) == "7"  # ... without holding its GPU
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        _stop(first, *([second] if second else []))


def test_claims_in_one_process_take_the_next_free_gpu_and_set_cuda_visible_devices(tmp_path):
    first, second = _env(tmp_path, "3,5"), _env(tmp_path, "3,5")
    assert claim_gpu("auto", first).gpu == "3" and first["CUDA_VISIBLE_DEVICES"] == "3"
    claim = claim_gpu("cuda", second)
    assert (claim.gpu, claim.of, second["CUDA_VISIBLE_DEVICES"]) == ("5", 2, "5")
    assert claim.lock.read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("variable", SCHEDULER_VARIABLES)
def test_a_schedulers_own_assignment_is_kept(tmp_path, variable):
    env = {**_env(tmp_path, "0,1"), variable: "1"}
    assert claim_gpu("auto", env) is None
    assert env.get("CUDA_VISIBLE_DEVICES") == ("1" if variable == "CUDA_VISIBLE_DEVICES" else None)
    assert not (tmp_path / "locks").exists()


@pytest.mark.parametrize(("device", "gpus"), [("cpu", "0,1"), ("cuda:1", "0,1"), ("auto", ""), ("cuda", " ")])
def test_nothing_is_claimed_on_cpu_on_an_explicit_gpu_or_without_gpus(tmp_path, device, gpus):
    env = _env(tmp_path, gpus)
    assert claim_gpu(device, env) is None
    assert "CUDA_VISIBLE_DEVICES" not in env and not (tmp_path / "locks").exists()


@pytest.mark.parametrize("gpus", ["0,,1", "0,1,0", "0,../x"])
def test_a_bad_gpu_list_fails_naming_the_variable(tmp_path, gpus):
    with pytest.raises(RuntimeSettingError, match=r"RANKREPRO_GPUS=.*comma-separated indices or UUIDs"):
        claim_gpu("auto", _env(tmp_path, gpus))


def test_a_lock_folder_that_cannot_be_made_fails_naming_the_variable(tmp_path):
    (tmp_path / "locks").write_text("a file, not a folder")
    with pytest.raises(RuntimeSettingError, match=r"GPU lock folder .*locks .*set RANKREPRO_GPU_LOCKS"):
        claim_gpu("auto", _env(tmp_path, "0"))


def test_the_gpus_are_nvidia_smis_without_a_list(tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nprintf 'GPU-aaa\\nGPU-bbb\\n'\n")
    smi.chmod(0o755)
    assert listed_gpus({"PATH": str(smi.parent)}) == ["GPU-aaa", "GPU-bbb"]
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' ; exit 9\n")  # no driver: no GPU
    assert listed_gpus({"PATH": str(smi.parent)}) == []
    assert listed_gpus({"PATH": str(tmp_path / "empty")}) == []  # no nvidia-smi


@pytest.mark.parametrize(("workers", "gpus", "cpus", "expected"),
                         [(8, 8, 64, 8), (8, 8, 16, 2), (8, 8, 4, 1), (0, 8, 64, 0), (8, 1, 4, 4), (3, 2, 64, 3)])
def test_the_loader_workers_split_the_cpus_between_the_gpus(workers, gpus, cpus, expected):
    assert loader_workers(workers, gpus, cpus) == expected


@pytest.mark.parametrize("command", [
    ["train", "--run", "{tmp}/r/run.json", "--manifest", "{tmp}/m"],
    ["evaluate", "--run", "{tmp}/r/run.json", "--manifest", "{tmp}/m", "--model", "{tmp}/m.pt", "--out", "{tmp}/o"],
    ["train-batch", "--runs", "{tmp}/p/a-b-0123456789.json", "--staged", "{tmp}/s", "--runs-dir", "{tmp}/runs",
     "--manifest", "{tmp}/m"],
])
def test_train_evaluate_and_train_batch_claim_a_gpu_first(tmp_path, command):
    args = [a.format(tmp=tmp_path) for a in command] + ["--device", "auto", "--num-workers", "64"]
    done = subprocess.run([sys.executable, "-m", "rankrepro", *args], env=_env(tmp_path, "g0,g1"),
                          capture_output=True, text=True, timeout=300)
    workers = max(1, len(os.sched_getaffinity(0)) // 2)
    assert (f"GPU g0 claimed (one of 2; lock {tmp_path / 'locks' / 'gpu-g0.lock'}); CUDA_VISIBLE_DEVICES=g0; "
            f"loader workers {workers} (runtime.num_workers 64)") in done.stderr, done.stderr


def test_a_job_with_a_bad_gpu_list_stops_with_the_message_alone(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rankrepro", "train", "--run", str(tmp_path / "run.json"),
                           "--manifest", str(tmp_path)], env=_env(tmp_path, "0,0"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("rankrepro: RANKREPRO_GPUS='0,0': it lists a GPU twice"), done.stderr
