"""Archives are verified once, re-verified (size + mtime, hash only on change) before they are
extracted again; final errors leave the CLI with their own exit status."""

import hashlib
import json
import os

import pytest

from datautil import replica_archive
from rankrepro.cli import main
from rankrepro.data import checksums, datasets
from rankrepro.data.checksums import VERIFIED_SUFFIX, file_digest, is_verified
from rankrepro.data.errors import EXIT_CHECKSUM, EXIT_DOWNLOAD
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.errors import ChecksumError, ManualDownloadRequired

SOP = datasets.load("sop")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    archive = tmp_path_factory.mktemp("replica") / "Stanford_Online_Products.zip"
    return archive, replica_archive("sop", archive, classes_per_super=1, images_per_class=(2, 2), image_size=8)


@pytest.fixture
def downloaded(replica, tmp_path):
    """(data_root, archive) after a download of the replica through file://."""
    archive, checksum = replica
    data_root = tmp_path / "data"
    record = SOP.download(data_root, url=archive.as_uri(), checksum=checksum)
    return data_root, record.with_name("Stanford_Online_Products.zip")


def sidecar(path):
    return json.loads(path.with_name(path.name + VERIFIED_SUFFIX).read_text())


def count_hashing(monkeypatch):
    """A list that grows by the path of every file hashed from now on."""
    hashed = []
    real = file_digest

    def spy(path, algo):
        hashed.append(str(path))
        return real(path, algo)

    monkeypatch.setattr(checksums, "file_digest", spy)
    return hashed


