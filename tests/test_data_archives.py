"""Shared replica helpers (rankrepro.data.replicas): deterministic zip and tar archives that
the real extraction code reads; they import no dataset."""

import ast
import hashlib
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from rankrepro.data import archives, replicas
from rankrepro.data.archives import EXTRACTED_MARKER, _extract_into, extract, is_extracted
from rankrepro.data.checksums import ChecksumLock, is_verified, recorded_checksum, reverify
from rankrepro.data.errors import ChecksumError

MEMBERS = {"top/a.txt": b"alpha\n", "top/sub/b.JPG": b"\xff\xd8jpeg", "top/sub/deeper/c.csv": b"x,y\n1,2\n"}


@pytest.mark.parametrize("name", ["r.zip", "r.tar", "r.tar.gz", "r.tgz"])
def test_archives_are_deterministic_and_extract(tmp_path, name):
    write = replicas.write_zip if name.endswith(".zip") else replicas.write_tar
    first = write(tmp_path / "one" / name, MEMBERS)
    again = write(tmp_path / "two" / name, MEMBERS)
    assert first == again == "sha256:" + hashlib.sha256((tmp_path / "one" / name).read_bytes()).hexdigest()
    out = extract(tmp_path / "one" / name, tmp_path / "out", checksum=first)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()
            and EXTRACTED_MARKER not in p.parts} == MEMBERS
    marker = json.loads((out / EXTRACTED_MARKER / name).read_text())
    assert marker["archive"] == name and marker["checksum"] == first
    assert set(marker["members"]) >= set(MEMBERS)


def test_archives_list_parent_folders_first(tmp_path):
    replicas.write_zip(tmp_path / "r.zip", MEMBERS)
    replicas.write_tar(tmp_path / "r.tgz", MEMBERS)
    folders = ["top/", "top/sub/", "top/sub/deeper/"]
    with zipfile.ZipFile(tmp_path / "r.zip") as zf:
        assert zf.namelist() == folders + list(MEMBERS)
        assert zf.getinfo("top/sub/b.JPG").compress_type == zipfile.ZIP_STORED
    with tarfile.open(tmp_path / "r.tgz") as tf:
        assert tf.getnames() == [f.rstrip("/") for f in folders] + list(MEMBERS)
        assert {m.mtime for m in tf.getmembers()} == {0}


def test_extract_keeps_a_copy_of_the_same_archive_and_replaces_another(tmp_path):
    one = replicas.write_zip(tmp_path / "a" / "x.zip", {"top/v.txt": b"1", "top/old.txt": b"only in one"})
    two = replicas.write_zip(tmp_path / "b" / "x.zip", {"top/v.txt": b"2", "top/w.txt": b"new"})
    out = extract(tmp_path / "a" / "x.zip", tmp_path / "out", checksum=one)
    (out / "top" / "mine.txt").write_text("not the archive's")
    (out / "top" / "v.txt").write_text("edited")
    extract(tmp_path / "a" / "x.zip", out, checksum=one)
    assert (out / "top" / "v.txt").read_text() == "edited"  # same archive: not extracted again
    extract(tmp_path / "b" / "x.zip", out)  # no checksum: the marker is trusted
    assert (out / "top" / "old.txt").exists()
    extract(tmp_path / "b" / "x.zip", out, checksum=two)
    assert (out / "top" / "v.txt").read_bytes() == b"2" and (out / "top" / "w.txt").read_bytes() == b"new"
    assert not (out / "top" / "old.txt").exists()  # the old archive's members went
    assert (out / "top" / "mine.txt").exists()  # what no archive wrote stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]


def test_archives_share_a_tree_each_with_its_marker(tmp_path):
    """GLDv2's shards all extract into train/: one marker per archive, written last."""
    a = replicas.write_tar(tmp_path / "images_000.tar", {"0/0/1/001.jpg": b"a"})
    b = replicas.write_tar(tmp_path / "images_001.tar", {"0/0/2/002.jpg": b"b", "1/0/0/100.jpg": b"c"})
    tree = tmp_path / "tree" / "train"
    extract(tmp_path / "images_000.tar", tree, checksum=a)
    extract(tmp_path / "images_001.tar", tree, checksum=b)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*.jpg")) == ["0/0/1/001.jpg", "0/0/2/002.jpg",
                                                                            "1/0/0/100.jpg"]
    assert is_extracted("images_000.tar", tree, a) and is_extracted("images_001.tar", tree, b)
    assert not is_extracted("images_001.tar", tree, a)


