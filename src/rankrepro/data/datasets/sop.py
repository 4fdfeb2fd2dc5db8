"""Stanford Online Products (Oh Song et al., CVPR 2016): eBay product photos.

Two levels: ``class`` (one product, ``class_id``) and ``super_class`` (one of 12
product kinds, ``super_class_id``); both ids are the dataset's own, 1-based.
Protocol ``same_set``: every test image queries the rest of the test set.
Train and test products are disjoint.

Archive layout: ``Stanford_Online_Products/`` holding ``Ebay_train.txt``,
``Ebay_test.txt``, ``Ebay_info.txt``, ``LICENSE``, ``README`` and one folder
``<kind>_final/`` per super-class with images ``<product_id>_<n>.JPG``. Each
split file has the header ``image_id class_id super_class_id path`` and one
space-separated row per image.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rankrepro.data import sources
from rankrepro.data.manifest import Manifest, write_manifest

NAME = "sop"
ARCHIVE = "Stanford_Online_Products.zip"
# Provenance: the original ftp://cs.stanford.edu/cs/cvgl/Stanford_Online_Products.zip is dead;
# this Google Drive copy is the one pytorch-metric-learning 2.9 downloads (same md5).
URL = ("https://drive.usercontent.google.com/download?id=1TclrpQOF_ullUP99wk_gjGN8pKvtErG8"
       "&export=download&authuser=0&confirm=t")
CHECKSUM = "md5:7f73d41a2f44250d4779881525aea32e"
TOP = "Stanford_Online_Products"
LEVELS = ["class", "super_class"]
PROTOCOL = "same_set"
SPLIT_FILES = {"train": "Ebay_train.txt", "test": "Ebay_test.txt"}
INFO_FILE = "Ebay_info.txt"
HEADER = ["image_id", "class_id", "super_class_id", "path"]
FOLDER_SUFFIX = "_final"
SUPER_CLASS_NAMES = ["bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle",
                     "lamp", "mug", "sofa", "stapler", "table", "toaster"]  # by super_class_id
EXPECTED_COUNTS = {
    "train": {"images": 59_551, "classes": 11_318, "super_classes": 12},
    "test": {"images": 60_502, "classes": 11_316, "super_classes": 12},
}


def download(data_root: str | Path, url: str = URL, checksum: str = CHECKSUM) -> Path:
    """Download and verify the archive to ``<data_root>/downloads/sop/Stanford_Online_Products.zip``."""
    return sources.download(url, Path(data_root) / "downloads" / NAME / ARCHIVE, checksum)


def prepare(source: str | Path, manifest_dir: str | Path, *, data_root: str | Path,
            replica: bool = False) -> Manifest:
    """Build the manifest from the archive or an already-extracted copy.

    ``source`` is the zip (extracted to ``<data_root>/sop/``), the
    ``Stanford_Online_Products`` folder, or its parent. Rows: ``path`` as listed,
    ``split`` train/test, ``label`` = class_id, ``level_1`` = super_class_id.
    Unless ``replica``, the counts must equal the published ones.
    """
    root = locate_root(source, data_root)
    table = pd.concat([read_split(root, split) for split in SPLIT_FILES], ignore_index=True)
    check_disjoint(table)
    if not replica:
        check_counts(table)
    check_images_exist(root, table["path"])
    meta = {
        "dataset": NAME,
        "root": str(root.resolve()),
        "levels": LEVELS,
        "protocol": PROTOCOL,
        "replica": replica,
        "super_class_names": super_class_names(table),
    }
    return write_manifest(manifest_dir, table, meta)


def locate_root(source: str | Path, data_root: str | Path) -> Path:
    """The ``Stanford_Online_Products`` folder for ``source``, extracting an archive first."""
    source = Path(source)
    if source.is_file():
        source = sources.extract(source, Path(data_root) / NAME)
    for root in (source, source / TOP):
        if (root / SPLIT_FILES["train"]).is_file():
            return root
    raise FileNotFoundError(f"no {TOP}/{SPLIT_FILES['train']} under {source}: "
                            f"expected the {ARCHIVE} archive, the {TOP} folder or its parent")


def read_split(root: Path, split: str) -> pd.DataFrame:
    """One split file as manifest rows: ``path, split, label, level_1``."""
    file = root / SPLIT_FILES[split]
    rows = pd.read_csv(file, sep=r"\s+", dtype={"path": str})
    if list(rows.columns) != HEADER:
        raise ValueError(f"{file}: header {list(rows.columns)}, expected {HEADER}")
    return pd.DataFrame({
        "path": rows["path"],
        "split": split,
        "label": rows["class_id"].astype("int64"),
        "level_1": rows["super_class_id"].astype("int64"),
    })


def check_disjoint(table: pd.DataFrame) -> None:
    """Train and test must share no class."""
    shared = set(table.loc[table.split == "train", "label"]) & set(table.loc[table.split == "test", "label"])
    if shared:
        raise ValueError(f"SOP: {len(shared)} classes are in both train and test, e.g. {sorted(shared)[:5]}")


def check_counts(table: pd.DataFrame) -> None:
    """Images, classes and super-classes per split must equal EXPECTED_COUNTS."""
    for split, expected in EXPECTED_COUNTS.items():
        rows = table[table.split == split]
        found = {"images": len(rows), "classes": rows["label"].nunique(),
                 "super_classes": rows["level_1"].nunique()}
        for key, value in expected.items():
            if found[key] != value:
                raise ValueError(f"SOP {split}: expected {value:,} {key}, found {found[key]:,} "
                                 "(pass replica=True for a generated replica)")


def check_images_exist(root: Path, paths: pd.Series) -> None:
    """Every listed image must be a file under ``root``."""
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise FileNotFoundError(f"SOP: {len(missing)} listed images are missing under {root}, "
                                f"e.g. {', '.join(missing[:5])}")


def super_class_names(table: pd.DataFrame) -> list[str]:
    """Super-class names (image folder minus ``_final``), ordered by super_class_id."""
    folders = table["path"].str.split("/").str[0].str.removesuffix(FOLDER_SUFFIX)
    by_id = folders.groupby(table["level_1"]).unique()
    clashes = {int(i): list(names) for i, names in by_id.items() if len(names) != 1}
    if clashes:
        raise ValueError(f"SOP: super-class ids spread over several folders: {clashes}")
    return [names[0] for _, names in by_id.sort_index().items()]


def make_replica(out_archive: str | Path) -> str:
    """Write a generated replica of the archive (rankrepro.data.replicas); return its checksum."""
    from rankrepro.data.replicas import make_sop_replica

    return make_sop_replica(out_archive)
