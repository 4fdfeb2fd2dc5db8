"""The jobs' cluster resources (rankrepro.plan.resources, through WorkflowTargets): runtimes and memory computed by
hand on a tiny plan and profile, the fallback for runs without an estimate, the caps on every rule, the config
checks, one log per attempt; and (slow) `snakemake -n --profile profiles/slurm` without --cores."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as W

import pytest

from rankrepro.plan.build import PlanFiles
from rankrepro.plan.model import Plan
from rankrepro.plan.resources import UNKNOWN_IMAGES, ClusterResources, Work, cluster_settings
from rankrepro.plan.schema import PlanError
from rankrepro.plan.targets import TargetError, WorkflowTargets

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = {"device": "cuda", "num_workers": 2, "prefetch_factor": 4, "eval_batch_size": 100, "image_cache": False,
           "evaluate_in_train_job": False, "runs_per_job": 1, "keep_model": True, "curves": True}
PROFILE = """gpu: toy
measured: false
train: {resnet50: {224: 1000}}
train_fp32: {resnet50: {224: 500}}
inference: {resnet50: {224: 3000}}
inference_fp32: {resnet50: {224: 1500}}
"""


def toy_run(dataset="sop", epochs=100, every=50, backbone="resnet50", batch=64, crop=224):
    """A run with what the estimates read: 100 epochs, its test curve every 50 (evaluations at 50 and 100)."""
    return {"dataset": dataset, "model": {"backbone": backbone, "embed_dim": 512},
            "images": {"train_crop": crop, "test_crop": crop, "train_resize": None, "test_resize": None},
            "amp": "fp16", "epochs": epochs, "sampler": {"batch_size": batch}, "eval": {"every": every},
            "max_batches_per_epoch": None}


@pytest.fixture()
def toy(tmp_path):
    """A plan of runs 'big' (sop: 36,000 train and 18,000 test images), 'small' (10 epochs, no curve),
    'faces' (ijbc: no training image count), 'dyml' (a training count, none for its test splits), 'tiny' (a backbone the profile lacks); the profile and manifests in tmp_path."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "toy.yaml").write_text(PROFILE)
    meta = tmp_path / "results" / "manifests" / "sop" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"counts": {"train": {"images": 36_000}, "test": {"images": 18_000}}}))
    runs = {"big": toy_run(), "small": toy_run(epochs=10, every=None), "faces": toy_run(dataset="ijbc"), "dyml": toy_run(dataset="dyml_vehicle"),
            "tiny": toy_run(backbone="resnet_tiny")}
    datasets = {"sop": {"facts": {"source": "sop", "derived_from": None}},
                "dyml_vehicle": {"facts": {"source": "dyml_vehicle", "derived_from": None}},
                "ijbc": {"facts": {"source": "ijbc", "derived_from": None}}}
    return Plan(runs, {}, datasets, {"names": []}), tmp_path


def resources(toy, cluster=None, **runtime):
    plan, tmp = toy
    return ClusterResources(plan, {**RUNTIME, **runtime}, {"gpu": "toy", **(cluster or {})}, tmp / "results",
                            tmp / "profiles")


def test_runtime_is_the_estimate_times_the_safety_factor_plus_the_margin(toy):
    r = resources(toy, {"runtime_min": 1})
    # train: 36,000 images x 100 epochs / 1,000 images/s = 1 h; one evaluation: 18,000 / 3,000 = 6 s = 0.1 min;
    # the train job scores its curve twice (epochs 50 and 100): 60.2 min x 2 + 15 = 135.4 -> 136
    assert r.runtime_minutes([Work("big", train=True, evaluate=False)]) == 136
    # and with runtime.evaluate_in_train_job a third evaluation: 60.3 x 2 + 15 = 135.6 -> 136; 1 evaluation: 15.2 -> 16
    assert r.runtime_minutes([Work("big", train=True, evaluate=True)]) == 136
    assert r.runtime_minutes([Work("big", train=False, evaluate=True)]) == 16
    # small: 36,000 x 10 / 1,000 = 6 min, no curve: 6 x 2 + 15 = 27; a batch sums: 60.3 + 6.1 = 66.4 x 2 + 15 -> 148
    assert r.runtime_minutes([Work("small", train=True, evaluate=False)]) == 27
    assert r.runtime_minutes([Work("big", True, True), Work("small", True, True)]) == 148


