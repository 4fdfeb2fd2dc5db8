"""VGGFace2 (Cao et al., FG 2018) as a face retrieval benchmark: Smooth-AP §5 (Tables 4, 5) fine-tunes
on the train split and reports mAP on the test split (protocol ``face``: every test image queries all
the others, full-list AP).

Source (manual; faces.md B.3). The official site is offline since Dec 2020 and TFDS removed its
builder; an unofficial re-upload exists but is **never** downloaded: the user puts the files under
``<data_root>/downloads/vggface2/`` (:data:`FILES`, sizes and checksums from faces.md B.3: sha256 of
the archives from TFDS ``url_checksums/vgg_face2.txt`` @24211da0, md5 of the lists and the meta CSV
from mlverse/torchvision ``R/dataset-vggface2.R`` @23247cfb), or points ``datasets.vggface2.extracted``
to a copy already extracted. Layout of the tree ``<data_root>/vggface2/`` (the image root)::

    train/n000002/0001_01.jpg ...      (vggface2_train.tar.gz: the folder train/)
    test/n000001/0001_01.jpg ...       (vggface2_test.tar.gz: the folder test/)
    train_list.txt  test_list.txt      one image per line, "n000002/0001_01.jpg"
    identity_meta.csv                  "Class_ID, Name, Sample_Num, Flag, Gender" (Flag 1: train, 0: test)
    bb_landmark/loose_bb_{train,test}.csv          (optional) "NAME_ID,X,Y,W,H"
    bb_landmark/loose_landmark_{train,test}.csv    (optional) "NAME_ID,P1X,P1Y,...,P5X,P5Y"

``NAME_ID`` is the list line without ``.jpg`` (``"n000002/0001_01"``, quoted in the real files).

Choices:

- Splits ``train`` / ``test`` = the lines of the two lists, in file order; ``path`` =
  ``<split>/<line>``. ``label`` = the identity's number (``n000002`` -> 2: the class ids as released,
  not remapped; train and test are disjoint). Every listed identity must be in ``identity_meta.csv``
  with the Flag of its split (an error names the list, its line and the CSV).
- Face geometry columns (:data:`FACE_COLUMNS`, floats, pixels of the stored loose crop):
  ``box_x, box_y, box_w, box_h`` from ``loose_bb_<split>.csv`` and ``lmk_x1, lmk_y1, ..., lmk_x5,
  lmk_y5`` from ``loose_landmark_<split>.csv``. They are always in the manifest; NaN where
  ``bb_landmark.tar.gz`` is absent or does not list the image. The face transforms read them
  (box extension by 0.3 for SENet-50, 5-point alignment for ArcFace). A box or landmark row that is not
  plausible (:mod:`rankrepro.data.face_geometry`: not finite, an empty box, landmarks that coincide or lie
  far from the box) fails the prepare naming the CSV and line; no image is opened for it.
- ``bb_landmark.tar.gz`` has no published checksum: its sha256 is recorded on first verified use.

Expected counts (faces.md B.1, Smooth-AP §5.1, ox-vgg/vgg_face2 README): train 8,631 identities /
3,141,890 images, test 500 / 169,396.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.face_align import BOX_COLUMNS, LANDMARK_COLUMNS
from rankrepro.data.face_geometry import box_problem, landmark_problem
from rankrepro.data.replicas import key_rng, tiny_jpeg, write_file, write_tar
from rankrepro.io import read_lines, text_stream

SPLITS = ("train", "test")
LISTS = {split: f"{split}_list.txt" for split in SPLITS}
IDENTITY_META = "identity_meta.csv"
BB_DIR = "bb_landmark"
BB_ARCHIVE = "bb_landmark.tar.gz"
#: the loose box of the face in the stored image (``BOX_COLUMNS``: top-left corner, width, height, pixels) and
#: its 5 landmarks (``LANDMARK_COLUMNS``: eyes, nose, mouth corners in the order of the source file, x then y each)
FACE_COLUMNS = BOX_COLUMNS + LANDMARK_COLUMNS
LINE_RE = re.compile(r"n(\d{6})/[^/]+\.jpg")

FILES = (
    SourceFile("vggface2_train.tar.gz", size=37_909_212_476,
               checksum="sha256:0e7ecc1bec3e8ae402b79db927510abaff386a91ea1b223d5c83e995bc4d28af"),
    SourceFile("vggface2_test.tar.gz", size=2_028_325_313,
               checksum="sha256:6ddf619f4d8a472dec49030783534a42e4743cf57d04a76aaaae50bca7e16b44"),
    SourceFile(LISTS["train"], checksum="md5:4cfbab4a839163f454d7ecef28b68669", extract=False),
    SourceFile(LISTS["test"], checksum="md5:d08b10f12bc9889509364ef56d73c621", extract=False),
    SourceFile(IDENTITY_META, checksum="md5:d315386c7e8e166c4f60e27d9cc61acc", extract=False),
    SourceFile(BB_ARCHIVE, checksum=None, optional=True),  # none published: recorded on first verified use
)
#: md5 of the archives (mlverse/torchvision R/dataset-vggface2.R @23247cfb), for users who check by hand
ARCHIVE_MD5 = {"vggface2_train.tar.gz": "88813c6b15de58afc8fa75ea83361d7f",
               "vggface2_test.tar.gz": "bb7a323824d1004e14e00c23974facd3"}


@DATASETS.register("vggface2")
class VGGFace2(Dataset):
    """VGGFace2 (train / test identity split); see the module docstring for the layout and choices."""

    title = "VGGFace2"
    files = FILES
    manual = True
    how_to_get = (
        "the official VGGFace2 site (robots.ox.ac.uk/~vgg/data/vgg_face2) is offline and no other copy is "
        "downloaded automatically (the unofficial re-uploads are not the authors'). If you hold the release, put "
        "its files at the paths below: vggface2_train.tar.gz (md5 " + ARCHIVE_MD5["vggface2_train.tar.gz"] + "), "
        "vggface2_test.tar.gz (md5 " + ARCHIVE_MD5["vggface2_test.tar.gz"] + "), train_list.txt, test_list.txt, "
        "identity_meta.csv, and optionally bb_landmark.tar.gz (the loose boxes and 5 landmarks, needed for the "
        "face crops; its sha256 is recorded the first time the counts check out).")
    top = ""
    marker = LISTS["train"]
    levels = ["identity"]
    protocol = "face"
    extra_columns = FACE_COLUMNS
    # faces.md B.1 (Smooth-AP §5.1; ox-vgg/vgg_face2 README: 8,631 train / 500 test identities)
    expected_counts = {"train": {"images": 3_141_890, "identity": 8_631},
                       "test": {"images": 169_396, "identity": 500}}
    disjoint = (("train", "test"),)

    def read_table(self, root: Path) -> pd.DataFrame:
        """Both lists as rows ``path, split, label, origin`` plus :data:`FACE_COLUMNS` (module
        docstring). A missing list or ``identity_meta.csv`` is an error naming it."""
        root = Path(root)
        for name in (*LISTS.values(), IDENTITY_META):
            if not (root / name).is_file():
                raise FileNotFoundError(f"{self.title}: {root / name} is missing (a VGGFace2 tree holds "
                                        f"{', '.join([*LISTS.values(), IDENTITY_META])}, train/, test/)")
        flags = read_identity_meta(root / IDENTITY_META)
        parts = [read_list(root, split, flags) for split in SPLITS]
        table = pd.concat(parts, ignore_index=True)
        for split in SPLITS:
            rows = (table["split"] == split).to_numpy()
            geometry = read_geometry(root, split)
            names = table.loc[rows, "path"].str.slice(len(split) + 1, -len(".jpg"))
            for column in FACE_COLUMNS:
                table.loc[rows, column] = names.map(geometry[column]).to_numpy(dtype=np.float64) \
                    if len(geometry) else np.nan
        table[list(FACE_COLUMNS)] = table[list(FACE_COLUMNS)].astype(np.float64)
        return table

    def make_replica(self, out_dir: str | Path, *, identities: int = 4, images_per_identity: int = 6,
                     image_size: int = 32, geometry: bool = True, seed: int = 0) -> list[str]:
        """Write the VGGFace2 files into ``out_dir`` (real names and formats); return their names.

        Per split ``identities`` identities (4: the demo's batch takes 4 identities x 2 images; train
        ``n000002, n000004, ...``, test ``n000001, n000003, ...``: disjoint, interleaved as in the real
        numbering) with ``images_per_identity``
        tiny JPEGs each (``<image>_<face>.jpg``, one image with two faces). ``identity_meta.csv``
        also lists an identity with no image. ``geometry``: write ``bb_landmark.tar.gz`` (boxes and
        landmarks inside the image; the last image of each split is left out of both CSVs)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        ids = {"train": [2 + 2 * i for i in range(identities)], "test": [1 + 2 * i for i in range(identities)]}
        meta = ["Class_ID, Name, Sample_Num, Flag, Gender"]
        bb: dict[str, bytes] = {}
        names = []
        for split in SPLITS:
            members, lines, boxes, marks = {}, [], ["NAME_ID,X,Y,W,H"], \
                ["NAME_ID," + ",".join(f"P{i}{a}" for i in range(1, 6) for a in "XY")]
            for k in ids[split]:
                meta.append(f'n{k:06d}, "Person_{k}, Jr.", {images_per_identity}, {int(split == "train")}, '
                            f'{"mf"[k % 2]}')
                for j in range(images_per_identity):
                    line = f"n{k:06d}/{j // 2 + 1:04d}_{j % 2 + 1:02d}.jpg" if j < 2 else \
                        f"n{k:06d}/{j + 1:04d}_01.jpg"
                    members[f"{split}/{line}"] = tiny_jpeg(rng, k, image_size)
                    lines.append(line)
            for line in lines[:-1]:
                g = key_rng(("vggface2 geometry", line)).uniform(2, image_size / 4, 14)
                x, y, w, h = round(g[0]), round(g[1]), round(image_size / 2 + g[2]), round(image_size / 2 + g[3])
                boxes.append(f'"{line[:-4]}",{x},{y},{w},{h}')
                points = np.stack([x + g[4:9] % w, y + g[9:14] % h], axis=1).reshape(-1)  # x1, y1, ..., y5
                marks.append(f'"{line[:-4]}",' + ",".join(f"{v:.3f}" for v in points))
            write_tar(out_dir / f"vggface2_{split}.tar.gz", members)
            write_file(out_dir / LISTS[split], ("\n".join(lines) + "\n").encode())
            bb[f"{BB_DIR}/loose_bb_{split}.csv"] = ("\n".join(boxes) + "\n").encode()
            bb[f"{BB_DIR}/loose_landmark_{split}.csv"] = ("\n".join(marks) + "\n").encode()
            names += [f"vggface2_{split}.tar.gz", LISTS[split]]
        meta.append(f'n{2 * identities + 1:06d}, "Nobody_Listed", 0, 0, f')
        write_file(out_dir / IDENTITY_META, ("\n".join(meta) + "\n").encode())
        names.append(IDENTITY_META)
        if geometry:
            write_tar(out_dir / BB_ARCHIVE, bb)
            names.append(BB_ARCHIVE)
        return names


