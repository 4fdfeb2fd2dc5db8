"""iNaturalist 2018 (Van Horn et al., CVPR 2018) as a retrieval benchmark: the class-disjoint
split of Smooth-AP (Brown et al., ECCV 2020), used by PNP and SupRank.

Three registrations of one class share their files (``source = "inat"``: one download, one
tree); they differ only in their levels (finest first):

- ``inat``: ``species``.
- ``inat_base``: ``species``, ``supercategory`` (the folder under ``train_val2018/``: Plantae,
  Insecta, Aves, ...; SupRank's ``hierarchy_mode: base``).
- ``inat_full``: ``species``, ``genus``, ``family``, ``order``, ``class``, ``phylum``,
  ``kingdom`` (SupRank's ``hierarchy_mode: full``, ``HIERARCHY`` of ``inaturalist_2018.py``).

Protocol ``same-set``: every test image queries the rest of the test set (Smooth-AP
``evaluate.py``, SupRank's AccuracyCalculator; suprank.md §3.1). Train and test species are
disjoint.

Source files (datasets.md "iNaturalist 2018"; visipedia/inat_comp 2018/README.md "Data"; losses.md
§1.3; suprank.md §4), all extracted into the one tree ``<data_root>/inat/``:

- ``train_val2018.tar.gz`` (120 GB, md5 published): ``train_val2018/<Super>/<category_id>/<file>.jpg``
  (README: "a directory structure like train_val2018/super category/category/image.jpg").
- ``train2018.json.tar.gz``, ``val2018.json.tar.gz`` (md5 published): one member each,
  ``train2018.json`` / ``val2018.json`` at the archive's top (PML's ``inaturalist2018.py``
  extracts them into the root and reads ``<root>/train2018.json``). COCO-style (README
  "Annotation Format")::

      {"info": {...}, "images": [{"id", "width", "height", "file_name", "license", "rights_holder"}],
       "annotations": [{"id", "image_id", "category_id"}],
       "categories": [{"id", "name", "supercategory", "kingdom", "phylum", "class", "order",
                       "family", "genus"}],
       "licenses": [{"id", "name", "url"}]}

  ``file_name`` is the image path from the tree root (``train_val2018/...``): PML looks the
  split-file lines up in it verbatim.
- ``Inat_dataset_splits.zip``: the Smooth-AP retrieval split from Google Drive id
  ``1sXfkBTFDrRU3__-NUs1qBP3sf_0uMB98`` (Smooth-AP README, PML ``SPLITS_URL``), holding
  ``Inat_dataset_splits/Inaturalist_{train,test}_set1.txt``: one path per line,
  ``train_val2018/<Super>/<category_id>/<file>.jpg``. Nobody publishes its checksum: its sha256
  is recorded on first verified use. The download name is ours (the Drive file's own name is
  not in the references); only its members matter.

The tree ``<data_root>/inat/`` (the image root; ``train2018.json`` marks it)::

    train2018.json   val2018.json   Inat_dataset_splits/Inaturalist_{train,test}_set1.txt
    train_val2018/<Super>/<category_id>/<file>.jpg

An already-extracted copy must have this layout (PML's; SupRank's ``Inaturalist/`` folder is it).

Choices:

- Splits ``train`` / ``test`` = the lines of the two split files, in file order (blank lines
  and surrounding white space ignored); manifest ``path`` = the line. The split re-partitions
  the *union* of the official train and val images (losses.md §1.3: 325,846 + 136,093 =
  437,513 + 24,426), so a line is looked up in both JSONs.
- ``label`` = the image's ``category_id`` from the JSONs (PML), the species' own id, not
  remapped. The ``<category_id>`` folder of the line (SupRank's label) must agree: a
  disagreement is an error naming the split file and line. So is a line found in neither
  JSON, a line that is not ``<...>/<Super>/<category_id>/<file>``, and a line listed twice.
- Coarser levels are positions in *sorted names* (suprank.md §4: "iNat level ids come from
  sorted names"; SupRank keys a taxon by its name alone, so two taxa of one level with the
  same name are one label there, as in SupRank):

  - ``supercategory``: the folder of the line (SupRank uses the path, not the JSON field),
    ids over the names of *both* split files together, so that a name has one id in both
    splits (SupRank sorts the names of each split it loads separately).
  - ``genus`` ... ``kingdom``: the fields of the image's category, ids over the names of
    *every* category of ``train2018.json`` and ``val2018.json`` (SupRank: every category of
    ``train2018.json``; the same ids when val2018.json lists no category of its own, which is
    [unverified]). A category listed in both files with different taxonomy is an error
    naming it. Names are compared as they are (no
    stripping, no case folding).

- The taxonomy comes from the JSONs' ``categories`` as downloaded: the competition
  *obfuscated* every taxonomic name there (README "Taxonomy Information & Obfuscation"; the
  un-obfuscated ``categories.json.tar.gz`` came later, README update of June 23rd, 2018).
  SupRank reads ``train2018.json`` too. Obfuscation changes which id a name gets (the
  sorted order), not which species share a taxon, as long as it is one-to-one per level:
  whether SupRank's published level counts came from the obfuscated or the un-obfuscated
  names is [unverified]; a real run that disagrees stops naming both numbers.
  ``categories.json.tar.gz`` is therefore not a source file.
- ``meta.json``: ``inat_base`` adds ``supercategory_names``; ``inat_full`` adds
  ``<level>_names`` for genus ... kingdom (``names[i]`` names id ``i``; obfuscated names
  in the real data).

Expected counts: only published numbers (see :attr:`INat.expected_counts`).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_tar, write_zip
from rankrepro.io import read_lines, read_text

S3 = "https://ml-inat-competition-datasets.s3.amazonaws.com/2018/"
SPLITS_DRIVE_ID = "1sXfkBTFDrRU3__-NUs1qBP3sf_0uMB98"
IMAGES_ARCHIVE = "train_val2018.tar.gz"
IMAGES_DIR = "train_val2018"
TRAIN_JSON = "train2018.json"
VAL_JSON = "val2018.json"
JSONS = (TRAIN_JSON, VAL_JSON)
SPLITS_ARCHIVE = "Inat_dataset_splits.zip"
SPLITS_DIR = "Inat_dataset_splits"
SPLIT_FILES = {"train": f"{SPLITS_DIR}/Inaturalist_train_set1.txt",
               "test": f"{SPLITS_DIR}/Inaturalist_test_set1.txt"}
#: the taxonomy fields of a category, finest first (SupRank's HIERARCHY after "species")
TAXONOMY = ["genus", "family", "order", "class", "phylum", "kingdom"]
LEVELS = {"species": ["species"], "base": ["species", "supercategory"], "full": ["species", *TAXONOMY]}
TITLES = {"species": "iNaturalist 2018", "base": "iNat-base", "full": "iNat-full"}

FILES = (
    SourceFile(IMAGES_ARCHIVE, url=S3 + IMAGES_ARCHIVE,
               checksum="md5:b1c6952ce38f31868cc50ea72d066cc3"),  # inat_comp 2018 README (datasets.md)
    SourceFile(f"{TRAIN_JSON}.tar.gz", url=S3 + f"{TRAIN_JSON}.tar.gz",
               checksum="md5:bfa29d89d629cbf04d826a720c0a68b0"),  # inat_comp 2018 README (datasets.md)
    SourceFile(f"{VAL_JSON}.tar.gz", url=S3 + f"{VAL_JSON}.tar.gz",
               checksum="md5:f2ed8bfe3e9901cdefceb4e53cd3775d"),  # inat_comp 2018 README (datasets.md)
    SourceFile(SPLITS_ARCHIVE, url=("https://drive.usercontent.google.com/download?id="
                                    f"{SPLITS_DRIVE_ID}&export=download&confirm=t"),
               checksum=None),  # none published (Smooth-AP README, PML): recorded on first verified use
)

# Published counts (each cited). Every variant: Smooth-AP paper Table 1 (papers/smooth_ap_eccv2020.txt,
# "INaturalist train 325,846 5,690" / "test 136,093 2,452"; also datasets.md from PML's tests).
# inat_base train: 13 super-categories (SupRank config/dataset/inat_base.yaml; datasets.md, suprank.md §4).
# inat_full train, classes per level 5690/3438/961/249/54/23/5 (SupRank config/dataset/inat_full.yaml;
# datasets.md, suprank.md §4). Nobody publishes test counts above the species: not enforced.
_SPLIT_COUNTS = {"train": {"images": 325_846, "species": 5_690}, "test": {"images": 136_093, "species": 2_452}}
_TRAIN_LEVEL_COUNTS = {
    "species": {},
    "base": {"supercategory": 13},
    "full": dict(zip(TAXONOMY, [3_438, 961, 249, 54, 23, 5])),
}


class INat(Dataset):
    """iNaturalist 2018 (Smooth-AP split); see the module docstring for the layout and every choice.

    ``hierarchy``: ``"species"`` (``inat``), ``"base"`` (``inat_base``) or ``"full"`` (``inat_full``).
    """

    source = "inat"
    files = FILES
    top = ""
    marker = TRAIN_JSON
    protocol = "same-set"
    disjoint = (("train", "test"),)

    def __init__(self, *, hierarchy: str) -> None:
        if hierarchy not in LEVELS:
            raise ValueError(f"iNaturalist 2018: hierarchy {hierarchy!r}, expected one of {sorted(LEVELS)}")
        self.hierarchy = hierarchy
        self.title = TITLES[hierarchy]
        self.levels = list(LEVELS[hierarchy])
        self.expected_counts = {"train": {**_SPLIT_COUNTS["train"], **_TRAIN_LEVEL_COUNTS[hierarchy]},
                                "test": dict(_SPLIT_COUNTS["test"])}
        self._names: dict[str, list] | None = None

    # -- parsing --------------------------------------------------------------------------------

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows of both split files (module docstring), ``origin`` = the split file and
        line (``"Inat_dataset_splits/Inaturalist_train_set1.txt, line <n>"``). Every file is
        checked to be there before anything is read; a missing one is a FileNotFoundError naming it."""
        root = Path(root)
        for name in (*JSONS, *SPLIT_FILES.values()):
            if not (root / name).is_file():
                raise FileNotFoundError(f"{self.title}: {root / name} is missing (an iNaturalist 2018 tree "
                                        f"holds {', '.join([*JSONS, *SPLIT_FILES.values()])})")
        labels, categories = read_annotations(root, taxonomy=self.hierarchy == "full")
        table = pd.concat([read_split(root, split, labels) for split in SPLIT_FILES], ignore_index=True)
        rows = table[["path", "split", "label", "origin"]].copy()
        self._names = {}
        if self.hierarchy == "base":
            names = sorted(set(table["supercategory"]))
            self._names["supercategory"] = names
            rows["level_1"] = table["supercategory"].map({n: i for i, n in enumerate(names)}).astype("int64")
        elif self.hierarchy == "full":
            json_names = " and ".join(str(root / name) for name in JSONS)
            unknown = ~rows["label"].isin(categories.index)
            if unknown.any():
                row = rows[unknown].iloc[0]
                raise ValueError(f"{json_names}: category {row['label']} (of {row['path']}, {row['split']} split) "
                                 "is not among the categories")
            for i, level in enumerate(TAXONOMY, 1):
                names = sorted_names(categories[level], level, json_names)
                self._names[level] = names
                ids = categories[level].map({n: k for k, n in enumerate(names)})
                rows[f"level_{i}"] = rows["label"].map(ids).astype("int64")
        return rows

    def extra_meta(self, table: pd.DataFrame) -> dict:
        if self.hierarchy == "species":
            return {}
        if self._names is None:
            raise RuntimeError(f"{self.title}: extra_meta needs read_table first (it reads the level names)")
        return {f"{level}_names": list(names) for level, names in self._names.items()}

    # -- replica --------------------------------------------------------------------------------

    def make_replica(self, out_dir: str | Path, *, image_size: int = 32, seed: int = 0) -> list[str]:
        """Write an iNaturalist 2018 replica into ``out_dir``; return the four names written.

        The species (:data:`REPLICA_SPECIES`) and their taxonomy are fixed and hand-checkable:
        a genus shared by two train species, a genus shared across the split, a
        super-category only in test, a category (:data:`REPLICA_UNUSED`) with no image. Each
        species has images in both JSONs (the split re-partitions their union); every image
        is in a split file, the lines shuffled. Image names (32 hex digits, as the real
        ones) and pixels come from ``seed``.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        images: dict[str, bytes] = {}
        entries: dict[str, list[tuple[str, int]]] = {TRAIN_JSON: [], VAL_JSON: []}
        lines: dict[str, list[str]] = {"train": [], "test": []}
        for species in REPLICA_SPECIES:
            cid, sup, split = species["id"], species["supercategory"], species["split"]
            for json_name, count in ((TRAIN_JSON, species["train_json"]), (VAL_JSON, species["val_json"])):
                for _ in range(count):
                    name = "".join("0123456789abcdef"[d] for d in rng.integers(0, 16, 32))
                    path = f"{IMAGES_DIR}/{sup}/{cid}/{name}.jpg"
                    images[path] = tiny_jpeg(rng, cid, image_size, group_key=sup)
                    entries[json_name].append((path, cid))
                    lines[split].append(path)
        categories = [{"id": s["id"], "name": s["name"], "supercategory": s["supercategory"],
                       **{level: s[level] for level in TAXONOMY}}
                      for s in sorted([*REPLICA_SPECIES, REPLICA_UNUSED], key=lambda s: s["id"])]
        next_id = 0
        texts = {}
        for json_name in JSONS:
            listed = entries[json_name]
            ids = list(range(next_id, next_id + len(listed)))
            next_id += len(listed)
            document = {
                "info": {"year": 2018, "version": "1.0",
                         "description": f"Generated replica of iNaturalist 2018 {json_name} for rankrepro; "
                                      "synthetic images, no real data.",
                         "contributor": "rankrepro", "url": "https://github.com/visipedia/inat_comp",
                         "date_created": "2018-02-01 00:00:00"},
                "images": [{"id": i, "width": image_size, "height": image_size, "file_name": path,
                            "license": 1, "rights_holder": "rankrepro replica"}
                           for i, (path, _) in zip(ids, listed)],
                "categories": categories,
                "annotations": [{"id": i, "image_id": i, "category_id": cid} for i, (_, cid) in zip(ids, listed)],
                "licenses": [{"id": 1, "name": "Attribution License",
                              "url": "http://creativecommons.org/licenses/by/4.0/"}],
            }
            texts[json_name] = json.dumps(document).encode()
        split_members = {}
        for split, file in SPLIT_FILES.items():
            order = rng.permutation(len(lines[split]))
            split_members[file] = ("\n".join(lines[split][i] for i in order) + "\n").encode()
        write_tar(out_dir / IMAGES_ARCHIVE, dict(sorted(images.items())))
        for json_name in JSONS:
            write_tar(out_dir / f"{json_name}.tar.gz", {json_name: texts[json_name]})
        write_zip(out_dir / SPLITS_ARCHIVE, split_members)
        return [f.name for f in FILES]


# -- the replica's species (hand-checkable; the tests read the replica files, not these) -----------

def _species(cid, name, sup, kingdom, phylum, klass, order, family, genus, split, train_json, val_json):
    return {"id": cid, "name": name, "supercategory": sup, "kingdom": kingdom, "phylum": phylum, "class": klass,
            "order": order, "family": family, "genus": genus, "split": split, "train_json": train_json,
            "val_json": val_json}


#: (category id, name, super-category, kingdom ... genus, split, images in train2018.json, in val2018.json)
REPLICA_SPECIES = [
    _species(7477, "Quercus robur", "Plantae", "Plantae", "Tracheophyta", "Magnoliopsida", "Fagales", "Fagaceae",
             "Quercus", "train", 3, 1),
    _species(7480, "Quercus alba", "Plantae", "Plantae", "Tracheophyta", "Magnoliopsida", "Fagales", "Fagaceae",
             "Quercus", "train", 2, 1),
    _species(3012, "Parus major", "Aves", "Animalia", "Chordata", "Aves", "Passeriformes", "Paridae", "Parus",
             "train", 3, 1),
    _species(3020, "Turdus merula", "Aves", "Animalia", "Chordata", "Aves", "Passeriformes", "Turdidae", "Turdus",
             "train", 2, 1),
    _species(1150, "Apis mellifera", "Insecta", "Animalia", "Arthropoda", "Insecta", "Hymenoptera", "Apidae", "Apis",
             "train", 3, 1),
    _species(7490, "Fagus sylvatica", "Plantae", "Plantae", "Tracheophyta", "Magnoliopsida", "Fagales", "Fagaceae",
             "Fagus", "test", 3, 1),
    _species(3045, "Turdus migratorius", "Aves", "Animalia", "Chordata", "Aves", "Passeriformes", "Turdidae",
             "Turdus", "test", 2, 1),
    _species(1163, "Bombus terrestris", "Insecta", "Animalia", "Arthropoda", "Insecta", "Hymenoptera", "Apidae",
             "Bombus", "test", 3, 1),
    _species(5500, "Amanita muscaria", "Fungi", "Fungi", "Basidiomycota", "Agaricomycetes", "Agaricales",
             "Amanitaceae", "Amanita", "test", 2, 1),
]
#: a category of the JSONs with no image (the real lists hold all 8,142 species; its names count)
REPLICA_UNUSED = _species(6001, "Bufo bufo", "Amphibia", "Animalia", "Chordata", "Amphibia", "Anura", "Bufonidae",
                          "Bufo", None, 0, 0)

DATASETS.register("inat", hierarchy="species")(INat)
DATASETS.register("inat_base", hierarchy="base")(INat)
DATASETS.register("inat_full", hierarchy="full")(INat)


# -- readers --------------------------------------------------------------------------------------

def load_json(file: Path) -> dict:
    """A COCO-style iNaturalist JSON, checked to hold ``images``, ``annotations``, ``categories`` lists."""
    text = read_text(file)
    try:
        document = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{file}: expected a JSON object with images, annotations, categories")
    for key in ("images", "annotations", "categories"):
        if not isinstance(document.get(key), list):
            raise ValueError(f"{file}: no {key!r} list (COCO-style keys images, annotations, categories)")
    return document


def _records(document: dict, key: str, fields: list[str], file: Path) -> pd.DataFrame:
    """The ``fields`` of every entry of ``document[key]``; an entry lacking one is an error naming it."""
    entries = document[key]
    for n, entry in enumerate(entries):
        lacking = fields if not isinstance(entry, dict) else [f for f in fields if f not in entry]
        if lacking:
            raise ValueError(f"{file}: {key}[{n}] lacks {lacking} (expected the fields {fields})")
    return pd.DataFrame({f: [entry[f] for entry in entries] for f in fields}, dtype=object)


def read_annotations(root: Path, taxonomy: bool = True) -> tuple[pd.Series, pd.DataFrame]:
    """Both JSONs: ``(labels, categories)``. ``labels``: category id by ``file_name`` (each file's
    images joined to its own annotations); ``categories``: the taxonomy fields indexed by
    category id, over both files (one id must have one taxonomy). ``taxonomy``: require the
    taxonomy fields (else ``categories`` holds whichever are there)."""
    label_parts, category_parts = [], []
    for name in JSONS:
        file = root / name
        document = load_json(file)
        images = _records(document, "images", ["id", "file_name"], file)
        annotations = _records(document, "annotations", ["image_id", "category_id"], file)
        annotations["category_id"] = int_values(annotations["category_id"], file, "annotations", "category_id")
        counts = annotations["image_id"].value_counts()
        clash = annotations[annotations["image_id"].isin(counts[counts > 1].index)]
        clash = clash.groupby("image_id")["category_id"].nunique()
        if (clash > 1).any():
            raise ValueError(f"{file}: image id {clash[clash > 1].index[0]} is annotated with several categories")
        by_image = pd.Series(annotations["category_id"].to_numpy(), index=annotations["image_id"].to_numpy())
        by_image = by_image[~by_image.index.duplicated()]
        category = images["id"].map(by_image)
        labels = pd.DataFrame({"file_name": images["file_name"], "category_id": category, "json": name})
        label_parts.append(labels[category.notna()])
        fields = ["id", *TAXONOMY] if taxonomy else \
            ["id", *[f for f in TAXONOMY if all(isinstance(c, dict) and f in c for c in document["categories"])]]
        categories = _records(document, "categories", fields, file).reindex(columns=["id", *TAXONOMY])
        categories["id"] = int_values(categories["id"], file, "categories", "id")
        categories["json"] = name
        category_parts.append(categories)
    labels = pd.concat(label_parts, ignore_index=True)
    repeated = labels[labels["file_name"].duplicated(keep=False)]
    if len(repeated):
        clash = repeated.groupby("file_name")["category_id"].nunique()
        if (clash > 1).any():
            raise ValueError(f"{root / TRAIN_JSON} and {root / VAL_JSON} give {clash[clash > 1].index[0]} "
                             "different categories")
    labels = labels[~labels["file_name"].duplicated()]
    categories = pd.concat(category_parts, ignore_index=True)
    repeated = categories[categories["id"].duplicated(keep=False)]
    if len(repeated):
        clash = repeated.groupby("id")[TAXONOMY].nunique().max(axis=1) > 1
        if clash.any():
            raise ValueError(f"{root / TRAIN_JSON} and {root / VAL_JSON}: category {clash[clash].index[0]} has "
                             "different taxonomy fields in the two files (or twice in one)")
    categories = categories[~categories["id"].duplicated()].set_index("id")[TAXONOMY]
    return pd.Series(labels["category_id"].to_numpy(), index=labels["file_name"].to_numpy()), categories


def read_split(root: Path, split: str, labels: pd.Series) -> pd.DataFrame:
    """One split file as rows ``path, split, label, supercategory, origin`` (file order; origin:
    the split file relative to ``root`` and the line); every line is checked (module docstring)
    and an error names the file and line."""
    file = root / SPLIT_FILES[split]
    paths, numbers = [], []
    for number, line in enumerate(read_lines(file), 1):
        if line.strip():
            paths.append(line.strip())
            numbers.append(number)
    if not paths:
        raise ValueError(f"{file}: no image listed")
    seen: dict[str, int] = {}
    folders, supers = [], []
    for path, number in zip(paths, numbers):
        if path in seen:
            raise ValueError(f"{file}, line {number}: {path} is listed twice (first on line {seen[path]})")
        seen[path] = number
        parts = PurePosixPath(path).parts
        if len(parts) < 3 or not parts[-2].isdigit() or path.startswith("/") or ".." in parts:
            raise ValueError(f"{file}, line {number}: {path!r} is not <...>/<Super>/<category_id>/<file>.jpg")
        folders.append(int(parts[-2]))
        supers.append(parts[-3])
    found = pd.Series(paths).map(labels)
    missing = found.isna().to_numpy()
    if missing.any():
        k = int(missing.nonzero()[0][0])
        raise ValueError(f"{file}, line {numbers[k]}: {paths[k]} is in neither {root / TRAIN_JSON} nor "
                         f"{root / VAL_JSON} ({int(missing.sum())} such lines)")
    label = found.astype("int64").to_numpy()
    wrong = label != np.asarray(folders, dtype=np.int64)
    if wrong.any():
        k = int(wrong.nonzero()[0][0])
        raise ValueError(f"{file}, line {numbers[k]}: {paths[k]} is in folder {folders[k]} but the JSONs "
                         f"give category {label[k]}")
    return pd.DataFrame({"path": paths, "split": split, "label": label, "supercategory": supers,
                         "origin": [f"{SPLIT_FILES[split]}, line {n}" for n in numbers]})


def int_values(values: pd.Series, file: Path, key: str, field: str) -> pd.Series:
    """``values`` as int64; a value that is not an integer is an error naming the file and entry."""
    bad = ~values.map(lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool))
    if bad.any():
        raise ValueError(f"{file}: {key} {field} {values[bad].iloc[0]!r} is not an integer")
    return values.astype("int64")


def sorted_names(values: pd.Series, level: str, where: str) -> list:
    """The distinct names of one level, sorted (SupRank's ``sorted(set(...))``); a missing name or
    names of mixed types (not comparable) is an error naming the level and the category."""
    bad = values.isna() | values.map(lambda v: isinstance(v, (dict, list, bool)))
    if bad.any():
        raise ValueError(f"{where}: category {bad[bad].index[0]} has no {level!r} name")
    try:
        return sorted(set(values))
    except TypeError:
        raise ValueError(f"{where}: the {level!r} names mix types (e.g. numbers and strings): "
                         "cannot sort them") from None
