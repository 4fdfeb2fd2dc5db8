"""Checksums of dataset files: parsing, hashing, verification and the records that spare a rehash.

A *checksum* is a string ``"<algo>:<hex digest>"`` with ``algo`` in ``md5`` or ``sha256``.

A verified file may get a ``<file>.verified`` sidecar (``{"checksum", "size", "mtime_ns"}``,
:func:`record_verified`); :func:`reverify` checks the file again before it is used again, hashing
it only when its size or mtime changed. Files nobody publishes a checksum for get one recorded on
first use in ``<data_root>/checksums.lock.json`` (:class:`ChecksumLock`).
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path

from rankrepro.data.errors import ChecksumError
from rankrepro.io import atomic_write_json

__all__ = ["ALGOS", "VERIFIED_SUFFIX", "parse_checksum", "file_digest", "verify", "record_verified", "is_verified",
           "recorded_checksum", "reverify", "file_lock", "ChecksumLock"]


ALGOS = ("md5", "sha256")
VERIFIED_SUFFIX = ".verified"


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
