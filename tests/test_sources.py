"""Downloads against a real loopback HTTP server, extraction, manual files, placing a file (link or copy)."""

import hashlib
import io
import os
import socket
import tarfile
import time
import zipfile

import pytest

from rankrepro.data import downloads
from rankrepro.data.archives import extract, is_extracted
from rankrepro.data.checksums import verify
from rankrepro.data.downloads import download
from rankrepro.data.errors import ChecksumError, DownloadError, ManualDownloadRequired
from rankrepro.data.sources import place, require_files
from rankrepro.io import link_or_copy

PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes
SHA = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()
MD5 = "md5:" + hashlib.md5(PAYLOAD).hexdigest()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    """Shorten the retry backoff (not Retry-After) so the suite stays quick."""
    monkeypatch.setattr(downloads, "BACKOFF_S", 0.01)


def fetch(url, dest, checksum=SHA, **kw):
    kw.setdefault("progress", False)
    return download(url, dest, checksum, chunk_size=1000, **kw)


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("checksum", [SHA, MD5])
def test_download_verifies_and_renames(http_server, tmp_path, checksum, capsys):
    url = http_server.add("/data.bin", PAYLOAD)
    dest = fetch(url, tmp_path / "out" / "data.bin", checksum, progress=True)
    assert dest.read_bytes() == PAYLOAD
    assert verify(dest, checksum)
    assert leftovers(dest.parent) == ["data.bin"]
    assert "data.bin" in capsys.readouterr().err


def test_file_url(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    dest = fetch(src.as_uri(), tmp_path / "copy.bin")
    assert dest.read_bytes() == PAYLOAD


def test_file_url_resumes_and_rejects_bad_checksum(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    (tmp_path / "copy.bin.part").write_bytes(PAYLOAD[:3000])
    assert fetch(src.as_uri(), tmp_path / "copy.bin").read_bytes() == PAYLOAD
    with pytest.raises(ChecksumError):
        fetch(src.as_uri(), tmp_path / "other.bin", "md5:" + "0" * 32)


def test_missing_file_url(tmp_path):
    url = (tmp_path / "absent.bin").as_uri()
    with pytest.raises(DownloadError, match="absent.bin"):
        fetch(url, tmp_path / "x.bin")


def test_resume_from_part_with_range(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD)
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:4000])
    assert fetch(url, dest).read_bytes() == PAYLOAD
    [req] = http_server.requests("/data.bin")
    assert req.headers["Range"] == "bytes=4000-"
    assert (req.status, req.sent) == (206, len(PAYLOAD) - 4000)


def test_server_ignoring_range_restarts_from_zero(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, ranges=False)
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(b"garbage that is no prefix")
    assert fetch(url, dest).read_bytes() == PAYLOAD
    [req] = http_server.requests("/data.bin")
    assert "Range" in req.headers and req.status == 200


def test_stale_part_longer_than_file_restarts(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD)
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD + b"extra")
    assert fetch(url, tmp_path / "data.bin").read_bytes() == PAYLOAD
    assert [r.status for r in http_server.requests("/data.bin")] == [416, 200]


def test_truncated_body_resumes_with_range(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, truncate_at=4000)
    assert fetch(url, tmp_path / "data.bin").read_bytes() == PAYLOAD
    reqs = http_server.requests("/data.bin")
    assert [r.headers.get("Range") for r in reqs] == [None, "bytes=4000-", "bytes=8000-"]
    assert sum(r.sent for r in reqs) == len(PAYLOAD)


def test_truncated_body_that_stays_truncated(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, truncate_at=1000, ranges=False)
    dest = tmp_path / "data.bin"
    with pytest.raises(DownloadError, match=f"received 1000 of {len(PAYLOAD)} bytes") as err:
        fetch(url, dest, retries=1)
    assert url in str(err.value)
    assert len(http_server.requests("/data.bin")) == 2
    assert not dest.exists()
    assert leftovers(tmp_path) == ["data.bin.part"]  # kept for a later resume, never at dest


