"""DyML (Sun et al., CVPR 2021, "Dynamic Metric Learning"): DyML-Vehicle, -Animal and -Product.

Three registrations of one class, ``dyml_vehicle`` / ``dyml_animal`` / ``dyml_product``
(keyword ``domain``). Three levels, finest first: ``fine``, ``middle``, ``coarse``. Protocol
``dyml`` (:func:`rankrepro.metrics.protocols.dyml.dyml`): Vehicle and Animal have one query/gallery
benchmark per level; Product has one same-set test set with all three label columns.

Source (manual). The authors share the data on OneDrive
(https://1drv.ms/u/s!AsLhhAJIX-_0asLHa5h-56ZZL94?e=KFLdmt) and Baidu
(https://pan.baidu.com/s/1WJdELF8GdZqS7PkzsL9aRA, password d6nm), per the
SupetZYK/DynamicMetricLearning README; SupRank's README points to the same OneDrive folder.
Nobody publishes checksums, sizes, file names or a licence. The one declared source file per
domain is an archive ``dyml_<domain>.zip`` [unverified name] holding the folder
``dyml_<domain>/`` [unverified name: the folder names of the authors' and SupRank's code,
``/data/dyml_vehicle``, ``.../image_retrieval/dyml_vehicle``], extracted into
``<data_root>/dyml_<domain>/``; its sha256 is recorded on first verified use. A user with the
folder sets ``datasets.dyml_<domain>.extracted`` to it (or to its parent). The image root is the
folder holding ``train/label.csv``: itself, its ``dyml_<domain>/``, or its only sub-folder holding
it (e.g. the authors' own ``DyML-vehicle``).

Layout (suprank.md §4; the readers of SupRank ``datasets/dyml.py``, the authors'
``src/DyML_dataset.py`` / ``src/DyML_testset.py`` and CLCD ``src/dataset/dyml_*.py``)::

    train/label.csv, train/imgs/<fname>                              (every domain)
    bmk_{fine,middle,coarse}/{query,gallery}.csv                     (Vehicle, Animal)
    bmk_{fine,middle,coarse}/{query,gallery}/<fname>
    mini-bmk_all_in_one/label.csv, mini-bmk_all_in_one/imgs/<fname>  (Product)

The CSV files are ``", "``-separated. The odd column names SupRank reads with
``pd.read_csv`` -- ``fname``, ``" fine_id0.jpg"``, ``" middle_id"``, ``" coarse_id"`` (label
files) and ``fname``, ``" labels0.jpg"`` (benchmark files) -- are kept as published: they are
what pandas makes of a header written *without its line break*, glued to the first row (whose
image is ``0.jpg``)::

    fname, coarse_id, middle_id, fine_id0.jpg, <coarse>, <middle>, <fine>
    1.jpg, <coarse>, <middle>, <fine>
    ...
    fname, labels0.jpg, <label>          (benchmark files)
    1.jpg, <label>

This reading is inferred, not seen [unverified]: the authors' readers cut the first line after
its last ``_id`` and split the rest as a row ``fname, coarse, middle, fine`` (their comment; CLCD
maps coarse/middle/fine to fields 1/2/3), which only works if that row is glued there, and it
is the only layout for which SupRank's column names pick the same columns (``" fine_id0.jpg"``
= field 3 = fine). The parser checks the names of line 1 verbatim and in this order (spaces
around the commas aside): the header must be ``fname, coarse_id, middle_id, fine_id``
(``fname, labels``) followed either by the glued first row or by a line break (a header
someone repaired); anything else is an error naming the file. Choices where the code
differs: the glued first row is kept (the authors' readers keep it; SupRank's pandas reading
loses that image); every line after the header must be a full row (the authors stop at the
first short row, CLCD skips it): an error names file and line; label ids are kept as listed
(SupRank remaps each level, and each benchmark file on its own, to 0..n-1); a negative
id is an error (-1 means "unknown" in the manifest).

Manifest. ``path`` is relative to the image root (``train/imgs/<fname>`` ...). Splits:
``train`` (all three levels known); Vehicle/Animal ``query_<level>``, ``gallery_<level>`` for
each level (a benchmark row knows only its level's label, the other level columns are -1);
Product ``test`` (all three known). suprank.md §3.1 states that a DyML gallery already contains
its queries (SupRank evaluates each benchmark as ``{query, gallery_distractor}``, dropping the
top-1 neighbour), so the generated replica repeats each query image in its gallery, under the
same file name [unverified: how the real galleries name them].

Counts (``expected_counts``): only the train classes per level are published, from SupRank
``config/dataset/dyml_{vehicle,animal,product}.yaml`` ``num_classes_train_level{0,1,2}``
(datasets.md): Vehicle 39,491 / 93 / 5, Animal 495 / 28 / 5, Product 1,639 / 171 / 36. No
image count is stated (``num_samples_train`` is empty; the SupRank TPAMI paper, App. C-A2 and
Table VIII, gives none), nor any test count. If SupRank counted its classes as it reads the
files, the row of ``0.jpg`` was not among them: a count off by one at some level would point
there. Whether train and test classes are disjoint is not
stated, so no ``disjoint`` is declared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_zip
from rankrepro.io import read_lines

LEVELS = ["fine", "middle", "coarse"]
TITLES = {"vehicle": "DyML-Vehicle", "animal": "DyML-Animal", "product": "DyML-Product"}
# train classes per level: SupRank config/dataset/dyml_<domain>.yaml num_classes_train_level{0,1,2} (datasets.md)
TRAIN_CLASSES = {
    "vehicle": {"fine": 39_491, "middle": 93, "coarse": 5},
    "animal": {"fine": 495, "middle": 28, "coarse": 5},
    "product": {"fine": 1_639, "middle": 171, "coarse": 36},
}
ONEDRIVE = "https://1drv.ms/u/s!AsLhhAJIX-_0asLHa5h-56ZZL94?e=KFLdmt"  # DynamicMetricLearning README
ONEDRIVE_LONG = ("https://onedrive.live.com/?authkey=%21AMLHa5h%2D56ZZL94&id=F4EF5F480284E1C2%21106"
                 "&cid=F4EF5F480284E1C2")  # SupRank README (suprank.md §4)
BAIDU = "https://pan.baidu.com/s/1WJdELF8GdZqS7PkzsL9aRA (password d6nm)"  # DynamicMetricLearning README

TRAIN_DIR, TRAIN_IMAGES = "train", "train/imgs"
LABEL_FILE = "label.csv"
PRODUCT_TEST_DIR = "mini-bmk_all_in_one"
PARTS = ("query", "gallery")
# the header fields as written (", "-separated); the data rows have the same order
LABEL_HEADER = ("fname", "coarse_id", "middle_id", "fine_id")
BMK_HEADER = ("fname", "labels")
# what SupRank's pd.read_csv calls the columns it reads (the header glued to the row of 0.jpg)
SUPRANK_LABEL_COLUMNS = ("fname", " fine_id0.jpg", " middle_id", " coarse_id")
SUPRANK_BMK_COLUMNS = ("fname", " labels0.jpg")
LEVEL_FIELD = {"coarse": 1, "middle": 2, "fine": 3}  # field of a label-file row holding each level
MANIFEST_COLUMN = {"fine": "label", "middle": "level_1", "coarse": "level_2"}


def top_folder(domain: str) -> str:
    return f"dyml_{domain}"


def archive_name(domain: str) -> str:
    return f"dyml_{domain}.zip"


def bmk_dir(level: str) -> str:
    return f"bmk_{level}"


def benchmark_splits(level: str) -> dict[str, str]:
    """``{"query": "query_<level>", "gallery": "gallery_<level>"}``: a benchmark's manifest splits."""
    return {part: f"{part}_{level}" for part in PARTS}


