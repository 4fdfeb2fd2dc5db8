"""Cars196: both published layouts (legacy car_ims + cars_annos.mat, Kaggle class folders) from
generated replicas; the retrieval split by class, the published train/test flag ignored."""

import csv
import io
import shutil
import tarfile

import numpy as np
import pandas as pd
import pytest
import scipy.io
from PIL import Image

from datautil import replica_folder, unpacked
from rankrepro.data import datasets
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.data.datasets import cars

CARS = datasets.load("cars")
KAGGLE_ZIP = "stanford-car-dataset-by-classes-folder.zip"
FOLDERS = "car_data/car_data"


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """The legacy replica folder: car_ims.tgz, cars_annos.mat, replica.json."""
    return replica_folder(tmp_path_factory.mktemp("legacy"), "cars", classes_per_split=3, seed=1)


@pytest.fixture(scope="module")
def kaggle(tmp_path_factory):
    """The Kaggle replica folder (the zip, replica.json) and a plain unzip of it."""
    out = tmp_path_factory.mktemp("kaggle")
    replica_folder(out / "replica", "cars", layout="folders", classes_per_split=3, seed=1)
    unpacked(out / "replica" / KAGGLE_ZIP, out / "unzipped")
    return out


def mat_rows(path):
    """cars_annos.mat read with scipy directly: [(relative_im_path, class, test)], class_names."""
    mat = scipy.io.loadmat(path)
    rows = [(str(a["relative_im_path"][0]), int(a["class"][0, 0]), int(a["test"][0, 0])) for a in mat["annotations"][0]]
    return rows, [str(n[0]) for n in mat["class_names"][0]]


def csv_rows(folder, split):
    with open(folder / f"anno_{split}.csv", newline="") as f:
        return list(csv.reader(f))


def test_facts_and_how_to_get():
    facts = datasets.facts()["cars"]
    assert facts == {"title": "Cars196", "source": "cars", "derived_from": None, "files": 2,
                     "protocol": "same-set", "levels": ["class"], "manual": True, "derive_inputs": []}
    files = {f.name: f for f in CARS.source_files()}
    assert list(files) == ["car_ims.tgz", "cars_annos.mat"]  # the archive is extracted before the .mat is linked
    assert files["car_ims.tgz"].checksum == "md5:d5c8f0aa497503f355e17dc7886c3f14" and files["car_ims.tgz"].extract
    assert files["cars_annos.mat"].checksum == "md5:b407c6086d669747186bd1d764ff9dbc"
    assert not files["cars_annos.mat"].extract and all(f.url is None for f in files.values())
    for needle in ["car_ims.tgz", "cars_annos.mat", "imagenet.stanford.edu",
                   "jutrera/stanford-car-dataset-by-classes-folder", "datasets.cars.extracted", "names.csv"]:
        assert needle in CARS.how_to_get
    assert CARS.expected_counts == {"train": {"images": 8_054, "class": 98}, "test": {"images": 8_131, "class": 98}}


def test_manual_download_message(legacy, tmp_path):
    with pytest.raises(ManualDownloadRequired) as err:
        CARS.download(tmp_path)
    text = str(err.value)
    folder = tmp_path.absolute() / "downloads" / "cars"
    assert f"car_ims.tgz: missing; put it at {folder / 'car_ims.tgz'}" in text
    assert f"cars_annos.mat: missing; put it at {folder / 'cars_annos.mat'}" in text
    assert "md5:d5c8f0aa497503f355e17dc7886c3f14" in text and "Kaggle" in text and "datasets.cars.extracted" in text
    # a file that is not the real one is refused by its md5
    folder.mkdir(parents=True)
    shutil.copy(legacy / "cars_annos.mat", folder / "cars_annos.mat")
    with pytest.raises(ManualDownloadRequired, match="cars_annos.mat: checksum mismatch"):
        CARS.download(tmp_path)
    assert not (folder / "download.json").exists()


