"""IJB-C: both layouts (NIST tree, insightface release) of the replica parse to the same rows; the
instance key, boxes and landmarks; the manual message; protocol files trusted on first use."""

import tarfile

import numpy as np
import pytest

from rankrepro.data import checksums, datasets
from rankrepro.data.errors import ChecksumError, ManualDownloadRequired
from rankrepro.data.datasets.ijbc import REPLICA_SUBJECTS
from rankrepro.data.datasets.vggface2 import BOX_COLUMNS, LANDMARK_COLUMNS

IJBC = datasets.load("ijbc")


def prepare(tmp_path, layout):
    out = tmp_path / layout
    IJBC.write_replica(out / "replica", layout=layout)
    record = IJBC.download(out / "data", replica_dir=out / "replica")
    return IJBC.prepare(record, out / "m", data_root=out / "data", replica=True)


def member_text(archive, name):
    with tarfile.open(archive) as tf:
        return tf.extractfile(name).read().decode()


def test_manual_message(tmp_path):
    with pytest.raises(ManualDownloadRequired) as err:
        IJBC.download(tmp_path)
    message = str(err.value)
    where = tmp_path.absolute() / "downloads" / "ijbc" / "IJB-C.tar.gz"
    assert f"IJB-C.tar.gz: missing; put it at {where} (no published checksum)" in message
    assert "NIST" in message and "insightface" in message and "datasets.ijbc.extracted" in message


def test_both_layouts_give_the_same_rows(tmp_path):
    nist, insight = prepare(tmp_path, "nist").table, prepare(tmp_path, "insightface").table
    key = ["split", "label", "instance"]
    assert nist[key].sort_values(key).values.tolist() == insight[key].sort_values(key).values.tolist()
    assert set(nist["split"]) == {"test"} and len(nist) == 27
    # 1-based subjects as released; one instance per still, one per video sighting (3 frames)
    assert sorted(set(nist["label"])) == [1, 2, 3, 4, 5]
    per_instance = nist.groupby("instance").size()
    assert per_instance["1/103"] == 3 and (per_instance.drop("1/103") == 1).all()
    instances = nist.groupby("label")["instance"].nunique().to_dict()
    assert instances == {s: len(v) for s, v in REPLICA_SUBJECTS.items()} and instances[5] == 4


def test_nist_boxes_are_the_metadata_face_columns(tmp_path):
    manifest = prepare(tmp_path, "nist")
    text = member_text(tmp_path / "nist" / "replica" / "IJB-C.tar.gz", "IJB/IJB-C/protocols/archive/ijbc_metadata.csv")
    rows = [line.split(",") for line in text.splitlines()[1:]]
    table = manifest.table
    assert table["path"].tolist() == [f"images/{r[1]}" for r in rows]
    assert table["instance"].tolist() == [f"{r[0]}/{r[2]}" for r in rows]
    np.testing.assert_array_equal(table[list(BOX_COLUMNS)].to_numpy(), [[float(v) for v in r[3:7]] for r in rows])
    assert table[list(LANDMARK_COLUMNS)].isna().all().all()
    assert (manifest.root / "images" / "frames").is_dir()


def test_insightface_landmarks_and_repeated_crops_dropped(tmp_path):
    table = prepare(tmp_path, "insightface").table
    archive = tmp_path / "insightface" / "replica" / "IJB-C.tar.gz"
    tid_mid = [line.split() for line in member_text(archive, "IJBC/meta/ijbc_face_tid_mid.txt").splitlines()]
    points = {line.split()[0]: [float(v) for v in line.split()[1:11]]
              for line in member_text(archive, "IJBC/meta/ijbc_name_5pts_score.txt").splitlines()}
    assert len(tid_mid) == 27 + 5  # each subject's first instance is repeated in a second probe template
    kept = {f"loose_crop/{name}" for name, template, _ in tid_mid if int(template) < 2000}
    assert set(table["path"]) == kept
    for _, row in table.iterrows():
        np.testing.assert_allclose(row[list(LANDMARK_COLUMNS)].to_numpy(dtype=float), points[row["path"][11:]])
    assert table[list(BOX_COLUMNS)].isna().all().all()


