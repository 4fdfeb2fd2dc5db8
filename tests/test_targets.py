"""The workflow's paths and arguments (rankrepro.plan.targets), without Snakemake: a small plan,
what each input function returns, and errors that name what is unknown; `write-run` by run id."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as W

import pytest

from rankrepro.cli import main
from rankrepro.engine.batch import STAGED_FILES
from rankrepro.record.runtime import runtime_flags
from rankrepro.plan.batches import train_batches
from rankrepro.plan.build import PlanFiles, plan_from_config, write_plan
from rankrepro.plan.complete import run_id
from rankrepro.plan.model import RUN_ID_KEY, Plan
from rankrepro.plan.resources import Work
from rankrepro.plan.targets import TargetError, WorkflowTargets

CONFIG = {"data_root": "data", "tracking": {"tracking_uri": "sqlite:///results/mlflow.db", "experiment": "x"},
          "tables": {"suprank": ["table1", "fig6"], "smooth_ap": ["table1"]},
          "datasets": {"sop": {"replica": True}, "cub": {"url": "https://example.org/cub.tgz", "checksum": "md5:00"},
                       "inat": {"extracted": "/data/inat"}, "sop_merge3": {}, "gldv2": {}},
          "hgldv2": {"build": True}}
RUNTIME = {"device": "cuda", "num_workers": 8, "eval_batch_size": 256, "image_cache": True,
           "evaluate_in_train_job": False, "runs_per_job": 1, "keep_model": True, "curves": True}
PLAN_FILE = "results/plan/plan.0123456789ab.json"


@pytest.fixture(scope="module")
def plan():
    return Plan.from_json(plan_from_config(CONFIG))


@pytest.fixture(scope="module")
def plan_without_curves():
    """The plan with no test curve (eval.every null): its train jobs evaluate only when runtime says so."""
    return Plan.from_json(plan_from_config({**CONFIG, "run_overrides": {"eval": {"every": None}}}))


def plan_files(plan) -> PlanFiles:
    """Where write_plan would put ``plan``'s files (their names only)."""
    return PlanFiles(Path(PLAN_FILE), {key: Path(f"results/plan/tables/{key}.0123.json") for key in plan.tables},
                     Path("results/plan/runs"))


def targets(plan, **runtime):
    return WorkflowTargets(plan, {"data_root": "data", "runtime": {**RUNTIME, **runtime}}, plan_files(plan))


def run_with(plan, train_resize):
    """A planned run id whose images.train_resize is ``train_resize``."""
    return next(rid for rid, run in sorted(plan.runs.items()) if run["images"]["train_resize"] == train_resize)


def test_downloads_and_prepare_follow_each_datasets_source(plan):
    t = targets(plan)
    assert t.download_input(W(source="sop")) == ["data/replicas/sop/replica.json"]
    assert t.download_args(W(source="sop")) == ["--replica-dir", "data/replicas/sop"]
    assert t.download_input(W(source="cub")) == []
    assert t.download_args(W(source="cub")) == ["--url", "https://example.org/cub.tgz", "--checksum", "md5:00"]
    assert t.download_args(W(source="gldv2")) == []  # the official sources
    assert t.download_data_root(W(source="sop"), ["my data/downloads/sop/download.json"]) == "my data"
    assert t.prepare_input(W(dataset="cub")) == ["data/downloads/cub/download.json"]
    assert t.prepare_source(W(dataset="cub")) == "data/downloads/cub/download.json"
    assert t.prepare_input(W(dataset="inat")) == [] and t.prepare_source(W(dataset="inat")) == "/data/inat"
    assert t.prepare_input(W(dataset="sop_merge3")) == ["results/manifests/sop/meta.json"]  # derived
    assert t.prepare_source(W(dataset="sop_merge3")) == "results/manifests/sop"
    assert t.prepare_flags(W(dataset="sop_merge3")) == ["--replica"]  # its base is a replica
    assert t.prepare_flags(W(dataset="cub")) == []
    assert "results/manifests/sop_merge3/meta.json" in t.manifest_outputs()


def test_unknown_datasets_and_sources_are_named(plan):
    t = targets(plan)
    with pytest.raises(TargetError, match=r"dataset 'imagenet' is not in the plan; planned: .*cub.*sop"):
        t.prepare_input(W(dataset="imagenet"))
    with pytest.raises(TargetError, match=r"no planned dataset downloads into 'nowhere'; sources: .*sop"):
        t.download_args(W(source="nowhere"))


