"""PKU VehicleID: its replica through the real download -> prepare path, extracted copies, and the
list files' checks. Expected values are read from the replica zip directly, not through vehicleid.py."""

import io
import zipfile

import pytest
from PIL import Image

from rankrepro.data import datasets
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.data.datasets import vehicleid

VEHICLEID = datasets.load("vehicleid")
TOP = "VehicleID_V1.0"
LISTS = {"train": "train_list.txt", "test_800": "test_list_800.txt",
         "test_1600": "test_list_1600.txt", "test_2400": "test_list_2400.txt"}


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    out = tmp_path_factory.mktemp("vehicleid_replica")
    VEHICLEID.write_replica(out, seed=5)
    return out


def read_member(replica_dir, name):
    with zipfile.ZipFile(replica_dir / "VehicleID_V1.0.zip") as zf:
        return zf.read(f"{TOP}/{name}").decode()


def listed(replica_dir, split):
    """[(image id, vehicle id)] of one list of the replica."""
    return [tuple(line.split()) for line in read_member(replica_dir, f"train_test_split/{LISTS[split]}").splitlines()]


def model_of(replica_dir):
    lines = read_member(replica_dir, "attribute/model_attr.txt").splitlines()
    return dict(tuple(map(int, line.split())) for line in lines)


@pytest.fixture(scope="module")
def prepared(replica, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vehicleid_data")
    record = VEHICLEID.download(tmp / "data", replica_dir=replica)
    return VEHICLEID.prepare(record, tmp / "manifest", data_root=tmp / "data", replica=True), tmp / "data"


@pytest.fixture
def extracted(replica, tmp_path):
    """A plain unzip of the replica (the parent of VehicleID_V1.0)."""
    with zipfile.ZipFile(replica / "VehicleID_V1.0.zip") as zf:
        zf.extractall(tmp_path / "copy")
    return tmp_path / "copy"


def test_facts_and_sources():
    assert VEHICLEID.name == "vehicleid" and type(VEHICLEID) is vehicleid.VehicleID
    facts = datasets.facts()["vehicleid"]
    assert facts["manual"] is True and facts["files"] == 1 and facts["protocol"] == "vehicleid"
    assert facts["levels"] == ["vehicle", "model"]
    (f,) = VEHICLEID.source_files()
    assert (f.name, f.url, f.checksum, f.extract) == ("VehicleID_V1.0.zip", None, None, True)
    # only the test lists' vehicle counts: the paper's image / train counts differ from the release
    assert VEHICLEID.expected_counts == {"test_800": {"vehicle": 800}, "test_1600": {"vehicle": 1600},
                                         "test_2400": {"vehicle": 2400}}
    paper = vehicleid.PAPER_COUNTS  # Smooth-AP §5; Table 1 sums the test lists: 40,365 images / 4,800 ids
    assert paper["train"] == {"images": 110178, "vehicle": 13134}
    assert sum(paper[s]["images"] for s in LISTS if s != "train") == 40365
    assert sum(paper[s]["vehicle"] for s in LISTS if s != "train") == 4800
    assert set(VEHICLEID.disjoint) == {("train", s) for s in LISTS if s != "train"}


def test_manual_download_message(tmp_path):
    with pytest.raises(ManualDownloadRequired) as err:
        VEHICLEID.download(tmp_path)
    message = str(err.value)
    assert "pkuml.org/resources/pku-vehicleid.html" in message
    assert f"put it at {tmp_path.absolute() / 'downloads' / 'vehicleid' / 'VehicleID_V1.0.zip'}" in message
    assert "datasets.vehicleid.extracted" in message


def test_replica_layout(replica):
    with zipfile.ZipFile(replica / "VehicleID_V1.0.zip") as zf:
        names = set(zf.namelist())
        image = Image.open(io.BytesIO(zf.read(sorted(n for n in names if n.endswith(".jpg"))[0])))
    assert image.format == "JPEG" and image.size == (32, 32)
    for name in [f"train_test_split/{f}" for f in LISTS.values()] + \
            ["attribute/model_attr.txt", "attribute/color_attr.txt", "attribute/img2vid.txt", "README.md"]:
        assert f"{TOP}/{name}" in names
    rows = {s: listed(replica, s) for s in LISTS}
    for s in LISTS:
        assert rows[s] and all(len(i) == 7 and i.isdigit() for i, _ in rows[s])
        assert {f"{TOP}/image/{i}.jpg" for i, _ in rows[s]} <= names
    tests = [{i for i, _ in rows[s]} for s in LISTS if s != "train"]
    assert tests[0] & tests[1] or tests[0] & tests[2] or tests[1] & tests[2]  # the lists overlap
    train_vehicles = {v for _, v in rows["train"]}
    assert all(not train_vehicles & {v for _, v in rows[s]} for s in LISTS if s != "train")
    vehicles = {int(v) for r in rows.values() for _, v in r}
    assert vehicles - set(model_of(replica)), "some vehicles have no model attribute"


def test_download_and_prepare(replica, prepared):
    manifest, data_root = prepared
    assert manifest.root == (data_root / "vehicleid" / TOP).resolve()
    assert manifest.meta["protocol"] == "vehicleid" and manifest.meta["levels"] == ["vehicle", "model"]
    models = model_of(replica)
    unknown = {}
    for split in LISTS:
        rows = listed(replica, split)
        part = manifest.split(split).table
        assert part["path"].tolist() == [f"image/{i}.jpg" for i, _ in rows]
        assert part["label"].tolist() == [int(v) for _, v in rows]
        assert part["level_1"].tolist() == [models.get(int(v), -1) for _, v in rows]
        assert manifest.meta["counts"][split] == {"images": len(rows), "classes": len({v for _, v in rows})}
        unknown[split] = len({v for _, v in rows if int(v) not in models})
    assert manifest.meta["vehicles_without_model"] == unknown and sum(unknown.values())
    assert len(manifest.table) == sum(len(listed(replica, s)) for s in LISTS)  # one row per image per list
    assert all(p.is_file() for p in manifest.paths())


@pytest.mark.parametrize("form", ["parent", "top", "renamed"])
def test_prepare_from_extracted_folder(extracted, tmp_path, form):
    top = extracted / TOP
    if form == "renamed":  # the top folder's name is not verified: any single folder holding the lists
        top = top.rename(extracted / "vehicle_id")
    source = top if form == "top" else extracted
    manifest = VEHICLEID.prepare(source, tmp_path / "m", data_root=tmp_path / "unused", replica=True)
    assert manifest.root == top.resolve()
    assert set(manifest.table["split"]) == set(LISTS)
    assert not (tmp_path / "unused").exists()


def test_real_counts_enforced(extracted, tmp_path):
    with pytest.raises(ValueError, match=r"VehicleID test_800: expected 800 vehicle labels, found \d+"):
        VEHICLEID.prepare(extracted, tmp_path / "m", data_root=tmp_path)
    assert not (tmp_path / "m" / "meta.json").exists()


@pytest.mark.parametrize("name", ["train_test_split/test_list_1600.txt", "attribute/model_attr.txt"])
def test_missing_file_named(extracted, tmp_path, name):
    (extracted / TOP / name).unlink()
    with pytest.raises(FileNotFoundError, match=f"{TOP}/{name}.* is missing"):
        VEHICLEID.prepare(extracted, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_not_a_vehicleid_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_test_split/train_list.txt"):
        VEHICLEID.prepare(tmp_path, tmp_path / "m", data_root=tmp_path)


def test_malformed_line_named(extracted, tmp_path):
    file = extracted / TOP / "train_test_split" / "train_list.txt"
    lines = file.read_text().splitlines()
    lines[2] = lines[2] + " 7"
    file.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"train_list.txt line 3: expected '<image id> <vehicle id>'"):
        VEHICLEID.prepare(extracted, tmp_path / "m", data_root=tmp_path, replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_vehicle_with_two_models(extracted, tmp_path):
    file = extracted / TOP / "attribute" / "model_attr.txt"
    vehicle, model = file.read_text().split()[:2]
    file.write_text(file.read_text() + f"{vehicle} {int(model) + 1}\n")
    with pytest.raises(ValueError, match=f"model_attr.txt: vehicle {vehicle} is listed with models {model} and"):
        VEHICLEID.prepare(extracted, tmp_path / "m", data_root=tmp_path, replica=True)


def test_train_and_test_sharing_a_vehicle_refused(extracted, tmp_path):
    split = extracted / TOP / "train_test_split"
    image, vehicle = (split / "test_list_800.txt").read_text().split()[:2]
    (split / "train_list.txt").write_text((split / "train_list.txt").read_text() + f"{image} {vehicle}\n")
    with pytest.raises(ValueError, match="classes are in both train and test_800"):
        VEHICLEID.prepare(extracted, tmp_path / "m", data_root=tmp_path, replica=True)


def test_find_root_takes_the_only_sub_folder_holding_the_split_lists(tmp_path):
    ds = VEHICLEID
    assert ds.root_in_only_subfolder
    for folder in ("VehicleID_V1.0", "renamed"):
        (tmp_path / folder / ds.marker).parent.mkdir(parents=True)
        (tmp_path / folder / ds.marker).write_text("")
    assert ds.find_root(tmp_path) == tmp_path / "VehicleID_V1.0"  # the top folder first
    (tmp_path / "VehicleID_V1.0" / ds.marker).unlink()
    assert ds.find_root(tmp_path) == tmp_path / "renamed"  # else the only sub-folder with the marker
    (tmp_path / "other" / ds.marker).parent.mkdir(parents=True)
    (tmp_path / "other" / ds.marker).write_text("")
    assert ds.find_root(tmp_path) is None  # two: none is guessed
    assert ds.find_root(tmp_path / "missing") is None
