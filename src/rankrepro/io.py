"""Atomic file writes (a killed job never leaves a half-written output), :func:`link_or_copy`, the CSV text/table helpers and the
one YAML loader of the package (:func:`load_yaml`: a key given twice is an error, not last-wins)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; outputs get the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def link_or_copy(source: str | Path, dest: str | Path, *, keep_identical: bool = False) -> Path:
    """``dest`` becomes ``source``'s file, atomically: a hard link when the file system allows, else a copy
    (:func:`shutil.copy2`: the source's mode and times, as a link has them). With ``keep_identical``, an
    existing ``dest`` with the same bytes is left as it is. Returns ``dest``.

    Unlike :func:`atomic_path`, no mode is set: a link's inode is the source's, whose mode is not ours to
    change."""
    source, dest = Path(source), Path(dest)
    if keep_identical and dest.is_file() and _same_bytes(source, dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or one without hard links
            shutil.copy2(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def _same_bytes(a: Path, b: Path, chunk: int = 1 << 20) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def csv_text(header, rows) -> str:
    """A CSV as the real files are written: comma-separated, quoted only where needed, ``\\n`` lines."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def read_csv_columns(path: str | Path, columns):
    """``path`` as a pandas DataFrame of strings ("" for empty cells); an error naming the file when it is
    missing, not UTF-8 (:mod:`rankrepro.data.text_files`) or lacks one of ``columns``."""
    import pandas as pd

    from rankrepro.data.text_files import text_stream

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    df = pd.read_csv(text_stream(path), dtype=str, keep_default_na=False)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    return df


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster on many specs
_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that gives the same key twice (PyYAML would keep the last value silently)."""

    def __init__(self, key, line: int, first_line: int):
        super().__init__(problem=f"key {key!r} appears twice (first on line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class StrictLoader(_BASE_LOADER):
    """The safe loader (libyaml's when installed) that refuses a key given twice in one mapping; a merge
    key's (``<<: *anchor``) values may still be overridden, as YAML means them to be."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in first:
                        raise DuplicateKeyError(key, line, first[key])
                    first[key] = line
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
        return super().construct_mapping(node, deep)


def load_yaml(path: str | Path, where: str | None = None):
    """The YAML data of ``path`` (the safe loader); a :class:`ValueError` naming the file (``where``, default
    ``path``) -- and the line of a key given twice, ``<file>:<line>: key 'k' appears twice (first on line
    <n>)`` -- when it does not parse. OSError (a missing file) propagates."""
    where = where or str(path)
    text = Path(path).read_text(encoding="utf-8")
    try:
        return yaml.load(text, Loader=StrictLoader)
    except DuplicateKeyError as err:
        raise ValueError(f"{where}:{err.line}: {err.problem}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML: {err}") from None
