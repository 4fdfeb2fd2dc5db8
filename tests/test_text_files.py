"""The datasets' text files (lists, CSVs, JSON, checksum files; the GLDv2 CSVs H-GLDv2 reads) go through one
UTF-8 reader: a byte that is not UTF-8 is an error naming the file, the line and the byte's position, never
a bare UnicodeDecodeError."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from rankrepro.data import checksums, datasets
from rankrepro.data.datasets import cars, cub, dyml, gldv2, gldv2_ground_truth, ijbc, inat, inshop, sop, vehicleid
from rankrepro.data.datasets import vggface2
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.hgldv2 import scrape
from rankrepro.io import TextEncodingError, read_csv_columns, read_lines, read_text, text_stream

#: line 2 holds a Latin-1 "é" (0xe9): byte 4 of the line, byte 16 of the file (1-based counts)
LATIN1 = b"header line\nJos\xe9 Mourinho\n"
WHERE = "line 2: byte 4 of the line (byte 16 of the file) is not UTF-8: e9"


def test_a_byte_that_is_not_utf8_names_the_file_line_position_and_bytes(tmp_path):
    file = tmp_path / "list.txt"
    file.write_bytes(LATIN1)
    with pytest.raises(TextEncodingError) as err:
        read_text(file)
    assert str(err.value).startswith(f"{file}, {WHERE} ")
    assert "'Jos\\\\xe9 Mourinho'" in str(err.value)  # the line, its bad byte shown escaped
    assert "save it as UTF-8" in str(err.value)


@pytest.mark.parametrize("data, line, in_line, in_file", [
    (b"\xef\xbb\xbfab\r\ncd\x80\n", 2, 3, 10),  # a BOM counts as bytes of the file; CRLF ends line 1
    (b"a\rb\r\xc3\x28", 3, 1, 5),                # lone CRs end lines; a truncated 2-byte sequence
    (b"\xff", 1, 1, 1),
])
def test_line_and_byte_positions_are_counted_by_hand(tmp_path, data, line, in_line, in_file):
    file = tmp_path / "f.csv"
    file.write_bytes(data)
    with pytest.raises(TextEncodingError, match=rf", line {line}: byte {in_line} of the line \(byte {in_file} of"):
        read_lines(file)


def test_utf8_text_with_a_bom_and_any_line_ends(tmp_path):
    file = tmp_path / "f.txt"
    file.write_bytes(b"\xef\xbb\xbfJos\xc3\xa9\r\nZo\xc3\xab\rx\n\n")
    assert read_text(file) == "José\r\nZoë\rx\n\n"
    assert read_lines(file) == ["José", "Zoë", "x", ""]
    assert text_stream(file).read() == "José\r\nZoë\rx\n\n"


def _ground_truth(root: Path):
    manifest = SimpleNamespace(meta={"ground_truth": "sol.csv"}, root=root, directory=root)
    return gldv2_ground_truth.ground_truth_positions(manifest, manifest, manifest)


#: every reader of a dataset's text file: (the file, relative to the root; a call reading it)
READERS = {
    "sop": ("Ebay_train.txt", lambda root: sop.read_split(root, "train")),
    "cub images": ("images.txt", lambda root: cub.read_id_file(root / "images.txt", "path")),
    "cub classes": ("classes.txt", lambda root: cub.read_classes(root / "classes.txt")),
    "cars names": (cars.NAMES_CSV, lambda root: cars.read_folders(root)),
    "cars anno": (cars.ANNO_CSV["train"], lambda root: cars.read_folders(root)),
    "inat list": (inat.SPLIT_FILES["train"], lambda root: inat.read_split(root, "train", pd.Series(dtype=str))),
    "inat json": ("train2018.json", lambda root: inat.load_json(root / "train2018.json")),
    "dyml": ("train.csv", lambda root: dyml.read_rows(root / "train.csv", dyml.LABEL_HEADER, "DyML")),
    "vehicleid": ("model_attr.txt", lambda root: vehicleid.read_pairs(root / "model_attr.txt", "a", "b")),
    "vggface2 meta": (vggface2.IDENTITY_META, lambda root: vggface2.read_identity_meta(root / vggface2.IDENTITY_META)),
    "vggface2 list": (vggface2.LISTS["train"], lambda root: vggface2.read_list(root, "train", {})),
    "vggface2 boxes": ("bb_landmark/loose_bb_train.csv",
                       lambda root: vggface2.read_geometry_csv(root / "bb_landmark/loose_bb_train.csv",
                                                               vggface2.BOX_COLUMNS)),
    "ijbc nist": (ijbc.NIST_METADATA[0], lambda root: ijbc.read_nist(root)),
    "ijbc templates": (ijbc.TEMPLATE_CSVS[0], lambda root: ijbc.template_subjects(root)),
    "ijbc columns": (ijbc.TID_MID, lambda root: ijbc.read_columns(root, ijbc.TID_MID, ["name", "t", "m"], np.int64)),
    "inshop": ("list_eval_partition.txt", lambda root: inshop.read_partition(root / "list_eval_partition.txt")),
    "voc": ("VOC2007/ImageSets/Main/trainval.txt", lambda root: datasets.load("voc07").read_table(root)),
    "gldv2": (gldv2.TRAIN_CLEAN, lambda root: gldv2.read_csv(root / gldv2.TRAIN_CLEAN, gldv2.TRAIN_CLEAN)),
    "gldv2 ground truth": ("sol.csv", _ground_truth),
    "replica sha256": ("a.zip.sha256", lambda root: checksums.stated_checksum(root / "a.zip")),
    "gldv2 categories (h-gldv2 scrape)": ("train_label_to_category.csv",
                                          lambda root: scrape.read_categories({"train": root / "train_label_to_category.csv"})),
    "gldv2 hierarchy (h-gldv2 compare)": ("train_label_to_hierarchical.csv",
                                          lambda root: read_csv_columns(root / "train_label_to_hierarchical.csv", [])),
    "md5 file": ("md5.images_000.txt", lambda root: Dataset.expected_checksum(
        SourceFile("images_000.tar", checksum_file="md5.images_000.txt"), root, checksums.ChecksumLock(root / "lock"))),
}


@pytest.mark.parametrize("name", READERS)
def test_every_dataset_text_reader_names_file_line_and_byte(tmp_path, name):
    relative, read = READERS[name]
    for other in (cars.NAMES_CSV, *cars.ANNO_CSV.values()) if name.startswith("cars") else ():
        (tmp_path / other).write_text("x\n")
    file = tmp_path / relative
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(LATIN1)
    with pytest.raises(TextEncodingError) as err:
        read(tmp_path)
    assert str(err.value).startswith(f"{file}, {WHERE} ")


def test_vggface2_identity_meta_reads_utf8_names_and_a_bom(tmp_path):
    file = tmp_path / vggface2.IDENTITY_META
    file.write_bytes("\ufeffClass_ID, Name, Sample_Num, Flag, Gender\n"
                     'n000001, "José_Mourinho", 3, 1, m\n'
                     'n000002, "Zoë_Saldaña", 4, 0, f\n'.encode())
    assert vggface2.read_identity_meta(file) == {1: 1, 2: 0}
