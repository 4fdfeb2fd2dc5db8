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
import time
import zipfile
import zlib
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
EXTRACTED_MARKER = ".extracted"  # folder of per-archive markers in a dataset tree
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
    checksum: str | None,
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

    ``checksum`` None: nobody publishes one. The body is complete when it has the
    length the server stated; the caller records its sha256 once the data is verified
    otherwise (:class:`ChecksumLock`, trust on first use). An existing ``dest`` is kept.
    """
    dest = Path(dest)
    if checksum is None:
        if dest.is_file():
            return dest
        algo = expected = None
    else:
        algo, expected = parse_checksum(checksum)
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
    if checksum is None:
        hint = _html_hint(part)
        if hint:
            part.unlink()
            raise DownloadError(f"{url} gave an HTML page, not the file{hint}")
        os.replace(part, dest)
        return dest
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
    """Extract a zip or tar(.gz/.bz2/.xz) archive into ``dest_dir``; return ``dest_dir``.

    ``dest_dir`` is a tree that several archives of one dataset may share (GLDv2's 500
    train shards all extract into ``train/``). Each archive leaves a marker
    ``<dest_dir>/.extracted/<archive name>`` (JSON: the archive's ``checksum`` and its
    member names), written last: an archive without its marker was not (completely)
    extracted and is extracted again, overwriting what an interrupted run left. A marker
    for the same ``checksum`` (or any marker when ``checksum`` is None) means done.

    A marker for another checksum (a new download, a regenerated replica): the old
    archive's members are removed first, then the new archive is extracted. Members that
    would land outside ``dest_dir`` (absolute paths, ``..``, links) make it fail before
    anything is written. A non-empty ``dest_dir`` that no archive was extracted into is
    someone else's folder: refused.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    marker = dest_dir / EXTRACTED_MARKER / archive.name
    previous = _read_marker(marker)
    if previous is not None and (checksum is None or previous.get("checksum") in (None, checksum)):
        return dest_dir
    if dest_dir.is_dir() and not (dest_dir / EXTRACTED_MARKER).is_dir() and any(dest_dir.iterdir()):
        raise FileExistsError(f"{dest_dir} exists but was not extracted by rankrepro (no {EXTRACTED_MARKER}/); "
                              "remove it, or point to it as an already-extracted copy")
    names = _member_names(archive)
    if previous is not None:
        marker.unlink()
        _remove_members(dest_dir, previous.get("members", []))
    (dest_dir / EXTRACTED_MARKER).mkdir(parents=True, exist_ok=True)  # the tree is ours from now on
    _extract_into(archive, dest_dir)
    atomic_write_json(marker, {"archive": archive.name, "checksum": checksum, "members": names})
    return dest_dir


def is_extracted(archive_name: str, dest_dir: str | Path, checksum: str | None = None) -> bool:
    """True when ``archive_name`` was completely extracted into ``dest_dir`` (for ``checksum``, if given)."""
    record = _read_marker(Path(dest_dir) / EXTRACTED_MARKER / archive_name)
    return record is not None and (checksum is None or record.get("checksum") in (None, checksum))


def _read_marker(marker: Path) -> dict | None:
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _remove_members(dest_dir: Path, members: list[str]) -> None:
    """Delete the files an earlier extraction wrote (folders only when they end up empty)."""
    folders = set()
    for name in members:
        path = dest_dir / name
        if path.is_file() or path.is_symlink():
            path.unlink()
        folders.update(p for p in PurePosixPath(name).parents if str(p) != ".")
    for folder in sorted(folders, key=lambda f: -len(f.parts)):
        try:
            (dest_dir / folder).rmdir()
        except OSError:
            pass


