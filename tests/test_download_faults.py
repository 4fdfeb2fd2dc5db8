"""Downloads that keep what arrived: a connection dropped mid-chunk resumes from the bytes already
written; several processes downloading one file take turns instead of tripping over one another."""

import hashlib
import threading

import pytest

from rankrepro.data import downloads
from rankrepro.data.downloads import download

MIB = 1 << 20
PAYLOAD = bytes(range(256)) * (10 * MIB // 256 // 4)  # 2.5 MiB
SHA = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(downloads, "BACKOFF_S", 0.01)


def test_connection_dropped_before_each_chunk_completes_still_finishes(http_server, tmp_path):
    url = http_server.add("/f.bin", PAYLOAD, truncate_at=MIB // 2)  # every reply stops after 0.5 MiB
    dest = download(url, tmp_path / "f.bin", SHA, retries=6, progress=False)  # default 1 MiB chunks
    assert dest.read_bytes() == PAYLOAD
    ranges = [r.headers.get("Range") for r in http_server.requests("/f.bin")]
    assert ranges == [None] + [f"bytes={n * MIB // 2}-" for n in range(1, 5)]


def test_concurrent_downloads_of_one_file_take_turns(http_server, tmp_path):
    url = http_server.add("/f.bin", PAYLOAD)
    start, results = threading.Barrier(4), {}

    def one(i):
        start.wait()
        try:
            results[i] = download(url, tmp_path / "f.bin", SHA, chunk_size=4096, progress=False)
        except Exception as err:  # noqa: BLE001  reported below
            results[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: tmp_path / "f.bin" for i in range(4)}
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["f.bin"]