def test_legacy_replica_layout(legacy):
    rows, names = mat_rows(legacy / "cars_annos.mat")
    assert len(names) == 196 and names[1] == "Replica Make002 C/V Cargo Van 2012"
    with tarfile.open(legacy / "car_ims.tgz") as tf:
        files = {m.name: m for m in tf.getmembers() if m.isfile()}
        image = Image.open(io.BytesIO(tf.extractfile(sorted(files)[0]).read()))
    assert image.format == "JPEG" and image.size == (32, 32)
    assert [r[0] for r in rows] == sorted(files) == [f"car_ims/{i:06d}.jpg" for i in range(1, len(rows) + 1)]
    assert sorted({r[1] for r in rows}) == [1, 2, 3, 99, 100, 101]
    fields = scipy.io.loadmat(legacy / "cars_annos.mat")["annotations"].dtype.names
    assert fields == ("relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test")
    # the official flag disagrees with the retrieval split both ways
    assert any(c <= 98 and t == 1 for _, c, t in rows) and any(c > 98 and t == 0 for _, c, t in rows)


def test_legacy_download_and_prepare(legacy, tmp_path):
    record = CARS.download(tmp_path / "data", replica_dir=legacy)
    manifest = CARS.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert manifest.root == (tmp_path / "data" / "cars").resolve()
    rows, names = mat_rows(legacy / "cars_annos.mat")
    table = manifest.table
    assert table["path"].tolist() == [r[0] for r in rows]
    assert table["label"].tolist() == [r[1] for r in rows]
    assert table["split"].tolist() == ["train" if r[1] <= 98 else "test" for r in rows]
    assert manifest.meta["class_names"] == names and manifest.meta["layout"] == "legacy"
    assert all(p.is_file() for p in manifest.paths())


def test_legacy_test_flag_is_ignored(legacy, tmp_path):
    shutil.copy(legacy / "cars_annos.mat", tmp_path / "cars_annos.mat")
    with tarfile.open(legacy / "car_ims.tgz") as tf:
        tf.extractall(tmp_path, filter="data")
    before = CARS.prepare(tmp_path, tmp_path / "a", data_root=tmp_path / "unused", replica=True).table
    mat = scipy.io.loadmat(tmp_path / "cars_annos.mat")
    flags = mat["annotations"]["test"]  # new arrays: loadmat's 1-byte arrays may share an interned buffer
    for i in range(flags.shape[1]):
        flags[0, i] = np.array([[1 - int(flags[0, i][0, 0])]], dtype=np.uint8)
    scipy.io.savemat(tmp_path / "cars_annos.mat", {k: v for k, v in mat.items() if not k.startswith("__")})
    flipped, original = mat_rows(tmp_path / "cars_annos.mat")[0], mat_rows(legacy / "cars_annos.mat")[0]
    assert [r[2] for r in flipped] == [1 - r[2] for r in original]
    assert [r[:2] for r in flipped] == [r[:2] for r in original]
    after = CARS.prepare(tmp_path, tmp_path / "b", data_root=tmp_path / "unused", replica=True).table
    pd.testing.assert_frame_equal(before, after)
    assert not (tmp_path / "unused").exists()


def test_kaggle_replica_layout(kaggle):
    folder = kaggle / "unzipped"
    names = (folder / "names.csv").read_text().splitlines()
    assert len(names) == 196 and names[99] == "Replica Make100 C/V Cargo Van 2012"
    rows = {s: csv_rows(folder, s) for s in ("train", "test")}
    assert all(len(r) == 6 and r[0].endswith(".jpg") and r[-1].isdigit() for s in rows for r in rows[s])  # no header
    for split, listed in rows.items():
        images = folder / FOLDERS / split
        on_disk = sorted(p.relative_to(images).as_posix() for p in images.rglob("*.jpg"))
        assert on_disk == sorted(f"{names[int(r[-1]) - 1].replace('/', '-')}/{r[0]}" for r in listed)
    assert (folder / FOLDERS / "train" / "Replica Make002 C-V Cargo Van 2012").is_dir()