def test_a_runs_image_caches_are_those_its_transforms_read(plan_without_curves):
    plan = plan_without_curves
    t = targets(plan)
    cached, uncached = run_with(plan, 256), run_with(plan, None)
    assert t.run_manifest(W(run_id=cached)) == f"results/manifests/{plan.runs[cached]['dataset']}/meta.json"
    folder = f"results/cache/{plan.runs[cached]['dataset']}/s256"
    assert t.run_train_cache(W(run_id=cached)) == [f"{folder}/cache.json"]
    assert t.run_eval_cache(W(run_id=cached)) == [f"{folder}/cache.json"]  # a (256, 256) squash of s256
    assert t.run_eval_cache_args(W(run_id=cached)) == ["--image-cache", folder]
    assert t.train_caches(W(run_id=cached)) == [f"{folder}/cache.json"]  # the evaluate job reads the other
    assert t.train_manifest(W(run_id=cached)) == [t.run_manifest(W(run_id=cached))]
    assert t.run_train_cache(W(run_id=uncached)) == [] and t.run_eval_cache_args(W(run_id=uncached)) == []
    assert targets(plan, image_cache=False).run_train_cache(W(run_id=cached)) == []
    assert t.run_plan_file(W(run_id=cached)) == f"results/plan/runs/{cached}.json"
    for method in (t.run_manifest, t.run_plan_file):
        with pytest.raises(TargetError, match=rf"run sop-x-0123456789 is not in the plan \({PLAN_FILE}\)"):
            method(W(run_id="sop-x-0123456789"))


def test_the_train_command_of_a_run_and_of_a_fused_run(plan_without_curves):
    plan = plan_without_curves
    rid = run_with(plan, 256)
    dataset, folder = plan.runs[rid]["dataset"], f"results/runs/{rid}"
    cache = f"results/cache/{dataset}/s256"
    train = ["train", "--run", f"{folder}/run.json", "--manifest", f"results/manifests/{dataset}", "--device", "cuda",
             "--num-workers", "8", "--threads", "6", "--image-cache", cache, *runtime_flags({})]
    assert targets(plan).train_command(W(run_id=rid), 6) == train
    assert "--no-channels-last" in targets(plan, channels_last=False).train_command(W(run_id=rid), 6)
    assert targets(plan).train_files(rid) == {"model": f"{folder}/model.pt", "history": f"{folder}/history.csv"}
    fused = targets(plan, evaluate_in_train_job=True)
    assert fused.train_command(W(run_id=rid), 6) == train + [
        "--evaluate-out", f"{folder}/metrics.json", "--batch-size", "256", "--eval-image-cache", cache]
    assert fused.train_caches(W(run_id=rid)) == [f"{cache}/cache.json"] * 2  # training's and evaluation's
    assert fused.train_files() == {"model": "results/runs/{run_id}/model.pt",
                                   "history": "results/runs/{run_id}/history.csv",
                                   "metrics": "results/runs/{run_id}/metrics.json"}
    # what a batch stages is what a fused train job outputs, with the run.json it writes
    assert sorted([*(Path(p).name for p in fused.train_files().values()), "run.json"]) == sorted(STAGED_FILES)
    assert not fused.batched
    # runtime.keep_model false: no model.pt declared, the job removes it once evaluated (issue 37)
    lean = targets(plan, evaluate_in_train_job=True, keep_model=False)
    assert lean.train_files(rid) == {"history": f"{folder}/history.csv", "metrics": f"{folder}/metrics.json"}
    assert lean.train_command(W(run_id=rid), 6) == fused.train_command(W(run_id=rid), 6) + ["--no-model"]


def test_a_run_with_a_test_curve_trains_with_the_evaluations_batch_size_and_cache(plan):
    rid = run_with(plan, 256)
    assert plan.runs[rid]["eval"]["every"] == 20  # SupRank: test_eval_freq
    dataset = plan.runs[rid]["dataset"]
    cache = f"results/cache/{dataset}/s256"
    t = targets(plan)
    assert t.evaluates_in_train_job(rid) and not t.runtime["evaluate_in_train_job"]
    command = t.train_command(W(run_id=rid), 6)
    assert command[-4:] == ["--batch-size", "256", "--eval-image-cache", cache] and "--evaluate-out" not in command
    assert t.train_caches(W(run_id=rid)) == [f"{cache}/cache.json"] * 2  # training's and the test curve's


