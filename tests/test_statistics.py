"""Dataset statistics tables (``kind: dataset_statistics``): cells counted from manifests, not runs.

Values are checked by hand on tiny hand-written manifests; the planner's cells and inputs,
pending rows of planned datasets, spec errors naming file and key, split errors at render
time, and the Smooth-AP Table 1 transcription against the paper text."""

import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rankrepro import catalog
from rankrepro.data.manifest import write_manifest
from rankrepro.plan.build import make_plan
from rankrepro.plan.planned import load_planned
from rankrepro.plan.schema import PlanError
from rankrepro.plan.specs import SPECS_DIR, load_spec
from rankrepro.tables.kinds.base import TableError
from rankrepro.tables.kinds.dataset_statistics import STATISTICS_REPLICA_NOTE, images_per_class
from rankrepro.tables.render import render

REPO = Path(__file__).resolve().parents[1]
PAPERS = REPO.parent / "shared" / "papers"
PLANNED = {**load_planned(), "datasets": load_planned()["datasets"] | {"faces"}}  # faces: a planned dataset

COLUMNS = [{"key": "images", "header": "# Images", "statistic": "images"},
           {"key": "classes", "header": "# Classes", "statistic": "classes"},
           {"key": "ipc", "header": "# Ims/Class", "statistic": "images_per_class"}]


def _spec(**edits) -> dict:
    spec = {"paper": "mine", "table": "stats", "kind": "dataset_statistics", "caption": "Datasets.",
            "source": "hand-written", "columns": copy.deepcopy(COLUMNS),
            "rows": [{"name": "SOP train", "dataset": "sop", "split": "train", "paper": [7, 3, 2.3]},
                     {"name": "SOP test", "dataset": "sop", "split": "test", "paper": [21, 4, 5.2]},
                     {"name": "SOP pooled", "dataset": "sop", "split": ["q1", "q2"], "paper": [7, 4, 1.8]},
                     {"name": "Faces", "dataset": "faces", "split": "test", "paper": [3310000, 8631, 363.7]}]}
    spec.update(edits)
    return spec


