"""Stanford Online Products (Oh Song et al., CVPR 2016): eBay product photos.

Two levels: ``class`` (one product, ``class_id``) and ``super_class`` (one of 12
product kinds, ``super_class_id``); both ids are the dataset's own, 1-based.
Protocol ``same-set``: every test image queries the rest of the test set.
Train and test products are disjoint.

Archive layout: ``Stanford_Online_Products/`` holding ``Ebay_train.txt``,
``Ebay_test.txt``, ``Ebay_info.txt``, ``LICENSE``, ``README`` and one folder
``<kind>_final/`` per super-class with images ``<product_id>_<n>.JPG``. Each
split file has the header ``image_id class_id super_class_id path`` and one
space-separated row per image.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_zip
from rankrepro.io import text_stream

TOP = "Stanford_Online_Products"
ARCHIVE = "Stanford_Online_Products.zip"
SPLIT_FILES = {"train": "Ebay_train.txt", "test": "Ebay_test.txt"}
INFO_FILE = "Ebay_info.txt"
HEADER = ["image_id", "class_id", "super_class_id", "path"]
FOLDER_SUFFIX = "_final"
SUPER_CLASS_NAMES = ["bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle",
                     "lamp", "mug", "sofa", "stapler", "table", "toaster"]  # by super_class_id


@DATASETS.register("sop")
class SOP(Dataset):
    """Stanford Online Products; see the module docstring for the layout."""

    title = "SOP"
    # Provenance: the original ftp://cs.stanford.edu/cs/cvgl/Stanford_Online_Products.zip is dead;
    # this Google Drive copy is the one pytorch-metric-learning 2.9 downloads (same md5).
    files = (SourceFile(ARCHIVE, url=("https://drive.usercontent.google.com/download?id=1TclrpQOF_ullUP99wk_gjGN8pKvtErG8"
                                      "&export=download&authuser=0&confirm=t"),
                        checksum="md5:7f73d41a2f44250d4779881525aea32e"),)
    top = TOP
    marker = SPLIT_FILES["train"]
    levels = ["class", "super_class"]
    protocol = "same-set"
    expected_counts = {
        "train": {"images": 59_551, "class": 11_318, "super_class": 12},
        "test": {"images": 60_502, "class": 11_316, "super_class": 12},
    }
    disjoint = (("train", "test"),)

    def read_table(self, root: Path) -> pd.DataFrame:
        """Both split files as manifest rows: ``path`` as listed, ``split`` train/test,
        ``label`` = class_id, ``level_1`` = super_class_id."""
        return pd.concat([read_split(root, split) for split in SPLIT_FILES], ignore_index=True)

    def extra_meta(self, table: pd.DataFrame) -> dict:
        return {"super_class_names": super_class_names(table)}

    def make_replica(self, out_dir: str | Path, *, classes_per_super: int = 4,
                     images_per_class: tuple[int, int] = (2, 5), image_size: int = 32, seed: int = 0) -> list[str]:
        """Write a Stanford Online Products replica zip into ``out_dir``; return its name.

        Each of the 12 super-classes gets ``classes_per_super`` products in train and
        as many in test; each product has between ``images_per_class[0]`` and
        ``images_per_class[1]`` images (inclusive). Class ids are 1-based and
        contiguous, train first, grouped by super-class as in the real data.
        """
        rng = np.random.default_rng(seed)
        rows: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
        images: dict[str, bytes] = {}
        class_id = 0
        for split in rows:
            for super_id, kind in enumerate(SUPER_CLASS_NAMES, 1):
                for _ in range(classes_per_super):
                    class_id += 1
                    product = 110_000_000_000 + class_id * 1_000_000 + int(rng.integers(1_000_000))
                    for n in range(int(rng.integers(images_per_class[0], images_per_class[1] + 1))):
                        path = f"{kind}{FOLDER_SUFFIX}/{product}_{n}.JPG"
                        rows[split].append((class_id, super_id, path))
                        images[f"{TOP}/{path}"] = tiny_jpeg(rng, class_id, image_size, group_key=super_id)
        note = b"Generated replica of Stanford Online Products for rankrepro; synthetic images, no real data.\n"
        members = {
            f"{TOP}/{SPLIT_FILES['train']}": split_file(rows["train"]),
            f"{TOP}/{SPLIT_FILES['test']}": split_file(rows["test"]),
            f"{TOP}/{INFO_FILE}": split_file(rows["train"] + rows["test"]),
            f"{TOP}/README": note,
            f"{TOP}/LICENSE": note,
            **images,
        }
        write_zip(Path(out_dir) / ARCHIVE, members)
        return [ARCHIVE]


def read_split(root: Path, split: str) -> pd.DataFrame:
    """One split file as manifest rows: ``path, split, label, level_1`` and ``origin`` (the split
    file, relative to ``root``, and the line: the header is line 1; exact unless the file holds
    blank lines, which pandas skips)."""
    file = root / SPLIT_FILES[split]
    rows = pd.read_csv(text_stream(file), sep=r"\s+", dtype={"path": str})
    if list(rows.columns) != HEADER:
        raise ValueError(f"{file}: header {list(rows.columns)}, expected {HEADER}")
    return pd.DataFrame({
        "path": rows["path"],
        "split": split,
        "label": rows["class_id"].astype("int64"),
        "level_1": rows["super_class_id"].astype("int64"),
        "origin": [f"{SPLIT_FILES[split]}, line {n}" for n in range(2, len(rows) + 2)],
    })


def super_class_names(table: pd.DataFrame) -> list[str]:
    """Super-class names (image folder minus ``_final``), ordered by super_class_id."""
    folders = table["path"].str.split("/").str[0].str.removesuffix(FOLDER_SUFFIX)
    by_id = folders.groupby(table["level_1"]).unique()
    clashes = {int(i): list(names) for i, names in by_id.items() if len(names) != 1}
    if clashes:
        raise ValueError(f"SOP: super-class ids spread over several folders: {clashes}")
    return [names[0] for _, names in by_id.sort_index().items()]


def split_file(rows: list[tuple[int, int, str]]) -> bytes:
    """An SOP split file: the header, then ``image_id class_id super_class_id path`` rows."""
    lines = [" ".join(HEADER)] + [f"{i} {c} {s} {p}" for i, (c, s, p) in enumerate(rows, 1)]
    return ("\n".join(lines) + "\n").encode()
