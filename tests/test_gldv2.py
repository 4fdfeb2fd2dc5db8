"""Google Landmarks v2 / H-GLDv2: the replica through the real download path (md5 files, shards
verified against them) -> extract -> parse; expected values read from the replica's own files
with the csv and tarfile modules, independently of gldv2.py."""

import csv
import hashlib
import io
import json
import shutil
import tarfile

import pytest

from rankrepro.data import datasets
from rankrepro.data.checksums import recorded_checksum
from rankrepro.data.errors import ChecksumError
from rankrepro.data.datasets import gldv2
from rankrepro.data.manifest import META_JSON

REPLICA_SHARDS = {"train": 2, "index": 1, "test": 1}
MD5_OF = {f"{s}/images_{n:03d}.tar": f"md5sum/{s}/md5.images_{n:03d}.txt"
          for s, count in REPLICA_SHARDS.items() for n in range(count)}


def local(name, replica):
    """The dataset with its real source-file list, taken from a local copy laid out as the S3 bucket
    (the replica's file names are the bucket's paths) with the replica's shard counts."""
    dataset = datasets.load(name)
    dataset.base_url = replica.as_uri() + "/"
    dataset.shard_counts = REPLICA_SHARDS
    return dataset


def rows(replica, name):
    """A replica CSV as (header, rows), read with the csv module."""
    header, *body = csv.reader(io.StringIO((replica / name).read_text()))
    return header, body


def image_id(path):
    return path.rsplit("/", 1)[1].removesuffix(".jpg")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    out = tmp_path_factory.mktemp("gldv2") / "replica"
    datasets.load("gldv2").write_replica(out)
    return out


@pytest.fixture(scope="module")
def prepared(replica, tmp_path_factory):
    """{name: manifest}: both variants downloaded from the local bucket (md5-verified shards) into
    one data root and prepared (the second reuses the shared tree)."""
    tmp = tmp_path_factory.mktemp("prepared")
    out = {}
    for name in ("gldv2", "gldv2_hier"):
        dataset = local(name, replica)
        record = dataset.download(tmp / "data", replica_dir=None)
        out[name] = dataset.prepare(record, tmp / name, data_root=tmp / "data", replica=True)
    out["data_root"] = tmp / "data"
    return out


@pytest.fixture(scope="module")
def csvs(replica):
    """Hand-checkable facts of the replica CSVs."""
    _, clean = rows(replica, "metadata/train_clean.csv")
    _, index = rows(replica, "metadata/index_image_to_landmark.csv")
    _, solution = rows(replica, "ground_truth/retrieval_solution_v2.1.csv")
    hier = {}
    for split in ("train", "index"):
        header, body = rows(replica, f"metadata/{split}_label_to_hierarchical.csv")
        hier[split] = {int(r[0]): dict(zip(header, r)) for r in body}
    return {"clean": clean, "index": {r[0]: int(r[1]) for r in index}, "solution": solution, "hier": hier}


def test_registrations_share_their_files():
    plain, hier = datasets.load("gldv2"), datasets.load("gldv2_hier")
    assert type(plain) is type(hier) is gldv2.GLDv2
    assert plain.facts()["source"] == hier.facts()["source"] == "gldv2"
    assert plain.levels == ["landmark"]
    assert hier.levels == ["landmark", "hierarchical_label", "natural_or_human_made"]
    assert plain.protocol == hier.protocol == "gldv2-suprank" and plain.disjoint == hier.disjoint == ()
    files = {f.name: f for f in plain.source_files()}
    assert files == {f.name: f for f in hier.source_files()}
    assert len(files) == 7 + 2 * (500 + 100 + 20)  # 7 CSVs (2: the Commons categories), md5 + shard each
    shard = files["index/images_099.tar"]
    assert shard.url == "https://s3.amazonaws.com/google-landmark/index/images_099.tar"
    assert shard.checksum is None and shard.checksum_file == "md5sum/index/md5.images_099.txt"
    assert shard.extract and shard.into == "index"
    md5 = files["md5sum/test/md5.images_019.txt"]
    assert md5.url == "https://s3.amazonaws.com/google-landmark/md5sum/test/md5.images_019.txt"
    assert md5.checksum is None and not md5.extract
    solution = files["ground_truth/retrieval_solution_v2.1.csv"]
    assert solution.url == "https://s3.amazonaws.com/google-landmark/ground_truth/retrieval_solution_v2.1.csv"
    assert "train/images_500.tar" not in files and "train/images_499.tar" in files
    assert plain.expected_counts == {"train": {"images": 1_580_470, "landmark": 81_313},
                                     "gallery": {"images": 761_757}}
    assert hier.expected_counts == {"gallery": {"images": 761_757}}  # H-GLDv2 train counts: not the released CSV's