def test_the_floor_the_ceiling_and_the_settings_bound_the_runtime(toy):
    assert resources(toy).runtime_minutes([Work("small", True, False)]) == 30  # the default floor
    assert resources(toy, {"runtime_max": 100}).runtime_minutes([Work("big", True, False)]) == 100
    r = resources(toy, {"runtime_safety": 1.0, "runtime_margin_min": 0, "runtime_min": 1})
    assert r.runtime_minutes([Work("big", True, False)]) == 61  # 60.2 -> 61


def test_a_run_without_an_estimate_asks_for_runtime_max(toy):
    r = resources(toy, {"runtime_max": 600})
    assert r.estimate("faces") is None and r.estimate("tiny") is None and r.estimate("big")["gpu_h"] > 1
    assert r.runtime_minutes([Work("faces", True, False)]) == 600  # no image count
    assert r.runtime_minutes([Work("tiny", True, False)]) == 600  # resnet_tiny is not in the profile
    assert r.runtime_minutes([Work("small", True, True), Work("faces", True, True)]) == 600  # a batch holding one
    assert r.estimate("dyml")["train_images"] == 343_100  # estimated from its unverified training count


def test_memory_terms_by_hand(toy):
    r = resources(toy)
    mib = 2**20
    terms = r.mem_terms(Work("big", train=True, evaluate=False))
    assert terms["base"] == 1500 and terms["cuda"] == 2000 and terms["workers"] == 2 * 200
    assert terms["manifest"] == pytest.approx(3 * 54_000 * 500 / mib)  # main + 2 workers x every image
    # 64 x 3 x 224^2 x 4 B = 36.75 MiB per batch, 2 workers x 4 + 2 in flight
    assert terms["train batches"] == pytest.approx(10 * 36.75)
    # its test curve: 100 x 3 x 224^2 x 4 B = 57.42 MiB per batch, 2 x 2 + 2 in flight; 18,000 x 512 x 4 B x 2
    assert terms["eval batches"] == pytest.approx(6 * 100 * 3 * 224**2 * 4 / mib)
    assert terms["embeddings"] == pytest.approx(18_000 * 512 * 8 / mib)
    total = 3900 + 77.25 + 367.5 + 344.53 + 70.31  # 4,759.6 MB
    assert sum(terms.values()) == pytest.approx(total, abs=0.01)
    assert r.mem_mb([Work("big", True, False)]) == 6000  # x 1.25 = 5,949.5 -> 6,000
    assert resources(toy, num_workers=8).mem_mb([Work("big", True, False)]) == 10000  # 8 workers: 7,685 x 1.25
    # no curve, nothing evaluated: no evaluation terms; on CPU no CUDA context
    small = resources(toy, device="cpu", num_workers=0).mem_terms(Work("small", True, False))
    assert small["cuda"] == 0 and small["eval batches"] == small["embeddings"] == 0 == small["workers"]
    assert small["train batches"] == pytest.approx(2 * 36.75)
    assert small["cpu activations"] == 64 * 50  # a training's activations on CPU: batch x (224 / 224)^2 x 50 MB
    assert terms["cpu activations"] == 0  # on a GPU they are in its memory
    # an evaluate job: no training batches
    assert r.mem_terms(Work("big", train=False, evaluate=True))["train batches"] == 0
    # unknown counts: UNKNOWN_IMAGES for the training split, and for the test splits together
    assert r.mem_terms(Work("faces", True, False))["manifest"] == pytest.approx(3 * 2 * UNKNOWN_IMAGES * 500 / mib)
    assert r.mem_terms(Work("dyml", True, False))["manifest"] == pytest.approx(3 * (343_100 + UNKNOWN_IMAGES) * 500 / mib)


def test_the_caps_bound_threads_and_memory(toy):
    r = resources(toy, {"max_threads": 4, "max_mem_mb": 5000})
    assert (r.cap_threads(8), r.cap_threads(2), r.cap_mem(64000), r.cap_mem(1000)) == (4, 2, 5000, 1000)
    assert r.mem_mb([Work("big", True, False)]) == 5000
    free = resources(toy)
    assert (free.cap_threads(64), free.cap_mem(10**6)) == (64, 10**6)