def test_a_batch_job_writes_its_runs_files(plan):
    """Issue 37: with runtime.runs_per_job > 1, one rule per batch whose outputs are its runs' files (no write-run
    and adopt job per run)."""
    t = targets(plan, evaluate_in_train_job=True, runs_per_job=4)
    assert t.batched
    assert t.batches == train_batches(plan.runs, 4, key=lambda r: (plan.runs[r]["dataset"], (
        t.run_cache_dir(r, "train"), t.run_cache_dir(r, "evaluate"))))
    assert sorted(r for ids in t.batches.values() for r in ids) == sorted(plan.runs)
    name, ids = next(iter(t.batches.items()))
    batch = t.batch_wildcards(name)
    assert batch.batch == name
    assert t.batch_plan_files(batch) == [f"results/plan/runs/{rid}.json" for rid in ids]
    assert t.batch_outputs(batch) == [f"results/runs/{rid}/{f}" for rid in ids
                                      for f in ("run.json", "model.pt", "history.csv", "metrics.json")]
    assert t.batch_flags(batch) == []
    lean = targets(plan, evaluate_in_train_job=True, runs_per_job=4, keep_model=False)
    assert lean.batch_outputs(batch) == [f"results/runs/{rid}/{f}" for rid in ids
                                         for f in ("run.json", "history.csv", "metrics.json")]
    assert lean.batch_flags(batch) == ["--no-model"]
    dataset = plan.runs[ids[0]]["dataset"]
    assert t.batch_manifest(batch) == [f"results/manifests/{dataset}/meta.json"]
    assert t.batch_runtime(batch) == t.cluster.runtime_minutes([Work(rid, True, True) for rid in ids])  # tests/test_cluster_resources.py
    caches = t.run_train_cache(W(run_id=ids[0])) + t.run_eval_cache(W(run_id=ids[0]))
    assert t.batch_cache_inputs(batch) == caches
    assert t.batch_cache_args(batch) == (["--image-cache", caches[0][:-len("/cache.json")],
                                          "--eval-image-cache", caches[1][:-len("/cache.json")]] if caches else [])
    assert t.batch_of(ids[0]) == name
    with pytest.raises(TargetError, match=rf"training batch 'sop_99' is not in the plan \({PLAN_FILE}\); "
                                          rf"batches: .*{name}"):
        t.batch_plan_files(W(batch="sop_99"))
    with pytest.raises(TargetError, match="batches: none: runtime.runs_per_job is 1"):
        targets(plan).batch_outputs(batch)


@pytest.mark.parametrize("runtime, message", [
    ({"runs_per_job": 4}, "runtime.runs_per_job is 4 but runtime.evaluate_in_train_job is false"),
    ({"runs_per_job": 0, "evaluate_in_train_job": True}, "runtime.runs_per_job must be an integer >= 1, got 0"),
    ({"keep_model": False}, "runtime.keep_model is false but runtime.evaluate_in_train_job is false: the evaluate "
                            "job reads model.pt"),
])
def test_runtime_settings_a_workflow_cannot_run_are_named(plan, runtime, message):
    with pytest.raises(TargetError, match=message):
        targets(plan, **runtime)


def test_tables_sweeps_report_and_index(plan):
    t = targets(plan)
    table = W(paper="suprank", table="table1")
    assert t.table_plan(table) == "results/plan/tables/suprank/table1.0123.json"
    assert t.table_inputs(table) == [f"results/runs/{rid}/metrics.json" for rid in plan.tables["suprank/table1"].runs]
    assert t.table_labels(table) == {"table": "table1", "kind": "runs"}
    assert t.table_inputs(W(paper="smooth_ap", table="table1")) == [
        f"results/manifests/{name}/meta.json" for name in plan.tables["smooth_ap/table1"].datasets]
    with pytest.raises(TargetError, match=r"table suprank/table99 is not in the plan .*planned: suprank/table1"):
        t.table_inputs(W(paper="suprank", table="table99"))
    assert t.paper_table_csvs(W(paper="suprank")) == ["results/tables/suprank/table1.csv",
                                                      "results/tables/suprank/fig6.csv"]
    with pytest.raises(TargetError, match="no table of paper 'pnp'"):
        t.paper_table_csvs(W(paper="pnp"))
    assert t.sweep_tables() == ["suprank/fig6"] and t.sweep_table_pattern() == "fig6"
    assert t.sweep_outputs() == ["results/tables/suprank/fig6.png"]
    assert t.sweep_inputs(W(paper="suprank", table="fig6")) == t.table_inputs(W(paper="suprank", table="fig6"))
    with pytest.raises(TargetError, match="suprank/table1 is not a planned sweep"):
        t.sweep_inputs(table)
    rid = plan.tables["suprank/table1"].runs[0]
    assert t.run_paper(W(run_id=rid)) == "suprank"
    assert t.run_labels(W(run_id=rid))["tables"] == ", ".join(plan.tables_using(rid))
    report = t.report_outputs()
    assert "results/tables/smooth_ap/table1.html" in report and f"results/runs/{rid}/curve.png" in report
    assert "results/tables/suprank/scatter.png" in report and "results/tables/suprank/fig6.png" in report
    index = t.index_inputs()
    assert set(report) <= set(index) and "results/hgldv2/compare.json" in index
    assert f"results/runs/{rid}/history.csv" in index and "results/tables/suprank/table1.md" in index
    assert f"results/runs/{rid}/run.json" in t.track_inputs()



