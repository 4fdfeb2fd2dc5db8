"""iNaturalist 2018 (inat, inat_base, inat_full): one generated replica through the real
download -> prepare path, shared by the three registrations; facts read from the replica's
archives directly (tarfile/zipfile/json), not through inat.py."""

import io
import json
import shutil
import tarfile
import zipfile

import pytest

from rankrepro.data import datasets
from rankrepro.data.datasets import inat
from rankrepro.data.manifest import META_JSON

NAMES = ["inat", "inat_base", "inat_full"]
TAXONOMY = ["genus", "family", "order", "class", "phylum", "kingdom"]
SPLITS = {"train": "Inat_dataset_splits/Inaturalist_train_set1.txt",
          "test": "Inat_dataset_splits/Inaturalist_test_set1.txt"}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(replica folder, data root, {name: manifest}): one replica, one download, one tree; the three
    variants prepared from it."""
    tmp = tmp_path_factory.mktemp("inat")
    datasets.load("inat").write_replica(tmp / "replica")
    record = datasets.load("inat_full").download(tmp / "data", replica_dir=tmp / "replica")
    manifests = {name: datasets.load(name).prepare(record, tmp / name, data_root=tmp / "data", replica=True)
                 for name in NAMES}
    return tmp / "replica", tmp / "data", manifests


def read_json(replica, name):
    """``train2018.json`` / ``val2018.json`` out of its replica archive."""
    with tarfile.open(replica / f"{name}.tar.gz") as tf:
        assert tf.getnames() == [name]
        return json.load(tf.extractfile(name))


def split_lines(replica, split):
    with zipfile.ZipFile(replica / "Inat_dataset_splits.zip") as zf:
        return zf.read(SPLITS[split]).decode().splitlines()


def truth(replica):
    """{file_name: category_id} over both JSONs and {category_id: category}, read by hand."""
    labels, categories = {}, {}
    for name in ("train2018.json", "val2018.json"):
        doc = read_json(replica, name)
        assert set(doc) == {"info", "images", "annotations", "categories", "licenses"}
        by_id = {a["image_id"]: a["category_id"] for a in doc["annotations"]}
        labels.update({image["file_name"]: by_id[image["id"]] for image in doc["images"]})
        categories.update({c["id"]: c for c in doc["categories"]})
    return labels, categories


def test_three_variants_share_their_files():
    loaded = [datasets.load(name) for name in NAMES]
    assert all(type(d) is inat.INat for d in loaded)
    assert {d.source_name for d in loaded} == {"inat"}
    assert {json.dumps(d.facts()["source"]) for d in loaded} == {'"inat"'}
    files = [d.source_files() for d in loaded]
    assert files[0] == files[1] == files[2]
    by_name = {f.name: f for f in files[0]}
    assert set(by_name) == {"train_val2018.tar.gz", "train2018.json.tar.gz", "val2018.json.tar.gz",
                            "Inat_dataset_splits.zip"}
    assert by_name["train_val2018.tar.gz"].checksum == "md5:b1c6952ce38f31868cc50ea72d066cc3"
    assert by_name["train2018.json.tar.gz"].checksum == "md5:bfa29d89d629cbf04d826a720c0a68b0"
    assert by_name["val2018.json.tar.gz"].checksum == "md5:f2ed8bfe3e9901cdefceb4e53cd3775d"
    assert by_name["Inat_dataset_splits.zip"].checksum is None
    assert "1sXfkBTFDrRU3__-NUs1qBP3sf_0uMB98" in by_name["Inat_dataset_splits.zip"].url
    assert all(f.extract and f.into == "" for f in files[0])
    assert [d.levels for d in loaded] == [["species"], ["species", "supercategory"],
                                          ["species", "genus", "family", "order", "class", "phylum", "kingdom"]]
    assert {d.protocol for d in loaded} == {"same-set"}


def test_published_counts():
    common = {"train": {"images": 325_846, "species": 5_690}, "test": {"images": 136_093, "species": 2_452}}
    assert datasets.load("inat").expected_counts == common
    assert datasets.load("inat_base").expected_counts == {"train": {**common["train"], "supercategory": 13},
                                                          "test": common["test"]}
    full = datasets.load("inat_full").expected_counts
    assert [full["train"][level] for level in ["species", *TAXONOMY]] == [5690, 3438, 961, 249, 54, 23, 5]
    assert full["test"] == common["test"]


def test_replica_layout(prepared):
    replica, _, _ = prepared
    with tarfile.open(replica / "train_val2018.tar.gz") as tf:
        images = {n for n in tf.getnames() if n.endswith(".jpg")}
    labels, categories = truth(replica)
    train, test = split_lines(replica, "train"), split_lines(replica, "test")
    assert set(train) | set(test) == images == set(labels)          # the split covers the union of the JSONs
    assert not set(train) & set(test) and len(set(train)) == len(train)
    for path in images:
        top, sup, cid, name = path.split("/")
        assert top == "train_val2018" and int(cid) == labels[path] and categories[int(cid)]["supercategory"] == sup
        assert len(name) == 32 + 4
    assert set(categories[6001]) == {"id", "name", "supercategory", *TAXONOMY}
    assert 6001 not in labels.values()                                # a category without images
    val = read_json(replica, "val2018.json")
    assert any(image["file_name"] in train for image in val["images"])  # train takes val images too


def test_manifests_follow_the_split_files_and_jsons(prepared):
    replica, data_root, manifests = prepared
    labels, _ = truth(replica)
    for name, manifest in manifests.items():
        assert manifest.root == (data_root / "inat").resolve()
        assert manifest.meta["dataset"] == name and manifest.meta["protocol"] == "same-set"
        for split in ("train", "test"):
            part = manifest.split(split).table
            lines = split_lines(replica, split)
            assert part["path"].tolist() == lines
            assert part["label"].tolist() == [labels[p] for p in lines]
            assert part["label"].tolist() == [int(p.split("/")[2]) for p in lines]
        assert all(p.is_file() for p in manifest.paths())
    assert sorted(manifests["inat"].split("train").table["label"].unique()) == [1150, 3012, 3020, 7477, 7480]
    assert sorted(manifests["inat"].split("test").table["label"].unique()) == [1163, 3045, 5500, 7490]


def test_inat_base_levels(prepared):
    replica, _, manifests = prepared
    manifest = manifests["inat_base"]
    assert manifest.meta["supercategory_names"] == ["Aves", "Fungi", "Insecta", "Plantae"]  # sorted folders
    table = manifest.table
    assert table["level_1"].tolist() == [["Aves", "Fungi", "Insecta", "Plantae"].index(p.split("/")[1])
                                         for p in table["path"]]
    assert sorted(manifest.split("train").table["level_1"].unique()) == [0, 2, 3]  # no Fungi in train
    assert sorted(manifest.split("test").table["level_1"].unique()) == [0, 1, 2, 3]


def test_inat_full_levels(prepared):
    replica, _, manifests = prepared
    manifest = manifests["inat_full"]
    _, categories = truth(replica)
    # hand-checked: names of every category (Bufo bufo has no image but its names count), sorted
    assert manifest.meta["kingdom_names"] == ["Animalia", "Fungi", "Plantae"]
    assert manifest.meta["class_names"] == ["Agaricomycetes", "Amphibia", "Aves", "Insecta", "Magnoliopsida"]
    assert manifest.meta["genus_names"] == ["Amanita", "Apis", "Bombus", "Bufo", "Fagus", "Parus", "Quercus",
                                            "Turdus"]
    table = manifest.table
    for i, level in enumerate(TAXONOMY, 1):
        names = sorted({c[level] for c in categories.values()})
        assert manifest.meta[f"{level}_names"] == names
        assert table[f"level_{i}"].tolist() == [names.index(categories[c][level]) for c in table["label"]]
    genus = dict(zip(table["label"], table["level_1"]))
    assert genus[7477] == genus[7480] == 6             # Quercus, both train
    assert genus[3020] == genus[3045] == 7             # Turdus, across the split
    assert genus[7490] == 4 and dict(zip(table["label"], table["level_6"]))[5500] == 1  # Fagus; Fungi
    assert "supercategory_names" not in manifest.meta and "genus_names" not in manifests["inat"].meta


@pytest.fixture
def copy(prepared, tmp_path):
    """A copy of the prepared tree, as an already-extracted folder."""
    _, data_root, _ = prepared
    out = tmp_path / "copy"
    shutil.copytree(data_root / "inat", out, ignore=shutil.ignore_patterns(".extracted"))
    return out


def test_prepare_from_extracted_copy(copy, tmp_path):
    manifest = datasets.load("inat_full").prepare(copy, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert manifest.root == copy.resolve() and len(manifest.table) == 32
    assert not (tmp_path / "unused").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_path_absent_from_the_jsons_is_an_error(copy, tmp_path, name):
    split = copy / SPLITS["test"]
    lines = split.read_text().splitlines()
    stray = "train_val2018/Aves/3045/00000000000000000000000000000000.jpg"
    split.write_text("\n".join([*lines[:2], stray, *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"Inaturalist_test_set1\.txt, line 3: .*00000000\.jpg is in neither "
                                         r".*train2018\.json nor .*val2018\.json"):
        datasets.load(name).prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_folder_disagreeing_with_the_jsons_is_an_error(copy, tmp_path):
    split = copy / SPLITS["train"]
    first = split.read_text().splitlines()[0]
    top, sup, cid, file = first.split("/")
    moved = f"{top}/{sup}/9999/{file}"
    (copy / moved).parent.mkdir(parents=True)
    shutil.move(copy / first, copy / moved)
    split.write_text(split.read_text().replace(first, moved))
    for name in ("train2018.json", "val2018.json"):
        (copy / name).write_text((copy / name).read_text().replace(f'"{first}"', f'"{moved}"'))
    with pytest.raises(ValueError, match=f"Inaturalist_train_set1.txt, line 1: .* folder 9999 .* category {cid}"):
        datasets.load("inat").prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / META_JSON).exists()


@pytest.mark.parametrize("missing", [SPLITS["train"], SPLITS["test"], "val2018.json"])
def test_a_missing_file_is_named(copy, tmp_path, missing):
    (copy / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing.split("/")[-1].replace(".", r"\.") + " is missing"):
        datasets.load("inat_base").prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_a_line_listed_twice_is_an_error(copy, tmp_path):
    split = copy / SPLITS["train"]
    lines = split.read_text().splitlines()
    split.write_text("\n".join([*lines, "", lines[1]]) + "\n")
    with pytest.raises(ValueError, match=f"line {len(lines) + 2}: .* listed twice \\(first on line 2\\)"):
        datasets.load("inat").prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)


def test_conflicting_taxonomy_is_an_error(copy, tmp_path):
    doc = json.loads((copy / "val2018.json").read_text())
    next(c for c in doc["categories"] if c["id"] == 7490)["genus"] = "Castanea"
    (copy / "val2018.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="category 7490 has different taxonomy"):
        datasets.load("inat_full").prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)


def test_real_counts_enforced(copy, tmp_path):
    with pytest.raises(ValueError, match=r"iNat-full train: expected 325,846 images, found 18"):
        datasets.load("inat_full").prepare(copy, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_replica_options_change_the_images(tmp_path):
    dataset = datasets.load("inat")
    a = dataset.write_replica(tmp_path / "a")
    b = dataset.write_replica(tmp_path / "b", seed=1)
    assert a["train_val2018.tar.gz"] != b["train_val2018.tar.gz"]
    with tarfile.open(tmp_path / "b" / "train_val2018.tar.gz") as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith(".jpg"))
        from PIL import Image
        assert Image.open(io.BytesIO(tf.extractfile(member).read())).size == (32, 32)