@pytest.mark.parametrize("block, message", [
    ({"runtime_safety": 0.5}, r"config: cluster\.runtime_safety: 0\.5 is less than the minimum of 1"),
    ({"max_mem": 1}, r"config: cluster: Additional properties .*'max_mem'"),
    ({"max_threads": "8"}, r"config: cluster\.max_threads: '8' is not of type"),
    ({"runtime_min": 120, "runtime_max": 60}, r"cluster\.runtime_min \(120 minutes\) is above cluster\.runtime_max"),
])
def test_settings_are_checked_naming_the_key(block, message):
    with pytest.raises(PlanError, match=message):
        cluster_settings(block)


def test_planning_checks_the_cluster_block():
    """At plan time (the Snakefile's and python -m rankrepro plan's validation) the schema names the key."""
    from rankrepro.plan.build import plan_from_config

    config = {"data_root": "data", "tracking": {"tracking_uri": "sqlite:///x.db", "experiment": "x"}, "tables": {},
              "datasets": {}, "cluster": {"max_mem_mb": 0}}
    with pytest.raises(PlanError, match=r"config: cluster\.max_mem_mb: 0 is less than the minimum of 1"):
        plan_from_config(config)


def test_the_defaults_are_the_schemas():
    assert cluster_settings(None) == {"gpu": "h100", "profile": None, "runtime_safety": 2.0, "runtime_margin_min": 15,
                                      "runtime_min": 30, "runtime_max": 2880, "max_threads": None, "max_mem_mb": None}


# -- through WorkflowTargets (what the rules call) ------------------------------------------------------------

def toy_targets(toy, cluster=None, **runtime):
    plan, tmp = toy
    files = PlanFiles(Path("results/plan/plan.json"), {}, Path("results/plan/runs"))
    t = WorkflowTargets(plan, {"data_root": "data", "runtime": {**RUNTIME, **runtime}, "cluster": cluster}, files)
    t.cluster = resources(toy, cluster, **runtime)  # the toy profile and manifests
    return t


def test_the_rules_resources_per_job(toy):
    t = toy_targets(toy, {"runtime_min": 1})
    assert (t.train_runtime(W(run_id="big")), t.evaluate_runtime(W(run_id="big"))) == (136, 16)
    assert t.train_mem_mb(W(run_id="big")) == t.evaluate_mem_mb(W(run_id="big")) == 6000
    fused = toy_targets(toy, {"runtime_min": 1}, evaluate_in_train_job=True)
    assert fused.train_runtime(W(run_id="small")) == 28  # 6.1 min x 2 + 15 = 27.2 -> 28


def test_training_batches_sum_their_runs(toy):
    t = toy_targets(toy, {"runtime_min": 1}, evaluate_in_train_job=True, runs_per_job=2, device="cpu")
    batch = t.batch_of("big")
    runs = t.batch_runs(W(batch=batch))
    assert runs == ["big", "small"]  # sop's first batch of two
    assert t.batch_runtime(W(batch=batch)) == 148
    assert t.batch_mem_mb(W(batch=batch)) == max(t.cluster.mem_mb([Work(rid, True, True)]) for rid in runs)


def test_all_cores_is_cores_or_eight_at_most_max_threads(toy):
    assert [toy_targets(toy).all_cores(c) for c in (None, 2, 64)] == [8, 2, 64]
    assert [toy_targets(toy, {"max_threads": 4}).all_cores(c) for c in (None, 2, 64)] == [4, 2, 4]


def test_a_bad_cluster_block_or_an_unknown_gpu_fails_the_workflow_naming_it(toy):
    plan, _ = toy
    files = PlanFiles(Path("results/plan/plan.json"), {}, Path("results/plan/runs"))
    with pytest.raises(TargetError, match=r"cluster\.gpu: no throughput profile for GPU kind 'b200'.*b200\.yaml"):
        WorkflowTargets(plan, {"data_root": "data", "runtime": RUNTIME, "cluster": {"gpu": "b200"}}, files)
    with pytest.raises(TargetError, match=r"cluster\.runtime_min \(90 minutes\) is above cluster\.runtime_max"):
        WorkflowTargets(plan, {"data_root": "data", "runtime": RUNTIME,
                               "cluster": {"runtime_min": 90, "runtime_max": 60}}, files)


