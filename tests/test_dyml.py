"""DyML-Vehicle / -Animal / -Product: generated replicas through the manual download -> prepare path.

The facts checked here are read from the replica archives independently of dyml.py: with the
authors' own way of reading the label files (cut line 1 after its last ``_id``, split rows on
``", "``: fname, coarse, middle, fine) and with SupRank's (``pd.read_csv`` and the odd column
names ``" fine_id0.jpg"``, ``" middle_id"``, ``" coarse_id"``, ``" labels0.jpg"``)."""

import io
import json
import shutil
import zipfile

import pandas as pd
import pytest

from rankrepro.data import datasets
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.data.datasets import dyml
from rankrepro.data.manifest import META_JSON

DOMAINS = ["vehicle", "animal", "product"]
LEVELS = ["fine", "middle", "coarse"]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """{domain: (replica folder, archive, extracted folder)} with default options."""
    out = {}
    for domain in DOMAINS:
        tmp = tmp_path_factory.mktemp(domain)
        datasets.load(f"dyml_{domain}").write_replica(tmp / "replica")
        archive = tmp / "replica" / f"dyml_{domain}.zip"
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp / "extracted")
        out[domain] = (tmp / "replica", archive, tmp / "extracted")
    return out


def authors_rows(text):
    """The authors' reader (DynamicMetricLearning src/DyML_dataset.py): rows of 4 (label files)
    or 2 (benchmark files) ", "-separated fields; line 1 cut after its last "_id"."""
    lines = text.split("\n")
    lines[0] = lines[0].split("_id")[-1] if "_id" in lines[0] else lines[0].split("labels")[-1]
    return [line.split(", ") for line in lines if line]


def suprank_table(zf, name):
    return pd.read_csv(io.BytesIO(zf.read(name)))