# -- readers --------------------------------------------------------------------------------------

def read_identity_meta(file: Path) -> dict[int, int]:
    """``{identity number: Flag}`` of ``identity_meta.csv`` (header ``Class_ID, Name, Sample_Num, Flag,
    Gender``; spaces after commas, quoted names). A bad row is an error naming the file and line."""
    flags = {}
    reader = csv.reader(text_stream(file), skipinitialspace=True)
    header = [h.strip() for h in next(reader, [])]
    if header[:1] != ["Class_ID"] or "Flag" not in header:
        raise ValueError(f"{file}: header {header}, expected Class_ID, Name, Sample_Num, Flag, Gender")
    flag_at = header.index("Flag")
    for row in reader:
        if not row:
            continue
        match = re.fullmatch(r"n(\d{6})", row[0].strip())
        if not match or len(row) <= flag_at or row[flag_at].strip() not in ("0", "1"):
            raise ValueError(f"{file}, line {reader.line_num}: {row!r} is not n<6 digits>, ..., Flag 0/1, ...")
        flags[int(match.group(1))] = int(row[flag_at])
    return flags


def read_list(root: Path, split: str, flags: dict[int, int]) -> pd.DataFrame:
    """One list as rows ``path, split, label, origin``; a line that is not ``n<6 digits>/<name>.jpg``,
    a line listed twice, or an identity that ``identity_meta.csv`` does not put in ``split`` is an
    error naming the list and line."""
    name = LISTS[split]
    paths, labels, origins, seen = [], [], [], {}
    for number, line in enumerate(read_lines(root / name), 1):
        line = line.strip()
        if not line:
            continue
        match = LINE_RE.fullmatch(line)
        if not match:
            raise ValueError(f"{root / name}, line {number}: {line!r} is not n<6 digits>/<name>.jpg")
        if line in seen:
            raise ValueError(f"{root / name}, line {number}: {line} is listed twice (first on line {seen[line]})")
        seen[line] = number
        identity = int(match.group(1))
        if flags.get(identity) != int(split == "train"):
            state = "is not listed" if identity not in flags else f"has Flag {flags[identity]}"
            raise ValueError(f"{root / name}, line {number}: identity n{identity:06d} {state} in "
                             f"{root / IDENTITY_META} (Flag 1: train, 0: test)")
        paths.append(f"{split}/{line}")
        labels.append(identity)
        origins.append(f"{name}, line {number}")
    if not paths:
        raise ValueError(f"{root / name}: no image listed")
    return pd.DataFrame({"path": paths, "split": split, "label": np.asarray(labels, dtype=np.int64),
                         "origin": origins})


