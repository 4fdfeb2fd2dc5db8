"""What every registered dataset promises, checked on its generated replica through the real
download (file://, checksum-verified) -> verify -> extract -> parse path.

A dataset module adds itself here by being registered: nothing to list. Its own test file
checks what is particular to it (columns, odd headers, level names, the real counts)."""

from __future__ import annotations

import io
import json

import pytest

from rankrepro.data import datasets
from rankrepro.data.checksums import file_digest, parse_checksum
from rankrepro.data.errors import ChecksumError
from rankrepro.data.manifest import META_JSON, level_columns
from rankrepro.metrics.protocols import PROTOCOLS

FILE_BASED = [n for n in datasets.names() if not datasets.load(n).derived_from]
DERIVED = [n for n in datasets.names() if datasets.load(n).derived_from]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """{name: (manifest, data_root)}: each file-based dataset's replica, downloaded and prepared."""
    cache = {}

    def get(name):
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            dataset = datasets.load(name)
            dataset.write_replica(tmp / "replica")
            record = dataset.download(tmp / "data", replica_dir=tmp / "replica")
            cache[name] = (dataset.prepare(record, tmp / "manifest", data_root=tmp / "data", replica=True),
                           tmp / "data")
        return cache[name]

    return get


@pytest.mark.parametrize("name", FILE_BASED)
def test_facts_are_json_and_complete(name):
    dataset = datasets.load(name)
    facts = dataset.facts()
    assert facts == json.loads(json.dumps(facts))
    assert facts["protocol"] in PROTOCOLS and facts["levels"] and facts["files"] >= 1
    assert dataset.title and dataset.marker
    files = dataset.source_files()
    assert len({f.name for f in files}) == len(files)
    for f in files:
        assert f.url or dataset.manual, f"{name}: {f.name} has no url but the dataset is not manual"
        if f.checksum:
            parse_checksum(f.checksum)
    if dataset.manual:
        assert dataset.how_to_get
    for split, counts in dataset.expected_counts.items():
        assert set(counts) <= {"images", *dataset.levels}, f"{name} expected_counts[{split}]"


@pytest.mark.parametrize("name", FILE_BASED)
def test_replica_goes_through_download_and_prepare(name, prepared):
    manifest, _ = prepared(name)
    dataset = datasets.load(name)
    table = manifest.table
    assert manifest.meta["dataset"] == name and manifest.meta["protocol"] == dataset.protocol
    assert manifest.meta["levels"] == list(dataset.levels) and manifest.meta["replica"] is True
    assert list(table.columns) == ["path", "split", *level_columns(len(dataset.levels)), *dataset.extra_columns]
    assert manifest.meta.get("extra_columns", []) == list(dataset.extra_columns)
    assert set(dataset.expected_counts) <= set(table["split"]), "every split of the real data is in the replica"
    assert all(p.is_file() for p in manifest.paths())
    for a, b in dataset.disjoint:
        assert not set(table.loc[table.split == a, "label"]) & set(table.loc[table.split == b, "label"])


@pytest.mark.parametrize("name", [n for n in FILE_BASED if len(datasets.load(n).levels) > 1])
def test_every_fine_class_has_one_parent_per_level(name, prepared):
    """Within each split (rows whose levels are all known: a DyML benchmark row knows one level)."""
    manifest, _ = prepared(name)
    columns = level_columns(manifest.n_levels)
    known = manifest.table[(manifest.table[columns] >= 0).all(axis=1)]
    assert len(known), f"{name}: no row knows all its levels"
    for split, rows in known.groupby("split"):
        for column in columns[1:]:
            parents = rows.groupby("label")[column].nunique()
            assert (parents == 1).all(), f"{name} {split}: fine classes with several {column}: {parents[parents > 1]}"


@pytest.mark.parametrize("name", FILE_BASED)
def test_replica_counts_are_refused_as_real(name, prepared, tmp_path):
    """Without replica=True the published counts are enforced; nothing is written."""
    dataset = datasets.load(name)
    if not dataset.expected_counts:
        pytest.skip(f"{name} states no counts")
    _, data_root = prepared(name)
    record = data_root / "downloads" / dataset.source_name / "download.json"
    with pytest.raises(ValueError, match="expected .* found"):
        dataset.prepare(record, tmp_path / "m", data_root=data_root)
    assert not (tmp_path / "m" / META_JSON).exists()


