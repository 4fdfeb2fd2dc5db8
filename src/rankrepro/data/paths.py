"""Relative paths that must stay inside their root: manifest image paths, archive members, cache files."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath

__all__ = ["leaves_root"]


def leaves_root(path: str) -> bool:
    """True when ``path``, meant relative to a root, could leave that root by its text alone:
    empty, absolute (``/x``, ``\\x``, ``C:x``) or holding a ``..`` component (either slash).
    Symlinks are the caller's to check (they need the file system)."""
    posix = PurePosixPath(path.replace("\\", "/"))
    return not path or posix.is_absolute() or ".." in posix.parts or bool(PureWindowsPath(path).drive)
