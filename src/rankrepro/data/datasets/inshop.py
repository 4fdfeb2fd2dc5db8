"""In-shop Clothes Retrieval (DeepFashion, Liu et al., CVPR 2016): shop photos of clothing items.

Three levels, finest first: ``item`` (one clothing item: the number of its ``id_XXXXXXXX``),
``clothing_type`` (the ``<Type>`` folder, e.g. ``Denim``, ``Dresses``) and ``gender`` (the
``MEN``/``WOMEN`` folder). Protocol ``query-gallery``: the query split searched against the
gallery split (RaMBO §5; losses.md §5.4). Train items are disjoint from the evaluation items;
query and gallery share theirs by construction.

Source files (manual: see :attr:`InShop.how_to_get`). The release is a Google-Drive folder
(``0B7EVK8r0v71pVDZFQXRsMDZCX1E``, datasets.md) with ``Img/img.zip``, ``Eval/list_eval_partition.txt``
and ``Anno/`` (mmfashion's In-shop page); only the two files below are used, downloaded to
``<data_root>/downloads/inshop/``. File ids inside the folder were seen only in an unnamed helper
script [unverified], so nothing is downloaded automatically; nobody publishes checksums, so
their sha256 is recorded on first verified use (``checksums.lock.json``).

- ``img.zip``: members ``img/<MEN|WOMEN>/<Type>/id_XXXXXXXX/<NN>_<k>_<view>.jpg`` (256x256
  JPEGs); the top folder ``img/`` is what the partition file's paths start with [unverified:
  the usual "unzip img.zip next to Eval/" instructions imply it]. Extracted into the tree root.
- ``list_eval_partition.txt``: line 1 the number of images (52,712), line 2 the header
  ``image_name item_id evaluation_status``, then one whitespace-separated row per image,
  ``img/<MEN|WOMEN>/<Type>/id_XXXXXXXX/<file>.jpg id_XXXXXXXX train|query|gallery`` (OML
  convert_inshop.py, SupRank inshop.py; SupRank drops empty fields, so the columns may be
  padded with runs of spaces). Linked into ``<tree>/Eval/`` as in the release.

The tree ``<data_root>/inshop/`` is the image root (``Eval/list_eval_partition.txt`` marks it)::

    Eval/list_eval_partition.txt   img/<MEN|WOMEN>/<Type>/id_XXXXXXXX/*.jpg

An already-extracted copy (``extracted``) is the folder holding ``Eval/list_eval_partition.txt``
(or a flat ``list_eval_partition.txt``, SupRank's layout); its images may be under ``img/``
(img.zip unzipped beside ``Eval/``) or ``Img/img/`` (unzipped in place inside the release's
``Img/``, the layout mmpretrain reads). Which one is found by probing the first listed image;
manifest paths are relative to that folder (``Img/img/...`` in the second case).

Choices:

- ``label`` = the item number (``id_00000080`` -> 80), the dataset's own id, not remapped.
- ``clothing_type`` ids: 0-based positions in the sorted list of ``<Type>`` names over the whole
  file, *without* the gender (as SupRank: ``Denim`` of MEN and of WOMEN is one type), so a type
  may have both genders; ``gender`` ids likewise (``MEN`` = 0, ``WOMEN`` = 1). ``meta.json``
  holds the names (``clothing_type_names``, ``gender_names``) in id order.
- An item listed under two types or two genders is an error naming it: no reference says the
  real file has one, and a fine class must have one parent per level.
- Line 1 must equal the number of rows and line 2 must be the published header; a row must
  have three fields, a known split and a path of the form above (errors name the file and line).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_file, write_zip
from rankrepro.io import read_lines

ARCHIVE = "img.zip"
PARTITION = "list_eval_partition.txt"
EVAL_DIR = "Eval"
HEADER = ["image_name", "item_id", "evaluation_status"]
SPLITS = ("train", "query", "gallery")
IMAGE_PREFIXES = ("", "Img/")  # where img/ may sit in an extracted copy
ITEM_RE = re.compile(r"id_(\d+)")
DRIVE_FOLDER = "0B7EVK8r0v71pVDZFQXRsMDZCX1E"

# Replica: a few of the real <Type> folders (Denim exists for both genders) and view names.
REPLICA_TYPES = {"MEN": ["Denim", "Shirts_Polos", "Tees_Tanks"], "WOMEN": ["Denim", "Dresses", "Skirts"]}
REPLICA_VIEWS = ["1_front", "2_side", "3_back", "4_full", "7_additional"]


@DATASETS.register("inshop")
class InShop(Dataset):
    """In-shop Clothes Retrieval; see the module docstring for the layout and the choices."""

    title = "In-shop"
    files = (SourceFile(ARCHIVE, checksum=None, into=""),
             SourceFile(PARTITION, checksum=None, extract=False, into=EVAL_DIR))
    manual = True
    how_to_get = (f"open the DeepFashion In-shop Clothes Retrieval Benchmark Google-Drive folder "
                  f"https://drive.google.com/drive/folders/{DRIVE_FOLDER} and download Img/{ARCHIVE} "
                  f"and Eval/{PARTITION}; put both, unchanged and side by side, in the downloads folder below "
                  f"(no checksum is published: their sha256 is recorded the first time their counts check out).")
    top = ""
    marker = f"{EVAL_DIR}/{PARTITION}"
    levels = ["item", "clothing_type", "gender"]
    protocol = "query-gallery"
    # RaMBO paper §5 ("In-shop Clothes"): 25,882 train images of 3,997 classes; 14,218 query +
    # 12,612 gallery images of 3,985 classes each. Types and genders per split: not published.
    expected_counts = {
        "train": {"images": 25_882, "item": 3_997},
        "query": {"images": 14_218, "item": 3_985},
        "gallery": {"images": 12_612, "item": 3_985},
    }
    disjoint = (("train", "query"), ("train", "gallery"))

    def find_root(self, directory: Path) -> Path | None:
        """``directory`` when it holds ``Eval/list_eval_partition.txt`` or a flat ``list_eval_partition.txt``."""
        return directory if partition_file(directory) else None

    def read_table(self, root: Path) -> pd.DataFrame:
        """The partition file's rows: ``path`` (image prefix + image_name), ``split``,
        ``label`` = item number, ``level_1`` = clothing type id, ``level_2`` = gender id,
        ``origin`` = ``"Eval/list_eval_partition.txt, line <n>"`` (the file as found)."""
        file = partition_file(root)
        if file is None:
            raise FileNotFoundError(f"{self.title}: {root / EVAL_DIR / PARTITION} is missing "
                                    f"(an In-shop folder holds {EVAL_DIR}/{PARTITION})")
        rows = read_partition(file)
        check_one_parent(rows, file)
        types, genders = sorted(set(rows["type"])), sorted(set(rows["gender"]))
        prefix = image_prefix(root, rows["path"].iat[0]) if len(rows) else ""
        listed = file.relative_to(root).as_posix()
        return pd.DataFrame({
            "path": prefix + rows["path"],
            "split": rows["split"],
            "label": rows["item"].astype("int64"),
            "level_1": rows["type"].map({name: i for i, name in enumerate(types)}).astype("int64"),
            "level_2": rows["gender"].map({name: i for i, name in enumerate(genders)}).astype("int64"),
            "origin": [f"{listed}, line {n}" for n in rows["line"]],
        })

    def extra_meta(self, table: pd.DataFrame) -> dict:
        parts = table["path"].str.split("/")
        return {"clothing_type_names": names_by_id(parts.str[-3], table["level_1"]),
                "gender_names": names_by_id(parts.str[-4], table["level_2"])}

    def make_replica(self, out_dir: str | Path, *, items_per_type: int = 2, images_per_item: tuple[int, int] = (3, 5),
                     image_size: int = 32, seed: int = 0) -> list[str]:
        """Write ``img.zip`` and ``list_eval_partition.txt`` into ``out_dir``; return their names.

        Each (gender, type) of :data:`REPLICA_TYPES` gets ``items_per_type`` train items and as
        many evaluation items; an item has ``images_per_item`` images (inclusive range, at
        least 2). An evaluation item's images are split between query (the first ones) and
        gallery (at least one each). Item numbers are distinct, shuffled 8-digit ids.
        """
        if images_per_item[0] < 2:
            raise ValueError("an In-shop replica item needs at least 2 images (query and gallery)")
        rng = np.random.default_rng(seed)
        groups = [(g, t) for g in sorted(REPLICA_TYPES) for t in REPLICA_TYPES[g]]
        numbers = rng.permutation(np.arange(1, 4 * len(groups) * items_per_type + 1))[:2 * len(groups) * items_per_type]
        rows, images, k = [], {}, 0
        for role in ("train", "eval"):
            for gender, kind in groups:
                for _ in range(items_per_type):
                    item = f"id_{int(numbers[k]):08d}"
                    k += 1
                    n = int(rng.integers(images_per_item[0], images_per_item[1] + 1))
                    n_query = int(rng.integers(1, n)) if role == "eval" else 0
                    for i in range(n):
                        look, view = divmod(i, len(REPLICA_VIEWS))
                        path = f"img/{gender}/{kind}/{item}/{look + 1:02d}_{REPLICA_VIEWS[view]}.jpg"
                        split = "train" if role == "train" else ("query" if i < n_query else "gallery")
                        rows.append((path, item, split))
                        images[path] = tiny_jpeg(rng, item, image_size, group_key=(gender, kind))
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_zip(out_dir / ARCHIVE, images)
        write_file(out_dir / PARTITION, partition_text(rows))
        return [ARCHIVE, PARTITION]


def partition_file(root: Path) -> Path | None:
    """``root/Eval/list_eval_partition.txt``, else ``root/list_eval_partition.txt``; None if neither."""
    for file in (root / EVAL_DIR / PARTITION, root / PARTITION):
        if file.is_file():
            return file
    return None


def read_partition(file: Path) -> pd.DataFrame:
    """The rows of ``list_eval_partition.txt``: ``path, item (int), split, gender, type`` (names)
    and ``line`` (its 1-based line number)."""
    lines = read_lines(file)
    if len(lines) < 2:
        raise ValueError(f"{file}: {len(lines)} lines; expected the image count, the header and one row per image")
    try:
        stated = int(lines[0].strip())
    except ValueError:
        raise ValueError(f"{file} line 1: {lines[0]!r} is not the number of images") from None
    if lines[1].split() != HEADER:
        raise ValueError(f"{file} line 2: header {lines[1].split()}, expected {HEADER}")
    records = []
    for number, line in enumerate(lines[2:], 3):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3:
            raise ValueError(f"{file} line {number}: {len(fields)} fields, expected {' '.join(HEADER)}: {line!r}")
        path, item_id, split = fields
        item, parts = ITEM_RE.fullmatch(item_id), PurePosixPath(path).parts
        if item is None:
            raise ValueError(f"{file} line {number}: item_id {item_id!r} is not id_<digits>")
        if split not in SPLITS:
            raise ValueError(f"{file} line {number}: evaluation_status {split!r}, expected one of {list(SPLITS)}")
        if len(parts) != 5 or parts[0] != "img":
            raise ValueError(f"{file} line {number}: image_name {path!r} is not "
                             "img/<MEN|WOMEN>/<Type>/id_XXXXXXXX/<file>.jpg")
        records.append((path, int(item.group(1)), split, parts[1], parts[2], number))
    if stated != len(records):
        raise ValueError(f"{file}: line 1 states {stated:,} images but {len(records):,} rows follow the header")
    return pd.DataFrame(records, columns=["path", "item", "split", "gender", "type", "line"])


def check_one_parent(rows: pd.DataFrame, file: Path) -> None:
    """Every item under one clothing type and one gender; else an error naming the items."""
    for column in ("type", "gender"):
        seen = rows.groupby("item")[column].unique()
        clashes = {f"id_{item:08d}": sorted(names) for item, names in seen.items() if len(names) > 1}
        if clashes:
            first = dict(list(clashes.items())[:5])
            raise ValueError(f"{file}: {len(clashes)} item(s) listed under several {column} folders, e.g. {first}; "
                             "rankrepro's In-shop levels need one per item")


def image_prefix(root: Path, first: str) -> str:
    """The folder (``""`` or ``"Img/"``) under which the first listed image exists; ``""`` if none."""
    return next((p for p in IMAGE_PREFIXES if (root / p / first).is_file()), "")


def names_by_id(names: pd.Series, ids: pd.Series) -> list[str]:
    """The name of each id 0..max, from rows carrying both."""
    by_id = names.groupby(ids).unique()
    return [str(by_id[i][0]) for i in range(int(ids.max()) + 1)] if len(ids) else []


def partition_text(rows: list[tuple[str, str, str]]) -> bytes:
    """``list_eval_partition.txt``: the count, the header, then the rows, image names padded to one width."""
    width = max(len(p) for p, _, _ in rows) + 2
    lines = [str(len(rows)), " ".join(HEADER)] + [f"{p.ljust(width)}{i} {s}" for p, i, s in rows]
    return ("\n".join(lines) + "\n").encode()
