"""Checksums of dataset files: parsing, hashing, verification and the records that spare a rehash.

A *checksum* is a string ``"<algo>:<hex digest>"`` with ``algo`` in ``md5`` or ``sha256``.

A verified file may get a ``<file>.verified`` sidecar (``{"checksum", "size", "mtime_ns"}``,
:func:`record_verified`); :func:`reverify` checks the file again before it is used again, hashing
it only when its size or mtime changed. A sidecar is only a cache of a verification already done:
it never decides *which* checksum a file must match (the published one, or the one recorded in the
lock file, always does; only a generated replica states its own, :func:`stated_checksum`). Files
nobody publishes a checksum for get one recorded on first use in ``<data_root>/checksums.lock.json``
(:class:`ChecksumLock`).
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path

from rankrepro.data.errors import ChecksumError
from rankrepro.io import atomic_write_json, read_text

__all__ = ["ALGOS", "VERIFIED_SUFFIX", "STATED_SUFFIX", "parse_checksum", "file_digest", "verify", "record_verified",
           "is_verified", "stated_checksum", "recorded_checksum", "reverify", "file_lock", "ChecksumLock"]


ALGOS = ("md5", "sha256")
VERIFIED_SUFFIX = ".verified"
STATED_SUFFIX = ".sha256"  # a generated replica's checksum, beside the file


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


def stated_checksum(path: str | Path) -> str | None:
    """The checksum a generated replica states beside ``path`` in ``<path>.sha256``: ``sha256:<hex>``
    or ``sha256sum``'s ``<hex>  <name>``; None when there is no such file. Anything else is a
    ``ValueError`` naming the file."""
    stated = Path(f"{path}{STATED_SUFFIX}")
    if not stated.is_file():
        return None
    text = read_text(stated).strip()
    fields = text.split()
    digest = fields[0].lower().removeprefix("sha256:") if fields else ""
    name = fields[1].lstrip("*") if len(fields) == 2 else Path(path).name
    if len(fields) not in (1, 2) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) \
            or name != Path(path).name:
        raise ValueError(f"{stated}: expected 'sha256:<hex>' or sha256sum's '<hex>  {Path(path).name}', got "
                         f"{text[:100]!r}; fix or delete it")
    return f"sha256:{digest}"


def recorded_checksum(path: str | Path) -> str | None:
    """For a generated replica: the checksum ``path`` was last verified against
    (``<path>.verified``), else the one stated beside it (:func:`stated_checksum`), else None."""
    return _read_sidecar(path).get("checksum") or stated_checksum(path)


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
        """The entries, checked: a JSON object whose every entry is a record with a valid
        ``checksum``; anything else is a ``ValueError`` naming the file and the key (a broken
        entry must not pass for "nothing recorded yet", which would turn verification off)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as err:
            raise ValueError(f"{self.path} is not valid JSON ({err}); fix or delete it") from None
        if not isinstance(data, dict):
            raise ValueError(f"{self.path} is not a JSON object of '<source>/<file>': {{\"checksum\": ...}} "
                             f"entries (it holds a {type(data).__name__}); fix or delete it")
        for key, entry in data.items():
            try:
                parse_checksum(entry["checksum"])
            except (TypeError, KeyError, ValueError, AttributeError):
                raise ValueError(f"{self.path}: entry {key!r} is not a record with a checksum "
                                 f"('md5:<hex>' or 'sha256:<hex>'), got {entry!r}; fix it, or delete the entry to "
                                 "record the file's checksum again on its next prepare") from None
        return data

    def get(self, key: str) -> str | None:
        """The checksum recorded for ``key``; None when none is."""
        entry = self.read().get(key)
        return None if entry is None else entry["checksum"]

    @contextmanager
    def explain(self, key: str):
        """A :class:`ChecksumError` raised inside says that its expected checksum is the one recorded here."""
        try:
            yield
        except ChecksumError as err:
            raise ChecksumError(f"{err}. The expected checksum is the one {self.path} recorded for {key!r} the "
                                "first time this file's data passed the dataset's checks; if the new file is "
                                "right, delete that entry to record it again") from None

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
