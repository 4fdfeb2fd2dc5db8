"""CUB-200-2011: a generated replica through the real download -> prepare path; the retrieval
split by class (not train_test_split.txt)."""

import io
import shutil
import tarfile

import pandas as pd
import pytest
from PIL import Image

from datautil import replica_folder, unpacked
from rankrepro.data import datasets
from rankrepro.data.errors import ChecksumError
from rankrepro.data.datasets import cub
from rankrepro.data.manifest import read_manifest

CUB = datasets.load("cub")
TOP = "CUB_200_2011"


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """The replica folder (CUB_200_2011.tgz, replica.json) with 3 classes per split."""
    return replica_folder(tmp_path_factory.mktemp("replica"), "cub", classes_per_split=3, seed=1)


@pytest.fixture(scope="module")
def extracted(replica, tmp_path_factory):
    """A plain untar of the replica (the parent of CUB_200_2011)."""
    return unpacked(replica / "CUB_200_2011.tgz", tmp_path_factory.mktemp("extracted"))


def read_member(archive, name):
    with tarfile.open(archive) as tf:
        return tf.extractfile(f"{TOP}/{name}").read().decode()


def pairs(text):
    """``<id> <value>`` lines as {int id: value}, read independently of cub.py."""
    return {int(line.split(" ")[0]): line.split(" ", 1)[1] for line in text.splitlines()}


def copy_of(extracted, tmp_path):
    shutil.copytree(extracted, tmp_path / "copy")
    return tmp_path / "copy"


def test_facts():
    facts = datasets.facts()["cub"]
    assert facts == {"title": "CUB-200-2011", "source": "cub", "derived_from": None, "files": 1,
                     "protocol": "same-set", "levels": ["class"], "manual": False, "derive_inputs": []}
    (f,) = CUB.source_files()
    assert f.name == "CUB_200_2011.tgz" and f.checksum == "md5:97eceeb196236b17998738112f37df78"
    assert f.url == "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz"
    assert f.size == 1_150_585_339
    assert CUB.expected_counts == {"train": {"images": 5_864, "class": 100}, "test": {"images": 5_924, "class": 100}}
    assert "1hbzc_P1FuxMkcabkgn9ZKinBwW683j45" in cub.__doc__ and "train_test_split.txt" in cub.__doc__


def test_replica_layout(replica):
    archive = replica / "CUB_200_2011.tgz"
    with tarfile.open(archive) as tf:
        names = {m.name for m in tf.getmembers() if m.isfile()}
        first_jpg = next(n for n in sorted(names) if n.endswith(".jpg"))
        image = Image.open(io.BytesIO(tf.extractfile(first_jpg).read()))
    for name in ["images.txt", "image_class_labels.txt", "classes.txt", "bounding_boxes.txt", "train_test_split.txt"]:
        assert f"{TOP}/{name}" in names
    assert image.format == "JPEG" and image.size == (32, 32)
    paths, labels = pairs(read_member(archive, "images.txt")), pairs(read_member(archive, "image_class_labels.txt"))
    assert sorted(paths) == sorted(labels) == list(range(1, len(paths) + 1))
    assert {f"{TOP}/images/{p}" for p in paths.values()} == {n for n in names if n.endswith(".jpg")}
    assert sorted({int(c) for c in labels.values()}) == [1, 2, 3, 101, 102, 103]
    for i, path in paths.items():  # the folder NNN.Name carries the class id
        assert int(path.split(".")[0]) == int(labels[i])
    classes = pairs(read_member(archive, "classes.txt"))
    assert sorted(classes) == list(range(1, 201)) and classes[7] == "007.Replica_bird_007"
    assert len(pairs(read_member(archive, "bounding_boxes.txt"))[1].split(" ")) == 4


