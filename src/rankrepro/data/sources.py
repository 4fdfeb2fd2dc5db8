"""Dataset files that are not downloaded archives: files a licence keeps us from downloading
(:func:`require_files`: checked, with a message saying exactly what to put where) and single
source files put into the dataset tree (:func:`place`).

Downloads are :mod:`rankrepro.data.downloads`, checksums :mod:`rankrepro.data.checksums`,
archive extraction :mod:`rankrepro.data.archives`, errors and exit statuses
:mod:`rankrepro.data.errors`.
"""

from __future__ import annotations

from pathlib import Path

from rankrepro.data import checksums
from rankrepro.data.errors import ManualDownloadRequired
from rankrepro.io import link_or_copy

__all__ = ["place", "require_files"]


def place(file: str | Path, dest: str | Path) -> Path:
    """Put a non-archive source file (a CSV, a ``.mat``) at ``dest`` in the dataset tree:
    a hard link when the file system allows, else a copy; atomic; kept when identical."""
    return link_or_copy(file, dest, keep_identical=True)


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
        elif checksum and not checksums.verify(path, checksum):
            algo, _ = checksums.parse_checksum(checksum)
            problems.append(f"  - {rel}: checksum mismatch at {path}: expected {checksum}, "
                            f"got {algo}:{checksums.file_digest(path, algo)}")
    if problems:
        raise ManualDownloadRequired(
            f"dataset {dataset!r} needs files that cannot be downloaded automatically.\n"
            f"How to get them: {how_to_get}\n" + "\n".join(problems) + (f"\n{note}" if note else "")
        )
    return root
