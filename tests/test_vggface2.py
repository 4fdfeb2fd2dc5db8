"""VGGFace2: the manual-download message, the replica through download -> prepare, and the box and
landmark columns read from bb_landmark (expected values read from the replica's CSVs directly)."""

import csv
import io
import tarfile

import numpy as np
import pytest

from rankrepro.data import datasets
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.data.datasets.vggface2 import FACE_COLUMNS, read_geometry

VGGFACE2 = datasets.load("vggface2")


def test_missing_files_message_names_file_size_checksum_destination_and_extracted(tmp_path):
    with pytest.raises(ManualDownloadRequired) as err:
        VGGFACE2.download(tmp_path)
    message = str(err.value)
    folder = tmp_path.absolute() / "downloads" / "vggface2"
    assert (f"vggface2_train.tar.gz: missing; put it at {folder / 'vggface2_train.tar.gz'} (37,909,212,476 bytes, "
            "sha256:0e7ecc1bec3e8ae402b79db927510abaff386a91ea1b223d5c83e995bc4d28af)") in message
    assert (f"vggface2_test.tar.gz: missing; put it at {folder / 'vggface2_test.tar.gz'} (2,028,325,313 bytes, "
            "sha256:6ddf619f4d8a472dec49030783534a42e4743cf57d04a76aaaae50bca7e16b44)") in message
    for name, md5 in (("train_list.txt", "4cfbab4a839163f454d7ecef28b68669"),
                      ("test_list.txt", "d08b10f12bc9889509364ef56d73c621"),
                      ("identity_meta.csv", "d315386c7e8e166c4f60e27d9cc61acc")):
        assert f"{name}: missing; put it at {folder / name} (md5:{md5})" in message
    assert "88813c6b15de58afc8fa75ea83361d7f" in message and "bb7a323824d1004e14e00c23974facd3" in message
    assert "bb_landmark.tar.gz: missing" not in message and "optionally bb_landmark.tar.gz" in message
    assert "datasets.vggface2.extracted" in message


def prepare(tmp_path, **options):
    VGGFACE2.write_replica(tmp_path / "replica", **options)
    record = VGGFACE2.download(tmp_path / "data", replica_dir=tmp_path / "replica")
    return VGGFACE2.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def read_csv_member(archive, name):
    with tarfile.open(archive) as tf:
        text = tf.extractfile(name).read().decode()
    rows = list(csv.reader(io.StringIO(text)))
    return {row[0]: [float(v) for v in row[1:]] for row in rows[1:]}


def test_rows_labels_and_geometry(tmp_path):
    manifest = prepare(tmp_path)
    table = manifest.table
    assert list(table.columns[3:]) == list(FACE_COLUMNS) and manifest.meta["protocol"] == "face"
    for split, ids in (("train", [2, 4, 6, 8]), ("test", [1, 3, 5, 7])):
        rows = table[table.split == split]
        lines = (tmp_path / "replica" / f"{split}_list.txt").read_text().split()
        assert rows["path"].tolist() == [f"{split}/{line}" for line in lines]
        assert rows["label"].tolist() == [int(line[1:7]) for line in lines] and sorted(set(rows["label"])) == ids
        boxes = read_csv_member(tmp_path / "replica" / "bb_landmark.tar.gz", f"bb_landmark/loose_bb_{split}.csv")
        marks = read_csv_member(tmp_path / "replica" / "bb_landmark.tar.gz",
                                f"bb_landmark/loose_landmark_{split}.csv")
        for _, row in rows.iterrows():
            name = row["path"][len(split) + 1:-4]
            got = row[list(FACE_COLUMNS)].to_numpy(dtype=float)
            if name in boxes:
                np.testing.assert_allclose(got, boxes[name] + marks[name])
            else:  # the replica leaves one image per split out of the CSVs
                assert np.isnan(got).all()
        assert rows[list(FACE_COLUMNS)].isna().all(axis=1).sum() == 1


def test_without_bb_landmark_the_columns_are_nan(tmp_path):
    table = prepare(tmp_path, geometry=False).table
    assert len(table) == 48 and table[list(FACE_COLUMNS)].isna().all().all()


def test_identity_flag_must_match_the_split(tmp_path):
    """An extracted copy (``datasets.vggface2.extracted``) whose identity_meta.csv puts a train identity in test."""
    VGGFACE2.write_replica(tmp_path / "replica")
    copy = tmp_path / "copy"
    for split in ("train", "test"):
        with tarfile.open(tmp_path / "replica" / f"vggface2_{split}.tar.gz") as tf:
            tf.extractall(copy, filter="data")
        (copy / f"{split}_list.txt").write_bytes((tmp_path / "replica" / f"{split}_list.txt").read_bytes())
    meta = (tmp_path / "replica" / "identity_meta.csv").read_text()
    (copy / "identity_meta.csv").write_text(meta)
    assert len(VGGFACE2.prepare(copy, tmp_path / "ok", data_root=tmp_path / "data", replica=True).table) == 48
    (copy / "identity_meta.csv").write_text(meta.replace('n000002, "Person_2, Jr.", 6, 1', 'n000002, "Person_2, Jr.", 6, 0'))
    with pytest.raises(ValueError, match=r"train_list.txt, line 1: identity n000002 has Flag 0"):
        VGGFACE2.prepare(copy, tmp_path / "m", data_root=tmp_path / "data", replica=True)