def _member_names(archive: Path) -> list[str]:
    """The archive's member names, checked: none may escape the destination."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                names = zf.namelist()
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive, "r:*") as tf:
                members = tf.getmembers()
                for m in members:
                    if m.issym() or m.islnk():
                        raise ValueError(f"refusing to extract {archive}: member {m.name!r} is a link")
                names = [m.name for m in members]
        else:
            raise ValueError(f"{archive} is neither a zip nor a tar archive (truncated or corrupt, or not an archive?)")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as err:
        raise ValueError(f"cannot read archive {archive} (truncated or corrupt?): {err}") from None
    _check_members(archive, names)
    return names


def place(file: str | Path, dest: str | Path) -> Path:
    """Put a non-archive source file (a CSV, a ``.mat``) at ``dest`` in the dataset tree:
    a hard link when the file system allows, else a copy; atomic; kept when identical."""
    file, dest = Path(file), Path(dest)
    if dest.is_file() and dest.stat().st_size == file.stat().st_size and \
            file_digest(dest, "sha256") == file_digest(file, "sha256"):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(file, tmp)
    except OSError:
        shutil.copyfile(file, tmp)
    os.replace(tmp, dest)
    return dest


@contextmanager
def file_lock(path: str | Path):
    """Hold an exclusive ``flock`` on ``path`` (created if absent): jobs that share a dataset tree
    or the checksum lock file take turns."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield


class ChecksumLock:
    """Checksums recorded on first use, for files nobody publishes one for.

    ``<data_root>/checksums.lock.json`` maps ``"<source>/<file>"`` to ``{"checksum":
    "sha256:<hex>", "size", "recorded"}``. A file's entry is written the first time the
    data it holds passes the dataset's checks (its published counts); every later use
    checks the file against it. Writers take an exclusive ``flock`` on
    ``checksums.lock.json.lock`` and rewrite the file atomically.
    """

    FILE = "checksums.lock.json"

    def __init__(self, data_root: str | Path):
        self.path = Path(data_root) / self.FILE

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as err:
            raise ValueError(f"{self.path} is not valid JSON ({err}); fix or delete it") from None

    def get(self, key: str) -> str | None:
        entry = self.read().get(key)
        return entry.get("checksum") if isinstance(entry, dict) else None

    def record(self, entries: dict[str, Path]) -> None:
        """Record the sha256 of each ``{key: file}`` not recorded yet (an entry is never replaced)."""
        if not entries:
            return
        with file_lock(f"{self.path}.lock"):
            data = self.read()
            for key, file in entries.items():
                if key not in data:
                    data[key] = {"checksum": "sha256:" + file_digest(file, "sha256"),
                                 "size": Path(file).stat().st_size,
                                 "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            atomic_write_json(self.path, data)


def _extract_into(archive: Path, directory: Path) -> None:
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(directory)
        else:
            with tarfile.open(archive, "r:*") as tf:
                tf.extractall(directory, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as err:
        raise ValueError(f"cannot extract {archive} (truncated or corrupt?): {err}") from None


def _check_members(archive: Path, names: list[str]) -> None:
    """Refuse member names that are absolute or climb out with ``..``."""
    for name in names:
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise ValueError(f"refusing to extract {archive}: member {name!r} would escape the destination")


def require_files(root: str | Path, files: dict[str, tuple[str | None, int | None]], dataset: str,
                  how_to_get: str, note: str = "") -> Path:
    """Check files that must be obtained by hand; return ``root`` when all are there and match.

    ``files`` maps a path relative to ``root`` to ``(checksum, size in bytes)``, either
    None when unknown (a file without a published checksum is checked against the lock
    file by the caller). Raises :class:`ManualDownloadRequired` listing every missing or
    mismatching file with the absolute path it must have, its size and checksum where
    known, how to get it and ``note`` (e.g. the ``extracted:`` alternative).
    """
    root = Path(root).absolute()
    problems = []
    for rel, (checksum, size) in files.items():
        path = root / rel
        known = ", ".join(x for x in (f"{size:,} bytes" if size else "", checksum or "no published checksum") if x)
        if not path.is_file():
            problems.append(f"  - {rel}: missing; put it at {path} ({known})")
        elif checksum and not verify(path, checksum):
            algo, _ = parse_checksum(checksum)
            problems.append(f"  - {rel}: checksum mismatch at {path}: expected {checksum}, "
                            f"got {algo}:{file_digest(path, algo)}")
    if problems:
        raise ManualDownloadRequired(
            f"dataset {dataset!r} needs files that cannot be downloaded automatically.\n"
            f"How to get them: {how_to_get}\n" + "\n".join(problems) + (f"\n{note}" if note else "")
        )
    return root