def test_wrong_checksum(http_server, tmp_path):
    url = http_server.add("/data.bin", b"<html>not the file</html>")
    with pytest.raises(ChecksumError) as err:
        fetch(url, tmp_path / "data.bin")
    message = str(err.value)
    actual = hashlib.sha256(b"<html>not the file</html>").hexdigest()
    for part in ("data.bin", url, SHA, actual, "HTML page"):
        assert part in message
    assert leftovers(tmp_path) == []


def test_permanent_500(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, always_status=500)
    with pytest.raises(DownloadError, match="HTTP 500") as err:
        fetch(url, tmp_path / "data.bin", retries=2)
    assert url in str(err.value) and "3 attempts" in str(err.value)
    assert len(http_server.requests("/data.bin")) == 3
    assert leftovers(tmp_path) == []


def test_transient_500_then_success(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, fail_first=2)
    assert fetch(url, tmp_path / "data.bin").read_bytes() == PAYLOAD
    assert [r.status for r in http_server.requests("/data.bin")] == [500, 500, 200]


def test_404_fails_at_once(http_server, tmp_path):
    url = http_server.url("/absent.bin")
    with pytest.raises(DownloadError, match="HTTP 404") as err:
        fetch(url, tmp_path / "data.bin")
    assert url in str(err.value)
    assert len(http_server.requests("/absent.bin")) == 1


def test_429_honours_retry_after(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD, fail_first=1, fail_status=429, retry_after="1")
    start = time.monotonic()
    assert fetch(url, tmp_path / "data.bin").read_bytes() == PAYLOAD
    assert time.monotonic() - start >= 1.0
    assert [r.status for r in http_server.requests("/data.bin")] == [429, 200]


def test_redirect_is_followed(http_server, tmp_path):
    http_server.add("/real.bin", PAYLOAD)
    url = http_server.add("/moved.bin", redirect_to="/real.bin")
    assert fetch(url, tmp_path / "data.bin").read_bytes() == PAYLOAD
    assert [r.status for r in http_server.log] == [302, 200]