def test_protocol_csv_recorded_then_verified(tmp_path):
    """An extracted NIST tree: the metadata CSV is returned to be recorded, then checked against the lock."""
    IJBC.write_replica(tmp_path / "replica")
    with tarfile.open(tmp_path / "replica" / "IJB-C.tar.gz") as tf:
        tf.extractall(tmp_path / "copy", filter="data")
    root, unverified = IJBC.locate_root(tmp_path / "copy", tmp_path / "data")
    key = "ijbc/protocol:protocols/archive/ijbc_metadata.csv"
    assert root == tmp_path / "copy" / "IJB" / "IJB-C" and set(unverified) == {key}
    checksums.ChecksumLock(tmp_path / "data").record(unverified)
    assert IJBC.locate_root(tmp_path / "copy", tmp_path / "data")[1] == {}
    csv_file = root / "protocols" / "archive" / "ijbc_metadata.csv"
    csv_file.write_text(csv_file.read_text() + "5,img/24.jpg,504,1,1,9,9,,0,3,1,2,1,5.5,-1.5" + ",0" * 18 + "\n")
    with pytest.raises(ChecksumError, match="ijbc_metadata.csv"):
        IJBC.locate_root(tmp_path / "copy", tmp_path / "data")


def extracted(tmp_path, layout):
    """An extracted copy of the replica in ``layout``: its root."""
    IJBC.write_replica(tmp_path / "replica", layout=layout)
    with tarfile.open(tmp_path / "replica" / "IJB-C.tar.gz") as tf:
        tf.extractall(tmp_path / "copy", filter="data")
    return tmp_path / "copy" / ("IJB/IJB-C" if layout == "nist" else "IJBC")


@pytest.mark.parametrize("box,match", [
    ("3,4,0,9", r"face box x, y, w, h \(3, 4, 0, 9\) has a width or height <= 0 \(FACE_X, FACE_Y, FACE_WIDTH, "
                r"FACE_HEIGHT 3, 4, 0, 9\); fix the line, or blank all four cells"),
    ("3,4,abc,9", r"face box x, y, w, h \(3, 4, nan, 9\) has a value that is not a finite number .*3, 4, abc, 9\)"),
    ("3,4,1e30,9", r"face box .* lies outside the image"),
    ("-500,-500,20,20", r"face box .* lies outside the image"),
])
def test_an_implausible_nist_box_names_the_metadata_line(tmp_path, box, match):
    root = extracted(tmp_path, "nist")
    csv_file = root / "protocols" / "archive" / "ijbc_metadata.csv"
    lines = csv_file.read_text().splitlines()
    fields = lines[3].split(",")
    fields[3:7] = box.split(",")
    lines[3] = ",".join(fields)
    csv_file.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match) as err:
        IJBC.prepare(root, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert str(err.value).startswith(f"{csv_file}, line 4: ")
    assert not (tmp_path / "m" / "meta.json").exists()


def test_a_nist_face_without_a_box_is_kept(tmp_path):
    root = extracted(tmp_path, "nist")
    csv_file = root / "protocols" / "archive" / "ijbc_metadata.csv"
    lines = csv_file.read_text().splitlines()
    fields = lines[3].split(",")
    fields[3:7] = [""] * 4
    lines[3] = ",".join(fields)
    csv_file.write_text("\n".join(lines) + "\n")
    table = IJBC.prepare(root, tmp_path / "m", data_root=tmp_path / "data", replica=True).table
    assert table[list(BOX_COLUMNS)].isna().all(axis=1).tolist() == [i == 2 for i in range(27)]


@pytest.mark.parametrize("points,match", [
    (["9"] * 10, r"5 landmarks \(9, 9, .*\) \(nearly\) coincide: their spread is 0 pixels"),
    (["1e30"] + ["9", "12", "20", "12", "15", "17", "11", "22", "19", "22"][1:],
     r"point 1 \(1e\+30, 12\) lies outside the face's reach"),
    ([str(v - 500) for v in (9, 12, 20, 12, 15, 17, 11, 22, 19, 22)], r"point 1 \(-491, -488\) lies outside"),
    (["nan"] + ["12"] * 9, r"have a value that is not a finite number"),
])
def test_implausible_insightface_landmarks_name_the_line(tmp_path, points, match):
    root = extracted(tmp_path, "insightface")
    five = root / "meta" / "ijbc_name_5pts_score.txt"
    lines = five.read_text().splitlines()
    fields = lines[2].split()
    fields[1:11] = points
    lines[2] = " ".join(fields)
    five.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match) as err:
        IJBC.prepare(root, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert str(err.value).startswith(f"{five}, line 3: 5 landmarks (")
    assert str(err.value).endswith("; fix or remove the line (without landmarks, align5 crops the whole image)")