# -- the rules' text -------------------------------------------------------------------------------------------

RULES = sorted((ROOT / "workflow" / "rules").glob("*.smk"))


def test_every_rule_caps_its_threads_and_memory():
    """No literal thread count above 1 and no literal mem_mb: each goes through TARGETS (the caps)."""
    for path in RULES:
        text = path.read_text()
        for value in re.findall(r"^\s*threads:\s*(.+)$", text, re.M):
            assert value.strip() == "1" or value.startswith("TARGETS."), f"{path.name}: threads: {value}"
        for value in re.findall(r"\bmem_mb=(.+?),?$", text, re.M):
            assert value.startswith("TARGETS."), f"{path.name}: mem_mb={value}"
    assert "workflow.cores" not in "".join(p.read_text() for p in RULES)  # needs --cores under an executor


def test_the_gpu_jobs_keep_one_log_per_attempt():
    text = {path.stem: path.read_text() for path in RULES}
    for rule, smk in (("rule train:", "train"), ('f"train_batch_{_batch}"', "train"), ("rule evaluate:", "evaluate")):
        body = re.split(r"\n\s*rule[ :]", text[smk].split(rule)[1])[0]
        assert "attempt=TARGETS.attempt_number" in body and "TARGETS.attempt_logged(" in body, rule
        assert "> {log" not in body, rule  # Snakemake's own redirect would be the only log


def test_attempt_logged_keeps_each_attempts_lines(tmp_path):
    """Two attempts as Snakemake runs them (it deletes the log: file before each): both are kept."""
    from snakemake.utils import format as snakemake_format

    template = WorkflowTargets.attempt_logged("echo {params.say:q}; test {resources.attempt} -ge 2")
    log = tmp_path / "logs" / "train" / "r1.log"
    log.parent.mkdir(parents=True)
    codes = []
    for attempt in (1, 2):
        log.unlink(missing_ok=True)
        command = snakemake_format(template, log=[str(log)], resources=W(attempt=attempt),
                                   params=W(say=f"epoch lines of attempt {attempt}"))
        codes.append(subprocess.run(["bash", "-c", "set -euo pipefail; " + command]).returncode)
    assert codes[0] != 0 and codes[1] == 0
    kept = sorted(log.parent.glob("r1.attempt*.log"))
    assert [p.name.split("-")[0] for p in kept] == ["r1.attempt1", "r1.attempt2"]
    first, second = (p.read_text().splitlines() for p in kept)
    assert first[0].startswith("== attempt 1: started ") and first[0].endswith("SLURM job none ==")
    assert first[1:] == ["epoch lines of attempt 1"] and second[1:] == ["epoch lines of attempt 2"]
    assert log.read_text() == kept[1].read_text()  # the log: file is the last attempt's


# -- Snakemake with the SLURM profile, no --cores, nothing submitted ----------------------------------------

