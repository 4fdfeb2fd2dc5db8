"""Getting dataset files onto disk: verified downloads, safe extraction, manual files.

A *checksum* is a string ``"<algo>:<hex digest>"`` with ``algo`` in ``md5`` or
``sha256``. A download is complete only once its checksum matches; until then
it lives in ``<dest>.part`` and nothing exists at ``dest``.

A verified file may get a ``<file>.verified`` sidecar (``{"checksum", "size",
"mtime_ns"}``, :func:`record_verified`); :func:`reverify` checks the file again
before it is used again, hashing it only when its size or mtime changed.

Errors that retrying cannot fix (:class:`ChecksumError`, :class:`ManualDownloadRequired`)
and network failures that outlived the in-job retries end the CLI with distinct exit
statuses (:func:`exit_codes`): ``EXIT_CHECKSUM`` 3, ``EXIT_MANUAL`` 4, ``EXIT_DOWNLOAD`` 5.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator
from urllib.parse import urlparse
from urllib.request import url2pathname

import requests
from tqdm import tqdm

from rankrepro import __version__
from rankrepro.io import atomic_write_json

ALGOS = ("md5", "sha256")
BACKOFF_S = 0.25  # first retry delay; doubles with each further retry
RETRY_AFTER_CAP_S = 5.0  # longest Retry-After wait honoured
EXTRACTED_MARKER = ".extracted"
VERIFIED_SUFFIX = ".verified"
EXIT_CHECKSUM, EXIT_MANUAL, EXIT_DOWNLOAD = 3, 4, 5
HEADERS = {"Accept-Encoding": "identity", "User-Agent": f"rankrepro/{__version__}"}


class DownloadError(RuntimeError):
    """A download failed; the message names the URL."""


class ChecksumError(DownloadError):
    """A file did not match its checksum (final: downloading again gives the same bytes)."""


class ManualDownloadRequired(RuntimeError):
    """Files a licence keeps us from downloading are missing or wrong."""


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


def parse_checksum(checksum: str) -> tuple[str, str]:
    """Split ``"algo:hex"`` into ``(algo, hex)``, lower-cased."""
    algo, sep, digest = checksum.partition(":")
    algo, digest = algo.lower(), digest.lower()
    if not sep or algo not in ALGOS or not digest:
        raise ValueError(f"checksum {checksum!r} is not 'md5:<hex>' or 'sha256:<hex>'")
    return algo, digest


def file_digest(path: str | Path, algo: str) -> str:
    """Hex digest of the file's bytes under ``algo`` (md5, sha256)."""
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: str | Path, checksum: str) -> bool:
    """True when ``path`` exists and its digest matches ``checksum``."""
    algo, digest = parse_checksum(checksum)
    return Path(path).is_file() and file_digest(path, algo) == digest


def record_verified(path: str | Path, checksum: str) -> None:
    """Write ``<path>.verified``: the ``checksum`` just verified, with the file's size and mtime."""
    stat = Path(path).stat()
    atomic_write_json(f"{path}{VERIFIED_SUFFIX}",
                      {"checksum": checksum, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})