def test_replica_layout(replica):
    written = json.loads((replica / "replica.json").read_text())["files"]
    assert set(written) == set(MD5_OF) | set(MD5_OF.values()) | {
        "metadata/train_clean.csv", "metadata/train_label_to_hierarchical.csv",
        "metadata/index_image_to_landmark.csv", "metadata/index_label_to_hierarchical.csv",
        "ground_truth/retrieval_solution_v2.1.csv", "metadata/train_label_to_category.csv",
        "metadata/index_label_to_category.csv"}
    for shard, md5_file in MD5_OF.items():
        md5 = hashlib.md5((replica / shard).read_bytes()).hexdigest()
        assert (replica / md5_file).read_text() == f"{md5}  {shard.split('/')[1]}\n"  # as md5sum prints it
        with tarfile.open(replica / shard) as tf:
            images = [m.name for m in tf.getmembers() if m.isfile()]
        assert images and all(n.split("/")[:3] == list(image_id(n)[:3]) and len(n.split("/")) == 4 for n in images)
    assert rows(replica, "metadata/train_clean.csv")[0] == ["landmark_id", "images"]
    assert rows(replica, "metadata/index_image_to_landmark.csv")[0] == ["id", "landmark_id"]
    assert rows(replica, "ground_truth/retrieval_solution_v2.1.csv")[0] == ["id", "images", "Usage"]
    for split in ("train", "index"):
        header, hier = rows(replica, f"metadata/{split}_label_to_hierarchical.csv")
        assert header == ["landmark_id", "category", "supercategory", "hierarchical_label", "natural_or_human_made"]
        header, categories = rows(replica, f"metadata/{split}_label_to_category.csv")
        assert header == ["landmark_id", "category"]
        # every landmark of train_clean / the index (and of the hierarchy file) has its Commons category,
        # the same URL in both files; the category file lists more landmarks than any other file
        category = dict(categories)
        listed = {r[0] for r in rows(replica, "metadata/train_clean.csv")[1]} if split == "train" else \
            {r[1] for r in rows(replica, "metadata/index_image_to_landmark.csv")[1]}
        assert listed < set(category) and {r[0] for r in hier} < set(category)
        assert all(category[r[0]] == r[1] for r in hier)
        assert all(url.startswith("http://commons.wikimedia.org/wiki/Category:") for url in category.values())


def test_shards_are_verified_against_their_md5_files(prepared, replica):
    downloads = prepared["data_root"] / "downloads" / "gldv2"
    for shard, md5_file in MD5_OF.items():
        assert recorded_checksum(downloads / shard) == "md5:" + (replica / md5_file).read_text().split()[0]
    tree = prepared["data_root"] / "gldv2"
    assert (tree / "md5sum" / "index" / "md5.images_000.txt").is_file()
    assert prepared["gldv2"].root == prepared["gldv2_hier"].root == tree.resolve()


def test_a_shard_whose_md5_file_disagrees(replica, tmp_path):
    bucket = tmp_path / "bucket"
    shutil.copytree(replica, bucket)
    (bucket / "md5sum/index/md5.images_000.txt").write_text("0" * 32 + "  images_000.tar\n")
    dataset = local("gldv2", bucket)
    with pytest.raises(ChecksumError, match=r"index/images_000\.tar.*expected md5:0{32}"):
        dataset.download(tmp_path / "data")
    assert not (tmp_path / "data" / "downloads" / "gldv2" / "download.json").exists()
    (bucket / "md5sum/index/md5.images_000.txt").write_text("")
    with pytest.raises(ChecksumError, match=r"md5\.images_000\.txt: no md5 .*index/images_000\.tar"):
        dataset.download(tmp_path / "data2")


def test_splits_and_query_labels(prepared, csvs):
    manifest = prepared["gldv2"]
    table = manifest.table
    assert manifest.meta["ground_truth"] == "ground_truth/retrieval_solution_v2.1.csv"
    assert (manifest.root / manifest.meta["ground_truth"]).is_file()
    assert manifest.meta["landmark_id_space"]["train"] != manifest.meta["landmark_id_space"]["gallery"]
    train = table[table.split == "train"]
    expected = [(f"train/{i[0]}/{i[1]}/{i[2]}/{i}.jpg", int(lm)) for lm, ids in csvs["clean"] for i in ids.split(" ")]
    assert list(zip(train["path"], train["label"])) == expected
    gallery = table[table.split == "gallery"]
    assert dict(zip(gallery["path"].map(image_id), gallery["label"])) == csvs["index"]
    assert all(p.startswith("index/") for p in gallery["path"])
    query = table[table.split == "query"]
    scored = [r for r in csvs["solution"] if r[1] != "None"]
    assert 0 < len(scored) < len(csvs["solution"])  # the replica holds ignored test images
    assert query["path"].map(image_id).tolist() == [r[0] for r in scored]
    assert all(p.startswith("test/") for p in query["path"])
    assert query["label"].tolist() == [csvs["index"][r[1].split(" ")[0]] for r in scored]
    # a query whose ground truth mixes landmarks takes the first image's
    mixed = [r for r in scored if len({csvs["index"][i] for i in r[1].split(" ")}) > 1]
    assert mixed
    for r in mixed:
        label = int(query.loc[query["path"].map(image_id) == r[0], "label"].iat[0])
        assert label == csvs["index"][r[1].split(" ")[0]] != csvs["index"][r[1].split(" ")[1]]