def slurm_snakemake(tmp_path, *args):
    """snakemake --profile profiles/slurm on a copy of the workflow, as a user with this virtualenv active."""
    from rankrepro.bench.plan import workflow_copy

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", *args],
                          cwd=workflow_copy(tmp_path), env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_slurm_profile_parses_without_cores(tmp_path):
    """The README's command: under an executor Snakemake has no --cores (workflow.cores raises; a dry run sets
    1 and hides it). A target nothing makes fails only once the DAG is built, after the parse: nothing submitted."""
    result = slurm_snakemake(tmp_path, "no_such_target")
    assert "No rule to produce no_such_target" in result.stdout + result.stderr, result.stderr[-2000:]
    assert "--cores" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_slurm_dry_run_gives_each_training_job_its_own_runtime(tmp_path):
    """A small run (CUB, top-k Table 1) and a big one (SOP, Smooth-AP Table 2): their own runtimes, no 48 h."""
    config = tmp_path / "two.yaml"
    config.write_text("tables: {suprank: [], smooth_ap: [table2], pnp: [], topk: [table1_cub], rambo: []}\n")
    result = slurm_snakemake(tmp_path, "-n", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    runtimes: dict[str, set] = {}
    for block in result.stdout.split("\nrule train:")[1:]:
        dataset = re.search(r"output: results/runs/(\w+)-", block).group(1)
        values = dict(item.split("=", 1) for item in re.search(r"resources: (.*)", block).group(1).split(", "))
        runtimes.setdefault(dataset, set()).add(int(values["runtime"]))
        assert values["slurm_partition"] == "gpu" and int(values["mem_mb"]) < 64000 and values["attempt"] == "1"
    assert set(runtimes) == {"cub", "sop"}, runtimes
    assert max(runtimes["cub"]) < min(runtimes["sop"]) < 2880, runtimes


def test_the_demos_replica_manifest_does_not_size_a_real_datasets_jobs(tmp_path):
    """After the demo, results/manifests/cub is a replica's (40 images); config.yaml's real CUB job is sized by
    CUB's declared 5,864 training images, as with no results folder (before: 30 minutes instead of 60)."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "toy.yaml").write_text(PROFILE)
    plan = Plan({"cub": toy_run(dataset="cub", epochs=1000, every=None)}, {},
                {"cub": {"facts": {"source": "cub", "derived_from": None}, "config": {"replica": False}}},
                {"names": []})
    job = [Work("cub", train=True, evaluate=False)]

    def minutes(results):
        return ClusterResources(plan, RUNTIME, {"gpu": "toy", "runtime_min": 1}, results,
                                tmp_path / "profiles").runtime_minutes(job)

    without = minutes(tmp_path / "nowhere")
    meta = tmp_path / "results" / "manifests" / "cub" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"replica": True, "counts": {"train": {"images": 24}, "test": {"images": 16}}}))
    # 5,864 images x 1,000 epochs / 1,000 images/s = 97.7 min x 2 + 15 = 210.5 -> 211
    assert minutes(tmp_path / "results") == without == 211
    meta.write_text(json.dumps({"replica": True}))
    with pytest.raises(PlanError, match=rf"{meta}: no 'counts'.*size the jobs' runtime"):
        minutes(tmp_path / "results")


def test_the_runtime_counts_the_epoch_a_per_class_cap_leaves(toy):
    """sop's prepared manifest: 3,600 classes of 10 train images; an m_per_class sampler (4 per class, batches of
    64) capped at 4 per class draws one group of each: 225 batches, 14,400 images an epoch, not 36,000."""
    plan, tmp = toy
    folder = tmp / "results" / "manifests" / "sop"
    labels = [c for c in range(3_600) for _ in range(10)]
    (folder / "manifest.csv").write_text("path,split,label\n" + "".join(
        f"{i}.jpg,train,{c}\n" for i, c in enumerate(labels)) + "".join(f"t{i}.jpg,test,0\n" for i in range(18_000)))
    run = {**toy_run(), "sampler": {"name": "m_per_class", "batch_size": 64, "samples_per_class": 4,
                                    "reduce_per_class": 4}}
    capped = Plan({"capped": run}, {}, plan.datasets, {"names": []})
    r = resources((capped, tmp), {"runtime_min": 1})
    # 14,400 x 100 / 1,000 images/s = 24 min; two evaluations of 6 s: 24.2 x 2 + 15 = 63.4 -> 64
    assert r.runtime_minutes([Work("capped", train=True, evaluate=False)]) == 64


def test_cluster_profile_names_the_file_that_prices_the_runtimes(toy):
    """cluster.profile (the pilot's measured profile): twice the toy's training rate halves the training hour."""
    plan, tmp = toy
    measured = tmp / "pilot.yaml"
    measured.write_text(PROFILE.replace("train: {resnet50: {224: 1000}}", "train: {resnet50: {224: 2000}}"))
    r = resources(toy, {"runtime_min": 1, "profile": str(measured)})
    # 36,000 x 100 / 2,000 = 30 min, + 2 evaluations of 0.1 min = 30.2 x 2 + 15 = 75.4 -> 76
    assert r.runtime_minutes([Work("big", train=True, evaluate=False)]) == 76
    with pytest.raises(PlanError, match=r"cluster\.profile: throughput profile .*absent\.yaml does not exist"):
        resources(toy, {"profile": str(tmp / "absent.yaml")})
