"""Stanford Online Products: a generated replica through the real download -> prepare path."""

import io
import json
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from rankrepro.data import datasets, replicas
from rankrepro.data.checksums import verify
from rankrepro.data.datasets import sop
from rankrepro.data.manifest import read_manifest
from rankrepro.registry import UnknownNameError
from datautil import replica_archive

CLASSES_PER_SUPER = 3
SOP = datasets.load("sop")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """(archive path, checksum) of a small SOP replica."""
    archive = tmp_path_factory.mktemp("replica") / "sop_replica.zip"
    checksum = replica_archive("sop", archive, classes_per_super=CLASSES_PER_SUPER, seed=1)
    return archive, checksum


@pytest.fixture(scope="module")
def extracted(replica, tmp_path_factory):
    """A plain unzip of the replica (the parent of Stanford_Online_Products)."""
    out = tmp_path_factory.mktemp("extracted")
    with zipfile.ZipFile(replica[0]) as zf:
        zf.extractall(out)
    return out


def listed_rows(archive, split):
    """The split file of the archive, read independently of sop.py."""
    with zipfile.ZipFile(archive) as zf:
        text = zf.read(f"Stanford_Online_Products/Ebay_{split}.txt").decode()
    header, *lines = text.splitlines()
    assert header == "image_id class_id super_class_id path"
    return [line.split(" ") for line in lines]


def listed_rows_of(extracted):
    """The split-file lines (train then test) of an extracted copy."""
    top = extracted / "Stanford_Online_Products"
    return [line for split in ("train", "test")
            for line in (top / f"Ebay_{split}.txt").read_text().splitlines()[1:]]


def test_registry():
    assert "sop" in datasets.names()
    assert type(SOP) is sop.SOP and SOP.name == "sop"
    assert datasets.DATASETS.get("sop").builder is sop.SOP
    with pytest.raises(KeyError, match="sop"):
        datasets.load("nope")
    with pytest.raises(UnknownNameError, match="registered: .*sop"):
        datasets.load("nope")
    with pytest.raises(RuntimeError, match=r"load\(name\)"):
        sop.SOP().name  # built directly: no registered name