def _specs_dir(tmp_path, spec) -> Path:
    d = tmp_path / "specs" / "mine"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SPECS_DIR / "suprank", tmp_path / "specs" / "suprank", dirs_exist_ok=True)  # a run table
    (d / "stats.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return tmp_path / "specs"


def _plan(tmp_path, spec=None, tables=None):
    return make_plan(tables or {"mine": ["stats"]}, specs_dir=_specs_dir(tmp_path, spec or _spec()), planned=PLANNED)


def _manifest(directory, replica=False):
    """train: 7 images of 3 classes; test: 21 of 4 (5.25 per class); q1: 3 of 2 and q2: 4 of 2,
    label 0 in both (3 distinct labels pooled, 4 distinct (split, label) pairs)."""
    labels = {"train": [0, 0, 0, 1, 1, 2, 2], "test": [3] * 6 + [4] * 5 + [5] * 5 + [6] * 5,
              "q1": [0, 0, 1], "q2": [0, 0, 0, 5]}
    rows = [{"path": f"{split}/{i}.jpg", "split": split, "label": label}
            for split, ls in labels.items() for i, label in enumerate(ls)]
    meta = {"dataset": "sop", "root": str(directory), "levels": ["class"], "protocol": "same-set", "replica": replica}
    return write_manifest(directory, pd.DataFrame(rows), meta)


def test_images_per_class_rounds_half_up_as_printed():
    assert images_per_class(21, 4) == 5.3  # 5.25: round() would give 5.2
    assert images_per_class(59551, 11318) == 5.3 and images_per_class(40365, 4800) == 8.4
    assert images_per_class(148824, 3531) == 42.1 and images_per_class(7, 3) == 2.3
    assert images_per_class(5, 0) is None


def test_statistics_by_hand_including_pooled_splits(tmp_path):
    plan = _plan(tmp_path)
    _manifest(tmp_path / "manifests" / "sop")
    rows = render(plan["tables"]["mine/stats"], tmp_path / "runs", tmp_path / "out" / "stats",
                  manifests_dir=tmp_path / "manifests")
    got = {(r["name"], r["statistic"]): (r["ours"], r["diff"], r["status"]) for r in rows}
    assert got[("SOP train", "images")] == (7, 0, "ours")
    assert got[("SOP train", "classes")] == (3, 0, "ours")
    assert got[("SOP train", "images_per_class")] == (2.3, 0.0, "ours")
    assert got[("SOP test", "images")] == (21, 0, "ours")
    assert got[("SOP test", "classes")] == (4, 0, "ours")
    assert got[("SOP test", "images_per_class")] == (5.3, 0.1, "ours")
    # pooled: 3 + 4 images, 2 + 2 classes (label 0 counted once per split), 7 / 4 = 1.75 -> 1.8
    assert got[("SOP pooled", "images")][0] == 7
    assert got[("SOP pooled", "classes")][0] == 4
    assert got[("SOP pooled", "images_per_class")][0] == 1.8
    assert all(got[("Faces", s)] == (None, None, "dataset faces not implemented yet")
               for s in ("images", "classes", "images_per_class"))

    md = (tmp_path / "out" / "stats.md").read_text()
    assert "| SOP train | sop: train | 7 | 7 | +0 | 3 | 3 | +0 | 2.3 | 2.3 | +0.0 |" in md
    assert "| SOP test | sop: test | 21 | 21 | +0 | 4 | 4 | +0 | 5.2 | 5.3 | +0.1 |" in md
    assert "| SOP pooled | sop: q1 + q2 | 7 | 7 | +0 | 4 | 4 | +0 | 1.8 | 1.8 | +0.0 |" in md
    assert "| Faces | faces: test | 3,310,000 | — |  | 8,631 | — |  | 363.7 | — |  |" in md  # paper number alone
    assert "- dataset faces not implemented yet" in md and "Replica data" not in md
    with open(tmp_path / "out" / "stats.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4 * 3 and table[6]["splits"] == "q1+q2" and table[0]["replica"] == "False"
    tex = (tmp_path / "out" / "stats.tex").read_text()
    assert r"SOP test & test & 21 & 21 & +0 & 4 & 4 & +0 & 5.2 & 5.3 & +0.1 \\" in tex
    assert r"\multicolumn{3}{c}{\# Images}" in tex and "Replica data" not in tex


def test_counts_come_from_manifest_csv_when_meta_has_none(tmp_path):
    plan = _plan(tmp_path)
    manifest = _manifest(tmp_path / "manifests" / "sop")
    meta = {k: v for k, v in manifest.meta.items() if k != "counts"}
    (tmp_path / "manifests" / "sop" / "meta.json").write_text(json.dumps(meta))
    rows = render(plan["tables"]["mine/stats"], tmp_path / "runs", tmp_path / "t", manifests_dir=tmp_path / "manifests")
    assert [r["ours"] for r in rows[:9]] == [7, 3, 2.3, 21, 4, 5.3, 7, 4, 1.8]


def test_replica_manifests_mark_the_table(tmp_path):
    plan = _plan(tmp_path)
    _manifest(tmp_path / "results" / "manifests" / "sop", replica=True)
    render(plan["tables"]["mine/stats"], tmp_path / "results" / "runs", tmp_path / "t")  # manifests beside runs
    assert STATISTICS_REPLICA_NOTE in (tmp_path / "t.md").read_text()
    assert "Replica data" in (tmp_path / "t.tex").read_text()
    with open(tmp_path / "t.csv") as fh:
        assert {r["replica"] for r in csv.DictReader(fh)} == {"True"}


def test_the_planner_makes_one_cell_per_row_and_column_and_needs_the_manifests(tmp_path):
    plan = _plan(tmp_path, tables={"mine": ["stats"], "suprank": ["table1"]})
    table = plan["tables"]["mine/stats"]
    assert table["runs"] == [] and table["datasets"] == ["sop"]
    assert table["spec_file"].endswith(os.path.join("mine", "stats.yaml"))
    cells = table["cells"]
    assert [(c["row"], c["column"]) for c in cells] == [(r, c) for r in range(4) for c in range(3)]
    assert [c["statistic"] for c in cells[:3]] == ["images", "classes", "images_per_class"]
    assert cells[6] == {"row": 2, "column": 0, "statistic": "images", "dataset": "sop", "splits": ["q1", "q2"],
                        "pending": None}
    assert all(c["pending"] == "dataset faces not implemented yet" for c in cells if c["row"] == 3)
    assert "sop" in plan["datasets"] and "faces" not in plan["datasets"]
    # the run table beside it is planned as before
    alone = make_plan({"suprank": ["table1"]}, planned=PLANNED)
    assert plan["runs"] == alone["runs"] and plan["tables"]["suprank/table1"] == alone["tables"]["suprank/table1"]
    assert "datasets" not in alone["tables"]["suprank/table1"]


def test_a_statistics_dataset_is_planned_even_without_runs(tmp_path):
    plan = _plan(tmp_path, _spec(rows=[{"name": "SOP", "dataset": "sop", "split": "train", "paper": [1, 1, 1.0]}]))
    assert plan["runs"] == {} and list(plan["datasets"]) == ["sop"]
    assert plan["datasets"]["sop"]["config"]["replica"] is False


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["rows"][1].pop("split"), r"stats.yaml: rows\[1\]: 'split' is a required property"),
    (lambda s: s["rows"][0].pop("dataset"), r"stats.yaml: rows\[0\]: 'dataset' is a required property"),
    (lambda s: s["rows"][1].update(dataset="sopp"), r"stats.yaml: rows\[1\].dataset: unknown dataset 'sopp'; "
                                                     r"registered: .*sop.*; planned: .*faces"),
    (lambda s: s["rows"][2]["paper"].pop(), r"stats.yaml: rows\[2\].paper: 2 numbers for 3 columns \('SOP pooled'\)"),
    (lambda s: s["columns"][2].update(statistic="ims"), r"stats.yaml: columns\[2\].statistic: 'ims' is not one of"),
    (lambda s: s["rows"][0].update(loss={"name": "smooth_ap"}), r"stats.yaml: rows\[0\]: Additional properties"),
    (lambda s: s.update(seeds=[0, 1]), r"stats.yaml: seeds: a dataset_statistics table has no runs"),
    (lambda s: s.update(kind="stats"), r"stats.yaml: kind: 'stats' is not one of"),
])
def test_a_bad_statistics_spec_names_its_file_and_key(tmp_path, edit, message):
    spec = _spec()
    edit(spec)
    with pytest.raises(PlanError, match=message):
        _plan(tmp_path, spec)