def test_connection_refused(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/data.bin"
    with pytest.raises(DownloadError, match="connection failed") as err:
        fetch(url, tmp_path / "data.bin", retries=1)
    assert url in str(err.value)


def test_existing_dest_is_kept_or_replaced(http_server, tmp_path):
    url = http_server.add("/data.bin", PAYLOAD)
    dest = tmp_path / "data.bin"
    dest.write_bytes(PAYLOAD)
    fetch(url, dest)
    assert http_server.requests("/data.bin") == []
    dest.write_bytes(b"stale")
    assert fetch(url, dest).read_bytes() == PAYLOAD
    assert len(http_server.requests("/data.bin")) == 1


def test_bad_checksum_string(tmp_path):
    with pytest.raises(ValueError, match="crc32"):
        fetch("http://127.0.0.1:1/x", tmp_path / "x", "crc32:abc")


def make_zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def make_tgz(path, members):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("make", [make_zip, make_tgz])
def test_extract_once_with_marker(tmp_path, make):
    archive = make(tmp_path / "a.arc", {"top/x.txt": b"x", "top/sub/y.txt": b"y"})
    out = extract(archive, tmp_path / "out")
    assert (out / "top" / "sub" / "y.txt").read_bytes() == b"y"
    assert is_extracted("a.arc", out)
    (out / "top" / "x.txt").write_bytes(b"edited")
    extract(archive, out)  # marker present: skipped
    assert (out / "top" / "x.txt").read_bytes() == b"edited"
    assert leftovers(tmp_path) == ["a.arc", "out"]


@pytest.mark.parametrize("make", [make_zip, make_tgz])
@pytest.mark.parametrize("evil", ["../evil.txt", "top/../../evil.txt", "/abs/evil.txt"])
def test_extract_refuses_path_traversal(tmp_path, make, evil):
    archive = make(tmp_path / "a.arc", {"top/ok.txt": b"ok", evil: b"evil"})
    with pytest.raises(ValueError, match="escape"):
        extract(archive, tmp_path / "sub" / "out")
    assert leftovers(tmp_path) == ["a.arc"]  # refused before anything is written


def test_extract_refuses_unmarked_existing_dir(tmp_path):
    archive = make_zip(tmp_path / "a.zip", {"x.txt": b"x"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "theirs.txt").write_text("someone else's")
    with pytest.raises(FileExistsError, match="out"):
        extract(archive, tmp_path / "out")


def test_require_files_lists_every_problem(tmp_path):
    (tmp_path / "good.bin").write_bytes(PAYLOAD)
    (tmp_path / "bad.bin").write_bytes(b"bad")
    files = {"good.bin": (SHA, None), "bad.bin": (MD5, 3), "sub/missing.tar": ("sha256:" + "ab" * 32, 123_456),
             "nochecksum.txt": (None, None)}
    with pytest.raises(ManualDownloadRequired) as err:
        require_files(tmp_path, files, "gldv2", "sign the licence at https://example.org")
    message = str(err.value)
    assert "good.bin" not in message
    assert "gldv2" in message and "https://example.org" in message
    assert f"{tmp_path / 'bad.bin'}" in message and MD5 in message
    assert "md5:" + hashlib.md5(b"bad").hexdigest() in message
    assert f"{tmp_path / 'sub' / 'missing.tar'}" in message and "sha256:" + "ab" * 32 in message
    assert "123,456 bytes" in message
    assert f"{tmp_path / 'nochecksum.txt'}" in message and "no published checksum" in message
    del files["bad.bin"], files["sub/missing.tar"], files["nochecksum.txt"]
    assert require_files(tmp_path, files, "gldv2", "") == tmp_path


# -- rankrepro.io.link_or_copy (sources.place; engine.batch.publish) -----------------------------------


def test_link_or_copy_links_when_it_can(tmp_path):
    source = tmp_path / "a.bin"
    source.write_bytes(PAYLOAD)
    dest = tmp_path / "sub" / "b.bin"
    dest.parent.mkdir()
    dest.write_bytes(b"old")
    assert link_or_copy(source, dest) == dest
    assert dest.read_bytes() == PAYLOAD and os.path.samefile(source, dest)
    assert leftovers(dest.parent) == ["b.bin"]


def test_link_or_copy_copies_when_os_link_fails(tmp_path, monkeypatch):
    def cross_device(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    source = tmp_path / "a.bin"
    source.write_bytes(PAYLOAD)
    os.utime(source, (1_000_000, 1_000_000))
    dest = link_or_copy(source, tmp_path / "new" / "b.bin")  # makes the folder
    assert dest.read_bytes() == PAYLOAD and not os.path.samefile(source, dest)
    assert dest.stat().st_mtime == 1_000_000  # copy2: the times a link would have
    assert leftovers(dest.parent) == ["b.bin"]


def test_link_or_copy_leaves_no_temporary_file_when_the_copy_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", lambda src, dst: (_ for _ in ()).throw(OSError("no links")))
    with pytest.raises(FileNotFoundError):
        link_or_copy(tmp_path / "missing.bin", tmp_path / "out" / "b.bin")
    assert leftovers(tmp_path / "out") == []


def test_link_or_copy_keeps_an_identical_file_only_when_asked(tmp_path):
    source, dest = tmp_path / "a.bin", tmp_path / "b.bin"
    source.write_bytes(PAYLOAD)
    dest.write_bytes(PAYLOAD)
    inode = dest.stat().st_ino
    assert link_or_copy(source, dest, keep_identical=True) == dest
    assert dest.stat().st_ino == inode  # kept
    assert link_or_copy(source, dest).stat().st_ino == source.stat().st_ino  # replaced by the link
    dest.unlink()
    dest.write_bytes(PAYLOAD[:-1] + b"x")  # same size, other bytes
    assert link_or_copy(source, dest, keep_identical=True).read_bytes() == PAYLOAD


def test_place_keeps_an_identical_file_and_replaces_a_stale_one(tmp_path):
    source, dest = tmp_path / "x.csv", tmp_path / "tree" / "x.csv"
    source.write_bytes(PAYLOAD)
    dest.parent.mkdir()
    dest.write_bytes(PAYLOAD)
    inode = dest.stat().st_ino
    assert place(source, dest).stat().st_ino == inode
    dest.write_bytes(b"stale")
    assert place(source, dest).read_bytes() == PAYLOAD
    assert leftovers(dest.parent) == ["x.csv"]
