"""In-shop Clothes Retrieval: its replica through the real download -> prepare path, the layouts of
an extracted copy, and the partition file's checks. Expected values are read from the replica's
files directly (zipfile, str.split), not through inshop.py."""

import io
import shutil
import zipfile

import pytest
from PIL import Image

from rankrepro.data import datasets
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.data.datasets import inshop

INSHOP = datasets.load("inshop")
PARTITION = "list_eval_partition.txt"


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """The folder of a generated replica (img.zip, list_eval_partition.txt, replica.json)."""
    out = tmp_path_factory.mktemp("inshop_replica")
    INSHOP.write_replica(out, seed=3)
    return out


def listed(replica_dir):
    """(count line, header fields, rows as [image_name, item_id, status]) of the replica's partition file."""
    count, header, *rows = (replica_dir / PARTITION).read_text().splitlines()
    return count, header.split(), [r.split() for r in rows]


@pytest.fixture(scope="module")
def prepared(replica, tmp_path_factory):
    """(manifest, data_root) of the replica, downloaded through file:// and prepared."""
    tmp = tmp_path_factory.mktemp("inshop_data")
    record = INSHOP.download(tmp / "data", replica_dir=replica)
    return INSHOP.prepare(record, tmp / "manifest", data_root=tmp / "data", replica=True), tmp / "data"


def extracted_copy(replica, folder, layout):
    """An extracted copy in one of the layouts users have: ``img`` (img.zip unzipped beside
    Eval/), ``Img/img`` (unzipped inside the release's Img/) or ``flat`` (SupRank: the partition
    file beside img/)."""
    images = folder / "Img" if layout == "Img/img" else folder
    with zipfile.ZipFile(replica / "img.zip") as zf:
        zf.extractall(images)
    target = folder / PARTITION if layout == "flat" else folder / "Eval" / PARTITION
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(replica / PARTITION, target)
    return folder


def test_facts_and_sources():
    assert INSHOP.name == "inshop" and type(INSHOP) is inshop.InShop
    facts = datasets.facts()["inshop"]
    assert facts["manual"] is True and facts["files"] == 2 and facts["protocol"] == "query-gallery"
    assert facts["levels"] == ["item", "clothing_type", "gender"]
    files = {f.name: f for f in INSHOP.source_files()}
    assert set(files) == {"img.zip", PARTITION}
    assert all(f.url is None and f.checksum is None for f in files.values())
    assert files["img.zip"].extract and not files[PARTITION].extract and files[PARTITION].into == "Eval"
    # RaMBO §5: 25,882 train images of 3,997 classes; 14,218 + 12,612 images of 3,985 classes each
    assert INSHOP.expected_counts == {"train": {"images": 25882, "item": 3997},
                                      "query": {"images": 14218, "item": 3985},
                                      "gallery": {"images": 12612, "item": 3985}}
    assert set(INSHOP.disjoint) == {("train", "query"), ("train", "gallery")}


def test_manual_download_message(tmp_path):
    with pytest.raises(ManualDownloadRequired) as err:
        INSHOP.download(tmp_path)
    message = str(err.value)
    folder = tmp_path.absolute() / "downloads" / "inshop"
    assert "0B7EVK8r0v71pVDZFQXRsMDZCX1E" in message
    assert f"put it at {folder / 'img.zip'}" in message and f"put it at {folder / PARTITION}" in message
    assert "Img/img.zip" in message and f"Eval/{PARTITION}" in message
    assert "datasets.inshop.extracted" in message
    assert not (folder / "download.json").exists()


def test_replica_layout(replica):
    count, header, rows = listed(replica)
    assert header == ["image_name", "item_id", "evaluation_status"]
    assert int(count) == len(rows) and all(len(r) == 3 for r in rows)
    with zipfile.ZipFile(replica / "img.zip") as zf:
        jpgs = sorted(n for n in zf.namelist() if n.endswith(".jpg"))
        image = Image.open(io.BytesIO(zf.read(jpgs[0])))
    assert image.format == "JPEG" and image.size == (32, 32)
    assert sorted(r[0] for r in rows) == jpgs  # every image listed once
    for path, item, _ in rows:
        top, gender, _, folder, _ = path.split("/")
        assert top == "img" and gender in ("MEN", "WOMEN") and folder == item
    items = {s: {r[1] for r in rows if r[2] == s} for s in ("train", "query", "gallery")}
    assert items["query"] == items["gallery"] and not items["train"] & items["query"]
    assert {r[0].split("/")[2] for r in rows if r[0].startswith("img/MEN")} & \
           {r[0].split("/")[2] for r in rows if r[0].startswith("img/WOMEN")}  # a type shared by both genders


def test_download_and_prepare(replica, prepared):
    manifest, data_root = prepared
    _, _, rows = listed(replica)
    assert manifest.root == (data_root / "inshop").resolve()
    assert (data_root / "inshop" / "Eval" / PARTITION).is_file()
    assert manifest.meta["protocol"] == "query-gallery" and manifest.meta["replica"] is True
    types = sorted({r[0].split("/")[2] for r in rows})
    genders = sorted({r[0].split("/")[1] for r in rows})
    assert manifest.meta["clothing_type_names"] == types
    assert manifest.meta["gender_names"] == genders == ["MEN", "WOMEN"]
    table = manifest.table
    assert table["path"].tolist() == [r[0] for r in rows]
    assert table["split"].tolist() == [r[2] for r in rows]
    assert table["label"].tolist() == [int(r[1].removeprefix("id_")) for r in rows]
    assert table["level_1"].tolist() == [types.index(r[0].split("/")[2]) for r in rows]
    assert table["level_2"].tolist() == [genders.index(r[0].split("/")[1]) for r in rows]
    for split in ("train", "query", "gallery"):
        part = [r for r in rows if r[2] == split]
        assert manifest.meta["counts"][split] == {"images": len(part), "classes": len({r[1] for r in part})}
    assert all(p.is_file() for p in manifest.paths())