def replica_and_first_archive(name: str, replica):
    """(dataset, checksums, archive): ``name``'s replica written to ``replica`` and the name of its
    first file that is extracted; skips the test for a dataset without an archive."""
    dataset = datasets.load(name)
    checksums = dataset.write_replica(replica)
    archives = [f.name for f in dataset.replica_files(replica) if f.extract]
    if not archives:
        pytest.skip(f"{name} has no archive")
    return dataset, checksums, archives[0]


def state_as_genuine(replica, name: str, checksums: dict, archive: str) -> None:
    """Rewrite ``replica/replica.json`` so that ``archive``, as it is now, passes its checksum."""
    digest = "sha256:" + file_digest(replica / archive, "sha256")
    (replica / "replica.json").write_text(json.dumps({"dataset": name, "files": {**checksums, archive: digest}}))


def assert_prepare_fails_with_no_output(dataset, replica, data_root, out, match: str) -> None:
    """Downloading ``replica`` works, preparing it raises ValueError(``match``) and writes no manifest."""
    record = dataset.download(data_root, replica_dir=replica)
    with pytest.raises(ValueError, match=match):
        dataset.prepare(record, out, data_root=data_root, replica=True)
    assert not (out / META_JSON).exists()


@pytest.mark.parametrize("name", FILE_BASED)
def test_a_truncated_archive_is_a_clear_error_and_no_output(name, tmp_path):
    replica = tmp_path / "replica"
    dataset, checksums, archive = replica_and_first_archive(name, replica)
    victim = replica / archive
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(ChecksumError, match=archive.split("/")[-1]):
        dataset.download(tmp_path / "data", replica_dir=replica)
    assert not (tmp_path / "data" / "downloads" / dataset.source_name / "download.json").exists()
    # the same truncated archive, its checksum stated as if it were whole: extraction fails clearly
    state_as_genuine(replica, name, checksums, archive)
    assert_prepare_fails_with_no_output(dataset, replica, tmp_path / "data2", tmp_path / "m", "truncated or corrupt")


@pytest.mark.parametrize("name", FILE_BASED)
def test_replica_is_deterministic(name, tmp_path):
    dataset = datasets.load(name)
    assert dataset.write_replica(tmp_path / "a") == dataset.write_replica(tmp_path / "b")


@pytest.mark.parametrize("name", FILE_BASED)
def test_a_path_traversal_member_is_refused_and_no_output(name, tmp_path):
    """The replica's first archive gets a member ``../escape.txt`` (its checksum stated as if genuine):
    prepare refuses it before writing anything, and no manifest appears."""
    import tarfile
    import zipfile

    replica = tmp_path / "replica"
    dataset, checksums, archive = replica_and_first_archive(name, replica)
    victim = replica / archive
    if zipfile.is_zipfile(victim):
        with zipfile.ZipFile(victim, "a") as zf:
            zf.writestr("../escape.txt", b"evil")
    else:
        plain = tmp_path / "plain.tar"
        with tarfile.open(victim) as src, tarfile.open(plain, "w") as dst:
            for member in src.getmembers():
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            info = tarfile.TarInfo("../escape.txt")
            info.size = 4
            dst.addfile(info, io.BytesIO(b"evil"))
        victim.write_bytes(plain.read_bytes())  # an uncompressed tar under the .tar(.gz) name: still a tar
    state_as_genuine(replica, name, checksums, archive)
    assert_prepare_fails_with_no_output(dataset, replica, tmp_path / "data", tmp_path / "m",
                                        "would escape the destination")
    assert not list(tmp_path.rglob("escape.txt"))


@pytest.mark.parametrize("name", DERIVED)
def test_a_derived_dataset_names_a_registered_base_with_its_levels_and_protocol(name):
    dataset = datasets.load(name)
    base = datasets.load(dataset.derived_from)
    assert not base.derived_from and dataset.source_files() == []
    # the base's finest level stays the finest (coarser levels may be added: gldv2_hier_rebuilt)
    assert list(dataset.levels)[:len(base.levels)] == list(base.levels) and dataset.protocol == base.protocol
    assert dataset.facts()["source"] is None and dataset.facts()["derived_from"] == base.name
    assert dataset.facts()["derive_inputs"] == list(dataset.derive_inputs)