def test_download_records_the_verification(replica, downloaded):
    _, checksum = replica
    _, path = downloaded
    stat = path.stat()
    assert sidecar(path) == {"checksum": checksum, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def test_untouched_archive_is_not_hashed_again(replica, downloaded, tmp_path, monkeypatch):
    archive, checksum = replica
    data_root, path = downloaded
    hashed = count_hashing(monkeypatch)
    assert SOP.download(data_root, url=archive.as_uri(), checksum=checksum) == path.with_name("download.json")
    manifest = SOP.prepare(path, tmp_path / "m1", data_root=data_root, replica=True)
    SOP.prepare(path, tmp_path / "m2", data_root=data_root, replica=True)
    assert hashed == [] and len(manifest.table) > 0


def test_touched_but_equal_archive_is_hashed_once_and_recorded(downloaded, tmp_path, monkeypatch):
    data_root, path = downloaded
    os.utime(path, ns=(0, 10**18))
    hashed = count_hashing(monkeypatch)
    SOP.prepare(path, tmp_path / "m", data_root=data_root, replica=True)
    assert hashed == [str(path)]
    assert sidecar(path)["mtime_ns"] == 10**18
    SOP.prepare(path, tmp_path / "m", data_root=data_root, replica=True)
    assert hashed == [str(path)]


@pytest.mark.parametrize("extracted_before", [False, True])
def test_modified_archive_is_refused_by_prepare(replica, downloaded, tmp_path, extracted_before):
    _, checksum = replica
    data_root, path = downloaded
    if extracted_before:
        SOP.prepare(path, tmp_path / "m0", data_root=data_root, replica=True)
    with open(path, "ab") as f:
        f.write(b"tampered")
    with pytest.raises(ChecksumError) as err:
        SOP.prepare(path, tmp_path / "m", data_root=data_root, replica=True)
    actual = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    for part in (str(path), checksum, actual):
        assert part in str(err.value)
    assert not (tmp_path / "m").exists()
    assert (data_root / "sop").exists() == extracted_before


def test_archive_without_sidecar_is_checked_against_the_dataset_checksum(replica, tmp_path):
    archive, _ = replica
    copy = tmp_path / "Stanford_Online_Products.zip"
    copy.write_bytes(archive.read_bytes())  # no .verified, no .sha256 beside it: SOP's published md5
    with pytest.raises(ChecksumError, match=SOP.source_files()[0].checksum):
        SOP.prepare(copy, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    # a generated replica states its checksum beside it
    manifest = SOP.prepare(archive, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert manifest.meta["replica"] is True


def test_changed_archive_is_extracted_anew(tmp_path):
    """An archive with another checksum (a new download, a regenerated replica) replaces the old extraction."""
    one, two = tmp_path / "one" / "a.zip", tmp_path / "two" / "a.zip"
    replica_archive("sop", one, classes_per_super=1, images_per_class=(2, 2), image_size=8, seed=1)
    replica_archive("sop", two, classes_per_super=1, images_per_class=(3, 3), image_size=8, seed=2)
    data_root = tmp_path / "data"
    first = SOP.prepare(one, tmp_path / "m1", data_root=data_root, replica=True)
    second = SOP.prepare(two, tmp_path / "m2", data_root=data_root, replica=True)
    assert first.root == second.root
    assert len(second.table) == 24 * 3 and all(p.is_file() for p in second.paths())
    assert sorted(p.name for p in data_root.iterdir()) == ["sop"]  # no temporary left


CHECKSUM = "sha256:" + "ab" * 32


class Licensed(Dataset):
    title = "Licensed"
    files = (SourceFile("licensed.tar", checksum=CHECKSUM, size=2_000_000),
             SourceFile("labels/list.txt", extract=False))
    manual = True
    how_to_get = "sign the licence at https://example.org"
    top, marker = "Licensed", "list.txt"


def test_manual_dataset_says_where_to_put_what(tmp_path):
    dataset = Licensed()
    dataset.name = "licensed"
    with pytest.raises(ManualDownloadRequired) as err:
        dataset.download(tmp_path)
    message = str(err.value)
    folder = tmp_path / "downloads" / "licensed"
    for part in ("licensed", "https://example.org", str(folder / "licensed.tar"), CHECKSUM, "2,000,000 bytes",
                 str(folder / "labels" / "list.txt"), "no published checksum",
                 "datasets.licensed.extracted", "Licensed/list.txt"):
        assert part in message
    assert not (folder / "download.json").exists()
    assert dataset.facts()["manual"] is True and dataset.facts()["files"] == 2
    # the list arrives; the archive is still missing: only it is named
    (folder / "labels").mkdir(parents=True)
    (folder / "labels" / "list.txt").write_text("a 1\n")
    with pytest.raises(ManualDownloadRequired) as err:
        dataset.download(tmp_path)
    assert "licensed.tar" in str(err.value) and "labels/list.txt" not in str(err.value)


def test_cli_checksum_mismatch_exits_3_naming_file_url_and_digests(replica, tmp_path, capsys):
    archive, _ = replica
    wrong = "md5:" + "0" * 32
    with pytest.raises(SystemExit) as exit_:
        main(["download", "sop", "--data-root", str(tmp_path), "--url", archive.as_uri(), "--checksum", wrong])
    assert exit_.value.code == EXIT_CHECKSUM == 3
    err = capsys.readouterr().err
    actual = "md5:" + hashlib.md5(archive.read_bytes()).hexdigest()
    for part in ("ChecksumError", "Stanford_Online_Products.zip", archive.as_uri(), wrong, actual):
        assert part in err
    assert not (tmp_path / "downloads" / "sop" / "Stanford_Online_Products.zip").exists()


def test_cli_download_and_prepare_exit_codes(replica, http_server, tmp_path, capsys):
    data_root = tmp_path / "data"
    assert main(["replica", "sop", "--out-dir", str(tmp_path / "rep")]) == 0
    archive = tmp_path / "rep" / "Stanford_Online_Products.zip"
    assert main(["download", "sop", "--data-root", str(data_root), "--replica-dir", str(archive.parent)]) == 0
    path = data_root / "downloads" / "sop" / "Stanford_Online_Products.zip"
    assert is_verified(path, archive.with_name(archive.name + ".sha256").read_text().strip())
    record = data_root / "downloads" / "sop" / "download.json"
    assert json.loads(record.read_text())["files"][path.name]["size"] == path.stat().st_size
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", "sop", "--source", str(path), "--data-root", str(data_root), "--out", str(tmp_path / "m"),
              "--replica"])
    assert exit_.value.code == 3 and str(path) in capsys.readouterr().err
    url = http_server.url("/absent.zip")
    with pytest.raises(SystemExit) as exit_:
        main(["download", "sop", "--data-root", str(tmp_path / "other"), "--url", url])
    assert exit_.value.code == EXIT_DOWNLOAD == 5 and "HTTP 404" in capsys.readouterr().err