def test_facts_are_json_and_need_no_torch():
    facts = datasets.facts()["sop"]
    assert facts == json.loads(json.dumps(facts))
    assert facts["source"] == "sop" and facts["files"] == 1 and facts["protocol"] == "same-set"
    assert [f.name for f in SOP.source_files()] == ["Stanford_Online_Products.zip"]
    assert facts["levels"] == ["class", "super_class"] and facts["manual"] is False
    assert SOP.source_files()[0].checksum == "md5:7f73d41a2f44250d4779881525aea32e"
    code = ("import sys, json; from rankrepro.data import datasets; json.dumps(datasets.facts()); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_replica_is_deterministic_and_in_sop_layout(replica, tmp_path):
    archive, checksum = replica
    assert checksum.startswith("sha256:") and verify(archive, checksum)
    assert archive.with_name(archive.name + ".sha256").read_text().strip() == checksum
    again = replica_archive("sop", tmp_path / "a.zip", classes_per_super=CLASSES_PER_SUPER, seed=1)
    other = replica_archive("sop", tmp_path / "b.zip", classes_per_super=CLASSES_PER_SUPER, seed=2)
    assert again == checksum != other
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        image = Image.open(io.BytesIO(zf.read(next(n for n in sorted(names) if n.endswith(".JPG")))))
    top = "Stanford_Online_Products/"
    for name in ["Ebay_train.txt", "Ebay_test.txt", "Ebay_info.txt", "README", "LICENSE"]:
        assert top + name in names
    folders = {n.split("/")[1] for n in names if n.endswith(".JPG")}
    assert folders == {f"{kind}_final" for kind in sop.SUPER_CLASS_NAMES}
    assert image.format == "JPEG" and image.size == (32, 32)
    train, test = listed_rows(archive, "train"), listed_rows(archive, "test")
    assert len(listed_rows(archive, "info")) == len(train) + len(test)
    assert {top + r[3] for r in train + test} == {n for n in names if n.endswith(".JPG")}
    train_ids, test_ids = sorted({int(r[1]) for r in train}), sorted({int(r[1]) for r in test})
    n_classes = 12 * CLASSES_PER_SUPER
    assert train_ids == list(range(1, n_classes + 1))
    assert test_ids == list(range(n_classes + 1, 2 * n_classes + 1))


def test_replica_images_depend_on_class():
    rng = np.random.default_rng(0)
    pixels = {c: [np.asarray(Image.open(io.BytesIO(replicas.tiny_jpeg(rng, c, 32))), float) for _ in range(4)]
              for c in (1, 2)}
    within = np.mean([np.abs(a - b).mean() for a, b in zip(pixels[1], pixels[1][1:])])
    across = np.mean([np.abs(a.mean((0, 1)) - b.mean((0, 1))).mean() for a, b in zip(pixels[1], pixels[2])])
    assert across > 10 and within < 60  # colours differ by class; same-class images stay alike


def test_download_and_prepare_replica(replica, http_server, tmp_path):
    archive, checksum = replica
    url = http_server.add("/sop.zip", archive.read_bytes())
    data_root = tmp_path / "data"
    path = SOP.download(data_root, url=url, checksum=checksum)
    assert path == data_root / "downloads" / "sop" / "download.json"
    assert (data_root / "downloads" / "sop" / "Stanford_Online_Products.zip").is_file()
    manifest = SOP.prepare(path, tmp_path / "manifest", data_root=data_root, replica=True)

    assert manifest.root == (data_root / "sop" / "Stanford_Online_Products").resolve()
    assert manifest.meta["levels"] == ["class", "super_class"]
    assert manifest.meta["protocol"] == "same-set" and manifest.meta["replica"] is True
    assert manifest.meta["super_class_names"] == sop.SUPER_CLASS_NAMES
    for split in ("train", "test"):
        rows = listed_rows(archive, split)
        assert manifest.meta["counts"][split] == {"images": len(rows), "classes": 12 * CLASSES_PER_SUPER}
        part = manifest.split(split).table
        assert part["path"].tolist() == [r[3] for r in rows]
        assert part["label"].tolist() == [int(r[1]) for r in rows]
        assert part["level_1"].tolist() == [int(r[2]) for r in rows]
        assert sorted(part["level_1"].unique()) == list(range(1, 13))
    assert all(p.is_file() for p in manifest.paths())
    train, test = manifest.split("train").table, manifest.split("test").table
    assert not set(train["label"]) & set(test["label"])
    assert manifest.labels().shape == (len(manifest.table), 2)

    again = read_manifest(tmp_path / "manifest")
    pd.testing.assert_frame_equal(again.table, manifest.table)
    assert again.meta == manifest.meta
    # a second prepare reuses the extracted copy
    assert SOP.prepare(path, tmp_path / "manifest2", data_root=data_root, replica=True).root == manifest.root


@pytest.mark.parametrize("form", ["parent", "top"])
def test_prepare_from_extracted_folder(extracted, tmp_path, form):
    source = extracted if form == "parent" else extracted / "Stanford_Online_Products"
    manifest = SOP.prepare(source, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert manifest.root == (extracted / "Stanford_Online_Products").resolve()
    assert len(manifest.table) == len(listed_rows_of(extracted))
    assert not (tmp_path / "unused").exists()


def test_real_counts_enforced(extracted, tmp_path):
    with pytest.raises(ValueError, match=r"SOP train: expected 59,551 images, found \d+"):
        SOP.prepare(extracted, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_missing_image_reported(extracted, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(extracted, copy)
    first = listed_rows_of(copy)[0].split(" ")[3]
    (copy / "Stanford_Online_Products" / first).unlink()
    with pytest.raises(FileNotFoundError, match=f"1 listed images are missing .*{first}"):
        SOP.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_not_an_sop_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="Ebay_train.txt"):
        SOP.prepare(tmp_path, tmp_path / "m", data_root=tmp_path)


def test_bad_header(extracted, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(extracted, copy)
    split = copy / "Stanford_Online_Products" / "Ebay_test.txt"
    split.write_text(split.read_text().replace("class_id super_class_id", "class super", 1))
    with pytest.raises(ValueError, match="header"):
        SOP.prepare(copy, tmp_path / "m", data_root=tmp_path, replica=True)
