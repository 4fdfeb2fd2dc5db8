"""Where an expected checksum comes from: the published one always wins over the sidecars beside
an archive (``.verified``, ``.sha256``) in a real prepare; ``checksums.lock.json`` is read
strictly and named when a file does not match what it recorded."""

import hashlib
import json
import os
import shutil

import pytest

from datautil import replica_archive
from rankrepro.data import checksums, datasets
from rankrepro.data.checksums import ChecksumLock, record_verified
from rankrepro.data.datasets.base import SourceFile
from rankrepro.data.datasets.sop import ARCHIVE, SOP

PUBLISHED = datasets.load("sop").source_files()[0].checksum


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    archive = tmp_path_factory.mktemp("replica") / ARCHIVE
    return archive, replica_archive("sop", archive, classes_per_super=1, images_per_class=(2, 2), image_size=8)


def copy_archive(replica, folder, *sidecars):
    """The replica archive copied into ``folder`` with the named sidecars (``.sha256``) beside it."""
    archive, _ = replica
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("", *sidecars):
        shutil.copy2(f"{archive}{suffix}", folder / f"{archive.name}{suffix}")
    return folder / archive.name


def dataset(checksum=None, url=None, counts=False):
    """SOP with one source file of the given checksum/url (no published counts unless ``counts``)."""
    class Variant(SOP):
        files = (SourceFile(ARCHIVE, url=url, checksum=checksum),)
        expected_counts = SOP.expected_counts if counts else {}

    ds = Variant()
    ds.name = "sop"
    return ds


def count_hashing(monkeypatch):
    hashed, real = [], checksums.file_digest
    monkeypatch.setattr(checksums, "file_digest", lambda path, algo: hashed.append(str(path)) or real(path, algo))
    return hashed


# -- sidecars beside an archive ---------------------------------------------------------------------


def test_real_prepare_ignores_a_stated_sha256(replica, tmp_path):
    archive = copy_archive(replica, tmp_path / "in", ".sha256")
    with pytest.raises(checksums.ChecksumError, match=PUBLISHED):
        datasets.load("sop").prepare(archive, tmp_path / "m", data_root=tmp_path / "data")
    assert not (tmp_path / "data" / "sop").exists()


def test_real_prepare_ignores_a_forged_verified_sidecar(replica, tmp_path):
    archive = copy_archive(replica, tmp_path / "in")
    record_verified(archive, "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest())
    with pytest.raises(checksums.ChecksumError, match=PUBLISHED):
        datasets.load("sop").prepare(archive, tmp_path / "m", data_root=tmp_path / "data")


def test_a_sidecar_for_the_published_checksum_spares_the_hash_until_the_file_changes(replica, tmp_path, monkeypatch):
    _, checksum = replica
    archive = copy_archive(replica, tmp_path / "in")
    ds = dataset(checksum)
    record_verified(archive, checksum)
    hashed = count_hashing(monkeypatch)
    ds.prepare(archive, tmp_path / "m", data_root=tmp_path / "data")
    assert hashed == []
    os.utime(archive, ns=(0, 10**18))
    ds.prepare(archive, tmp_path / "m", data_root=tmp_path / "data")
    assert hashed == [str(archive)]


def test_replica_accepts_a_sha256sum_format_file(replica, tmp_path):
    _, checksum = replica
    archive = copy_archive(replica, tmp_path / "in")
    archive.with_name(archive.name + ".sha256").write_text(f"{checksum.split(':')[1]}  {archive.name}\n")
    manifest = datasets.load("sop").prepare(archive, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert len(manifest.table) > 0


def test_replica_with_an_unreadable_sha256_file_names_it(replica, tmp_path):
    archive = copy_archive(replica, tmp_path / "in")
    stated = archive.with_name(archive.name + ".sha256")
    stated.write_text("not a checksum at all\n")
    with pytest.raises(ValueError) as err:
        datasets.load("sop").prepare(archive, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert str(stated) in str(err.value) and "sha256sum" in str(err.value)


# -- checksums.lock.json ----------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["sha256:" + "0" * 64, {"size": 3}, {"checksum": "crc:1"}, None])
def test_lock_entry_that_is_not_a_record_is_an_error_naming_file_and_key(tmp_path, entry):
    (tmp_path / ChecksumLock.FILE).write_text(json.dumps({"sop/x.zip": entry}))
    with pytest.raises(ValueError) as err:
        ChecksumLock(tmp_path).get("sop/x.zip")
    assert str(tmp_path / ChecksumLock.FILE) in str(err.value) and "'sop/x.zip'" in str(err.value)
    (tmp_path / "x.zip").write_bytes(b"x")
    with pytest.raises(ValueError, match="sop/x.zip"):
        ChecksumLock(tmp_path).record({"sop/x.zip": tmp_path / "x.zip"})


def test_lock_file_that_is_not_a_mapping_is_an_error_naming_it(tmp_path):
    (tmp_path / ChecksumLock.FILE).write_text("[]")
    with pytest.raises(ValueError, match=f"{tmp_path / ChecksumLock.FILE}.*not a JSON object"):
        ChecksumLock(tmp_path).get("sop/x.zip")


def lock_wrong_checksum(data_root):
    data_root.mkdir(parents=True, exist_ok=True)
    (data_root / ChecksumLock.FILE).write_text(json.dumps(
        {f"sop/{ARCHIVE}": {"checksum": "sha256:" + "0" * 64, "size": 1, "recorded": "2024-01-01T00:00:00Z"}}))


def test_download_mismatch_says_the_expected_checksum_comes_from_the_lock_file(replica, tmp_path):
    archive, _ = replica
    data_root = tmp_path / "data"
    lock_wrong_checksum(data_root)
    with pytest.raises(checksums.ChecksumError) as err:
        dataset(url=archive.as_uri()).download(data_root)
    assert str(data_root / ChecksumLock.FILE) in str(err.value) and f"sop/{ARCHIVE}" in str(err.value)


@pytest.mark.parametrize("source", ["download.json", "archive"])
def test_prepare_mismatch_says_the_expected_checksum_comes_from_the_lock_file(replica, tmp_path, source):
    archive, _ = replica
    data_root = tmp_path / "data"
    ds = dataset(url=archive.as_uri())
    record = ds.download(data_root)  # nothing published or recorded yet: trusted on first use
    ds.prepare(record, tmp_path / "m", data_root=data_root)
    assert ChecksumLock(data_root).get(f"sop/{ARCHIVE}")
    with open(record.with_name(ARCHIVE), "ab") as f:
        f.write(b"tampered")
    with pytest.raises(checksums.ChecksumError) as err:
        ds.prepare(record if source == "download.json" else record.with_name(ARCHIVE), tmp_path / "m2",
                   data_root=data_root)
    assert str(data_root / ChecksumLock.FILE) in str(err.value) and f"sop/{ARCHIVE}" in str(err.value)