def test_interrupted_extraction_is_redone(tmp_path, monkeypatch):
    checksum = replicas.write_zip(tmp_path / "x.zip", {"top/a.txt": b"a", "top/b.txt": b"b"})

    def dies(archive, directory):
        (directory / "top").mkdir(parents=True)
        (directory / "top" / "a.txt").write_bytes(b"half")
        raise KeyboardInterrupt

    real = _extract_into
    monkeypatch.setattr(archives, "_extract_into", dies)
    with pytest.raises(KeyboardInterrupt):
        extract(tmp_path / "x.zip", tmp_path / "out", checksum=checksum)
    assert not is_extracted("x.zip", tmp_path / "out")
    monkeypatch.setattr(archives, "_extract_into", real)
    extract(tmp_path / "x.zip", tmp_path / "out", checksum=checksum)
    assert (tmp_path / "out" / "top" / "a.txt").read_bytes() == b"a"


@pytest.mark.parametrize("name", ["t.zip", "t.tar.gz"])
def test_truncated_archive_is_a_clear_error_and_leaves_no_marker(tmp_path, name):
    write = replicas.write_zip if name.endswith(".zip") else replicas.write_tar
    write(tmp_path / name, {f"top/{i}.bin": bytes(range(256)) * 64 for i in range(8)})
    data = (tmp_path / name).read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"{name}.*truncated or corrupt"):
        extract(tmp_path / name, tmp_path / "out")
    assert not is_extracted(name, tmp_path / "out")


@pytest.mark.parametrize("member", ["../escape.txt", "/abs.txt", "top/../../escape.txt"])
def test_path_traversal_member_is_refused_before_writing(tmp_path, member):
    import zipfile

    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("top/fine.txt", b"ok")
        zf.writestr(member, b"evil")
    with pytest.raises(ValueError, match="would escape the destination"):
        extract(tmp_path / "evil.zip", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.txt").exists()


def test_tar_link_member_is_refused(tmp_path):
    import io
    import tarfile

    with tarfile.open(tmp_path / "links.tar", "w") as tf:
        info = tarfile.TarInfo("top/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
        data = tarfile.TarInfo("top/a.txt")
        data.size = 1
        tf.addfile(data, io.BytesIO(b"a"))
    with pytest.raises(ValueError, match="is a link"):
        extract(tmp_path / "links.tar", tmp_path / "out")


def test_someone_elses_folder_is_not_extracted_into(tmp_path):
    replicas.write_zip(tmp_path / "x.zip", {"top/a.txt": b"a"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "theirs.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not extracted by rankrepro"):
        extract(tmp_path / "x.zip", tmp_path / "out")


def test_checksum_lock_records_once_and_is_shared(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"data")
    lock = ChecksumLock(tmp_path)
    assert lock.get("src/f.bin") is None
    lock.record({"src/f.bin": tmp_path / "f.bin"})
    recorded = lock.get("src/f.bin")
    assert recorded == "sha256:" + hashlib.sha256(b"data").hexdigest()
    (tmp_path / "f.bin").write_bytes(b"changed")
    lock.record({"src/f.bin": tmp_path / "f.bin"})  # never replaced
    assert ChecksumLock(tmp_path).get("src/f.bin") == recorded


def test_replicas_module_imports_no_dataset():
    """The shared helpers stay below the datasets (no import circle)."""
    tree = ast.parse(Path(replicas.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and "datasets" in m]
    imported_names = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert "datasets" not in imported_names


def test_reverify(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"payload")
    checksum = "md5:" + hashlib.md5(b"payload").hexdigest()
    assert not is_verified(path, checksum) and recorded_checksum(path) is None
    assert reverify(path, checksum) == path
    assert is_verified(path, checksum) and recorded_checksum(path) == checksum
    assert not is_verified(path, "md5:" + "0" * 32)
    path.write_bytes(b"payload, changed")
    assert not is_verified(path, checksum)
    with pytest.raises(ChecksumError, match=f"{path}.*expected {checksum}"):
        reverify(path, checksum)
    with pytest.raises(FileNotFoundError, match="absent"):
        reverify(tmp_path / "absent", checksum)
