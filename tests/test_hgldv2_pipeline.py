"""H-GLDv2 around its steps: the planner's ``hgldv2`` block, the demo world on the GLDv2 replica's
category files (scrape -> clean, hand-listed), and the ``gldv2_hier_rebuilt`` dataset (with the
release's own labels it must equal ``gldv2_hier``)."""

import shutil

import pandas as pd
import pytest

from rankrepro.data import datasets
from rankrepro.data.datasets import gldv2
from rankrepro.plan.build import plan_hgldv2
from rankrepro.plan.schema import PlanError
from rankrepro.hgldv2 import clean, fake_api, scrape

PLANNED = {"gldv2": {}, "gldv2_hier_rebuilt": {}}


def test_the_hgldv2_block_gets_its_defaults():
    block = plan_hgldv2({"build": True}, PLANNED)
    assert block["api"]["commons_url"] == "https://commons.wikimedia.org/w/api.php"
    assert block["api"]["maxlag"] == 5 and block["api"]["fake_world"] is None
    assert block["clip"] == {"model": "ViT-B-32-quickgelu", "pretrained": "openai", "prompt": "{}"}
    assert block["kmeans"] == {"k": 50, "seed": 0, "niter": 25, "nredo": 5}
    assert block["several_classes"] == "drop" and block["curation"] is None
    assert plan_hgldv2(None, {})["build"] is False


@pytest.mark.parametrize("block, datasets_planned, message", [
    ({"build": True, "kmeans": {"k": "50"}}, PLANNED, r"config: hgldv2\.kmeans\.k: '50' is not of type 'integer'"),
    ({"build": True, "kmeans": {"k": 0}}, PLANNED, r"hgldv2\.kmeans\.k: 0 is less than the minimum"),
    ({"build": True, "clip": {"prompt": "a photo"}}, PLANNED, r"hgldv2\.clip\.prompt"),
    ({"build": True, "clip": {"prompt": "{} in {city}"}}, PLANNED,
     r"config: hgldv2\.clip\.prompt: '\{\} in \{city\}' has the placeholder\(s\) \{city\}; the allowed "
     r"placeholder is \{\} \(the name\), exactly once"),
    ({"build": True, "several_classes": "keep"}, PLANNED, r"hgldv2\.several_classes"),
    ({"build": True, "api": {"comons_url": "x"}}, PLANNED, r"hgldv2\.api.*comons_url"),
    ({"build": True}, {"sop": {}}, r"config hgldv2\.build: .* list datasets\.gldv2"),
    ({"build": False}, PLANNED, r"config datasets\.gldv2_hier_rebuilt: .* set hgldv2\.build: true"),
])
def test_mistakes_in_the_hgldv2_block_name_the_key(block, datasets_planned, message):
    with pytest.raises(PlanError, match=message):
        plan_hgldv2(block, datasets_planned)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    out = tmp_path_factory.mktemp("gldv2") / "replica"
    datasets.load("gldv2").write_replica(out)
    return out


def test_the_demo_world_on_the_replica_categories(replica, tmp_path):
    files = {split: replica / "metadata" / f"{split}_label_to_category.csv" for split in ("train", "index")}
    with fake_api.FakeWikimedia(fake_api.demo_world()) as api:
        waits = []
        summary = scrape.run_scrape(files, tmp_path / "scrape", tmp_path / "cache", commons_url=api.commons_url,
                                    wikidata_url=api.wikidata_url, min_interval=0, progress=False,
                                    sleep=waits.append)
        assert api.repeated() == {} and [r.fault for r in api.log if r.fault] == ["429", "503", "maxlag"]
    assert waits == [1.0, 2.0, 1.0] and summary["retries"] == 3
    report = clean.run_clean(tmp_path / "scrape" / "landmarks.jsonl", tmp_path / "clean")
    kept = pd.read_csv(tmp_path / "clean" / "landmarks.csv", dtype=str, keep_default_na=False)
    got = {(r.split, int(r.landmark_id)): r.supercategory for r in kept.itertuples()}
    # by hand from fake_api.DEMO_CASES: the plain names, the redirected and P301 ones; not the
    # several / irrelevant / unnamed / unlinked / missing / class-less landmarks
    assert got == {
        ("train", 1234): "church building", ("train", 20517): "arch bridge", ("train", 77001): "mountain",
        ("train", 138002): "bay", ("train", 200000): "castle", ("train", 300001): "cathedral",
        ("train", 300004): "monastery", ("train", 300006): "archaeological site", ("train", 300007): "tower",
        ("index", 1234): "lake", ("index", 501): "church building", ("index", 7002): "art museum",
        ("index", 88): "stratovolcano", ("index", 3030): "castle", ("index", 99999): "stratovolcano",
        ("index", 400001): "cathedral", ("index", 400002): "bridge"}
    assert report["counts"]["train"]["landmarks"] == len(gldv2.replica_landmarks("train")) == 15
    assert (report["counts"]["train"]["several"], report["counts"]["train"]["irrelevant"],
            report["counts"]["train"]["unnamed"]) == (1, 2, 1)
    # every name of the replica's released hierarchy is scraped for its landmark where the world has it
    for split, listed in (("train", gldv2.REPLICA_TRAIN_HIER), ("index", gldv2.REPLICA_INDEX_HIER)):
        for landmark, hier in listed:
            if hier and (split, landmark) in got:
                assert got[split, landmark] == gldv2.REPLICA_SUPERCATEGORY[hier[0]]


