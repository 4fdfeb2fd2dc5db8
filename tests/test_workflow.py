"""The Snakemake workflow: lint, dry runs (full config, SLURM profile), config errors,
and the demo profile end to end on a copy of the workflow."""

import csv
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rankrepro.bench.plan import workflow_copy

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def smk(cwd, *args, timeout=300):
    """Run snakemake as a user with this virtualenv activated would (jobs call `python`)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("profile", [[], ["--profile", "profiles/demo"]], ids=["full", "demo"])
def test_lint_reports_nothing(tmp_path, profile):
    """The full config's rules, and the demo's (its training batches: a rule train_batch_<batch> each)."""
    result = smk(workflow_copy(tmp_path), "--lint", *profile)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def _jobs(output: str) -> dict:
    stats = output[output.index("Job stats:"):].splitlines()[3:]
    jobs = {}
    for line in stats:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs


@pytest.mark.slow
def test_full_config_dry_run_lists_the_sop_chain(tmp_path):
    result = smk(workflow_copy(tmp_path), "-n", "--cores", "1")
    assert result.returncode == 0, result.stderr
    jobs = _jobs(result.stdout)
    for rule in ("download", "prepare", "run_config", "train", "evaluate", "table", "track"):
        assert jobs.get(rule, 0) >= 1, (rule, jobs)
    assert jobs.get("synthetic") == 5, jobs  # the results that need no dataset
    assert "replica" not in jobs
    assert "drive.usercontent.google.com" not in result.stdout  # the official URL lives in the dataset code


@pytest.mark.slow
def test_slurm_profile_dry_run(tmp_path):
    result = smk(workflow_copy(tmp_path), "-n", "--profile", "profiles/slurm")
    assert result.returncode == 0, result.stderr
    assert "train" in _jobs(result.stdout)


@pytest.mark.slow
def test_extracted_copy_skips_the_download(tmp_path):
    result = smk(workflow_copy(tmp_path), "-n", "--cores", "1", "--config",
                 'datasets={"sop": {"extracted": "/data/Stanford_Online_Products"}}', "--",
                 "results/manifests/sop/meta.json")
    assert result.returncode == 0, result.stderr
    jobs = _jobs(result.stdout)
    assert "download" not in jobs and jobs["prepare"] == 1


@pytest.mark.slow
def test_the_full_config_downloads_and_prepares_every_dataset(tmp_path):
    """config.yaml lists every dataset: one download per source (variants share theirs), one
    prepare per dataset; a derived dataset is prepared from its base's manifest."""

    from rankrepro.data import datasets

    wf = workflow_copy(tmp_path)
    listed = yaml.safe_load((wf / "config.yaml").read_text())["datasets"]
    assert sorted(listed) == datasets.names()
    result = smk(wf, "-n", "--cores", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    sources = {datasets.load(n).source_name for n in datasets.names() if not datasets.load(n).derived_from}
    downloads = set(re.findall(r"output: data/downloads/([a-z0-9_]+)/download\.json", result.stdout))
    prepared = set(re.findall(r"output: results/manifests/([a-z0-9_]+)/manifest\.csv", result.stdout))
    assert downloads == sources and prepared == set(datasets.names())
    for name in ("sop_merge3", "vehicleid_merge3"):
        job = result.stdout[result.stdout.index(f"output: results/manifests/{name}/manifest.csv") - 300:]
        base = datasets.load(name).derived_from
        assert f"input: results/manifests/{base}/meta.json" in job.split("rule ")[1]


@pytest.mark.slow
def test_the_full_config_builds_hgldv2_scrape_to_compare(tmp_path):
    """hgldv2.build: scrape -> clean -> cluster -> curate -> compare, after the GLDv2 download; the
    rebuilt dataset is prepared from the gldv2 manifest and the curated labels; a k given as text
    (as --config gives it) fails the dry run naming the key."""
    wf = workflow_copy(tmp_path)
    result = smk(wf, "-n", "--cores", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {block.split("\n", 1)[0].strip(): block for block in result.stdout.split("rule ")[1:]}
    chain = ["hgldv2_scrape:", "hgldv2_clean:", "hgldv2_cluster:", "hgldv2_curate:", "hgldv2_compare:"]
    assert all(step in jobs for step in chain)
    assert "input: data/downloads/gldv2/download.json" in jobs["hgldv2_scrape:"]
    assert "input: results/hgldv2/scrape/landmarks.jsonl" in jobs["hgldv2_clean:"]
    assert "input: results/hgldv2/clean/landmarks.csv" in jobs["hgldv2_cluster:"]
    assert "results/hgldv2/cluster/cluster.json" in jobs["hgldv2_curate:"].split("output:")[0]
    assert "results/hgldv2/labels/train_label_to_hierarchical.csv" in jobs["hgldv2_compare:"].split("output:")[0]
    rebuilt = result.stdout[result.stdout.index("output: results/manifests/gldv2_hier_rebuilt/manifest.csv") - 400:]
    inputs = rebuilt.split("rule ")[1].split("output:")[0]
    assert "results/manifests/gldv2/meta.json" in inputs and "results/hgldv2/labels/index_label_to_hierarchical.csv" in inputs
    bad = smk(wf, "-n", "--cores", "1", "--config", 'hgldv2={"build": true, "kmeans": {"k": 5}}')
    assert bad.returncode != 0 and "hgldv2.build: 'true' is not of type 'boolean'" in bad.stderr + bad.stdout
    (wf / "bad.yaml").write_text("hgldv2:\n  kmeans:\n    k: five\n")
    bad = smk(wf, "-n", "--cores", "1", "--configfile", "bad.yaml")
    assert bad.returncode != 0 and "hgldv2.kmeans.k: 'five' is not of type 'integer'" in bad.stderr + bad.stdout


@pytest.mark.slow
@pytest.mark.parametrize("bad, key", [
    ("runtime:\n  num_workers: -1\n", "num_workers"),
    ("tracking:\n  tracking_uri: ./mlruns\n  experiment: x\n", "tracking_uri"),
    ("datasets:\n  sop:\n    replca: true\n", "replca"),
    ("datasets:\n  imagenet: {}\n", "imagenet"),
    ("runtime:\n  runs_per_job: 0\n", "runs_per_job"),
    ("runtime:\n  runs_per_job: 4\n", "runtime.runs_per_job is 4 but runtime.evaluate_in_train_job is false"),
])
def test_bad_config_is_an_error_naming_the_key(tmp_path, bad, key):
    workflow_copy(tmp_path)
    (tmp_path / "bad.yaml").write_text(bad)
    result = smk(tmp_path, "-n", "--cores", "1", "--configfile", "bad.yaml")
    assert result.returncode != 0
    assert key in result.stderr + result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("config, key", [
    ('run_overrides={"epochz": 3}', r"run_overrides: \(top level\): Additional properties are not allowed \('epochz'"),
    ('run_overrides={"epochs": 3}', r"run_overrides: epochs: '3' is not of type 'integer'"),  # --config makes it "3"
    ('run_overrides={"loss": {"tau": 0}}', r"loss.tau: loss 'fast_ap' takes no parameter 'tau'"),
    ('run_overrides={"loss": {"name": "smoth_ap"}}', r"unknown loss 'smoth_ap'"),
])
def test_a_bad_run_override_fails_the_dry_run_naming_the_key(tmp_path, config, key):
    import re

    result = smk(workflow_copy(tmp_path), "-n", "--cores", "1", "--config", config)
    assert result.returncode != 0
    assert re.search(key, result.stderr + result.stdout), result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (("--configfile", "bad.yaml"), r"invalid plan of the config from (.*bad.yaml, config.yaml|config.yaml, "
                                   r".*bad.yaml): config: runtime.checkpoint_minutes: nan is not a finite number"),
    (("--config", 'seeds={"suprank/table1": [1.5]}'), r"invalid plan of the config from config.yaml, --config: "
                                                     r"config: seeds.suprank/table1\[0\]: '1.5' is not of type "
                                                     r"'integer' \(snakemake --config passes nested values as text"),
])
def test_the_dry_run_names_the_config_files_and_the_key(tmp_path, args, message):
    """Issue 33: checkpoint_minutes .nan passed the schema; a seed numpy refuses passed the plan."""
    import re

    wf = workflow_copy(tmp_path)
    (wf / "bad.yaml").write_text("runtime:\n  checkpoint_minutes: .nan\n")
    result = smk(wf, "-n", "--cores", "1", *args)
    assert result.returncode != 0
    assert re.search(message, result.stderr + result.stdout), result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_shell_parameters_are_quoted(tmp_path, http_server):
    """A URL with quotes, a semicolon and spaces, and a data root with a space and a quote, reach the
    download command as single arguments: the download succeeds and nothing else runs."""
    import requests
    import yaml

    wf = workflow_copy(tmp_path)
    made = subprocess.run([sys.executable, "-m", "rankrepro", "replica", "sop", "--out-dir", str(tmp_path / "rep")],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    archive = tmp_path / "rep" / "Stanford_Online_Products.zip"
    checksum = json.loads((tmp_path / "rep" / "replica.json").read_text())["files"][archive.name]
    url = http_server.url("/sop.zip?x=';touch pwned;'&y=a b")
    http_server.add(requests.utils.requote_uri(url).split(str(http_server.port), 1)[1], archive.read_bytes())
    data_root = "data dir/it's"
    (wf / "quoted.yaml").write_text(yaml.safe_dump({"data_root": data_root,
                                                    "datasets": {"sop": {"url": url, "checksum": checksum}}}))
    target = f"{data_root}/downloads/sop/download.json"
    result = smk(wf, "--cores", "1", "--configfile", "quoted.yaml", "--", target)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (wf / target).with_name(archive.name).read_bytes() == archive.read_bytes()
    assert not list(wf.rglob("pwned")) and not (Path.cwd() / "pwned").exists()


@pytest.mark.slow
def test_demo_profile_end_to_end(tmp_path):
    """The demo profile on a subset of the tables (the whole demo's wall time is a benchmark:
    ``python -m rankrepro bench demo``): SupRank Tables I, VII (ResNet-101 + PCA-initialised projection
    on H-GLDv2) and XI, the sweep of Fig. 6, Smooth-AP's Table 1, PNP's Table 1 (fraction columns),
    every synthetic result and the H-GLDv2 chain, the runs trained and evaluated in batches of a
    dataset (runtime.runs_per_job, runtime.evaluate_in_train_job)."""
    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]  # a config file merges into config.yaml
    (wf / "subset.yaml").write_text(yaml.safe_dump({"tables": {**{p: [] for p in papers},
                                                               "suprank": ["table1", "table7", "table11", "fig6"],
                                                               "smooth_ap": ["table1"], "pnp": ["table1"]}}))
    demo = ["--profile", "profiles/demo", "--configfile", "profiles/demo/demo.yaml", "subset.yaml"]
    result = smk(wf, "--cores", "2", *demo, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for table in ("table1", "table7", "table11", "fig6"):
        for ext in ("md", "csv", "tex", "html"):
            assert (wf / "results" / "tables" / "suprank" / f"{table}.{ext}").exists(), (table, ext)
    assert (wf / "results" / "tables" / "suprank" / "fig6.png").read_bytes()[:4] == b"\x89PNG"
    for name in ("pnp_fig6", "rambo_fig2", "rambo_table6", "smooth_ap_table_s1", "suprank_fig10_11"):
        record = json.loads((wf / "results" / "synthetic" / f"{name}.json").read_text())
        assert record["scale"] == "demo" and (wf / "results" / "synthetic" / f"{name}.md").exists(), name
    table = (wf / "results" / "tables" / "suprank" / "table1.md").read_text()
    assert "Replica data" in table and "| Smooth-AP [27] | <u>80.9</u> |" in table  # second best, as printed
    run_dirs = sorted((wf / "results" / "runs").iterdir())
    assert any(d.name.startswith("sop-smooth_ap-") for d in run_dirs)
    for run_dir in run_dirs:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        scores = {k: v for k, v in metrics["metrics"].items() if "n_" not in k}  # less the query counts
        assert metrics["replica"] and scores and all(0 <= v <= 1 for v in scores.values()), run_dir.name
        assert not (run_dir / "checkpoint.pt").exists()
        # the demo's runtime.keep_model and runtime.curves (false): nothing the tables and the report do not read
        names = {p.name for p in run_dir.iterdir()}
        assert {"run.json", "history.csv", "metrics.json"} <= names and not {"model.pt", "curve.png"} & names, names
    # the H-GLDv2 chain against the loopback fake: the replica's names, our labels, the comparison
    hgldv2 = wf / "results" / "hgldv2"
    scraped = json.loads((hgldv2 / "scrape" / "scrape.json").read_text())
    assert scraped["landmarks"] == {"train": 15, "index": 9} and scraped["retries"] == 3
    assert (hgldv2 / "cluster" / "review.md").exists() and json.loads((hgldv2 / "cluster" / "cluster.json").read_text())["k"] == 4
    assert "church building" in (hgldv2 / "labels" / "train_label_to_hierarchical.csv").read_text()
    compare = json.loads((hgldv2 / "compare.json").read_text())
    assert compare and (hgldv2 / "compare.md").exists()
    rebuilt = json.loads((wf / "results" / "manifests" / "gldv2_hier_rebuilt" / "meta.json").read_text())
    assert rebuilt["derived_from"] == "gldv2" and "church" in rebuilt["hierarchical_label_names"]
    assert not (wf / "results" / "logs" / "evaluate").exists()  # the train job evaluated
    assert list((wf / "results" / "logs" / "train").glob("batch_sop_*.log"))  # in batches
    pnp = (wf / "results" / "tables" / "pnp" / "table1.md").read_text()
    assert "| PNP-D_q | **80.1** |" in pnp and "| **0.380** |" in pnp  # Dists@intra as the paper prints it
    for rule in ("replica", "download", "prepare", "train", "table", "track", "hgldv2", "sweep_plot"):
        assert list((wf / "results" / "logs" / rule).rglob("*.log")) or (wf / "results" / "logs" / f"{rule}.log").exists()
    with sqlite3.connect(wf / "results" / "mlflow.db") as db:
        names = {r[0] for r in db.execute("select name from runs where lifecycle_stage = 'active'")}
    assert {d.name for d in run_dirs} | {"table:suprank/table1"} <= names
    again = smk(wf, "--cores", "2", *demo)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_the_demo_renders_variant_rows_when_the_config_turns_them_on(tmp_path):
    """``variants`` on for two tables of the demo: PNP Table 3's label-based rows train runs of their own, SupRank
    Table I's selection variant shows its main row's runs at their best test epoch; the tables show the variant
    rows with their Δ main, and the index counts their cells apart."""
    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    (wf / "subset.yaml").write_text(yaml.safe_dump({
        "tables": {**{p: [] for p in papers}, "suprank": ["table1"], "pnp": ["table3"]},
        "synthetic": {"names": []}, "variants": {"suprank/table1": True, "pnp": True}}))
    demo = ["--profile", "profiles/demo", "--configfile", "profiles/demo/demo.yaml", "subset.yaml"]
    result = smk(wf, "--cores", "2", *demo, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pnp = (wf / "results" / "tables" / "pnp" / "table3.md").read_text()
    assert "SOP R@1 Δ main" in pnp and "| PNP-D_q (BS = 112) · label-based positives (index_blocks null) |" in pnp
    assert "Source: the paper's text (eqs. 2-3" in pnp
    with open(wf / "results" / "tables" / "suprank" / "table1.csv") as fh:
        variant = [r for r in csv.DictReader(fh) if r["variant"]]
    assert len(variant) == 4 and all(r["select"] == "best_test" and r["ours"] for r in variant)
    index = (wf / "results" / "README.md").read_text()
    assert "of 12 cells reproduced, counted apart from the paper's cells" in index  # 8 in pnp/table3, 4 in table1


def _requirement_names(specs):
    import re

    return {re.split(r"[<>=!~ \[]", s, maxsplit=1)[0].lower() for s in specs}


def test_conda_envs_agree_with_pyproject():
    import tomllib

    import yaml

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {s.split(">=")[0].lower(): s for s in declared}
    for env_file in (REPO / "envs").glob("*.yaml"):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        assert _requirement_names(pip) <= set(pins), env_file.name
        assert all(spec in declared for spec in pip), env_file.name  # same lower bounds
        assert (REPO / "envs" / f"{env_file.stem}.post-deploy.sh").exists()


@pytest.mark.slow
def test_a_manual_dataset_stops_only_its_own_jobs(tmp_path):
    """VehicleID's files are missing: its download fails with the message naming the file and the
    `extracted` alternative; with --keep-going the other datasets (SOP and CUB replicas) are still
    prepared, and no VehicleID manifest appears. (An extracted copy of a replica is no source: ``replica``
    and ``extracted`` together are refused at plan time, tests/test_plan_checks.py.)"""
    import yaml

    wf = workflow_copy(tmp_path)
    (wf / "manual.yaml").write_text(yaml.safe_dump({
        "data_root": "data", "tables": {}, "synthetic": {"names": []},
        "datasets": {"sop": {"replica": True}, "vehicleid": {}, "cub": {"replica": True}}}))
    result = smk(wf, "--cores", "1", "--keep-going", "--configfile", "manual.yaml", "--",
                 *(f"results/manifests/{n}/meta.json" for n in ("sop", "vehicleid", "cub")))
    assert result.returncode != 0
    log = (wf / "results" / "logs" / "download" / "vehicleid.log").read_text()
    for part in ("ManualDownloadRequired", "VehicleID_V1.0.zip", str(wf / "data" / "downloads" / "vehicleid"),
                 "datasets.vehicleid.extracted", "pkuml.org"):
        assert part in log
    assert (wf / "results" / "manifests" / "sop" / "meta.json").is_file()
    assert (wf / "results" / "manifests" / "cub" / "meta.json").is_file()
    assert not (wf / "results" / "manifests" / "vehicleid").exists()
    assert not (wf / "data" / "downloads" / "vehicleid" / "download.json").exists()


@pytest.mark.slow
def test_missing_face_files_stop_only_the_face_jobs(tmp_path):
    """The demo with VGGFace2 and IJB-C as the full config has them (manual, files absent) and Smooth-AP's
    Tables 2 and 4: with --keep-going, both face downloads fail with the message naming their files, every
    face run and Table 4 wait, and Table 2 (SOP) is built."""
    wf = workflow_copy(tmp_path)
    papers = yaml.safe_load((wf / "config.yaml").read_text())["tables"]
    (wf / "subset.yaml").write_text(yaml.safe_dump({
        "tables": {**{p: [] for p in papers}, "smooth_ap": ["table2", "table4"]}, "synthetic": {"names": []},
        "datasets": {"vggface2": {"replica": False}, "ijbc": {"replica": False}}}))
    demo = ["--profile", "profiles/demo", "--configfile", "profiles/demo/demo.yaml", "subset.yaml"]
    result = smk(wf, "--cores", "2", "--keep-going", *demo, timeout=900)
    assert result.returncode != 0
    tables = wf / "results" / "tables" / "smooth_ap"
    assert (tables / "table2.md").is_file() and not (tables / "table4.md").exists()
    vggface2 = (wf / "results" / "logs" / "download" / "vggface2.log").read_text()
    for part in ("ManualDownloadRequired", "vggface2_train.tar.gz", "88813c6b15de58afc8fa75ea83361d7f",
                 str(wf / "data" / "demo" / "downloads" / "vggface2"), "datasets.vggface2.extracted"):
        assert part in vggface2, part
    assert "ManualDownloadRequired" in (wf / "results" / "logs" / "download" / "ijbc.log").read_text()
    # a face run's folder is written by its training batch (rankrepro.engine.batch), which waits for the data:
    # nothing of a face run exists, staged or published, while SOP's runs are
    runs = [d.name for d in (wf / "results" / "runs").iterdir()]
    staged = wf / "results" / "batches" / "staged"
    staged_runs = [d.name for d in staged.iterdir()] if staged.is_dir() else []
    assert any(r.startswith("sop-") for r in runs)
    assert not [r for r in runs + staged_runs if r.startswith(("vggface2-", "ijbc-"))]
