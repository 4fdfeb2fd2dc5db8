"""Cars196 / Stanford Cars (Krause et al., 3dRR 2013): 16,185 photos of 196 car models.

One level, ``class`` (the car model, the dataset's own 1-based class id, not remapped).
Protocol ``same-set``: every test image queries the rest of the test set.

Two published layouts are read (datasets.md "Cars196"; which one a folder holds is decided by
:meth:`Cars.find_root`, the legacy one first):

(a) **legacy** (what the DAG downloads): ``car_ims.tgz`` holding ``car_ims/NNNNNN.jpg`` (all
    16,185 images, train and test together) and, beside ``car_ims/``, ``cars_annos.mat``: a
    MATLAB v5 file with the struct array ``annotations`` (fields ``relative_im_path``, e.g.
    ``car_ims/000001.jpg``, ``bbox_x1``, ``bbox_y1``, ``bbox_x2``, ``bbox_y2``, ``class``
    1..196, ``test`` 0|1) and the cell array ``class_names`` (196 names). md5s of both from
    powerful-benchmarker (PB). Manifest ``path`` = ``relative_im_path``, relative to the folder
    holding ``cars_annos.mat`` (the dataset tree ``<data_root>/cars/``).
(b) **class folders** (the Kaggle copy ``jutrera/stanford-car-dataset-by-classes-folder`` that
    pytorch-metric-learning downloads): at the top of the zip ``names.csv`` (one class name per
    line, line i = class i), ``anno_train.csv`` / ``anno_test.csv`` (``file,x1,y1,x2,y2,class``,
    ``file`` a bare file name such as ``00001.jpg``) and the images
    ``car_data/car_data/{train,test}/<class name>/<file>``. Manifest ``path`` =
    ``car_data/car_data/<train|test>/<class folder>/<file>``, relative to the folder holding
    ``names.csv``.

Choices:

- Retrieval split, both layouts (losses.md "Cars196", PML ``cars196.py`` and its tests): the
  official train and test sets are merged, classes 1-98 are ``train`` (8,054 images), classes
  99-196 are ``test`` (8,131). The published train/test flag (the ``.mat``'s ``test`` field, or
  which ``anno_*.csv`` lists an image) is ignored: it only tells where a file lies.
- The Kaggle CSVs have **no header**: PML's ``cars196.py`` reads every line as data (``int()`` of
  the last field) and the third-party loaders seen read them with ``header=None``. A first line
  that is exactly ``file,x1,y1,x2,y2,class`` is nevertheless accepted as a header.
- A Kaggle class folder is the class name with ``/`` replaced by ``-`` (a folder name cannot hold
  ``/``: ``Ram C/V Cargo Van Minivan 2012`` lives in ``Ram C-V Cargo Van Minivan 2012/``; seen in
  several third-party loaders, not in a reference). ``meta.json``'s ``class_names`` keeps the
  names as ``names.csv`` / ``class_names`` spell them, ``class_names[i]`` naming class ``i + 1``;
  ``layout`` says which layout was read (``legacy`` / ``folders``).
- Bounding boxes are read by neither parser and crops are **not** applied (published DML
  code crops Cars by default, losses.md "top-k"); 16,185 boxes are too many for ``meta.json``.
  Cropping would be an option for later.
- ``manual``: the official host is dead, so the user puts the two legacy files in
  ``downloads/cars/`` or points ``datasets.cars.extracted`` to an unzipped Kaggle copy (see
  :attr:`Cars.how_to_get`). ``car_ims.tgz`` is listed before ``cars_annos.mat``: both land in the
  tree's top folder, which the archive must be extracted into before the ``.mat`` is linked there.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_file, write_tar, write_zip
from rankrepro.io import text_stream

# legacy layout
IMAGE_ARCHIVE = "car_ims.tgz"
IMAGE_DIR = "car_ims"
ANNOS = "cars_annos.mat"
MAT_FIELDS = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
# class-folder (Kaggle) layout
KAGGLE_ZIP = "stanford-car-dataset-by-classes-folder.zip"  # replica name (Kaggle's dataset slug)
NAMES_CSV = "names.csv"
ANNO_CSV = {"train": "anno_train.csv", "test": "anno_test.csv"}
ANNO_COLUMNS = ["file", "x1", "y1", "x2", "y2", "class"]
FOLDERS = "car_data/car_data"

N_CLASSES = 196
TRAIN_CLASSES = range(1, 99)  # classes 1-98 train, 99-196 test (module docstring)
# dead: the folder of cars_{train,test}.tgz in losses.md "Cars196", and of car_ims.tgz / cars_annos.mat in
# third-party loaders that carry PB's md5s
LEGACY_URL = "http://imagenet.stanford.edu/internal/car196/"
BODIES = ["Sedan 2012", "C/V Cargo Van 2012", "Coupe 2009", "SUV 2007", "Hatchback 2011", "Convertible 2010",
          "Minivan 2012"]  # replica names; the second exercises the Kaggle "/" -> "-" folder rule


@DATASETS.register("cars")
class Cars(Dataset):
    """Cars196; see the module docstring for both layouts and every choice."""

    title = "Cars196"
    # md5s: PB (datasets.md "Cars196"); sizes are not published. The host is dead: no url.
    files = (SourceFile(IMAGE_ARCHIVE, checksum="md5:d5c8f0aa497503f355e17dc7886c3f14"),
             SourceFile(ANNOS, checksum="md5:b407c6086d669747186bd1d764ff9dbc", extract=False))
    manual = True
    how_to_get = (
        f"the official host is dead ({IMAGE_ARCHIVE} and {ANNOS} were served from {LEGACY_URL}; "
        "ai.stanford.edu/~jkrause/cars/ is gone too). If you have a copy of these two legacy files, put them in "
        "the downloads folder named below. Otherwise download the Kaggle copy "
        "'jutrera/stanford-car-dataset-by-classes-folder' (https://www.kaggle.com/datasets/jutrera/"
        "stanford-car-dataset-by-classes-folder; whether it needs a Kaggle account is unverified), unzip it and set "
        "`datasets.cars.extracted: <folder>` to the folder holding names.csv, anno_train.csv, anno_test.csv "
        "and car_data/car_data/{train,test}/ (no checksum is published for it).")
    top = ""
    marker = ANNOS
    levels = ["class"]
    protocol = "same-set"
    # datasets.md "Cars196" (PML tests): 8,054 + 8,131 = 16,185 images; 98 classes each.
    expected_counts = {
        "train": {"images": 8_054, "class": 98},
        "test": {"images": 8_131, "class": 98},
    }
    disjoint = (("train", "test"),)

    def __init__(self) -> None:
        self._meta: dict = {}

    # -- finding and parsing --------------------------------------------------------------------

    def find_root(self, directory: Path) -> Path | None:
        """The folder holding ``cars_annos.mat`` (legacy) or ``names.csv`` beside
        ``car_data/car_data/`` (Kaggle): ``directory`` itself, else one of its subfolders.
        Raises a FileNotFoundError naming both layouts when neither is there (instead of
        returning None, so the message names the Kaggle files too)."""
        directory = Path(directory)
        candidates = [directory] + (sorted(p for p in directory.iterdir() if p.is_dir() and not
                                           p.name.startswith(".")) if directory.is_dir() else [])
        for root in candidates:
            if layout_of(root):
                return root
        raise FileNotFoundError(
            f"no Cars196 copy under {directory}: expected {ANNOS} beside {IMAGE_DIR}/ (legacy layout), or "
            f"{NAMES_CSV}, {ANNO_CSV['train']}, {ANNO_CSV['test']} beside {FOLDERS}/ (Kaggle class-folder "
            f"layout), in it or in one of its subfolders; or the download.json of downloads/cars/")

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows of every image, in file order (legacy: the ``.mat``'s; Kaggle:
        ``anno_train.csv`` then ``anno_test.csv``): ``path``, ``split`` (class <= 98: train,
        else test), ``label`` = class id, ``origin``: legacy ``"cars_annos.mat, annotations(<i>)"``
        (the 1-based, MATLAB-style index of the struct array entry: a ``.mat`` has no lines),
        Kaggle ``"anno_train.csv, line <n>"``."""
        root = Path(root)
        layout = layout_of(root)
        if layout == "legacy":
            paths, labels, names = read_legacy(root / ANNOS)
            origins = [f"{ANNOS}, annotations({i})" for i in range(1, len(paths) + 1)]
        elif layout == "folders":
            paths, labels, origins, names = read_folders(root)
        else:
            raise FileNotFoundError(f"{self.title}: neither {root / ANNOS} nor {root / NAMES_CSV} exists")
        labels = np.asarray(labels, dtype=np.int64)
        bad = sorted({int(c) for c in labels if not 1 <= c <= len(names)})
        if bad:
            where = root / (ANNOS if layout == "legacy" else NAMES_CSV)
            raise ValueError(f"{self.title}: class ids {bad[:5]} outside 1..{len(names)}, the classes named in {where}")
        self._meta = {"class_names": names, "layout": layout}
        return pd.DataFrame({"path": paths, "split": np.where(np.isin(labels, TRAIN_CLASSES), "train", "test"),
                             "label": labels, "origin": origins})

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """``class_names`` (``class_names[i]`` is class ``i + 1``) and ``layout`` (legacy / folders)."""
        return dict(self._meta)

    # -- replica --------------------------------------------------------------------------------

    def replica_file_like(self, name: str) -> SourceFile:
        """The class-folder replica's zip (``make_replica(layout="folders")``) is extracted into the tree."""
        if name == KAGGLE_ZIP:
            return SourceFile(KAGGLE_ZIP)
        return super().replica_file_like(name)

    def make_replica(self, out_dir: str | Path, *, layout: str = "legacy", classes_per_split: int = 4,
                     images_per_class: tuple[int, int] = (2, 5), image_size: int = 32, seed: int = 0) -> list[str]:
        """Write a Cars196 replica into ``out_dir``; return the names written.

        ``layout="legacy"``: ``car_ims.tgz`` and ``cars_annos.mat`` (the DAG's files);
        ``layout="folders"``: the Kaggle copy as one zip, ``stanford-car-dataset-by-classes-folder.zip``
        (names.csv, anno_*.csv and car_data/ at its top). Both list all 196 classes (synthetic
        names) and hold images of the first ``classes_per_split`` classes of each half (1, 2, ...
        and 99, 100, ...), between ``images_per_class[0]`` and ``[1]`` each; the same seed gives
        both layouts the same images, labels and official train/test flags (random, so they
        disagree with the retrieval split). Bounding boxes are random.
        """
        if not 1 <= classes_per_split <= len(TRAIN_CLASSES):
            raise ValueError(f"classes_per_split must be in 1..{len(TRAIN_CLASSES)}, got {classes_per_split}")
        if layout not in ("legacy", "folders"):
            raise ValueError(f"layout must be 'legacy' or 'folders', got {layout!r}")
        rng = np.random.default_rng(seed)
        names = [replica_class_name(c) for c in range(1, N_CLASSES + 1)]
        used = [*range(1, classes_per_split + 1), *range(TRAIN_CLASSES.stop, TRAIN_CLASSES.stop + classes_per_split)]
        images = []  # (class, test flag, bbox, jpeg), in class order
        for c in used:
            for _ in range(int(rng.integers(images_per_class[0], images_per_class[1] + 1))):
                x1, y1 = (int(v) for v in rng.integers(0, image_size // 2, 2))
                x2, y2 = (int(v) for v in rng.integers(image_size // 2, image_size, 2))
                images.append((c, int(rng.integers(0, 2)), (x1, y1, x2, y2), tiny_jpeg(rng, c, image_size)))
        out_dir = Path(out_dir)
        if layout == "legacy":
            members, annotations = {}, []
            for n, (c, test, box, jpeg) in enumerate(images, 1):
                path = f"{IMAGE_DIR}/{n:06d}.jpg"
                members[path] = jpeg
                annotations.append((path, *box, c, test))
            write_tar(out_dir / IMAGE_ARCHIVE, members)
            write_file(out_dir / ANNOS, annos_mat(annotations, names))
            return [IMAGE_ARCHIVE, ANNOS]  # the archive first: see the module docstring
        rows = {"train": [], "test": []}
        files = {}
        for c, test, box, jpeg in images:
            split = "test" if test else "train"
            file = f"{len(rows[split]) + 1:05d}.jpg"
            rows[split].append(f"{file},{','.join(map(str, box))},{c}")
            files[f"{FOLDERS}/{split}/{class_folder(names[c - 1])}/{file}"] = jpeg
        members = {NAMES_CSV: ("\n".join(names) + "\n").encode(),
                   **{ANNO_CSV[s]: ("\n".join(rows[s]) + "\n").encode() for s in ("train", "test")}, **files}
        write_zip(out_dir / KAGGLE_ZIP, members)
        return [KAGGLE_ZIP]


def layout_of(root: Path) -> str | None:
    """``legacy`` (cars_annos.mat), ``folders`` (names.csv beside car_data/car_data/) or None."""
    if (root / ANNOS).is_file():
        return "legacy"
    if (root / NAMES_CSV).is_file() and (root / FOLDERS).is_dir():
        return "folders"
    return None


def class_folder(name: str) -> str:
    """A class's folder in the Kaggle copy: its name with ``/`` replaced by ``-``."""
    return name.replace("/", "-")


def replica_class_name(class_id: int) -> str:
    return f"Replica Make{class_id:03d} {BODIES[(class_id - 1) % len(TRAIN_CLASSES) % len(BODIES)]}"


def _scalar(value):
    """One MATLAB struct field value (a 1x1 array, or a 1-element char array) as a Python scalar."""
    flat = np.asarray(value).ravel()
    if flat.size != 1:
        raise ValueError(f"expected one value, got {flat.size}")
    return flat[0].item() if hasattr(flat[0], "item") else flat[0]


def read_legacy(file: Path) -> tuple[list[str], list[int], list[str]]:
    """``cars_annos.mat`` as (relative_im_path per image, class per image, class_names); image
    ``i`` is the entry ``annotations(i + 1)``."""
    import scipy.io  # here, not at module level: the planner imports every dataset module for its facts

    try:
        mat = scipy.io.loadmat(file)
    except Exception as err:  # scipy raises ValueError / TypeError / MatReadError on a bad file
        raise ValueError(f"{file}: cannot read it as a MATLAB file ({err})") from None
    for key in ("annotations", "class_names"):
        if key not in mat:
            raise ValueError(f"{file}: no variable {key!r} (found {sorted(k for k in mat if not k.startswith('__'))})")
    annotations = mat["annotations"].ravel()
    fields = annotations.dtype.names or ()
    missing = [f for f in ("relative_im_path", "class") if f not in fields]
    if missing:
        raise ValueError(f"{file}: annotations lack the fields {missing} (has {list(fields)})")
    paths, labels = [], []
    for i, entry in enumerate(annotations):
        try:
            paths.append(str(_scalar(entry["relative_im_path"])))
            labels.append(int(_scalar(entry["class"])))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{file}: annotations({i + 1}): {err}") from None
    names = []
    for i, cell in enumerate(mat["class_names"].ravel()):
        try:
            names.append(str(_scalar(cell)).strip())
        except (ValueError, TypeError) as err:
            raise ValueError(f"{file}: class_names({i + 1}): {err}") from None
    return paths, labels, names


def read_folders(root: Path) -> tuple[list[str], list[int], list[str], list[str]]:
    """The Kaggle copy as (path per image, class per image, origin per image, class names):
    anno_train.csv then anno_test.csv, paths under car_data/car_data/<split>/<class folder>/,
    origins ``"<anno file>, line <n>"``."""
    for name in (NAMES_CSV, *ANNO_CSV.values()):
        if not (root / name).is_file():
            raise FileNotFoundError(f"Cars196: {root / name} is missing (the Kaggle class-folder copy holds "
                                    f"{NAMES_CSV}, {ANNO_CSV['train']} and {ANNO_CSV['test']})")
    names = [row[0].strip() for row in csv.reader(text_stream(root / NAMES_CSV)) if row and row[0].strip()]
    paths, labels, origins = [], [], []
    for split, name in ANNO_CSV.items():
        file = root / name
        for number, row in enumerate(csv.reader(text_stream(file)), 1):
            if not row or (number == 1 and [c.strip() for c in row] == ANNO_COLUMNS):
                continue
            if len(row) != len(ANNO_COLUMNS) or not row[-1].strip().isdigit():
                raise ValueError(f"{file} line {number}: expected {','.join(ANNO_COLUMNS)} "
                                 f"(no header), got {','.join(row)!r}")
            label = int(row[-1])
            if not 1 <= label <= len(names):
                raise ValueError(f"{file} line {number}: class {label} outside 1..{len(names)}, the classes "
                                 f"named in {root / NAMES_CSV}")
            paths.append(f"{FOLDERS}/{split}/{class_folder(names[label - 1])}/{row[0].strip()}")
            labels.append(label)
            origins.append(f"{name}, line {number}")
    return paths, labels, origins, names


def annos_mat(annotations: list[tuple], names: list[str]) -> bytes:
    """A ``cars_annos.mat`` (MATLAB v5) holding ``annotations`` (rows of MAT_FIELDS) and
    ``class_names``, with a fixed header (scipy writes the current time there). The numeric
    types (uint16 boxes, uint8 class and test) are the replica's choice: the parser takes any."""
    import scipy.io

    struct = np.zeros((1, len(annotations)), dtype=[(f, object) for f in MAT_FIELDS])
    for i, (path, x1, y1, x2, y2, c, test) in enumerate(annotations):
        struct[0, i] = (np.array([path]), *(np.array([[v]], dtype=np.uint16) for v in (x1, y1, x2, y2)),
                        np.array([[c]], dtype=np.uint8), np.array([[test]], dtype=np.uint8))
    cells = np.empty((1, len(names)), dtype=object)
    for i, name in enumerate(names):
        cells[0, i] = np.array([name])
    buffer = io.BytesIO()
    scipy.io.savemat(buffer, {"annotations": struct, "class_names": cells}, format="5", do_compression=False)
    data = bytearray(buffer.getvalue())
    data[:116] = b"MATLAB 5.0 MAT-file, generated replica of cars_annos.mat (rankrepro)".ljust(116)
    return bytes(data)
