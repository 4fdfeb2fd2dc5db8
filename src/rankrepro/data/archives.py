"""Safe extraction of dataset archives (zip, tar) into a dataset tree, with per-archive markers.

Members that would land outside the destination are refused before anything is written; an
archive counts as extracted only once its marker ``<dest>/.extracted/<archive name>`` exists
(:func:`extract`, :func:`is_extracted`).
"""

from __future__ import annotations

import json
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from rankrepro.data.paths import leaves_root
from rankrepro.io import atomic_write_json

__all__ = ["EXTRACTED_MARKER", "extract", "is_extracted"]


EXTRACTED_MARKER = ".extracted"  # folder of per-archive markers in a dataset tree


def extract(archive: str | Path, dest_dir: str | Path, checksum: str | None = None) -> Path:
    """Extract a zip or tar(.gz/.bz2/.xz) archive into ``dest_dir``; return ``dest_dir``.

    ``dest_dir`` is a tree that several archives of one dataset may share (GLDv2's 500
    train shards all extract into ``train/``). Each archive leaves a marker
    ``<dest_dir>/.extracted/<archive name>`` (JSON: the archive's ``checksum`` and its
    member names), written last: an archive without its marker was not (completely)
    extracted and is extracted again, overwriting what an interrupted run left. A marker
    for the same ``checksum`` (or any marker when ``checksum`` is None) means done.

    A marker for another checksum (a new download, a regenerated replica): the old
    archive's members are removed first (every path the marker lists must lie inside
    ``dest_dir``, else nothing is removed: an edited marker deletes nothing outside), then
    the new archive is extracted. Members that would land outside ``dest_dir`` (absolute
    paths, ``..``, links, or a symlink already in the tree that leaves it) make it fail
    before anything is written. A non-empty ``dest_dir`` that no archive was extracted into
    is someone else's folder: refused.
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
    _check_targets(archive, dest_dir, names)
    if previous is not None:
        members = _marked_members(marker, dest_dir, previous)
        marker.unlink()
        _remove_members(dest_dir, members)
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


def _leaving_link(dest_dir: Path, name: str, *, last: bool) -> Path | None:
    """The first symlink on the way to ``dest_dir/name`` (the last component too when ``last``)
    whose target lies outside ``dest_dir``; None when there is none."""
    root, path = dest_dir.resolve(), dest_dir
    parts = PurePosixPath(name).parts
    for part in parts if last else parts[:-1]:
        path = path / part
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            return path
    return None


def _check_targets(archive: Path, dest_dir: Path, names: list[str]) -> None:
    """Refuse members that would be written through a symlink in the tree that leaves it."""
    for name in names:
        link = _leaving_link(dest_dir, name, last=True)
        if link is not None:
            raise ValueError(f"refusing to extract {archive}: member {name!r} would be written through the symlink "
                             f"{link} -> {link.resolve()}, which leaves {dest_dir}; remove that symlink (or the "
                             "whole tree) and prepare again")


def _marked_members(marker: Path, dest_dir: Path, record: dict) -> list[str]:
    """The member paths a marker lists, checked before anything is deleted: each a relative path
    inside ``dest_dir`` (no ``..``, no symlink leaving the tree on the way)."""
    members = record.get("members", [])
    for name in members if isinstance(members, list) else [members]:
        if not isinstance(name, str) or leaves_root(name) or _leaving_link(dest_dir, name, last=False) is not None:
            raise ValueError(f"{marker}: listed member {name!r} lies outside {dest_dir} (the marker was edited or is "
                             f"corrupt); nothing was deleted: delete {dest_dir} and prepare again")
    return members


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
        if leaves_root(name):
            raise ValueError(f"refusing to extract {archive}: member {name!r} would escape the destination")

