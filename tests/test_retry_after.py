"""``Retry-After`` in both RFC 9110 forms (delta-seconds, HTTP-date); anything else is no hint: a
download then backs off as usual, and a failure names the URL and leaves no empty ``.part``."""

import hashlib
import time
from datetime import datetime, timezone

import pytest

from rankrepro.data import downloads
from rankrepro.data.downloads import download
from rankrepro.data.errors import DownloadError
from rankrepro.retry_after import parse_retry_after

PAYLOAD = bytes(range(256)) * 8
SHA = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()
NOW = datetime(2026, 10, 21, 7, 28, 0, tzinfo=timezone.utc).timestamp()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    monkeypatch.setattr(downloads, "BACKOFF_S", 0.01)


@pytest.mark.parametrize("value, seconds", [
    ("120", 120.0), (" 7 ", 7.0), ("0", 0.0),
    ("Wed, 21 Oct 2026 07:30:00 GMT", 120.0),     # IMF-fixdate, two minutes after NOW
    ("Wednesday, 21-Oct-26 07:28:30 GMT", 30.0),  # obsolete RFC 850 form
    ("Wed Oct 21 07:28:05 2026", 5.0),            # obsolete asctime form: no zone, GMT as HTTP means it
    ("Wed, 21 Oct 2026 07:27:00 GMT", 0.0),       # a past date: retry now
])
def test_both_rfc_forms_are_read(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5", "nan", "inf", "1e3", "Wed, 21 Oct 99999 07:28:00 GMT",
                                   "Wed, 32 Oct 2026 07:28:00 GMT"])
def test_anything_else_is_no_hint(value):
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize("hint", ["soon", "nan", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_503_with_a_hint_that_is_garbage_or_past_is_retried(http_server, tmp_path, hint):
    url = http_server.add("/f.bin", PAYLOAD, fail_first=1, fail_status=503, retry_after=hint)
    assert download(url, tmp_path / "f.bin", SHA, progress=False).read_bytes() == PAYLOAD
    assert [r.status for r in http_server.requests("/f.bin")] == [503, 200]


def test_a_503_that_outlives_the_retries_names_the_url_and_leaves_no_part(http_server, tmp_path):
    url = http_server.add("/f.bin", PAYLOAD, always_status=503, retry_after="soon")
    with pytest.raises(DownloadError, match="HTTP 503") as err:
        download(url, tmp_path / "f.bin", SHA, retries=1, progress=False)
    assert url in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_far_date_waits_only_up_to_the_cap(http_server, tmp_path, monkeypatch):
    monkeypatch.setattr(downloads, "RETRY_AFTER_CAP_S", 0.2)
    url = http_server.add("/f.bin", PAYLOAD, fail_first=1, fail_status=503, retry_after="Fri, 01 Jan 2100 00:00:00 GMT")
    start = time.monotonic()
    assert download(url, tmp_path / "f.bin", SHA, progress=False).read_bytes() == PAYLOAD
    assert 0.2 <= time.monotonic() - start < 5


def test_an_unexpected_error_leaves_no_empty_part(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(downloads, "_fetch_with_retries", broken)
    with pytest.raises(RuntimeError, match="boom"):
        download("http://127.0.0.1:9/f.bin", tmp_path / "f.bin", SHA, progress=False)
    assert list(tmp_path.iterdir()) == []
