"""Google Landmarks Dataset v2 (Weyand et al., CVPR 2020) and its hierarchical labels (H-GLDv2,
Ramzi et al., TPAMI; SupRank).

Two registrations of one class share their files (``source = "gldv2"``: one download, one tree):

- ``gldv2``: one level, ``landmark``.
- ``gldv2_hier``: ``landmark``, ``hierarchical_label`` (78 released clusters) and
  ``natural_or_human_made`` (2), from the May-2023 release's ``*_label_to_hierarchical.csv``.

Protocol ``gldv2-suprank`` (:mod:`rankrepro.metrics.protocols.gldv2`; suprank.md §3.2,
hgldv2.md §3), which reads the ground truth with :mod:`rankrepro.data.datasets.gldv2_ground_truth`.

Source files (https://s3.amazonaws.com/google-landmark/, cvdfoundation/google-landmark README
@183f68a; download names = the S3 paths, so ``downloads/gldv2/`` mirrors the bucket):

- ``metadata/train_clean.csv``: ``landmark_id,images`` (images: space-separated train image ids);
  the clean subset of team smlyaka.
- ``metadata/train_label_to_hierarchical.csv``, ``metadata/index_label_to_hierarchical.csv``:
  ``landmark_id,category,supercategory,hierarchical_label,natural_or_human_made``.
- ``metadata/index_image_to_landmark.csv``: ``id,landmark_id``.
- ``metadata/train_label_to_category.csv``, ``metadata/index_label_to_category.csv``:
  ``landmark_id,category`` (a Commons category URL): not parsed here; the H-GLDv2 scrape
  (:mod:`rankrepro.hgldv2.scrape`) reads them from the download folder.
- ``ground_truth/retrieval_solution_v2.1.csv``: ``id,images,Usage`` (images: space-separated
  *index* image ids, or ``None`` for an ignored test image; Usage Public / Private / Ignored).
- ``{train,index,test}/images_NNN.tar``: train 000-499, index 000-099, test 000-019. A shard's
  members are ``a/b/c/<id>.jpg`` (a, b, c: the id's first three characters) *without* the split
  folder (README "Extracting the data"; download-dataset.sh runs ``tar -xf`` inside the split's
  folder), so each shard extracts into ``<tree>/<split>/``.
- ``md5sum/<split>/md5.images_NNN.txt``: one per shard, first whitespace-separated field = the
  shard's md5 (how download-dataset.sh reads it); a shard is verified against it
  (``SourceFile.checksum_file``). Nobody publishes checksums of the md5 files or of the CSVs:
  their sha256 is recorded on first verified use (``checksums.lock.json``).

The tree ``<data_root>/gldv2/`` (the image root; ``metadata/train_clean.csv`` marks it)::

    metadata/*.csv   ground_truth/retrieval_solution_v2.1.csv   md5sum/<split>/md5.images_NNN.txt
    train/a/b/c/<id>.jpg   index/a/b/c/<id>.jpg   test/a/b/c/<id>.jpg

An already-extracted copy must have this layout (SupRank's ``images/train`` and its flat CSV
folder do not): point ``extracted`` to the folder holding ``metadata/``.

Splits (manifest ``path`` = ``<split folder>/a/b/c/<id>.jpg``):

- ``train``: every (landmark, image) of ``train_clean.csv``; label = the *train* landmark_id.
- ``gallery``: every row of ``index_image_to_landmark.csv``; label = the *index* landmark_id.
- ``query``: the rows of ``retrieval_solution_v2.1.csv`` whose images are not ``None`` (Public
  and Private pooled, as SupRank); label = the index landmark of the query's *first*
  ground-truth image (SupRank's ``evaluate_landmark``). ``meta.json``'s ``ground_truth`` holds
  the solution file's path relative to the root, so the official protocol (exact lists,
  Public / Private apart) can read it.

Id spaces: index landmark ids are a *different* id space from train landmark ids (README,
"IMPORTANT"): train labels and gallery/query labels are not comparable (the same integer names
two unrelated landmarks). Hence no ``disjoint`` pair: the check compares integers, and
between two id spaces an overlap would be a false alarm and its absence no evidence. Query and
gallery share the index space by construction. ``meta.json``'s ``landmark_id_space`` says so
per split. Labels are the dataset's own ids, not remapped.

H-GLDv2 choices (``gldv2_hier``):

- Train rows take their hierarchy from ``train_label_to_hierarchical.csv``, gallery and query
  rows from ``index_label_to_hierarchical.csv`` (same split of id spaces).
- Level ids are positions in the sorted names (SupRank's ``cluster_to_id``), the names taken
  from *both* files together so that one name has one id in every split (SupRank sorts each
  file's names separately: the same ids whenever both files hold the same names).
  ``meta.json`` lists them: ``hierarchical_label_names`` and ``natural_or_human_made_names``.
  Names are kept verbatim (``"ocean area "`` keeps its trailing space); an empty or blank cell,
  or a landmark without a row, is unknown.
- Train rows whose landmark has no ``hierarchical_label`` are dropped (SupRank's
  ``remove_nan=True``, which tests that column only). Gallery and query rows are kept, unknown
  levels being -1; the protocol drops them (``gldv2_suprank``, as SupRank's remove_nan).
- A landmark listed twice with different labels is an error naming the file and its lines.

Expected counts: only published numbers are enforced (see :attr:`GLDv2.expected_counts`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data import checksums
from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_file, write_tar
from rankrepro.io import csv_text, text_stream

BASE_URL = "https://s3.amazonaws.com/google-landmark/"
METADATA = "metadata"
GROUND_TRUTH_DIR = "ground_truth"
TRAIN_CLEAN = f"{METADATA}/train_clean.csv"
TRAIN_HIER = f"{METADATA}/train_label_to_hierarchical.csv"
INDEX_TO_LANDMARK = f"{METADATA}/index_image_to_landmark.csv"
INDEX_HIER = f"{METADATA}/index_label_to_hierarchical.csv"
GROUND_TRUTH = f"{GROUND_TRUTH_DIR}/retrieval_solution_v2.1.csv"
TRAIN_CATEGORY = f"{METADATA}/train_label_to_category.csv"
INDEX_CATEGORY = f"{METADATA}/index_label_to_category.csv"
CSV_FILES = (TRAIN_CLEAN, TRAIN_HIER, INDEX_TO_LANDMARK, INDEX_HIER, GROUND_TRUTH, TRAIN_CATEGORY, INDEX_CATEGORY)
#: shards per split folder (README: train 500 x ~1 GB, index 100 x ~850 MB, test 20 x ~500 MB)
SHARDS = {"train": 500, "index": 100, "test": 20}

HEADERS = {
    TRAIN_CLEAN: ["landmark_id", "images"],
    TRAIN_HIER: ["landmark_id", "category", "supercategory", "hierarchical_label", "natural_or_human_made"],
    INDEX_TO_LANDMARK: ["id", "landmark_id"],
    INDEX_HIER: ["landmark_id", "category", "supercategory", "hierarchical_label", "natural_or_human_made"],
    GROUND_TRUTH: ["id", "images", "Usage"],
    TRAIN_CATEGORY: ["landmark_id", "category"],
    INDEX_CATEGORY: ["landmark_id", "category"],
}
#: the columns the parser reads (a file may hold more)
NEEDED = {**HEADERS, TRAIN_HIER: ["landmark_id", "hierarchical_label", "natural_or_human_made"],
          INDEX_HIER: ["landmark_id", "hierarchical_label", "natural_or_human_made"]}
NO_GROUND_TRUTH = "None"
IMAGE_ID = r"[0-9A-Za-z]{16}"  # README: a 16-character string (hex in practice)
HIER_LEVELS = ["hierarchical_label", "natural_or_human_made"]
#: the split folder (tree) of each manifest split, and the id space of its labels
SPLIT_FOLDER = {"train": "train", "query": "test", "gallery": "index"}
ID_SPACE = {"train": "train landmark_id", "query": "index landmark_id", "gallery": "index landmark_id"}


def shard_name(split: str, n: int) -> str:
    return f"{split}/images_{n:03d}.tar"


def md5_name(split: str, n: int) -> str:
    return f"md5sum/{split}/md5.images_{n:03d}.txt"


class GLDv2(Dataset):
    """GLDv2 / H-GLDv2; see the module docstring for the layout and every choice.

    ``hierarchy``: False for ``gldv2`` (one level), True for ``gldv2_hier`` (three levels).
    ``base_url`` and ``shard_counts`` are where :meth:`source_files` takes the files from
    (class attributes; a test may point an instance at a local copy with fewer shards).
    """

    source = "gldv2"
    base_url = BASE_URL
    shard_counts = SHARDS
    top = ""
    marker = TRAIN_CLEAN
    protocol = "gldv2-suprank"
    disjoint = ()  # train and index landmark ids live in different id spaces (module docstring)

    def __init__(self, *, hierarchy: bool) -> None:
        self.hierarchy = bool(hierarchy)
        self.title = "H-GLDv2" if self.hierarchy else "GLDv2"
        self.levels = ["landmark", *HIER_LEVELS] if self.hierarchy else ["landmark"]
        # Enforced counts, each published:
        # - train (gldv2): 1,580,470 images / 81,313 landmarks: SupRank config/dataset/gldv2.yaml
        #   (num_samples_train, num_classes_train_level0), the train_clean.csv rows expanded.
        # - gallery: 761,757 images, the index set (README "There are 761,757 images in the
        #   `index` set"); that index_image_to_landmark.csv lists every one of them is
        #   [inferred] from its being the index label map: a real run that disagrees stops here
        #   naming both numbers. H-GLDv2 keeps every gallery row (-1 without hierarchy): same count.
        # Not enforced:
        # - H-GLDv2 train 970,981 images / 46,593 landmarks / 78 clusters (SupRank
        #   config/dataset/gldv2_hier.yaml): computed from SupRank's internal
        #   *_label_to_subcategory_with_clusters.csv, not from the released
        #   train_label_to_hierarchical.csv, which nobody has shown to reproduce them (suprank.md
        #   §6, hgldv2.md §1.2); compare them by hand with meta.json's counts.
        # - query: 1,129 scored test images (379 Public + 750 Private) is [unverified] (hgldv2.md §3).
        # - the 78 / 2 hierarchy names: 78 is counted in a third-party copy of the index file only.
        gallery = {"gallery": {"images": 761_757}}
        self.expected_counts = gallery if self.hierarchy else \
            {"train": {"images": 1_580_470, "landmark": 81_313}, **gallery}
        self._names: dict[str, list[str]] | None = None

    def source_files(self) -> list[SourceFile]:
        """The five CSVs (linked into ``metadata/`` / ``ground_truth/``), then per split every
        md5 file (linked into ``md5sum/<split>/``) and shard (extracted into ``<split>/``, verified
        against its md5 file)."""
        files = [SourceFile(name, url=self.base_url + name, extract=False, into=name.rsplit("/", 1)[0])
                 for name in CSV_FILES]
        for split, count in self.shard_counts.items():
            for n in range(count):
                files.append(SourceFile(md5_name(split, n), url=self.base_url + md5_name(split, n), extract=False,
                                        into=f"md5sum/{split}"))
                files.append(SourceFile(shard_name(split, n), url=self.base_url + shard_name(split, n),
                                        into=split, checksum_file=md5_name(split, n)))
        return files

    # -- parsing --------------------------------------------------------------------------------

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows: train, query, gallery (module docstring). Every CSV is checked before any
        row is built; a missing one is a FileNotFoundError naming it. No ``origin`` column: a path
        is built from an image id that is refused while reading, naming its file and line, unless
        it is 16 letters or digits, so no path can leave the root (and 2.3M origin strings would
        cost hundreds of MB for nothing)."""
        root = Path(root)
        needed = (TRAIN_CLEAN, INDEX_TO_LANDMARK, GROUND_TRUTH, *((TRAIN_HIER, INDEX_HIER) if self.hierarchy else ()))
        for name in needed:
            if not (root / name).is_file():
                raise FileNotFoundError(f"{self.title}: {root / name} is missing (a GLDv2 tree holds {name})")
        train = read_train(root / TRAIN_CLEAN)
        index_map = read_index_map(root / INDEX_TO_LANDMARK)
        gallery = pd.DataFrame({"path": image_paths(SPLIT_FOLDER["gallery"], index_map["id"]), "split": "gallery",
                                "label": index_map["landmark_id"].to_numpy()})
        queries = read_queries(root / GROUND_TRUTH, index_map)
        query = pd.DataFrame({"path": image_paths(SPLIT_FOLDER["query"], queries["id"]), "split": "query",
                              "label": queries["landmark_id"].to_numpy()})
        train = pd.DataFrame({"path": image_paths(SPLIT_FOLDER["train"], train["id"]), "split": "train",
                              "label": train["landmark_id"].to_numpy()})
        if not self.hierarchy:
            return pd.concat([train, query, gallery], ignore_index=True)
        table, self._names = attach_hierarchy(pd.concat([train, query, gallery], ignore_index=True),
                                              read_hierarchy(root / TRAIN_HIER), read_hierarchy(root / INDEX_HIER))
        return table

    def extra_meta(self, table: pd.DataFrame) -> dict:
        meta = {"ground_truth": GROUND_TRUTH, "landmark_id_space": dict(ID_SPACE)}
        if self.hierarchy:
            if self._names is None:
                raise RuntimeError(f"{self.title}: extra_meta needs read_table first (it reads the level names)")
            meta.update({f"{level}_names": list(self._names[level]) for level in HIER_LEVELS})
        return meta

    # -- replica --------------------------------------------------------------------------------

    def make_replica(self, out_dir: str | Path, *, image_size: int = 32, seed: int = 0) -> list[str]:
        """Write a GLDv2 replica into ``out_dir`` (folders as on S3); return the names written.

        The five CSVs with the real headers; shards train 000-001, index 000, test 000, each
        with its md5 file (``<md5>  images_NNN.tar``, as ``md5sum`` prints it). The landmarks
        (:data:`REPLICA_TRAIN`, :data:`REPLICA_INDEX`, :data:`REPLICA_QUERIES`) are fixed and
        hand-checkable: train landmarks without a hierarchical label (no row; an empty row),
        hierarchy rows of landmarks outside train_clean, an index landmark id equal to a train
        one (other id space, other labels), an index landmark without hierarchy, a query whose
        ground truth starts with another landmark's image, ignored test images. Image ids
        and pixels come from ``seed``; train images alternate between the two train shards.
        """
        out_dir = Path(out_dir)
        rng = np.random.default_rng(seed)
        used: set[str] = set()

        def new_id() -> str:
            while True:
                image_id = "".join("0123456789abcdef"[d] for d in rng.integers(0, 16, 16))
                if image_id not in used:
                    used.add(image_id)
                    return image_id

        shards: dict[str, dict[str, bytes]] = {shard_name("train", 0): {}, shard_name("train", 1): {},
                                               shard_name("index", 0): {}, shard_name("test", 0): {}}

        def add(split: str, shard: int, image_id: str, class_key, group_key) -> None:
            member = f"{image_id[0]}/{image_id[1]}/{image_id[2]}/{image_id}.jpg"
            shards[shard_name(split, shard)][member] = tiny_jpeg(rng, class_key, image_size, group_key=group_key)

        clean_rows, k = [], 0
        for landmark, n_images, hier in REPLICA_TRAIN:
            ids = [new_id() for _ in range(n_images)]
            for image_id in ids:
                add("train", k % 2, image_id, ("train", landmark), hier[0] if hier else ("train", landmark))
                k += 1
            clean_rows.append([landmark, " ".join(ids)])
        index_ids: dict[int, list[str]] = {}
        index_rows = []
        for landmark, n_images, hier in REPLICA_INDEX:
            index_ids[landmark] = [new_id() for _ in range(n_images)]
            for image_id in index_ids[landmark]:
                add("index", 0, image_id, ("index", landmark), hier[0] if hier else ("index", landmark))
                index_rows.append([image_id, landmark])
        # the real file is not grouped by landmark: shuffled
        index_rows = [index_rows[i] for i in rng.permutation(len(index_rows))]
        index_hier = {landmark: hier for landmark, _, hier in REPLICA_INDEX}
        solution_rows = []
        for ground_truth, usage in REPLICA_QUERIES:
            image_id = new_id()
            if ground_truth is None:
                add("test", 0, image_id, ("distractor", image_id), None)
                solution_rows.append([image_id, NO_GROUND_TRUTH, usage])
                continue
            first = ground_truth[0][0]
            add("test", 0, image_id, ("index", first), index_hier[first][0] if index_hier[first] else ("index", first))
            solution_rows.append([image_id, " ".join(index_ids[lm][i] for lm, i in ground_truth), usage])

        def hier_rows(split, listed) -> list[list]:
            return [[landmark, replica_category(split, landmark),
                     REPLICA_SUPERCATEGORY[hier[0]] if hier else "", *(hier or ("", ""))]
                    for landmark, hier in listed]

        texts = {
            TRAIN_CLEAN: csv_text(HEADERS[TRAIN_CLEAN], clean_rows),
            TRAIN_HIER: csv_text(HEADERS[TRAIN_HIER], hier_rows("train", REPLICA_TRAIN_HIER)),
            INDEX_TO_LANDMARK: csv_text(HEADERS[INDEX_TO_LANDMARK], index_rows),
            INDEX_HIER: csv_text(HEADERS[INDEX_HIER], hier_rows("index", REPLICA_INDEX_HIER)),
            GROUND_TRUTH: csv_text(HEADERS[GROUND_TRUTH], solution_rows),
            TRAIN_CATEGORY: csv_text(HEADERS[TRAIN_CATEGORY], [[lm, replica_category("train", lm)]
                                                               for lm in replica_landmarks("train")]),
            INDEX_CATEGORY: csv_text(HEADERS[INDEX_CATEGORY], [[lm, replica_category("index", lm)]
                                                               for lm in replica_landmarks("index")]),
        }
        for name, text in texts.items():
            (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
            write_file(out_dir / name, text.encode())
        md5s = []
        for name, members in shards.items():
            (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
            write_tar(out_dir / name, dict(sorted(members.items())))
            split, file = name.split("/")
            md5 = md5_name(split, int(file[len("images_"):-len(".tar")]))
            (out_dir / md5).parent.mkdir(parents=True, exist_ok=True)
            write_file(out_dir / md5, f"{checksums.file_digest(out_dir / name, 'md5')}  {file}\n".encode())
            md5s.append(md5)
        return [*texts, *shards, *md5s]


# -- the replica's landmarks (hand-checkable; the tests read the replica files, not these) ---------

#: train landmarks of train_clean.csv: (train landmark_id, images, (hierarchical_label,
#: natural_or_human_made) or None = no hierarchical label)
REPLICA_TRAIN = [
    (1234, 4, ("church", "human-made")),
    (20517, 3, ("bridge", "human-made")),
    (77001, 4, ("mountain", "natural")),
    (138002, 3, ("ocean area ", "natural")),   # the real name's trailing space
    (153, 3, None),                            # no row in train_label_to_hierarchical.csv
    (9001, 3, None),                           # a row with empty labels
]
#: rows of train_label_to_hierarchical.csv (None: empty cells); 200000 is outside train_clean
REPLICA_TRAIN_HIER = [(1234, ("church", "human-made")), (20517, ("bridge", "human-made")),
                      (77001, ("mountain", "natural")), (138002, ("ocean area ", "natural")), (9001, None),
                      (200000, ("castle / fort", "human-made"))]
#: index landmarks: (index landmark_id, images, hierarchy or None); 1234 is also a train id
REPLICA_INDEX = [
    (1234, 3, ("lake", "natural")),
    (501, 3, ("church", "human-made")),
    (7002, 3, ("museum", "human-made")),
    (88, 3, None),                             # no row in index_label_to_hierarchical.csv
    (3030, 2, ("castle / fort", "human-made")),
]
#: rows of index_label_to_hierarchical.csv (88 has none); 99999 has no index image
REPLICA_INDEX_HIER = [(landmark, hier) for landmark, _, hier in REPLICA_INDEX if hier] + \
    [(99999, ("volcano", "natural"))]
#: a scraped "instance of" name per hierarchical label (the supercategory column; not parsed)
REPLICA_SUPERCATEGORY = {"church": "church building", "bridge": "arch bridge", "mountain": "mountain",
                         "ocean area ": "bay", "lake": "lake", "museum": "art museum", "castle / fort": "castle",
                         "volcano": "stratovolcano"}
#: landmarks of the category files that are in no other file (the real train file lists ~203k
#: landmarks, train_clean ~81k): the H-GLDv2 scrape's demo world gives them its edge cases
REPLICA_CATEGORY_ONLY = {"train": [300001, 300002, 300003, 300004, 300005, 300006, 300007, 300008],
                         "index": [400001, 400002, 400003]}


def replica_landmarks(split: str) -> list[int]:
    """The landmarks of the replica's ``<split>_label_to_category.csv``, sorted."""
    listed = (REPLICA_TRAIN, REPLICA_TRAIN_HIER) if split == "train" else (REPLICA_INDEX, REPLICA_INDEX_HIER)
    return sorted({row[0] for rows in listed for row in rows} | set(REPLICA_CATEGORY_ONLY[split]))


def replica_category(split: str, landmark: int) -> str:
    """The replica's Commons category URL of a landmark (train and index ids are two id spaces)."""
    return f"http://commons.wikimedia.org/wiki/Category:Replica_{split}_landmark_{landmark}"


#: test images: (ground truth as [(index landmark, image number)], Usage); None: ignored
REPLICA_QUERIES = [
    ([(501, 0), (501, 2)], "Public"),
    ([(7002, 1), (501, 1)], "Private"),        # first ground-truth image from 7002: label 7002
    (None, "Ignored"),
    ([(88, 0)], "Public"),                     # landmark without hierarchy: -1 above the landmark
    ([(1234, 2), (1234, 0), (1234, 1)], "Private"),
    (None, "Ignored"),
    ([(3030, 1)], "Public"),
]

DATASETS.register("gldv2", hierarchy=False)(GLDv2)
DATASETS.register("gldv2_hier", hierarchy=True)(GLDv2)

#: where the H-GLDv2 pipeline writes our labels (workflow/rules/hgldv2.smk, rule hgldv2_curate)
REBUILT_LABELS = "results/hgldv2/labels"


@DATASETS.register("gldv2_hier_rebuilt")
class GLDv2HierRebuilt(Dataset):
    """H-GLDv2 with *our* hierarchy (:mod:`rankrepro.hgldv2`) instead of the release's.

    Derived from the ``gldv2`` manifest (same images, splits and landmark labels): ``derive``
    attaches ``hierarchical_label`` / ``natural_or_human_made`` from
    ``<labels_dir>/{train,index}_label_to_hierarchical.csv`` (the release's columns, written by
    the curate step) exactly as ``gldv2_hier`` does from the release (:func:`attach_hierarchy`):
    same level ids rule, same dropped train rows, same protocol. ``labels_dir`` is relative to
    the working directory (the repository root under Snakemake); the prepare rule depends on
    both files (:attr:`derive_inputs`). ``meta.json`` records the names and the files' sha256.
    """

    title = "H-GLDv2 (rebuilt labels)"
    derived_from = "gldv2"
    levels = ["landmark", *HIER_LEVELS]
    protocol = "gldv2-suprank"
    labels_dir = REBUILT_LABELS

    def __init__(self) -> None:
        self._meta: dict | None = None

    @property
    def derive_inputs(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(f"{self.labels_dir}/{split}_label_to_hierarchical.csv" for split in ("train", "index"))

    def derive(self, base) -> pd.DataFrame:
        where = base.directory or "the base manifest"
        if base.meta.get("dataset") != self.derived_from or base.meta.get("levels") != ["landmark"]:
            raise ValueError(f"{self.title}: {where} is not a one-level manifest of {self.derived_from!r} "
                             f"(dataset {base.meta.get('dataset')!r}, levels {base.meta.get('levels')!r})")
        train_file, index_file = (Path(f) for f in self.derive_inputs)
        for file in (train_file, index_file):
            if not file.is_file():
                raise FileNotFoundError(f"{self.title}: {file} is missing: run the H-GLDv2 pipeline "
                                        "(snakemake hgldv2_curate) or set labels_dir")
        table, names = attach_hierarchy(base.table, read_hierarchy(train_file), read_hierarchy(index_file))
        carried = {k: base.meta[k] for k in ("ground_truth", "landmark_id_space") if k in base.meta}
        self._meta = {**carried, **{f"{level}_names": names[level] for level in HIER_LEVELS},
                      "labels": {str(f): checksums.file_digest(f, "sha256") for f in (train_file, index_file)}}
        return table

    def extra_meta(self, table: pd.DataFrame) -> dict:
        if self._meta is None:
            raise RuntimeError(f"{self.title}: extra_meta needs derive() first")
        return dict(self._meta)


# -- readers --------------------------------------------------------------------------------------

def read_csv(file: Path, name: str) -> pd.DataFrame:
    """A GLDv2 CSV as strings (nothing read as NaN: ``None`` stays a string); its header must hold
    the columns the parser needs."""
    try:
        table = pd.read_csv(text_stream(file), dtype=str, keep_default_na=False, na_filter=False)
    except pd.errors.ParserError as err:
        raise ValueError(f"{file}: not a readable CSV: {err}") from None
    missing = [c for c in NEEDED[name] if c not in table.columns]
    if missing:
        raise ValueError(f"{file}: header {list(table.columns)} lacks {missing} (expected {HEADERS[name]})")
    return table


def line_of(row) -> int:
    """The file line (1-based, the header is line 1) of a row label of a table read by :func:`read_csv`
    (exact unless the file holds blank lines or quoted line breaks, which pandas folds)."""
    return int(row) + 2


def int_column(table: pd.DataFrame, column: str, file: Path) -> pd.Series:
    values = pd.to_numeric(table[column].str.strip(), errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        first = bad.to_numpy().nonzero()[0][0]
        raise ValueError(f"{file}, line {line_of(table.index[first])}: {column} "
                         f"{table[column].iat[first]!r} is not an integer")
    return values.astype("int64")


def check_ids(ids: pd.Series, file: Path, rows: pd.Index) -> None:
    """Image ids must be 16 letters/digits (they become paths); else an error naming the line."""
    bad = ~ids.str.fullmatch(IMAGE_ID).fillna(False).astype(bool)
    if bad.any():
        first = bad.to_numpy().nonzero()[0][0]
        raise ValueError(f"{file}, line {line_of(rows[first])}: image id {ids.iat[first]!r} is not "
                         "16 letters or digits")


def image_paths(folder: str, ids: pd.Series) -> pd.Series:
    """``<folder>/a/b/c/<id>.jpg`` (README: a, b, c = the id's first three characters)."""
    ids = ids.reset_index(drop=True)
    return folder + "/" + ids.str[0] + "/" + ids.str[1] + "/" + ids.str[2] + "/" + ids + ".jpg"


def read_train(file: Path) -> pd.DataFrame:
    """``train_clean.csv`` expanded to one row per image: ``id, landmark_id`` (file order)."""
    table = read_csv(file, TRAIN_CLEAN)
    landmark = int_column(table, "landmark_id", file)
    ids = table["images"].str.split()
    empty = ids.str.len() == 0
    if empty.any():
        raise ValueError(f"{file}, line {line_of(table.index[empty.to_numpy().nonzero()[0][0]])}: no images")
    rows = pd.DataFrame({"id": ids, "landmark_id": landmark}).explode("id")
    check_ids(rows["id"], file, rows.index)
    return rows.reset_index(drop=True)


def unique_ids(table: pd.DataFrame, file: Path, what: str) -> pd.Series:
    """The ``id`` column, stripped, checked (16 letters or digits) and without repeats."""
    ids = table["id"].str.strip()
    check_ids(ids, file, table.index)
    duplicated = ids.duplicated()
    if duplicated.any():
        first = duplicated.to_numpy().nonzero()[0][0]
        raise ValueError(f"{file}, line {line_of(table.index[first])}: {what} {ids.iat[first]} listed twice")
    return ids


def read_index_map(file: Path) -> pd.DataFrame:
    """``index_image_to_landmark.csv``: ``id, landmark_id``; ids unique."""
    table = read_csv(file, INDEX_TO_LANDMARK)
    ids = unique_ids(table, file, "image")
    return pd.DataFrame({"id": ids, "landmark_id": int_column(table, "landmark_id", file)})


def read_queries(file: Path, index_map: pd.DataFrame) -> pd.DataFrame:
    """The scored rows of ``retrieval_solution_v2.1.csv`` (images not ``None``, Public and
    Private pooled): ``id, landmark_id`` = the index landmark of the first ground-truth image."""
    table = read_csv(file, GROUND_TRUTH)
    ids = unique_ids(table, file, "test image")
    images = table["images"].str.strip()
    scored = images != NO_GROUND_TRUTH
    first_image = images[scored].str.split().str[0]
    blank = first_image.isna()
    if blank.any():
        row = first_image.index[blank.to_numpy().nonzero()[0][0]]
        raise ValueError(f"{file}, line {line_of(row)}: empty images (an ignored test image says "
                         f"{NO_GROUND_TRUTH!r})")
    landmark = first_image.map(pd.Series(index_map["landmark_id"].to_numpy(), index=index_map["id"].to_numpy()))
    unknown = landmark.isna()
    if unknown.any():
        row = first_image.index[unknown.to_numpy().nonzero()[0][0]]
        raise ValueError(f"{file}, line {line_of(row)}: ground-truth image {first_image[row]} is not in "
                         f"{INDEX_TO_LANDMARK}")
    return pd.DataFrame({"id": ids[scored], "landmark_id": landmark.astype("int64")}).reset_index(drop=True)


def read_hierarchy(file: Path) -> pd.DataFrame:
    """``*_label_to_hierarchical.csv`` indexed by landmark_id: ``hierarchical_label`` and
    ``natural_or_human_made``, verbatim ("" when blank); a landmark listed twice with different
    labels is an error naming its lines."""
    table = read_csv(file, TRAIN_HIER if "train" in file.name else INDEX_HIER)
    out = pd.DataFrame({level: table[level].where(table[level].str.strip() != "", "") for level in HIER_LEVELS})
    out.index = pd.Index(int_column(table, "landmark_id", file).to_numpy(), name="landmark_id")
    out["line"] = table.index.to_numpy() + 2
    repeated = out[out.index.duplicated(keep=False)]
    if len(repeated):
        clash = repeated.groupby(level=0)[HIER_LEVELS].nunique().max(axis=1) > 1
        if clash.any():
            landmark = clash[clash].index[0]
            lines = repeated.loc[[landmark], "line"].tolist()
            raise ValueError(f"{file}, lines {lines}: landmark {landmark} has different hierarchical labels")
    return out[~out.index.duplicated()][HIER_LEVELS]


def attach_hierarchy(table: pd.DataFrame, train_h: pd.DataFrame, index_h: pd.DataFrame
                     ) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """``level_1`` (hierarchical_label) and ``level_2`` (natural_or_human_made) ids for the
    ``train`` / ``query`` / ``gallery`` rows of a one-level GLDv2 table, from the two
    :func:`read_hierarchy` tables (train rows from ``train_h``, the others from ``index_h``):
    positions in the names of both files sorted together, -1 when unknown; train rows without a
    hierarchical label dropped (module docstring). Returns (table, {level: names})."""
    names = {level: sorted((set(train_h[level]) | set(index_h[level])) - {""}) for level in HIER_LEVELS}
    parts = []
    for split, hier in (("train", train_h), ("query", index_h), ("gallery", index_h)):
        part = table[table["split"] == split][["path", "split", "label"]].copy()
        for i, level in enumerate(HIER_LEVELS, 1):
            ids = {name: k for k, name in enumerate(names[level])}
            by_landmark = hier[level].map(ids)  # NaN for "" (unknown)
            part[f"level_{i}"] = part["label"].map(by_landmark).fillna(-1).astype("int64")
        if split == "train":
            part = part[part["level_1"] >= 0]  # SupRank remove_nan: no hierarchical_label, no training row
        parts.append(part)
    return pd.concat(parts, ignore_index=True), names
