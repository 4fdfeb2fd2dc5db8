"""Verified downloads (http, https, file URLs).

A download is complete only once its checksum matches (:mod:`rankrepro.data.checksums`); until
then it lives in ``<dest>.part`` and nothing exists at ``dest``. Every byte received is kept: a
dropped connection resumes from the end of ``<dest>.part`` (HTTP Range); a failure leaves a ``.part``
only when it holds bytes to resume from. Transient failures are retried with backoff; a 429 or 503's
``Retry-After`` (seconds or an HTTP-date, :mod:`rankrepro.retry_after`) replaces the backoff, capped
at :data:`RETRY_AFTER_CAP_S`, and one that is neither form is ignored. What outlives the retries is a
:class:`~rankrepro.data.errors.DownloadError` naming the URL. Processes downloading the same ``dest`` take turns
on an exclusive ``flock`` of ``<dest>.part``; one that waited finds ``dest`` complete and returns it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse
from urllib.request import url2pathname

import requests
import urllib3
from tqdm import tqdm

from rankrepro import __version__
from rankrepro.data import checksums
from rankrepro.data.errors import ChecksumError, DownloadError
from rankrepro.retry_after import parse_retry_after

__all__ = ["download", "BACKOFF_S", "RETRY_AFTER_CAP_S", "HEADERS"]


BACKOFF_S = 0.25  # first retry delay; doubles with each further retry
RETRY_AFTER_CAP_S = 60.0  # longest Retry-After wait honoured (a server may ask for hours)
HEADERS = {"Accept-Encoding": "identity", "User-Agent": f"rankrepro/{__version__}"}


class _Retryable(Exception):
    """A transient failure: ``wait`` is the delay the server asked for (seconds),
    ``restart`` says the ``.part`` file is no prefix of the body and must go."""

    def __init__(self, reason: str, wait: float | None = None, restart: bool = False):
        super().__init__(reason)
        self.wait = wait
        self.restart = restart


@dataclass
class _Body:
    """A response body: its chunks, the byte offset they start at, the full size if known."""

    chunks: Iterator[bytes]
    offset: int
    total: int | None


def download(
    url: str,
    dest: str | Path,
    checksum: str | None,
    *,
    retries: int = 3,
    timeout: float = 60,
    chunk_size: int = 1 << 20,
    progress: bool = True,
) -> Path:
    """Download ``url`` (http, https or file) to ``dest`` and verify ``checksum``.

    Returns at once when ``dest`` already matches. The body goes to ``<dest>.part``,
    resumed with an HTTP Range request from every byte already received (a killed job, a
    dropped connection); transient failures (connection errors, truncated bodies, 5xx,
    429) are retried ``retries`` times. ``dest`` appears, by rename, only once the
    checksum matches. Another process downloading the same ``dest`` waits for this one
    (a lock on ``<dest>.part``) and then returns the finished ``dest``.

    ``checksum`` None: nobody publishes one. The body is complete when it has the
    length the server stated; the caller records its sha256 once the data is verified
    otherwise (:class:`ChecksumLock`, trust on first use). An existing ``dest`` is kept.
    """
    dest = Path(dest)
    algo, expected = (None, None) if checksum is None else checksums.parse_checksum(checksum)
    if _complete(dest, algo, expected):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    with _exclusive(part):
        if _complete(dest, algo, expected):  # another process finished it while this one waited
            _remove_if_empty(part)
            return dest
        try:
            _fetch_with_retries(url, part, retries, timeout, chunk_size, progress)
        except BaseException:  # bytes received stay to resume from; an empty .part is no state
            _remove_if_empty(part)
            raise
        hint = _html_hint(part)
        if checksum is None:
            if hint:
                part.unlink()
                raise DownloadError(f"{url} gave an HTML page, not the file{hint}")
            os.replace(part, dest)
            return dest
        actual = checksums.file_digest(part, algo)
        if actual != expected:
            part.unlink()
            raise ChecksumError(
                f"checksum mismatch for {dest} from {url}: expected {algo}:{expected}, got {algo}:{actual}{hint}"
            )
        os.replace(part, dest)
    return dest


def _complete(dest: Path, algo: str | None, expected: str | None) -> bool:
    """``dest`` is there and matches (any ``dest`` when no checksum is known: it is kept)."""
    return dest.is_file() and (algo is None or checksums.file_digest(dest, algo) == expected)


def _remove_if_empty(part: Path) -> None:
    if part.is_file() and part.stat().st_size == 0:
        part.unlink()


@contextmanager
def _exclusive(part: Path):
    """Hold an exclusive ``flock`` on ``part`` (created if absent), the file at that path when the
    lock is granted: a waiter whose file was renamed to ``dest`` or removed meanwhile tries again."""
    import fcntl

    while True:
        with open(part, "ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                current = os.path.samestat(os.fstat(f.fileno()), os.stat(part))
            except FileNotFoundError:
                current = False
            if current:
                yield
                return


def _fetch_with_retries(url: str, part: Path, retries: int, timeout: float, chunk_size: int, progress: bool) -> None:
    """Bring ``part`` to the whole body, retrying transient failures with backoff."""
    opener = _open_file if urlparse(url).scheme == "file" else _open_http
    for attempt in range(retries + 1):
        try:
            _fetch(opener, url, part, timeout, chunk_size, progress)
            return
        except _Retryable as err:
            if err.restart:
                os.truncate(part, 0)  # the same file (others wait on its lock), emptied
            if attempt == retries:
                raise DownloadError(f"could not download {url} after {retries + 1} attempts: {err}") from None
            time.sleep(err.wait if err.wait is not None else BACKOFF_S * 2**attempt)


def _fetch(opener, url: str, part: Path, timeout: float, chunk_size: int, progress: bool) -> None:
    """One attempt: append the rest of the body to ``part`` (or rewrite it from zero)."""
    offset = part.stat().st_size if part.exists() else 0
    broken = None
    with opener(url, offset, timeout, chunk_size) as body:
        bar = tqdm(total=body.total, initial=body.offset, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=part.name[: -len(".part")], file=sys.stderr, disable=not progress)
        with bar, open(part, "ab" if body.offset else "wb") as f:
            try:
                for chunk in body.chunks:
                    f.write(chunk)
                    bar.update(len(chunk))
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                    urllib3.exceptions.HTTPError) as err:
                broken = err
    size = part.stat().st_size
    if body.total is not None and size != body.total:
        raise _Retryable(f"truncated body: received {size} of {body.total} bytes")
    if broken is not None:
        raise _Retryable(f"connection broken after {size} bytes: {broken}")


@contextmanager
def _open_http(url: str, offset: int, timeout: float, chunk_size: int):
    """GET ``url`` asking for bytes from ``offset`` on; yields the body."""
    headers = dict(HEADERS, **({"Range": f"bytes={offset}-"} if offset else {}))
    try:
        resp = requests.get(url, headers=headers, stream=True, timeout=timeout)
    except (requests.ConnectionError, requests.Timeout) as err:
        raise _Retryable(f"connection failed: {err}") from None
    except requests.RequestException as err:
        raise DownloadError(f"could not download {url}: {err}") from None
    with resp:
        status = resp.status_code
        if status == 416:
            raise _Retryable(f"range from byte {offset} not satisfiable", wait=0, restart=True)
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status} {resp.reason}", _retry_after(resp))
        if status >= 400:
            raise DownloadError(f"HTTP {status} {resp.reason} for {url}")
        length = _content_length(resp)
        start = _range_start(resp) if status == 206 else 0
        if status == 206 and start != offset:
            raise _Retryable(f"server sent a range from byte {start}, asked {offset}", wait=0, restart=True)
        total = None if length is None else start + length
        yield _Body(_pieces(resp.raw, chunk_size), start, total)


def _pieces(raw: urllib3.HTTPResponse, size: int) -> Iterator[bytes]:
    """The body as it arrives, at most ``size`` bytes a piece (``read1``): a connection dropped in
    the middle of a piece loses none of the bytes already received."""
    while piece := raw.read1(size, decode_content=True):
        yield piece


@contextmanager
def _open_file(url: str, offset: int, timeout: float, chunk_size: int):
    """Read a ``file://`` URL from ``offset`` on (from zero when the source is shorter)."""
    path = Path(url2pathname(urlparse(url).path))
    if not path.is_file():
        raise DownloadError(f"no such file for {url}: {path}")
    total = path.stat().st_size
    start = offset if offset <= total else 0
    with open(path, "rb") as f:
        f.seek(start)
        yield _Body(iter(lambda: f.read(chunk_size), b""), start, total)


def _content_length(resp: requests.Response) -> int | None:
    """Body length in bytes when the server states it for an unencoded body."""
    if resp.headers.get("Content-Encoding", "identity") != "identity":
        return None
    value = resp.headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def _range_start(resp: requests.Response) -> int:
    """First byte of a 206 reply, from ``Content-Range: bytes START-END/TOTAL``."""
    value = resp.headers.get("Content-Range", "")
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return -1


def _retry_after(resp: requests.Response) -> float | None:
    """The delay in seconds a 429 or 503 asks for (:func:`~rankrepro.retry_after.parse_retry_after`),
    at most :data:`RETRY_AFTER_CAP_S`; None when there is no usable hint (then: the backoff)."""
    if resp.status_code not in (429, 503):
        return None
    seconds = parse_retry_after(resp.headers.get("Retry-After"))
    return None if seconds is None else min(seconds, RETRY_AFTER_CAP_S)


def _html_hint(path: Path) -> str:
    """A note when a body looks like an HTML page (a quota or confirmation page)."""
    with open(path, "rb") as f:
        head = f.read(512).lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return " (the server sent an HTML page instead of the file: quota exceeded or a confirmation page?)"
    return ""