BB = ['NAME_ID,X,Y,W,H', '"n000002/0001_01",10,20,40,50', '"n000002/0002_01",5,5,30,30']
LANDMARKS = ['NAME_ID,P1X,P1Y,P2X,P2Y,P3X,P3Y,P4X,P4Y,P5X,P5Y', '"n000002/0001_01",20,35,40,35,30,45,22,58,38,58',
             '"n000002/0002_01",12,12,24,12,18,18,14,26,22,26']


def geometry_folder(tmp_path, bb=BB, landmarks=LANDMARKS):
    folder = tmp_path / "bb_landmark"
    folder.mkdir()
    (folder / "loose_bb_train.csv").write_text("\n".join(bb) + "\n")
    (folder / "loose_landmark_train.csv").write_text("\n".join(landmarks) + "\n")
    return folder


def test_plausible_geometry_is_read(tmp_path):
    geometry = read_geometry(geometry_folder(tmp_path).parent, "train")
    assert list(geometry.columns) == list(FACE_COLUMNS)
    assert geometry.loc["n000002/0002_01"].tolist() == [5, 5, 30, 30, 12, 12, 24, 12, 18, 18, 14, 26, 22, 26]


@pytest.mark.parametrize("kind,line,match", [
    ("bb", '"n000002/0002_01",5,5,0,30', r"loose_bb_train.csv, line 3: face box x, y, w, h \(5, 5, 0, 30\) has a "
                                         r"width or height <= 0; fix or remove the line"),
    ("bb", '"n000002/0002_01",5,nan,30,30', r"loose_bb_train.csv, line 3: .* not a finite number"),
    ("bb", '"n000002/0002_01",5,5,1e30,30', r"loose_bb_train.csv, line 3: .* lies outside the image"),
    ("landmark", '"n000002/0002_01",' + ",".join(["20"] * 10),
     r"loose_landmark_train.csv, line 3: 5 landmarks \(20, 20, .*\) \(nearly\) coincide: their spread is 0 pixels.* "
     r"\(its box: .*loose_bb_train.csv, line 3\); fix or remove the line"),
    ("landmark", '"n000002/0002_01",1e30,12,24,12,18,18,14,26,22,26',
     r"line 3: .* point 1 \(1e\+30, 12\) lies outside the face's reach, the face box \(5, 5, 30, 30\) grown"),
    ("landmark", '"n000002/0002_01",-488,-488,-476,-488,-482,-482,-486,-474,-478,-474',
     r"line 3: .* point 1 \(-488, -488\) lies outside the face's reach"),
    ("landmark", '"n000002/0002_01",12,12,24,12,18,nan,14,26,22,26', r"line 3: .* not a finite number"),
    ("landmark", '"n000002/0003_01",-488,-488,-476,-488,-482,-482,-486,-474,-478,-474',  # no box: the image's reach
     r"line 3: .* point 1 \(-488, -488\) lies outside the face's reach, the image grown by"),
])
def test_implausible_geometry_names_the_file_and_line(tmp_path, kind, line, match):
    bb, landmarks = ([*BB[:2], line], LANDMARKS) if kind == "bb" else (BB, [*LANDMARKS[:2], line])
    with pytest.raises(ValueError, match=match) as err:
        read_geometry(geometry_folder(tmp_path, bb, landmarks).parent, "train")
    assert str(err.value).startswith(str(tmp_path / "bb_landmark" / f"loose_{kind}_train.csv"))


def test_implausible_landmarks_fail_the_prepare(tmp_path):
    """An extracted copy whose loose_landmark_train.csv has 5 identical points on its line 2."""
    VGGFACE2.write_replica(tmp_path / "replica")
    copy = tmp_path / "copy"
    for archive in ("vggface2_train.tar.gz", "vggface2_test.tar.gz", "bb_landmark.tar.gz"):
        with tarfile.open(tmp_path / "replica" / archive) as tf:
            tf.extractall(copy, filter="data")
    for name in ("train_list.txt", "test_list.txt", "identity_meta.csv"):
        (copy / name).write_bytes((tmp_path / "replica" / name).read_bytes())
    marks = copy / "bb_landmark" / "loose_landmark_train.csv"
    lines = marks.read_text().splitlines()
    lines[1] = lines[1].split(",")[0] + ",7" * 10
    marks.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{marks}, line 2: 5 landmarks \(7, 7, .*\(nearly\) coincide"):
        VGGFACE2.prepare(copy, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()