def test_an_unknown_split_fails_at_render_naming_the_spec_row_and_the_splits(tmp_path):
    spec = _spec()
    spec["rows"][2]["split"] = ["q1", "q3"]
    plan = _plan(tmp_path, spec)
    _manifest(tmp_path / "manifests" / "sop")
    with pytest.raises(TableError, match=r"mine/stats.yaml: rows\[2\].split \(SOP pooled\): the manifest of sop "
                                         r"\(.*meta.json\) has no split 'q3'; its splits: q1, q2, test, train"):
        render(plan["tables"]["mine/stats"], tmp_path / "runs", tmp_path / "t", manifests_dir=tmp_path / "manifests")


def test_smooth_ap_table1_plans_registered_datasets_and_pends_the_others():
    plan = make_plan({"smooth_ap": ["table1"]})
    table = plan["tables"]["smooth_ap/table1"]
    spec, registered = table["spec"], catalog.load()["dataset"]
    assert table["runs"] == [] and plan["runs"] == {}
    assert "sop" in table["datasets"] and set(table["datasets"]) <= set(plan["datasets"])
    for cell in table["cells"]:
        dataset = spec["rows"][cell["row"]]["dataset"]
        assert (cell["pending"] is None) == (dataset in registered), cell
        assert (dataset in table["datasets"]) == (dataset in registered)
    vehicle_test = next(c for c in table["cells"] if spec["rows"][c["row"]]["name"] == "VehicleID test")
    assert vehicle_test["splits"] == ["test_800", "test_1600", "test_2400"]
    assert {"vggface2", "ijbc"} <= set(table["datasets"])  # the face rows: registered manual datasets


def _paper_number(token: str) -> float:
    return float(token.replace(",", ""))


@pytest.mark.skipif(not (PAPERS / "smooth_ap_eccv2020.txt").exists(), reason="papers not beside the checkout")
def test_smooth_ap_table1_numbers_match_the_paper_text():
    text = (PAPERS / "smooth_ap_eccv2020.txt").read_text()
    block = text[text.index("Table 1: Datasets"):text.index("5.2 Test Protocol")]
    spec = load_spec("smooth_ap", "table1")
    assert len(spec["rows"]) == 9
    for row in spec["rows"]:
        line = next(line for line in block.splitlines() if row["name"] + " " in line)
        rest = line[line.index(row["name"]) + len(row["name"]):]
        numbers = [m.group(1) for m in re.finditer(r"([\d,]+(?:\.\d+)?( M)?)", rest)]
        printed = [_paper_number(n[:-2]) * 1e6 if n.endswith(" M") else _paper_number(n) for n in numbers]
        assert printed == pytest.approx(row["paper"], abs=0), row["name"]
    pooled = next(r for r in spec["rows"] if r["name"] == "VehicleID test")
    assert pooled["paper"][:2] == [7332 + 12995 + 20038, 800 + 1600 + 2400]  # Section 5.1's three lists


@pytest.mark.slow
def test_the_table_rule_needs_the_manifests(tmp_path):
    from rankrepro.bench.plan import workflow_copy

    wf = workflow_copy(tmp_path)
    config = yaml.safe_load((wf / "config.yaml").read_text())
    config["tables"] = {"smooth_ap": ["table1"]}
    (wf / "config.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "results/tables/smooth_ap/table1.md"],
                            cwd=wf, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    job = result.stdout[result.stdout.index("rule table:"):]
    inputs = job[job.index("input: ") + len("input: "):].splitlines()[0].split(", ")
    assert re.fullmatch(r"results/plan/tables/smooth_ap/table1\.[0-9a-f]{12}\.json", inputs[0]), inputs[0]
    assert inputs[1:] == [
        f"results/manifests/{name}/meta.json" for name in ("ijbc", "inat", "sop", "vehicleid", "vggface2")]
    assert "rule prepare:" in result.stdout and "rule train:" not in result.stdout