class DyML(Dataset):
    """One DyML domain; see the module docstring for the layout and every choice."""

    marker = f"{TRAIN_DIR}/{LABEL_FILE}"
    root_in_only_subfolder = True  # the root: the tree, its dyml_<domain>/, or its only sub-folder with the marker
    levels = list(LEVELS)
    protocol = "dyml"
    manual = True

    def __init__(self, *, domain: str) -> None:
        if domain not in TITLES:
            raise ValueError(f"DyML: domain {domain!r}, expected one of {sorted(TITLES)}")
        self.domain = domain
        self.title = TITLES[domain]
        self.top = top_folder(domain)
        self.files = (SourceFile(archive_name(domain)),)  # no url (manual), no published checksum
        self.expected_counts = {"train": dict(TRAIN_CLASSES[domain])}
        name = f"dyml_{domain}"
        self.how_to_get = (
            f"download the {self.title} data from the DyML authors' share: OneDrive {ONEDRIVE} (SupRank links "
            f"the same folder as {ONEDRIVE_LONG}) or Baidu {BAIDU}. The share's file names are not published: "
            f"put a zip of the {self.top}/ folder (train/label.csv, train/imgs/, "
            + ("mini-bmk_all_in_one/" if domain == "product" else "bmk_fine/, bmk_middle/, bmk_coarse/")
            + f") at the path below, named {archive_name(domain)}; if you have the folder itself, set "
            f"datasets.{name}.extracted to it instead (no checksum is published: the archive's sha256 is "
            f"recorded the first time its counts check out).")

    @property
    def has_benchmarks(self) -> bool:
        """Vehicle and Animal: one query/gallery benchmark per level; Product: one test set."""
        return self.domain != "product"

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows of every label file (see the module docstring): train, then the
        benchmarks (Vehicle/Animal, fine to coarse, query before gallery) or Product's test set;
        ``origin`` = the label file relative to ``root`` and the line (``"train/label.csv, line 2"``)."""
        parts = [label_rows(root, f"{TRAIN_DIR}/{LABEL_FILE}", TRAIN_IMAGES, "train", self.title)]
        if self.has_benchmarks:
            for level in LEVELS:
                for part, split in benchmark_splits(level).items():
                    parts.append(benchmark_rows(root, level, part, split, self.title))
        else:
            parts.append(label_rows(root, f"{PRODUCT_TEST_DIR}/{LABEL_FILE}", f"{PRODUCT_TEST_DIR}/imgs", "test",
                                    self.title))
        return pd.concat(parts, ignore_index=True)

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """``domain``; for Vehicle/Animal ``benchmarks``: {level: {query, gallery (split names),
        column (the manifest column of that level)}}."""
        meta = {"domain": self.domain}
        if self.has_benchmarks:
            meta["benchmarks"] = {level: {**benchmark_splits(level), "column": MANIFEST_COLUMN[level]}
                                  for level in LEVELS}
        return meta

    def make_replica(self, out_dir: str | Path, *, coarse: int = 3, middle_per_coarse: int = 2,
                     fine_per_middle: int = 2, images_per_class: tuple[int, int] = (2, 3),
                     image_size: int = 32, seed: int = 0) -> list[str]:
        """Write ``dyml_<domain>.zip`` into ``out_dir``; return its name.

        A tree of ``coarse`` classes, ``middle_per_coarse`` middle classes under each and
        ``fine_per_middle`` fine classes under each middle one; ids are 0-based and contiguous per
        level. Train holds every fine class with ``images_per_class`` (inclusive range) images.
        Vehicle/Animal: per level, a benchmark of that level's classes (for ``fine``: new fine
        classes, one per middle class), one query image per class (two for ``coarse``) and a
        gallery holding those queries (same file names and bytes, listed first) plus two other
        images per class (three for ``coarse``). Product: a test set of new fine classes, one per
        middle class, with ``images_per_class`` images each. Images are ``<n>.jpg``, numbered
        from 0 per file, so every file starts with ``0.jpg`` glued to its header.
        """
        rng = np.random.default_rng(seed)
        top = self.top
        tree = [(c, c * middle_per_coarse + m) for c in range(coarse) for m in range(middle_per_coarse)]
        n_fine = len(tree) * fine_per_middle
        train = [(c, mid, mid * fine_per_middle + f) for c, mid in tree for f in range(fine_per_middle)]
        new_fine = [(c, mid, n_fine + i) for i, (c, mid) in enumerate(tree)]  # test fine classes

        def image(fine_key, coarse_id):
            return tiny_jpeg(rng, (self.domain, fine_key), image_size, group_key=(self.domain, coarse_id))

        def count():
            return int(rng.integers(images_per_class[0], images_per_class[1] + 1))

        members: dict[str, bytes] = {}

        def label_file(folder: str, images: str, classes):
            rows = []
            for c, mid, fine in classes:
                for _ in range(count()):
                    name = f"{len(rows)}.jpg"
                    members[f"{top}/{images}/{name}"] = image(fine, c)
                    rows.append((name, c, mid, fine))
            members[f"{top}/{folder}/{LABEL_FILE}"] = csv_text(LABEL_HEADER, rows)

        label_file(TRAIN_DIR, TRAIN_IMAGES, train)
        if self.has_benchmarks:
            per_level = {"fine": [(fine, c, fine) for c, _, fine in new_fine],
                         "middle": [(mid, c, ("middle", mid)) for c, mid in tree],
                         "coarse": [(c, c, ("coarse", c)) for c in range(coarse)]}
            for level, classes in per_level.items():
                n_query, n_other = (2, 3) if level == "coarse" else (1, 2)
                query, gallery = [], []
                for label, c, key in classes:
                    for _ in range(n_query):
                        name, data = f"{len(query)}.jpg", image(key, c)
                        query.append((name, label, data))
                        gallery.append((name, label, data))
                for label, c, key in classes:
                    for _ in range(n_other):
                        gallery.append((f"{len(gallery)}.jpg", label, image(key, c)))
                for part, rows in (("query", query), ("gallery", gallery)):
                    folder = bmk_dir(level)
                    members.update({f"{top}/{folder}/{part}/{name}": data for name, _, data in rows})
                    members[f"{top}/{folder}/{part}.csv"] = csv_text(BMK_HEADER, [r[:2] for r in rows])
        else:
            label_file(PRODUCT_TEST_DIR, f"{PRODUCT_TEST_DIR}/imgs", new_fine)
        name = archive_name(self.domain)
        write_zip(Path(out_dir) / name, dict(sorted(members.items())))
        return [name]


DATASETS.register("dyml_vehicle", domain="vehicle")(DyML)
DATASETS.register("dyml_animal", domain="animal")(DyML)
DATASETS.register("dyml_product", domain="product")(DyML)


# -- reading -----------------------------------------------------------------------------------


def read_rows(file: Path, header: tuple[str, ...], title: str) -> list[tuple[int, list[str]]]:
    """The rows of a DyML CSV file as ``(line number, fields)``, fields stripped; the first row
    may be glued to the header (see the module docstring). Errors name the file and line."""
    if not file.is_file():
        raise FileNotFoundError(f"{title}: {file} is missing (a label file of the dataset: "
                                "is the extracted copy complete?)")
    lines = read_lines(file)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"{file}: empty, expected the header {', '.join(header)!r} and rows")
    n = len(header)
    first = [f.strip() for f in lines[0].split(",")]
    glued = first[n - 1][len(header[n - 1]):] if len(first) >= n else ""
    if first[:n - 1] != list(header[:n - 1]) or not first[n - 1].startswith(header[n - 1]) \
            or len(first) != (2 * n - 1 if glued else n):
        names = ", ".join(repr(c) for c in (SUPRANK_LABEL_COLUMNS if n == 4 else SUPRANK_BMK_COLUMNS))
        raise ValueError(f"{file}, line 1: header {lines[0][:100]!r}; expected {', '.join(header)!r} "
                         f"followed by the first row, as published (pandas reads the columns {names})")
    rows = [(1, [glued, *first[n:]])] if glued else []
    for number, line in enumerate(lines[1:], 2):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != n or not fields[0]:
            raise ValueError(f"{file}, line {number}: {line[:100]!r}; expected {n} comma-separated fields "
                             f"({', '.join(header)})")
        rows.append((number, fields))
    return rows


def _labels(file: Path, rows: list[tuple[int, list[str]]], field: int) -> np.ndarray:
    """Field ``field`` of every row as non-negative integers (an error names file and line)."""
    out = np.empty(len(rows), np.int64)
    for i, (number, fields) in enumerate(rows):
        try:
            out[i] = int(fields[field])
        except ValueError:
            raise ValueError(f"{file}, line {number}: label {fields[field]!r} is not an integer") from None
        if out[i] < 0:
            raise ValueError(f"{file}, line {number}: negative label {out[i]} (-1 means 'unknown' in a manifest)")
    return out


def label_rows(root: Path, rel: str, images: str, split: str, title: str) -> pd.DataFrame:
    """A ``label.csv`` (train, or Product's test) as manifest rows with all three levels and
    ``origin`` (``"<rel>, line <n>"``; the row glued to the header is line 1)."""
    file = root / rel
    rows = read_rows(file, LABEL_HEADER, title)
    return pd.DataFrame({
        "path": [f"{images}/{fields[0]}" for _, fields in rows],
        "split": split,
        **{MANIFEST_COLUMN[level]: _labels(file, rows, LEVEL_FIELD[level]) for level in LEVELS},
        "origin": [f"{rel}, line {number}" for number, _ in rows],
    })


def benchmark_rows(root: Path, level: str, part: str, split: str, title: str) -> pd.DataFrame:
    """``bmk_<level>/<part>.csv`` as manifest rows: that level's column known, the others -1;
    ``origin`` as in :func:`label_rows`."""
    rel = f"{bmk_dir(level)}/{part}.csv"
    file = root / rel
    rows = read_rows(file, BMK_HEADER, title)
    known = _labels(file, rows, 1)
    return pd.DataFrame({
        "path": [f"{bmk_dir(level)}/{part}/{fields[0]}" for _, fields in rows],
        "split": split,
        **{MANIFEST_COLUMN[lv]: known if lv == level else np.full(len(rows), -1, np.int64) for lv in LEVELS},
        "origin": [f"{rel}, line {number}" for number, _ in rows],
    })


def csv_text(header: tuple[str, ...], rows: list[tuple]) -> bytes:
    """A DyML CSV file: the header glued to the first row (no line break), then one row a line."""
    lines = [", ".join(str(x) for x in row) for row in rows]
    return (", ".join(header) + lines[0] + "\n" + "".join(line + "\n" for line in lines[1:])).encode()