@pytest.mark.parametrize("layout", ["img", "Img/img", "flat"])
def test_prepare_from_extracted_copy(replica, tmp_path, layout):
    folder = extracted_copy(replica, tmp_path / "copy", layout)
    manifest = INSHOP.prepare(folder, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    prefix = "Img/" if layout == "Img/img" else ""
    assert manifest.root == folder.resolve()
    assert manifest.table["path"].tolist() == [prefix + r[0] for r in listed(replica)[2]]
    assert all(p.is_file() for p in manifest.paths())
    assert manifest.meta["gender_names"] == ["MEN", "WOMEN"]
    assert not (tmp_path / "unused").exists()


def test_real_counts_enforced(prepared, tmp_path):
    _, data_root = prepared
    with pytest.raises(ValueError, match=r"In-shop train: expected 25,882 images, found \d+"):
        INSHOP.prepare(data_root / "downloads" / "inshop", tmp_path / "m", data_root=data_root)
    assert not (tmp_path / "m" / "meta.json").exists()


def edit_partition(lines):
    """Edits of the partition file's lines -> the error they must raise."""
    first_item = lines[2].split()[1]
    other = next(line for line in lines[2:] if line.split()[1] == first_item and line != lines[2])
    moved = other.replace("/Denim/", "/Dresses/") if "/Denim/" in other else other.replace("/", "/X", 2)
    return {
        "count": ([str(len(lines) - 1)] + lines[1:], r"line 1 states \d+ images but \d+ rows"),
        "count_not_a_number": (["n/a"] + lines[1:], "line 1: 'n/a' is not the number of images"),
        "header": ([lines[0], "image_name item evaluation_status"] + lines[2:], "line 2: header"),
        "split": (lines[:2] + [lines[2].replace(" train", " val")] + lines[3:], "line 3: evaluation_status 'val'"),
        "fields": (lines[:3] + [lines[3] + " extra"] + lines[4:], "line 4: 4 fields"),
        "path": (lines[:2] + [lines[2].replace("img/", "images/", 1)] + lines[3:], "line 3: image_name"),
        "two_types": ([line if line != other else moved for line in lines],
                      f"1 item\\(s\\) listed under several type folders, e.g. {{'{first_item}'"),
    }


@pytest.mark.parametrize("case", ["count", "count_not_a_number", "header", "split", "fields", "path", "two_types"])
def test_partition_file_errors_name_the_file(replica, tmp_path, case):
    folder = extracted_copy(replica, tmp_path / "copy", "img")
    file = folder / "Eval" / PARTITION
    lines, pattern = edit_partition(file.read_text().splitlines())[case]
    file.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"{PARTITION}.*{pattern}"):
        INSHOP.prepare(folder, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_missing_partition_file(replica, tmp_path):
    folder = extracted_copy(replica, tmp_path / "copy", "img")
    (folder / "Eval" / PARTITION).unlink()
    with pytest.raises(FileNotFoundError, match=f"Eval/{PARTITION}"):
        INSHOP.prepare(folder, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_missing_image_reported(replica, tmp_path):
    folder = extracted_copy(replica, tmp_path / "copy", "img")
    first = listed(replica)[2][0][0]
    (folder / first).unlink()
    with pytest.raises(FileNotFoundError, match=f"1 listed images are missing .*{first}"):
        INSHOP.prepare(folder, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_gender_x_type_super_labels_for_the_hierarchical_sampler(prepared):
    """RaMBO's In-shop super-labels are gender x clothing type ("MEN/Denim, WOMEN/Dresses"): the
    hierarchical sampler's super_levels [1, 2] (levels clothing_type, gender of the manifest) keeps
    MEN/Denim and WOMEN/Denim apart; level 1 alone merges them (REPLICA_TYPES: 5 types, 6 pairs)."""
    from rankrepro.data.images import contiguous_labels
    from rankrepro.data.samplers import build_sampler

    manifest, _ = prepared
    labels = contiguous_labels(manifest.split("train").labels())
    block = {"name": "hierarchical", "batch_size": 4, "samples_per_class": 2, "batches_per_super_tuple": 1}
    by_type = build_sampler(block, labels, seed=0)
    by_pair = build_sampler({**block, "super_levels": [1, 2]}, labels, seed=0)
    pairs = sum(len(types) for types in inshop.REPLICA_TYPES.values())
    kinds = len({t for types in inshop.REPLICA_TYPES.values() for t in types})
    assert (pairs, kinds) == (6, 5)
    assert len(by_type) == kinds * (kinds - 1) // 2 and len(by_pair) == pairs * (pairs - 1) // 2
    for batch in by_pair:
        assert len({tuple(labels[i, 1:]) for i in batch}) == 2  # two (type, gender) super-labels per batch