def test_each_table_run_s_curve_is_drawn_by_the_first_paper_that_uses_it(plan):
    """Issue 37: one curves job per paper (no matplotlib in a training process); none with runtime.curves false."""
    t = targets(plan)
    papers = t.curve_runs()
    assert sorted(rid for rids in papers.values() for rid in rids) == sorted(plan.table_runs())
    assert all(t.run_paper(W(run_id=rid)) == paper for paper, rids in papers.items() for rid in rids)
    paper, rids = next(iter(papers.items()))
    assert t.curve_inputs(paper) == [f"results/runs/{rid}/{f}" for rid in rids for f in ("history.csv", "metrics.json")]
    assert t.curve_file(rids[0]) == f"results/runs/{rids[0]}/curve.png"
    bare = targets(plan, curves=False)
    assert bare.curve_runs() == {} and not any(p.endswith("curve.png") for p in bare.report_outputs())
    assert [p for p in t.report_outputs() if not p.endswith("curve.png")] == bare.report_outputs()


def test_the_recipe_cards_are_in_the_report_and_the_index(plan):
    t = targets(plan)
    assert t.recipes_files() == {"md": "results/recipes.md", "html": "results/recipes.html"}
    assert "results/recipes.html" in t.report_outputs() and "results/recipes.md" not in t.report_outputs()
    assert {"results/recipes.md", "results/recipes.html"} <= set(t.index_inputs())


def test_hgldv2_paths_and_arguments(plan):
    t = targets(plan)
    assert t.hgldv2_outputs() == ["results/hgldv2/compare.json"]
    assert t.gldv2_input(W()) == ["data/downloads/gldv2/download.json"]
    assert t.gldv2_metadata() == "data/downloads/gldv2/metadata"
    args = t.hgldv2_scrape_args(W())
    assert args[:2] == ["--commons-url", "https://commons.wikimedia.org/w/api.php"] and "--contact" not in args
    assert Path(t.hgldv2_curation()).is_file()


def test_write_run_writes_the_planned_run_with_its_id(plan, tmp_path, capsys):
    files = write_plan(plan.to_json(), tmp_path / "plan")
    rid, other = sorted(plan.runs)[:2]
    plan_file = str(files.run(rid))
    out = tmp_path / "runs" / rid / "run.json"
    assert main(["write-run", "--plan", plan_file, "--run-id", rid, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record[RUN_ID_KEY] == rid and {k: v for k, v in record.items() if k != RUN_ID_KEY} == plan.runs[rid]
    assert run_id(plan.runs[rid]) == rid  # the id hashes the run without its "id"
    with pytest.raises(SystemExit, match=rf"{plan_file}: holds run '{rid}', not {other}"):
        main(["write-run", "--plan", plan_file, "--run-id", other, "--out", str(tmp_path / "x.json")])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**record, "epochs": record["epochs"] + 1}))
    with pytest.raises(SystemExit, match=rf"{edited}: its content hashes to .*, not to its id {rid}"):
        main(["write-run", "--plan", str(edited), "--run-id", rid, "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_the_run_files_of_a_plan_do_not_change_with_the_plan(plan, tmp_path):
    """A run's plan file is named by its id (which hashes its content): another plan leaves it alone."""
    files = write_plan(plan.to_json(), tmp_path / "plan")
    rid = sorted(plan.runs)[0]
    before = files.run(rid).stat().st_mtime_ns
    smaller = plan.to_json()
    smaller["tables"] = {}
    assert write_plan(smaller, tmp_path / "plan").run(rid) == files.run(rid)
    assert files.run(rid).stat().st_mtime_ns == before


def test_the_workflow_paths_and_write_run_import_no_torch(plan, tmp_path):
    """The dry run builds WorkflowTargets; run_config is a cheap local job."""
    from test_plan import torch_blocked_env

    env = torch_blocked_env(tmp_path)
    rid = sorted(plan.runs)[0]
    plan_file = str(write_plan(plan.to_json(), tmp_path / "plan").run(rid))
    for command in (["-c", "import rankrepro.plan.targets"],
                    ["-m", "rankrepro", "write-run", "--plan", plan_file, "--run-id", rid, "--out",
                     str(tmp_path / "runs" / rid / "run.json")]):
        result = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / rid).iterdir()) == ["run.json"]