def copy_of(replicas, domain, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(replicas[domain][2], copy)
    return copy / f"dyml_{domain}"


def prepare(domain, source, tmp_path, **kw):
    return datasets.load(f"dyml_{domain}").prepare(source, tmp_path / "m", data_root=tmp_path / "data",
                                                   replica=kw.pop("replica", True), **kw)


def test_registry_and_facts():
    assert {"dyml_vehicle", "dyml_animal", "dyml_product"} <= set(datasets.names())
    for domain, (fine, middle, coarse) in {"vehicle": (39_491, 93, 5), "animal": (495, 28, 5),
                                           "product": (1_639, 171, 36)}.items():
        dataset = datasets.load(f"dyml_{domain}")
        assert type(dataset) is dyml.DyML and dataset.domain == domain
        assert datasets.DATASETS.get(f"dyml_{domain}").fixed == {"domain": domain}
        facts = dataset.facts()
        assert facts == json.loads(json.dumps(facts))
        assert facts["source"] == f"dyml_{domain}" and facts["files"] == 1 and facts["manual"] is True
        assert facts["protocol"] == "dyml" and facts["levels"] == LEVELS
        (f,) = dataset.source_files()
        assert (f.name, f.url, f.checksum) == (f"dyml_{domain}.zip", None, None)
        assert dataset.expected_counts == {"train": {"fine": fine, "middle": middle, "coarse": coarse}}
        assert dataset.disjoint == ()
    with pytest.raises(ValueError, match="domain 'cars'"):
        dyml.DyML(domain="cars")


@pytest.mark.parametrize("domain", DOMAINS)
def test_replica_layout_and_odd_headers(replicas, domain, tmp_path):
    replica, archive, _ = replicas[domain]
    top = f"dyml_{domain}/"
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        train_text = zf.read(top + "train/label.csv").decode()
        # the header is glued to the row of 0.jpg: SupRank's pandas reading sees the odd names
        assert train_text.startswith("fname, coarse_id, middle_id, fine_id0.jpg, ")
        table = suprank_table(zf, top + "train/label.csv")
        assert {"fname", " fine_id0.jpg", " middle_id", " coarse_id"} <= set(table.columns)
        rows = authors_rows(train_text)
        assert rows[0][0] == "0.jpg" and all(len(r) == 4 for r in rows)
        # SupRank's columns pick the authors' fields (fname, coarse, middle, fine); it loses 0.jpg
        assert table[[" fine_id0.jpg", " middle_id", " coarse_id"]].values.tolist() == \
            [[int(r[3]), int(r[2]), int(r[1])] for r in rows[1:]]
        assert {top + "train/imgs/" + r[0] for r in rows} == {n for n in names if n.startswith(top + "train/imgs/")
                                                             and n.endswith(".jpg")}
        if domain == "product":
            assert not any(n.startswith(top + "bmk_") for n in names)
            test = zf.read(top + "mini-bmk_all_in_one/label.csv").decode()
            assert test.startswith("fname, coarse_id, middle_id, fine_id0.jpg, ")
            assert all(top + "mini-bmk_all_in_one/imgs/" + r[0] in names for r in authors_rows(test))
        else:
            assert not any("mini-bmk" in n for n in names)
            for level in LEVELS:
                parts = {}
                for part in ("query", "gallery"):
                    text = zf.read(f"{top}bmk_{level}/{part}.csv").decode()
                    assert text.startswith("fname, labels0.jpg, ")
                    assert " labels0.jpg" in suprank_table(zf, f"{top}bmk_{level}/{part}.csv").columns
                    parts[part] = authors_rows(text)
                    assert all(f"{top}bmk_{level}/{part}/{r[0]}" in names for r in parts[part])
                # the gallery holds the queries (same names, same bytes), then other images
                q = parts["query"]
                assert parts["gallery"][:len(q)] == q and len(parts["gallery"]) > len(q)
                for name, _ in q:
                    assert zf.read(f"{top}bmk_{level}/query/{name}") == zf.read(f"{top}bmk_{level}/gallery/{name}")
    again = datasets.load(f"dyml_{domain}").write_replica(tmp_path / "again")
    assert again == json.loads((replica / "replica.json").read_text())["files"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_manifest_matches_the_files(replicas, domain, tmp_path):
    _, _, extracted = replicas[domain]
    manifest = prepare(domain, extracted, tmp_path)
    top = extracted / f"dyml_{domain}"
    assert manifest.root == top.resolve() and manifest.meta["protocol"] == "dyml"
    table = manifest.table
    train = authors_rows((top / "train/label.csv").read_text())
    part = table[table.split == "train"]
    assert part["path"].tolist() == [f"train/imgs/{r[0]}" for r in train]
    assert part[["label", "level_1", "level_2"]].values.tolist() == [[int(r[3]), int(r[2]), int(r[1])]
                                                                    for r in train]
    if domain == "product":
        assert set(table.split) == {"train", "test"}
        test = authors_rows((top / "mini-bmk_all_in_one/label.csv").read_text())
        rows = table[table.split == "test"]
        assert rows["path"].tolist() == [f"mini-bmk_all_in_one/imgs/{r[0]}" for r in test]
        assert rows[["label", "level_1", "level_2"]].values.tolist() == [[int(r[3]), int(r[2]), int(r[1])]
                                                                        for r in test]
        assert "benchmarks" not in manifest.meta
        return
    assert set(table.split) == {"train"} | {f"{p}_{lv}" for p in ("query", "gallery") for lv in LEVELS}
    columns = {"fine": "label", "middle": "level_1", "coarse": "level_2"}
    for level, column in columns.items():
        assert manifest.meta["benchmarks"][level] == {"query": f"query_{level}", "gallery": f"gallery_{level}",
                                                      "column": column}
        for p in ("query", "gallery"):
            listed = authors_rows((top / f"bmk_{level}/{p}.csv").read_text())
            rows = table[table.split == f"{p}_{level}"]
            assert rows["path"].tolist() == [f"bmk_{level}/{p}/{r[0]}" for r in listed]
            assert rows[column].tolist() == [int(r[1]) for r in listed]
            # a benchmark row knows only its own level
            others = [c for c in columns.values() if c != column]
            assert (rows[others] == -1).all().all() and (rows[column] >= 0).all()
    assert all(p.is_file() for p in manifest.paths())


def test_manual_message_names_the_file_and_the_alternatives(tmp_path):
    for domain in DOMAINS:
        name = f"dyml_{domain}"
        with pytest.raises(ManualDownloadRequired) as err:
            datasets.load(name).download(tmp_path / "data")
        message = str(err.value)
        where = (tmp_path / "data" / "downloads" / name / f"{name}.zip").absolute()
        assert f"{name}.zip: missing; put it at {where}" in message
        assert "1drv.ms/u/s!AsLhhAJIX-_0asLHa5h-56ZZL94" in message and "pan.baidu.com" in message
        assert f"datasets.{name}.extracted" in message and f"{name}/train/label.csv" in message
        assert ("mini-bmk_all_in_one" in message) == (domain == "product")
        assert not (tmp_path / "data" / "downloads" / name / "download.json").exists()


def test_archive_put_by_hand_then_counts_enforced(replicas, tmp_path):
    """The zip put where the message says: downloaded without checksum, prepared; as real data
    the published train counts refuse it, and no checksum gets recorded."""
    _, archive, _ = replicas["animal"]
    folder = tmp_path / "data" / "downloads" / "dyml_animal"
    folder.mkdir(parents=True)
    shutil.copy(archive, folder / "dyml_animal.zip")
    dataset = datasets.load("dyml_animal")
    record = dataset.download(tmp_path / "data")
    assert json.loads(record.read_text())["files"]["dyml_animal.zip"]["checksum"] is None
    with pytest.raises(ValueError, match=r"DyML-Animal train: expected 495 fine labels, found \d+"):
        dataset.prepare(record, tmp_path / "m", data_root=tmp_path / "data")
    assert not (tmp_path / "m" / META_JSON).exists()
    assert not (tmp_path / "data" / "checksums.lock.json").exists() or \
        "dyml_animal/dyml_animal.zip" not in (tmp_path / "data" / "checksums.lock.json").read_text()
    manifest = dataset.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert manifest.root == (tmp_path / "data" / "dyml_animal" / "dyml_animal").resolve()


def test_folder_under_another_name_is_found(replicas, tmp_path):
    """The top folder's name is not verified: the only sub-folder holding train/label.csv is the root."""
    top = copy_of(replicas, "vehicle", tmp_path)
    renamed = top.rename(top.with_name("DyML-vehicle"))
    assert prepare("vehicle", renamed.parent, tmp_path).root == renamed.resolve()


def test_a_repaired_header_is_accepted(replicas, tmp_path):
    top = copy_of(replicas, "product", tmp_path)
    before = prepare("product", top, tmp_path).table
    for rel in ("train/label.csv", "mini-bmk_all_in_one/label.csv"):
        file = top / rel
        file.write_text(file.read_text().replace("fine_id0.jpg", "fine_id\n0.jpg", 1))
    shutil.rmtree(tmp_path / "m")
    pd.testing.assert_frame_equal(prepare("product", top, tmp_path).table, before)


@pytest.mark.parametrize("header", ["fname, fine_id0.jpg, middle_id, coarse_id",   # SupRank's names as a header
                                    "fname,coarse,middle,fine0.jpg, 0, 0, 0"])
def test_a_different_header_names_the_file(replicas, tmp_path, header):
    top = copy_of(replicas, "vehicle", tmp_path)
    file = top / "train/label.csv"
    lines = file.read_text().split("\n")
    file.write_text("\n".join([header, *lines[1:]]))
    with pytest.raises(ValueError, match=rf"{file}, line 1: header .*expected 'fname, coarse_id, middle_id, "
                                         r"fine_id' followed by the first row.*' fine_id0.jpg'"):
        prepare("vehicle", top, tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()


@pytest.mark.parametrize("change, match", [
    (lambda lines: lines[:2] + ["9.jpg, 1"] + lines[3:], r"line 3: '9.jpg, 1'; expected 4 comma-separated"),
    (lambda lines: lines[:3] + ["9.jpg, 0, x, 2"] + lines[4:], r"line 4: label 'x' is not an integer"),
    (lambda lines: lines[:1] + ["9.jpg, 0, 0, -1"] + lines[2:], r"line 2: negative label -1"),
])
def test_bad_rows_name_file_and_line(replicas, tmp_path, change, match):
    top = copy_of(replicas, "product", tmp_path)
    file = top / "mini-bmk_all_in_one/label.csv"
    file.write_text("\n".join(change(file.read_text().split("\n"))))
    with pytest.raises(ValueError, match=f"{file}, {match}"):
        prepare("product", top, tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()


@pytest.mark.parametrize("domain, rel", [("vehicle", "bmk_middle/gallery.csv"), ("animal", "bmk_fine/query.csv"),
                                         ("product", "mini-bmk_all_in_one/label.csv")])
def test_a_missing_split_file_is_named_and_nothing_written(replicas, tmp_path, domain, rel):
    top = copy_of(replicas, domain, tmp_path)
    (top / rel).unlink()
    with pytest.raises(FileNotFoundError, match=f"{top / rel} is missing"):
        prepare(domain, top, tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()


def test_a_missing_image_is_reported(replicas, tmp_path):
    top = copy_of(replicas, "animal", tmp_path)
    (top / "bmk_coarse/gallery/0.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="1 listed images are missing .*bmk_coarse/gallery/0.jpg"):
        prepare("animal", top, tmp_path)
    assert not (tmp_path / "m" / META_JSON).exists()