def test_download_and_prepare(replica, tmp_path):
    archive = replica / "CUB_200_2011.tgz"
    record = CUB.download(tmp_path / "data", replica_dir=replica)
    manifest = CUB.prepare(record, tmp_path / "manifest", data_root=tmp_path / "data", replica=True)
    assert manifest.root == (tmp_path / "data" / "cub" / TOP).resolve()
    assert manifest.meta["protocol"] == "same-set" and manifest.meta["levels"] == ["class"]
    paths, labels = pairs(read_member(archive, "images.txt")), pairs(read_member(archive, "image_class_labels.txt"))
    table = manifest.table
    assert table["path"].tolist() == [f"images/{paths[i]}" for i in sorted(paths)]
    assert table["label"].tolist() == [int(labels[i]) for i in sorted(paths)]
    assert table["split"].tolist() == ["train" if int(labels[i]) <= 100 else "test" for i in sorted(paths)]
    assert sorted(manifest.split("train").table["label"].unique()) == [1, 2, 3]
    assert sorted(manifest.split("test").table["label"].unique()) == [101, 102, 103]
    classes = pairs(read_member(archive, "classes.txt"))
    assert manifest.meta["class_names"] == [classes[i] for i in range(1, 201)]
    assert all(p.is_file() for p in manifest.paths())
    again = read_manifest(tmp_path / "manifest")
    pd.testing.assert_frame_equal(again.table, table)


def test_train_test_split_txt_is_ignored(extracted, tmp_path):
    top = extracted / TOP
    flags = pairs((top / "train_test_split.txt").read_text())
    labels = pairs((top / "image_class_labels.txt").read_text())
    # the replica's classification flags disagree with the retrieval split both ways
    assert any(flags[i] == "0" and int(labels[i]) <= 100 for i in flags)
    assert any(flags[i] == "1" and int(labels[i]) > 100 for i in flags)
    before = CUB.prepare(extracted, tmp_path / "a", data_root=tmp_path, replica=True).table
    copy = copy_of(extracted, tmp_path)
    (copy / TOP / "train_test_split.txt").write_text("".join(f"{i} {1 - int(f)}\n" for i, f in flags.items()))
    after = CUB.prepare(copy, tmp_path / "b", data_root=tmp_path, replica=True).table
    pd.testing.assert_frame_equal(before, after)


def test_images_and_labels_joined_by_id(extracted, tmp_path):
    copy = copy_of(extracted, tmp_path)
    labels_file = copy / TOP / "image_class_labels.txt"
    labels_file.write_text("\n".join(reversed(labels_file.read_text().splitlines())) + "\n")
    before = CUB.prepare(extracted, tmp_path / "a", data_root=tmp_path, replica=True).table
    after = CUB.prepare(copy, tmp_path / "b", data_root=tmp_path, replica=True).table
    pd.testing.assert_frame_equal(before, after)


@pytest.mark.parametrize("form", ["parent", "top"])
def test_prepare_from_extracted_folder(extracted, tmp_path, form):
    source = extracted if form == "parent" else extracted / TOP
    manifest = CUB.prepare(source, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert manifest.root == (extracted / TOP).resolve()
    assert len(manifest.table) == len((extracted / TOP / "images.txt").read_text().splitlines())
    assert not (tmp_path / "unused").exists()


def test_real_counts_enforced(extracted, tmp_path):
    with pytest.raises(ValueError, match=r"CUB-200-2011 train: expected 5,864 images, found \d+"):
        CUB.prepare(extracted, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_missing_label_file(extracted, tmp_path):
    copy = copy_of(extracted, tmp_path)
    (copy / TOP / "image_class_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match="image_class_labels.txt is missing"):
        CUB.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_bad_line_and_mismatched_ids(extracted, tmp_path):
    copy = copy_of(extracted, tmp_path)
    labels_file = copy / TOP / "image_class_labels.txt"
    good = labels_file.read_text()
    labels_file.write_text(good.replace("\n", "\n3 x\n", 1))
    with pytest.raises(ValueError, match=r"image_class_labels.txt line 2: expected '<image_id> <class>'"):
        CUB.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    labels_file.write_text(good.split("\n", 1)[1])  # image 1 has no label
    with pytest.raises(ValueError, match=r"list different image ids .*\[1\]"):
        CUB.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_not_a_cub_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="CUB_200_2011/images.txt"):
        CUB.prepare(tmp_path, tmp_path / "m", data_root=tmp_path)


def test_checksum_mismatch_is_named(replica, tmp_path):
    with pytest.raises(ChecksumError, match="CUB_200_2011.tgz"):
        CUB.download(tmp_path, url=(replica / "CUB_200_2011.tgz").as_uri())  # the real md5 cannot match