def test_hierarchy_levels_and_remove_nan(prepared, csvs):
    plain, manifest = prepared["gldv2"].table, prepared["gldv2_hier"]
    table = manifest.table
    names = manifest.meta["hierarchical_label_names"]
    groups = manifest.meta["natural_or_human_made_names"]
    everything = [h for split in ("train", "index") for h in csvs["hier"][split].values()]
    assert names == sorted({h["hierarchical_label"] for h in everything} - {""})
    assert "ocean area " in names and groups == ["human-made", "natural"]

    def known(split, landmark):
        return csvs["hier"][split].get(landmark, {}).get("hierarchical_label", "") != ""

    # remove_nan: train keeps exactly the landmarks with a hierarchical label
    train = table[table.split == "train"]
    plain_train = plain[plain.split == "train"]
    kept = plain_train[[known("train", int(lm)) for lm in plain_train["label"]]]
    assert train["path"].tolist() == kept["path"].tolist() and len(kept) < len(plain_train)
    for _, row in train.iterrows():
        h = csvs["hier"]["train"][row["label"]]
        assert names[row["level_1"]] == h["hierarchical_label"]
        assert groups[row["level_2"]] == h["natural_or_human_made"]
    # query and gallery: the index file; every row kept, -1 where the landmark has none
    for split in ("query", "gallery"):
        part = table[table.split == split]
        assert part["path"].tolist() == plain.loc[plain.split == split, "path"].tolist()
        for _, row in part.iterrows():
            h = csvs["hier"]["index"].get(row["label"])
            if h is None:
                assert row["level_1"] == row["level_2"] == -1
            else:
                assert (names[row["level_1"]], groups[row["level_2"]]) == \
                    (h["hierarchical_label"], h["natural_or_human_made"])
        assert (part["level_1"] == -1).any()
    # one integer, two id spaces: train landmark 1234 and index landmark 1234 differ
    same = set(train["label"]) & set(table.loc[table.split == "gallery", "label"])
    assert same
    for landmark in same:
        assert csvs["hier"]["train"][landmark]["hierarchical_label"] != \
            csvs["hier"]["index"][landmark]["hierarchical_label"]


@pytest.fixture
def tree(prepared, tmp_path):
    """A copy of the prepared tree, as an already-extracted folder."""
    copy = tmp_path / "tree"
    shutil.copytree(prepared["gldv2"].root, copy, symlinks=True)
    return copy


@pytest.mark.parametrize("name, missing", [("gldv2", "metadata/index_image_to_landmark.csv"),
                                           ("gldv2", "ground_truth/retrieval_solution_v2.1.csv"),
                                           ("gldv2_hier", "metadata/index_label_to_hierarchical.csv")])
def test_a_missing_file_is_named_and_nothing_written(tree, tmp_path, name, missing):
    (tree / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing.replace(".", r"\.")):
        datasets.load(name).prepare(tree, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_unknown_ground_truth_image_names_file_and_line(tree, tmp_path):
    solution = tree / "ground_truth" / "retrieval_solution_v2.1.csv"
    lines = solution.read_text().splitlines()
    lines[1] = "ffffffffffffffff,0123456789abcdef,Public"
    solution.unlink()  # replace the file, never write through a link
    solution.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"retrieval_solution_v2\.1\.csv, line 2: ground-truth image 0123456789abcdef"):
        datasets.load("gldv2").prepare(tree, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_conflicting_hierarchy_rows_are_an_error(tree, tmp_path):
    file = tree / "metadata" / "train_label_to_hierarchical.csv"
    text = file.read_text()
    file.unlink()
    file.write_text(text + "1234,http://commons.wikimedia.org/wiki/Category:X,bay,bridge,human-made\n")
    with pytest.raises(ValueError, match=r"train_label_to_hierarchical\.csv, lines \[2, \d+\]: landmark 1234"):
        datasets.load("gldv2_hier").prepare(tree, tmp_path / "m", data_root=tmp_path, replica=True)


def test_real_counts(tree, tmp_path):
    with pytest.raises(ValueError, match=r"GLDv2 train: expected 1,580,470 images, found \d+"):
        datasets.load("gldv2").prepare(tree, tmp_path / "m", data_root=tmp_path)
    with pytest.raises(ValueError, match=r"H-GLDv2 gallery: expected 761,757 images, found \d+"):
        datasets.load("gldv2_hier").prepare(tree, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()