@pytest.fixture(scope="module")
def prepared(replica, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prepared")
    out = {}
    for name in ("gldv2", "gldv2_hier"):
        dataset = datasets.load(name)
        record = dataset.download(tmp / "data", replica_dir=replica)
        out[name] = dataset.prepare(record, tmp / name, data_root=tmp / "data", replica=True)
    out["tmp"] = tmp
    return out


def test_rebuilt_with_the_releases_labels_equals_gldv2_hier(prepared, replica, tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    for split in ("train", "index"):
        shutil.copy(replica / "metadata" / f"{split}_label_to_hierarchical.csv", labels)
    rebuilt = datasets.load("gldv2_hier_rebuilt")
    rebuilt.labels_dir = str(labels)
    manifest = rebuilt.prepare(prepared["gldv2"].directory, tmp_path / "m", data_root=prepared["tmp"] / "data",
                               replica=True)
    hier = prepared["gldv2_hier"]
    pd.testing.assert_frame_equal(manifest.table.reset_index(drop=True), hier.table.reset_index(drop=True))
    for key in ("levels", "protocol", "root", "ground_truth", "hierarchical_label_names",
                "natural_or_human_made_names"):
        assert manifest.meta[key] == hier.meta[key], key
    assert manifest.meta["derived_from"] == "gldv2" and len(manifest.meta["labels"]) == 2


def test_rebuilt_with_other_labels_and_without_labels(prepared, tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    header = "landmark_id,category,supercategory,hierarchical_label,natural_or_human_made\n"
    (labels / "train_label_to_hierarchical.csv").write_text(header + "1234,c,church building,church,human-made\n")
    (labels / "index_label_to_hierarchical.csv").write_text(header + "501,c,lake,lake,natural\n")
    rebuilt = datasets.load("gldv2_hier_rebuilt")
    rebuilt.labels_dir = str(labels)
    manifest = rebuilt.prepare(prepared["gldv2"].directory, tmp_path / "m", data_root=prepared["tmp"] / "data",
                               replica=True)
    table = manifest.table
    assert set(table[table["split"] == "train"]["label"]) == {1234}  # only the labelled train landmark
    gallery = table[table["split"] == "gallery"]
    assert set(gallery[gallery["label"] == 501]["level_1"]) == {1}  # names: church (0), lake (1)
    assert set(gallery[gallery["label"] != 501]["level_1"]) == {-1}
    assert manifest.meta["hierarchical_label_names"] == ["church", "lake"]
    rebuilt.labels_dir = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere/train_label_to_hierarchical.csv is missing"):
        rebuilt.prepare(prepared["gldv2"].directory, tmp_path / "n", data_root=prepared["tmp"] / "data", replica=True)
    with pytest.raises(ValueError, match="not a one-level manifest of 'gldv2'"):
        rebuilt.labels_dir = str(labels)
        rebuilt.prepare(prepared["gldv2_hier"].directory, tmp_path / "o", data_root=prepared["tmp"] / "data",
                        replica=True)