def read_geometry(root: Path, split: str) -> pd.DataFrame:
    """:data:`FACE_COLUMNS` indexed by ``NAME_ID`` from ``bb_landmark/loose_{bb,landmark}_<split>.csv``;
    empty when the folder is absent. Both CSVs must be there once it is; a row that is not a name and
    numbers, or whose box or landmarks are not plausible (:mod:`rankrepro.data.face_geometry`, the landmarks
    against the name's box), is an error naming the file and line."""
    folder = root / BB_DIR
    if not folder.is_dir():
        return pd.DataFrame(columns=list(FACE_COLUMNS), dtype=np.float64)
    files = {kind: folder / f"loose_{kind}_{split}.csv" for kind in ("bb", "landmark")}
    for file in files.values():
        if not file.is_file():
            raise FileNotFoundError(f"VGGFace2: {file} is missing ({BB_DIR}/ holds loose_bb_<split>.csv and "
                                    "loose_landmark_<split>.csv)")
    geometry = read_geometry_csv(files["bb"], BOX_COLUMNS).rename(columns={"line": "line_bb"}).join(
        read_geometry_csv(files["landmark"], LANDMARK_COLUMNS).rename(columns={"line": "line_landmark"}), how="outer")
    boxes = geometry[list(BOX_COLUMNS)].to_numpy()
    found = box_problem(boxes)
    if found is not None:
        raise ValueError(f"{files['bb']}, line {int(geometry['line_bb'].iat[found[0]])}: {found[1]}; fix or "
                         "remove the line")
    found = landmark_problem(geometry[list(LANDMARK_COLUMNS)].to_numpy(), boxes)
    if found is not None:
        row = geometry.iloc[found[0]]
        box = "" if np.isnan(row["line_bb"]) else f" (its box: {files['bb']}, line {int(row['line_bb'])})"
        raise ValueError(f"{files['landmark']}, line {int(row['line_landmark'])}: {found[1]}{box}; fix or remove "
                         "the line")
    return geometry[list(FACE_COLUMNS)]


def read_geometry_csv(file: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """One ``loose_*`` CSV: its header, then ``NAME_ID`` (maybe quoted) and ``len(columns)`` numbers, as
    ``columns`` and ``line`` (the row's line in the file) indexed by name; a name listed twice keeps its
    first row."""
    names, values, lines = [], [], []
    reader = csv.reader(text_stream(file))
    next(reader, None)
    for row in reader:
        if not row:
            continue
        try:
            if len(row) != len(columns) + 1:
                raise ValueError
            values.append([float(v) for v in row[1:]])
        except ValueError:
            raise ValueError(f"{file}, line {reader.line_num}: {row!r} is not NAME_ID and "
                             f"{len(columns)} numbers ({', '.join(columns)})") from None
        names.append(row[0].strip())
        lines.append(reader.line_num)
    table = pd.DataFrame(np.asarray(values, dtype=np.float64).reshape(-1, len(columns)), index=names,
                         columns=list(columns))
    table["line"] = lines
    return table[~table.index.duplicated()]