def _read_sidecar(path: str | Path) -> dict:
    try:
        record = json.loads(Path(f"{path}{VERIFIED_SUFFIX}").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def is_verified(path: str | Path, checksum: str) -> bool:
    """True when ``<path>.verified`` records ``checksum`` for the file's current size and mtime (no hashing)."""
    record, path = _read_sidecar(path), Path(path)
    if not record or not path.is_file():
        return False
    stat = path.stat()
    return (record.get("checksum"), record.get("size"), record.get("mtime_ns")) == \
        (checksum, stat.st_size, stat.st_mtime_ns)


def recorded_checksum(path: str | Path) -> str | None:
    """The checksum ``path`` was last verified against (``<path>.verified``), else the one a
    generated replica states beside it (``<path>.sha256``), else None."""
    checksum = _read_sidecar(path).get("checksum")
    if checksum:
        return checksum
    stated = Path(f"{path}.sha256")
    return stated.read_text().strip() if stated.is_file() else None


def reverify(path: str | Path, checksum: str) -> Path:
    """Check that ``path`` still matches ``checksum`` before it is used again; return ``path``.

    The file is hashed only when ``<path>.verified`` is absent, records another checksum,
    or records another size or mtime; a match is recorded. A mismatch raises
    :class:`ChecksumError` naming the file, the expected and the actual digest.
    """
    path = Path(path)
    if is_verified(path, checksum):
        return path
    if not path.is_file():
        raise FileNotFoundError(f"no file {path} to verify against {checksum}")
    algo, expected = parse_checksum(checksum)
    actual = file_digest(path, algo)
    if actual != expected:
        raise ChecksumError(f"checksum mismatch for {path}: expected {algo}:{expected}, got {algo}:{actual} "
                            "(changed since it was downloaded?); delete it to download it again")
    record_verified(path, checksum)
    return path


@contextmanager
def exit_codes():
    """For CLI commands: a final data error prints its message and exits with its own status.

    :class:`ChecksumError` -> ``EXIT_CHECKSUM`` (3), :class:`ManualDownloadRequired` ->
    ``EXIT_MANUAL`` (4), any other :class:`DownloadError` (network failures after the
    in-job retries, HTTP 4xx) -> ``EXIT_DOWNLOAD`` (5). Other errors propagate (status 1).
    """
    try:
        yield
    except ChecksumError as err:
        _exit(err, EXIT_CHECKSUM)
    except ManualDownloadRequired as err:
        _exit(err, EXIT_MANUAL)
    except DownloadError as err:
        _exit(err, EXIT_DOWNLOAD)


def _exit(err: Exception, status: int):
    print(f"rankrepro: {type(err).__name__}: {err}", file=sys.stderr)
    raise SystemExit(status)


def download(
    url: str,
    dest: str | Path,
    checksum: str,
    *,
    retries: int = 3,
    timeout: float = 60,
    chunk_size: int = 1 << 20,
    progress: bool = True,
) -> Path:
    """Download ``url`` (http, https or file) to ``dest`` and verify ``checksum``.

    Returns at once when ``dest`` already matches. The body goes to ``<dest>.part``,
    resumed with an HTTP Range request when that file exists; transient failures
    (connection errors, truncated bodies, 5xx, 429) are retried ``retries`` times.
    ``dest`` appears, by rename, only once the checksum matches.
    """
    algo, expected = parse_checksum(checksum)
    dest = Path(dest)
    if dest.is_file() and file_digest(dest, algo) == expected:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    opener = _open_file if urlparse(url).scheme == "file" else _open_http
    for attempt in range(retries + 1):
        try:
            _fetch(opener, url, part, timeout, chunk_size, progress)
            break
        except _Retryable as err:
            if err.restart:
                part.unlink(missing_ok=True)
            if attempt == retries:
                raise DownloadError(f"could not download {url} after {retries + 1} attempts: {err}") from None
            time.sleep(err.wait if err.wait is not None else BACKOFF_S * 2**attempt)
    actual = file_digest(part, algo)
    if actual != expected:
        hint = _html_hint(part)
        part.unlink()
        raise ChecksumError(
            f"checksum mismatch for {dest} from {url}: expected {algo}:{expected}, got {algo}:{actual}{hint}"
        )
    os.replace(part, dest)
    return dest


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
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as err:
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
        yield _Body(resp.iter_content(chunk_size), start, total)


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
    """The Retry-After delay in seconds (numeric or HTTP date), capped; None if absent."""
    value = resp.headers.get("Retry-After")
    if value is None or resp.status_code not in (429, 503):
        return None
    try:
        seconds = float(value)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        seconds = when.timestamp() - time.time() if when else 0.0
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


def _html_hint(path: Path) -> str:
    """A note when a body looks like an HTML page (a quota or confirmation page)."""
    with open(path, "rb") as f:
        head = f.read(512).lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return " (the server sent an HTML page instead of the file: quota exceeded or a confirmation page?)"
    return ""


def extract(archive: str | Path, dest_dir: str | Path, checksum: str | None = None) -> Path:
    """Extract a zip or tar(.gz/.bz2/.xz) archive to ``dest_dir``, atomically.

    Members go to a temporary sibling directory, a ``.extracted`` marker is
    written last, and the directory is renamed onto ``dest_dir``. A ``dest_dir``
    holding the marker is taken as done. Members that would land outside
    ``dest_dir`` (absolute paths, ``..``) make it fail before anything is written.

    With ``checksum`` (the archive's), the marker records it, and a ``dest_dir`` whose
    marker records another checksum was extracted from another archive: it is extracted
    anew and swapped in.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    marker = dest_dir / EXTRACTED_MARKER
    if marker.is_file():
        recorded = _marker_checksum(marker)
        if checksum is None or recorded is None or recorded == checksum:
            return dest_dir
    elif dest_dir.exists():
        raise FileExistsError(f"{dest_dir} exists but was not extracted by rankrepro (no {EXTRACTED_MARKER}); "
                              "remove it, or point to it as an already-extracted copy")
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest_dir.name}.", suffix=".tmp", dir=dest_dir.parent))
    old = None  # the stale extraction, moved aside until the new one is in place
    try:
        _extract_into(archive, tmp)
        (tmp / EXTRACTED_MARKER).write_text(f"{archive.name}\n" + (f"{checksum}\n" if checksum else ""))
        if dest_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest_dir.name}.", suffix=".old", dir=dest_dir.parent))
            os.replace(dest_dir, old)
        os.rename(tmp, dest_dir)
    except BaseException:
        if old is not None and not dest_dir.exists():
            os.replace(old, dest_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest_dir


def _marker_checksum(marker: Path) -> str | None:
    """The archive checksum an ``.extracted`` marker records (line 2), None when it records none."""
    lines = marker.read_text().splitlines()
    return (lines[1].strip() or None) if len(lines) > 1 else None


def _extract_into(archive: Path, directory: Path) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            _check_members(archive, zf.namelist())
            zf.extractall(directory)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive, "r:*") as tf:
            _check_members(archive, tf.getnames())
            tf.extractall(directory, filter="data")
    else:
        raise ValueError(f"{archive} is neither a zip nor a tar archive")


def _check_members(archive: Path, names: list[str]) -> None:
    """Refuse member names that are absolute or climb out with ``..``."""
    for name in names:
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise ValueError(f"refusing to extract {archive}: member {name!r} would escape the destination")


def require_files(root: str | Path, files: dict[str, str], dataset: str, how_to_get: str) -> Path:
    """Check files that must be obtained by hand; return ``root`` when all match.

    ``files`` maps a path relative to ``root`` to its checksum. Raises
    ManualDownloadRequired listing every missing or mismatching file with the
    absolute path it must have and the checksum it must match.
    """
    root = Path(root).absolute()
    problems = []
    for rel, checksum in files.items():
        path = root / rel
        if not path.is_file():
            problems.append(f"  - {rel}: missing; put it at {path} ({checksum})")
        elif not verify(path, checksum):
            algo, _ = parse_checksum(checksum)
            problems.append(f"  - {rel}: checksum mismatch at {path}: expected {checksum}, "
                            f"got {algo}:{file_digest(path, algo)}")
    if problems:
        raise ManualDownloadRequired(
            f"dataset {dataset!r} needs files that cannot be downloaded automatically.\n"
            f"How to get them: {how_to_get}\n" + "\n".join(problems)
        )
    return root