def test_kaggle_prepare_from_extracted_folder(kaggle, legacy, tmp_path):
    folder = kaggle / "unzipped"
    manifest = CARS.prepare(folder, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert manifest.root == folder.resolve() and manifest.meta["layout"] == "folders"
    names = (folder / "names.csv").read_text().splitlines()
    expected = [(f"{FOLDERS}/{s}/{names[int(r[-1]) - 1].replace('/', '-')}/{r[0]}", int(r[-1]))
                for s in ("train", "test") for r in csv_rows(folder, s)]
    table = manifest.table
    assert list(zip(table["path"], table["label"])) == expected
    assert table["split"].tolist() == ["train" if c <= 98 else "test" for _, c in expected]
    assert manifest.meta["class_names"] == names
    assert all(p.is_file() for p in manifest.paths())
    assert not (tmp_path / "unused").exists()
    # the same seed: the legacy replica holds the same labelled images
    legacy_rows, _ = mat_rows(legacy / "cars_annos.mat")
    assert sorted(table["label"]) == sorted(r[1] for r in legacy_rows)
    # the parent of the unzipped folder is found too
    assert CARS.prepare(kaggle, tmp_path / "m2", data_root=tmp_path / "unused", replica=True).root == folder.resolve()


def test_kaggle_through_download(kaggle, tmp_path):
    record = CARS.download(tmp_path / "data", replica_dir=kaggle / "replica")
    manifest = CARS.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert manifest.root == (tmp_path / "data" / "cars").resolve() and manifest.meta["layout"] == "folders"
    assert all(p.is_file() for p in manifest.paths())


def test_kaggle_official_split_is_ignored(kaggle, tmp_path):
    """A row of anno_test.csv with a class <= 98 is a train image (and vice versa)."""
    folder = kaggle / "unzipped"
    table = CARS.prepare(folder, tmp_path / "m", data_root=tmp_path, replica=True).table
    in_test_folder = table["path"].str.startswith(f"{FOLDERS}/test/")
    assert (in_test_folder & (table["split"] == "train")).any()
    assert (~in_test_folder & (table["split"] == "test")).any()


def test_kaggle_header_accepted_bad_row_named(kaggle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(kaggle / "unzipped", copy)
    before = CARS.prepare(copy, tmp_path / "a", data_root=tmp_path, replica=True).table
    train = copy / "anno_train.csv"
    text = train.read_text()
    train.write_text("file,x1,y1,x2,y2,class\n" + text)
    pd.testing.assert_frame_equal(before, CARS.prepare(copy, tmp_path / "b", data_root=tmp_path, replica=True).table)
    train.write_text(text + "00999.jpg,1,2,3,4\n")
    line = len(text.splitlines()) + 1
    with pytest.raises(ValueError, match=rf"anno_train.csv line {line}: expected file,x1,y1,x2,y2,class"):
        CARS.prepare(copy, tmp_path / "c", data_root=tmp_path, replica=True)
    assert not (tmp_path / "c" / "meta.json").exists()


def test_kaggle_missing_split_file(kaggle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(kaggle / "unzipped", copy)
    (copy / "anno_test.csv").unlink()
    with pytest.raises(FileNotFoundError, match="anno_test.csv is missing"):
        CARS.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_real_counts_enforced(kaggle, tmp_path):
    with pytest.raises(ValueError, match=r"Cars196 train: expected 8,054 images, found \d+"):
        CARS.prepare(kaggle / "unzipped", tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_not_a_cars_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="cars_annos.mat .*names.csv"):
        CARS.prepare(tmp_path / "empty", tmp_path / "m", data_root=tmp_path)


def test_bad_mat_named(tmp_path):
    (tmp_path / "cars_annos.mat").write_bytes(b"not a mat file")
    with pytest.raises(ValueError, match="cars_annos.mat: cannot read it as a MATLAB file"):
        CARS.prepare(tmp_path, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    scipy.io.savemat(tmp_path / "cars_annos.mat", {"annotations": np.zeros((1, 1))})
    with pytest.raises(ValueError, match="no variable 'class_names'"):
        CARS.prepare(tmp_path, tmp_path / "m", data_root=tmp_path / "unused", replica=True)


def test_layouts_replicate_deterministically(tmp_path):
    assert CARS.write_replica(tmp_path / "a", layout="folders") == CARS.write_replica(tmp_path / "b", layout="folders")
    with pytest.raises(ValueError, match="layout"):
        CARS.make_replica(tmp_path / "c", layout="nope")
    assert cars.class_folder("Ram C/V Cargo Van Minivan 2012") == "Ram C-V Cargo Van Minivan 2012"
