"""Shared replica helpers (rankrepro.data.replicas): deterministic zip and tar archives that
the real extraction code reads; they import no dataset."""

import ast
import hashlib
import tarfile
import zipfile
from pathlib import Path

import pytest

from rankrepro.data import replicas, sources

MEMBERS = {"top/a.txt": b"alpha\n", "top/sub/b.JPG": b"\xff\xd8jpeg", "top/sub/deeper/c.csv": b"x,y\n1,2\n"}


@pytest.mark.parametrize("name", ["r.zip", "r.tar", "r.tar.gz", "r.tgz"])
def test_archives_are_deterministic_and_extract(tmp_path, name):
    write = replicas.write_zip if name.endswith(".zip") else replicas.write_tar
    first = write(tmp_path / "one" / name, MEMBERS)
    again = write(tmp_path / "two" / name, MEMBERS)
    assert first == again == "sha256:" + hashlib.sha256((tmp_path / "one" / name).read_bytes()).hexdigest()
    assert (tmp_path / "one" / f"{name}.sha256").read_text() == first + "\n"
    out = sources.extract(tmp_path / "one" / name, tmp_path / "out", checksum=first)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()
            and p.name != sources.EXTRACTED_MARKER} == MEMBERS
    assert (out / sources.EXTRACTED_MARKER).read_text() == f"{name}\n{first}\n"


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
    one = replicas.write_zip(tmp_path / "a" / "x.zip", {"top/v.txt": b"1"})
    two = replicas.write_zip(tmp_path / "b" / "x.zip", {"top/v.txt": b"2", "top/w.txt": b"new"})
    out = sources.extract(tmp_path / "a" / "x.zip", tmp_path / "out", checksum=one)
    (out / "top" / "mine.txt").write_text("kept while the archive is the same")
    sources.extract(tmp_path / "a" / "x.zip", out, checksum=one)
    sources.extract(tmp_path / "b" / "x.zip", out)  # no checksum: the marker is trusted
    assert (out / "top" / "mine.txt").exists()
    sources.extract(tmp_path / "b" / "x.zip", out, checksum=two)
    assert (out / "top" / "v.txt").read_bytes() == b"2" and not (out / "top" / "mine.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]


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
    assert not sources.is_verified(path, checksum) and sources.recorded_checksum(path) is None
    assert sources.reverify(path, checksum) == path
    assert sources.is_verified(path, checksum) and sources.recorded_checksum(path) == checksum
    assert not sources.is_verified(path, "md5:" + "0" * 32)
    path.write_bytes(b"payload, changed")
    assert not sources.is_verified(path, checksum)
    with pytest.raises(sources.ChecksumError, match=f"{path}.*expected {checksum}"):
        sources.reverify(path, checksum)
    with pytest.raises(FileNotFoundError, match="absent"):
        sources.reverify(tmp_path / "absent", checksum)
