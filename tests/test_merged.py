"""Merged-class datasets (PNP Tables 6-7): sop_merge3 on a real SOP replica manifest,
vehicleid_merge3 on a hand-built VehicleID-like manifest (independent of vehicleid.py)."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from rankrepro.data import datasets
from rankrepro.data.datasets import merged
from rankrepro.data.manifest import META_JSON, MANIFEST_CSV, read_manifest, write_manifest
from datautil import replica_archive

CLASSES_PER_SUPER = 4  # 48 train classes -> 16 triples, some spanning two super-classes
SOP_MERGE3 = datasets.load("sop_merge3")
VEHICLEID_MERGE3 = datasets.load("vehicleid_merge3")
VEHICLEID_TESTS = ("test_800", "test_1600", "test_2400")


@pytest.fixture(scope="module")
def sop_manifest(tmp_path_factory):
    """The manifest folder of a prepared SOP replica (the base of sop_merge3)."""
    tmp = tmp_path_factory.mktemp("sop")
    archive = tmp / "sop.zip"
    replica_archive("sop", archive, classes_per_super=CLASSES_PER_SUPER, seed=3)
    datasets.load("sop").prepare(archive, tmp / "manifest", data_root=tmp / "data", replica=True)
    return tmp / "manifest"


def vehicleid_like(tmp_path, train_vehicles, models, *, shuffle_seed=None, name="base"):
    """A VehicleID-like manifest (levels and protocol as vehicleid_merge3 states them): two images
    per train vehicle (ids ``train_vehicles``, models ``models``, -1 unknown), three nested test
    lists of vehicles with ids from 1000. Images are empty files under ``tmp_path/images``."""
    root = tmp_path / "images"
    rows = []
    for vehicle, model in zip(train_vehicles, models):
        rows += [(f"train/{vehicle}_{n}.jpg", "train", vehicle, model) for n in range(2)]
    for size, split in zip((2, 4, 6), VEHICLEID_TESTS):
        rows += [(f"test/{1000 + v}_{n}.jpg", split, 1000 + v, 500 + v % 3) for v in range(size) for n in range(2)]
    table = pd.DataFrame(rows, columns=["path", "split", "label", "level_1"])
    if shuffle_seed is not None:
        table = table.sample(frac=1, random_state=shuffle_seed).reset_index(drop=True)
    for path in table["path"]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    meta = {"dataset": "vehicleid", "root": str(root.resolve()), "levels": VEHICLEID_MERGE3.levels,
            "protocol": VEHICLEID_MERGE3.protocol, "replica": True, "model_names": {"7": "x"}}
    write_manifest(tmp_path / name, table, meta)
    return tmp_path / name


def labelled(manifest):
    """{(split, path): (label, level_1 ...)} of a manifest."""
    t = manifest.table
    return {(s, p): tuple(v) for s, p, v in zip(t["split"], t["path"], t.drop(columns=["path", "split"]).to_numpy())}


# -- the grouping rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, last", [(3, [1, 2, 3]), (4, [1, 2, 3, 4]), (5, [1, 2, 3, 4, 5]), (6, [4, 5, 6]),
                                     (7, [4, 5, 6, 7]), (8, [4, 5, 6, 7, 8]), (9, [7, 8, 9])])
def test_merge_groups_consecutive_triples_and_remainder(n, last):
    groups = merged.merge_groups(range(1, n + 1))
    assert groups[-1] == last and len(groups) == n // 3
    assert all(len(g) >= 3 for g in groups) and sum(groups, []) == list(range(1, n + 1))


def test_merge_groups_sorts_and_dedups():
    assert merged.merge_groups([9, 3, 3, 1, 7, 5, 9]) == [[1, 3, 5, 7, 9]]
    assert merged.merge_groups(np.array([30, 10, 20, 60, 50, 40])) == [[10, 20, 30], [40, 50, 60]]
    with pytest.raises(ValueError, match="cannot merge 2 classes"):
        merged.merge_groups([1, 2, 2])


# -- facts ---------------------------------------------------------------------------------------


def test_registry_and_facts():
    for name, base in (("sop_merge3", "sop"), ("vehicleid_merge3", "vehicleid")):
        dataset = datasets.load(name)
        facts = datasets.facts()[name]
        assert facts == json.loads(json.dumps(facts))
        assert facts["derived_from"] == base and facts["source"] is None and facts["files"] == 0
        assert dataset.expected_counts == {} and dataset.source_files() == []
        if base in datasets.names():  # the base's registered facts, looked up lazily
            assert facts["levels"] == datasets.load(base).levels and facts["protocol"] == datasets.load(base).protocol
    assert datasets.facts()["sop_merge3"]["levels"] == ["class", "super_class"]
    assert datasets.facts()["sop_merge3"]["protocol"] == "same-set"
    assert VEHICLEID_MERGE3.disjoint == tuple(("train", t) for t in VEHICLEID_TESTS)
    assert SOP_MERGE3.disjoint == (("train", "test"),)


# -- sop_merge3 on a real SOP replica manifest ---------------------------------------------------


def test_sop_merge3(sop_manifest, tmp_path):
    base = read_manifest(sop_manifest)
    out = SOP_MERGE3.prepare(sop_manifest, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert not (tmp_path / "unused").exists()
    assert out.meta["dataset"] == "sop_merge3" and out.meta["derived_from"] == "sop"
    assert out.meta["levels"] == base.meta["levels"] and out.meta["protocol"] == base.meta["protocol"]
    assert out.meta["root"] == base.meta["root"] and out.meta["replica"] is True
    assert out.meta["super_class_names"] == base.meta["super_class_names"] and out.meta["merge_group_size"] == 3
    assert all(p.is_file() for p in out.paths())

    # test rows: the base's, untouched; train rows: same paths and order
    pd.testing.assert_frame_equal(out.split("test").table, base.split("test").table)
    assert out.table["path"].tolist() == base.table["path"].tolist()
    assert out.table["split"].tolist() == base.table["split"].tolist()

    mapping = dict(sorted((int(k), v) for k, v in out.meta["merged_classes"].items()))
    originals = sorted(base.split("train").table["label"].unique().tolist())
    n = 12 * CLASSES_PER_SUPER
    assert originals == list(range(1, n + 1)) and len(mapping) == n // 3
    assert sorted(sum(mapping.values(), [])) == originals
    assert all(len(v) >= 3 and k == v[0] for k, v in mapping.items())
    assert list(mapping.values()) == [originals[i:i + 3] for i in range(0, n, 3)]
    to_merged = {o: k for k, v in mapping.items() for o in v}
    btrain, mtrain = base.split("train").table, out.split("train").table
    assert mtrain["label"].tolist() == [to_merged[o] for o in btrain["label"]]
    assert out.meta["counts"]["train"] == {"images": len(btrain), "classes": n // 3}
    assert out.meta["counts"]["test"] == base.meta["counts"]["test"]

    # merged ids: original train ids, so disjoint from the test labels
    assert set(mtrain["label"]) <= set(originals)
    assert not set(mtrain["label"]) & set(out.split("test").table["label"])

    # one super-class per merged class: its first member's; triple [4, 5, 6] spans super-classes 1 and 2
    assert (mtrain.groupby("label")["level_1"].nunique() == 1).all()
    first_parent = btrain.groupby("label")["level_1"].first()
    assert dict(zip(mtrain["label"], mtrain["level_1"])) == {k: first_parent[k] for k in mapping}
    assert set(btrain.loc[btrain.label.isin([4, 5, 6]), "level_1"]) == {1, 2}
    assert set(mtrain.loc[mtrain.label == 4, "level_1"]) == {1}

    again = read_manifest(tmp_path / "m")
    pd.testing.assert_frame_equal(again.table, out.table)
    assert again.meta == out.meta


def test_sop_merge3_is_deterministic_and_independent_of_row_order(sop_manifest, tmp_path):
    a = SOP_MERGE3.prepare(sop_manifest, tmp_path / "a", data_root=tmp_path, replica=True)
    b = SOP_MERGE3.prepare(sop_manifest, tmp_path / "b", data_root=tmp_path, replica=True)
    assert (tmp_path / "a" / MANIFEST_CSV).read_bytes() == (tmp_path / "b" / MANIFEST_CSV).read_bytes()
    assert (tmp_path / "a" / META_JSON).read_bytes() == (tmp_path / "b" / META_JSON).read_bytes()

    base = read_manifest(sop_manifest)
    shuffled = base.table.sample(frac=1, random_state=0).reset_index(drop=True)
    assert shuffled["path"].tolist() != base.table["path"].tolist()
    write_manifest(tmp_path / "shuffled_base", shuffled, {k: v for k, v in base.meta.items() if k != "counts"})
    c = SOP_MERGE3.prepare(tmp_path / "shuffled_base", tmp_path / "c", data_root=tmp_path, replica=True)
    assert c.meta["merged_classes"] == a.meta["merged_classes"]
    assert labelled(c) == labelled(a)
    assert c.table["path"].tolist() == shuffled["path"].tolist()  # the base's row order is kept


def test_cli_prepare_sop_merge3(sop_manifest, tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "rankrepro", "prepare", "sop_merge3", "--source", str(sop_manifest),
                          "--data-root", str(tmp_path / "data"), "--out", str(out), "--replica"],
                         capture_output=True, text=True, check=True)
    n = 12 * CLASSES_PER_SUPER
    counts = json.loads(run.stdout)
    assert counts["train"]["classes"] == n // 3 and counts["test"]["classes"] == n
    manifest = read_manifest(out)
    assert manifest.meta["dataset"] == "sop_merge3" and len(manifest.meta["merged_classes"]) == n // 3


def test_cli_missing_base_manifest_is_a_clear_error(tmp_path):
    missing, out = tmp_path / "results" / "manifests" / "sop", tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "rankrepro", "prepare", "sop_merge3", "--source", str(missing),
                          "--data-root", str(tmp_path / "data"), "--out", str(out), "--replica"],
                         capture_output=True, text=True)
    assert run.returncode != 0 and str(missing) in run.stderr and "prepare 'sop' first" in run.stderr
    assert not out.exists()


# -- errors: clear, nothing written --------------------------------------------------------------


def test_missing_base_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no manifest of 'sop' in {tmp_path / 'nope'}"):
        SOP_MERGE3.prepare(tmp_path / "nope", tmp_path / "m", data_root=tmp_path, replica=True)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / MANIFEST_CSV).write_text("path,split,label\n")
    with pytest.raises(FileNotFoundError, match="missing meta.json"):
        SOP_MERGE3.prepare(tmp_path / "half", tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


def test_wrong_base_manifest(sop_manifest, tmp_path):
    with pytest.raises(ValueError, match="manifest of 'sop', expected 'vehicleid'"):
        VEHICLEID_MERGE3.prepare(sop_manifest, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


def test_replica_base_needs_replica_flag(sop_manifest, tmp_path):
    with pytest.raises(ValueError, match="generated replica"):
        SOP_MERGE3.prepare(sop_manifest, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m").exists()


def test_base_with_levels_other_than_the_bases(tmp_path):
    source = vehicleid_like(tmp_path, range(1, 7), [1] * 6)
    meta = json.loads((source / META_JSON).read_text())
    (source / META_JSON).write_text(json.dumps({**meta, "levels": ["vehicle", "colour"]}))
    with pytest.raises(ValueError, match="levels"):
        VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


def test_too_few_train_classes(tmp_path):
    source = vehicleid_like(tmp_path, [1, 2], [1, 1])
    with pytest.raises(ValueError, match="cannot merge 2 classes"):
        VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


def test_train_class_with_two_parents(tmp_path):
    source = vehicleid_like(tmp_path, range(1, 7), [1] * 6)
    table = pd.read_csv(source / MANIFEST_CSV)
    table.loc[0, "level_1"] = 2  # vehicle 1's first image says model 2, its second model 1
    table.to_csv(source / MANIFEST_CSV, index=False)
    with pytest.raises(ValueError, match="several level_1"):
        VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


def test_missing_image_reported(tmp_path):
    source = vehicleid_like(tmp_path, range(1, 7), [1] * 6)
    (tmp_path / "images" / "train" / "3_1.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="1 listed images are missing"):
        VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m").exists()


# -- vehicleid_merge3 on a hand-built VehicleID-like manifest ------------------------------------


@pytest.mark.parametrize("n", [7, 8])
def test_vehicleid_merge3_remainder_joins_last_group(tmp_path, n):
    vehicles = [10 * v for v in range(1, n + 1)]  # ids need not be contiguous
    models = [-1, 5, 6, 7, 8, 9, 4, 3][:n]        # vehicle 10 has no model label
    source = vehicleid_like(tmp_path, vehicles, models)
    base = read_manifest(source)
    out = VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    assert out.meta["merged_classes"] == {"10": [10, 20, 30], "40": vehicles[3:]}
    assert out.meta["levels"] == VEHICLEID_MERGE3.levels and out.meta["protocol"] == VEHICLEID_MERGE3.protocol
    assert out.meta["model_names"] == {"7": "x"}  # the base's own entries are carried over
    for split in VEHICLEID_TESTS:
        pd.testing.assert_frame_equal(out.split(split).table, base.split(split).table)
    train = out.split("train").table
    assert sorted(train["label"].unique()) == [10, 40]
    assert train.groupby("label")["label"].size().to_dict() == {10: 6, 40: 2 * (n - 3)}
    # models: the first member's that is known (vehicle 10's is not: vehicle 20's); then vehicle 40's
    assert train.groupby("label")["level_1"].unique().map(list).to_dict() == {10: [5], 40: [7]}
    assert out.meta["counts"]["train"] == {"images": 2 * n, "classes": 2}


def test_vehicleid_merge3_unknown_parent_stays_unknown(tmp_path):
    source = vehicleid_like(tmp_path, range(1, 7), [-1, -1, -1, 2, -1, 3])
    out = VEHICLEID_MERGE3.prepare(source, tmp_path / "m", data_root=tmp_path, replica=True)
    train = out.split("train").table
    assert train.groupby("label")["level_1"].unique().map(list).to_dict() == {1: [-1], 4: [2]}


def test_vehicleid_merge3_is_independent_of_row_order(tmp_path):
    vehicles, models = [5, 3, 11, 2, 8, 13, 7, 1], [1, 1, 2, 2, 3, 3, 4, 4]
    a = VEHICLEID_MERGE3.prepare(vehicleid_like(tmp_path, vehicles, models, name="a_base"), tmp_path / "a",
                                 data_root=tmp_path, replica=True)
    b = VEHICLEID_MERGE3.prepare(vehicleid_like(tmp_path, vehicles, models, shuffle_seed=1, name="b_base"),
                                 tmp_path / "b", data_root=tmp_path, replica=True)
    assert a.meta["merged_classes"] == b.meta["merged_classes"] == {"1": [1, 2, 3], "5": [5, 7, 8, 11, 13]}
    assert labelled(a) == labelled(b)
    assert b.table["path"].tolist() != a.table["path"].tolist()
