"""Atomic file writes (a killed job never leaves a half-written output), :func:`link_or_copy`, the CSV text/table helpers,
the one reader of text files (:func:`read_text`, :func:`read_lines`, :func:`text_stream`: UTF-8, or an error
naming file, line and byte), the one YAML loader of the package (:func:`load_yaml`: a key given twice is an error, not last-wins; aliases add at
most :data:`MAX_ALIAS_NODES` values) and the readers of a user's YAML or JSON file that must hold a mapping
(:func:`load_yaml_mapping`, :func:`load_json_mapping`): each error names the file, and the line where it has one."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

from rankrepro.messages import ShortMessage

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
    missing, not UTF-8 (:mod:`rankrepro.io`) or lacks one of ``columns``."""
    import pandas as pd


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


class FileFormatError(ShortMessage, ValueError):
    """A file that does not hold what its reader expects (not UTF-8, not YAML or JSON, YAML aliases past
    :data:`MAX_ALIAS_NODES`, not a mapping); the message names the file, and the line where it has one. The CLI
    prints it without a traceback (:func:`rankrepro.cli.run`)."""


# -- text files: UTF-8, or an error saying where it is not -------------------------------------------------------
#
# The one reader of the datasets' text files (image lists, CSVs, JSON, checksum files; the GLDv2 CSVs
# H-GLDv2 reads): UTF-8, or an error that says where it is not.
#
# Every such file of the datasets is UTF-8 text (most are plain ASCII; VGGFace2's ``identity_meta.csv``
# and the GLDv2 CSVs hold non-ASCII names, read as UTF-8 as public loaders of the releases read them).
# A leading UTF-8 byte-order mark is dropped. Bytes that are not UTF-8 raise :class:`TextEncodingError`,
# naming the file, the line (1-based), the bad bytes' position in that line and in the file (1-based
# byte counts) and the bytes themselves, never a bare :class:`UnicodeDecodeError`.
#
# A line ends at ``\n``, ``\r\n`` or a lone ``\r`` (universal newlines, as Python's text files,
# the :mod:`csv` module and pandas read them), in :func:`read_lines` and in the error's line number alike.

BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")
_SHOWN_CHARS = 100  # of the offending line, in the error message


class TextEncodingError(FileFormatError):
    """A text file holds bytes that are not UTF-8; the message names the file, line and bytes."""


def read_text(file: str | Path, where: str | None = None) -> str:
    """The text of ``file``, decoded as UTF-8 (a leading byte-order mark dropped); bytes that are not
    UTF-8 raise :class:`TextEncodingError` naming the file (``where``, default ``file``), the line and the bytes'
    position. OSError (a missing file) propagates."""
    data = Path(file).read_bytes()
    start = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise TextEncodingError(_describe(where or file, data, start + err.start, start + err.end, err.reason)) \
            from None


def read_lines(file: str | Path) -> list[str]:
    """The lines of ``file`` (:func:`read_text`) without their line ends; line ``n`` (1-based) is
    item ``n - 1``. No empty item for the end of a last line that ends with a line end."""
    lines = _LINE_END.split(read_text(file))
    if lines[-1] == "":
        lines.pop()
    return lines


def text_stream(file: str | Path) -> io.StringIO:
    """The text of ``file`` (:func:`read_text`) as a stream for :mod:`csv` readers and
    ``pandas.read_csv`` (line ends kept as they are, as ``open(..., newline="")`` gives them)."""
    return io.StringIO(read_text(file), newline="")


def _describe(file: str | Path, data: bytes, bad_start: int, bad_end: int, reason: str) -> str:
    """Where and what the bytes ``data[bad_start:bad_end]`` are, and what to do."""
    ends = list(_LINE_END_BYTES.finditer(data, 0, bad_start))
    line_start = ends[-1].end() if ends else 0
    next_end = _LINE_END_BYTES.search(data, bad_start)
    line = data[line_start:next_end.start() if next_end else len(data)]
    shown = line.decode("utf-8", errors="backslashreplace")
    shown = shown if len(shown) <= _SHOWN_CHARS else shown[:_SHOWN_CHARS] + "..."
    return (f"{file}, line {len(ends) + 1}: byte {bad_start - line_start + 1} of the line (byte {bad_start + 1} "
            f"of the file) is not UTF-8: {data[bad_start:bad_end].hex(' ')} ({reason}) in {shown!r}. The file "
            "must be UTF-8 text: restore the original (re-extract or download it again) or save it as UTF-8")


#: the most values (scalars, lists and mappings) the aliases (``*name``) of one YAML file may add once expanded,
#: those of the anchors they repeat included. The project's files hold at most 949 values
#: (src/rankrepro/hgldv2/curation.yaml; config.yaml 247) and their aliases add at most 153
#: (src/rankrepro/plan/setups/suprank.yaml; config.yaml none): the bound is ~650x that, and a config whose
#: aliases add 90,000 values is still refused by its schema in 1.2 s and 50 MB (`python -m rankrepro plan`,
#: measured). Anchors that repeat anchors multiply: 8 levels of 10 aliases ("billion laughs") are 10^8 values
#: in 1 kB.
MAX_ALIAS_NODES = 100_000


def _check_aliases(text: str, where: str) -> None:
    """A :class:`FileFormatError` naming ``where`` and the alias's line when the aliases of the YAML ``text`` add
    more than :data:`MAX_ALIAS_NODES` values once expanded, or when an alias lies inside its own anchor (a value
    that contains itself). Reads the parser's events once, counting each anchor's values: linear in the text,
    whatever the value would expand to."""
    if "*" not in text:  # no alias
        return
    anchors: dict[str, tuple[int, int]] = {}  # an anchor's values (those of its aliases included), its line
    open_nodes: list[list] = []  # [anchor, line, values so far] of each list or mapping being read
    added = 0
    for event in yaml.parse(text, Loader=_BASE_LOADER):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append([event.anchor, line, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, start, values = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, start, values = event.anchor, line, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor = None
            if any(node[0] == event.anchor for node in open_nodes):
                raise FileFormatError(f"{where}:{line}: alias *{event.anchor} lies inside its own anchor "
                                      f"&{event.anchor}: a value that contains itself; write the value out")
            values, start = anchors.get(event.anchor, (1, line))  # an undefined alias: the loader says so
            added += values
            if added > MAX_ALIAS_NODES:
                raise FileFormatError(f"{where}:{line}: alias *{event.anchor} (anchor on line {start}) repeats "
                                      f"{values:,} values: the file's aliases would add {added:,} values, more than "
                                      f"the {MAX_ALIAS_NODES:,} allowed (anchors that repeat anchors multiply); "
                                      "write the values out, or use fewer aliases")
        else:
            continue
        if anchor:
            anchors[anchor] = (values, start)
        if open_nodes:
            open_nodes[-1][2] += values


def load_yaml(path: str | Path, where: str | None = None):
    """The YAML data of ``path`` (the safe loader); a :class:`FileFormatError` naming the file (``where``, default
    ``path``) -- and the line of a key given twice, ``<file>:<line>: key 'k' appears twice (first on line
    <n>)``, or of an alias past :data:`MAX_ALIAS_NODES` -- when it is not UTF-8 or does not parse. OSError (a
    missing file) propagates."""
    where = where or str(path)
    text = read_text(path, where)
    try:
        _check_aliases(text, where)
        return yaml.load(text, Loader=StrictLoader)
    except DuplicateKeyError as err:
        raise FileFormatError(f"{where}:{err.line}: {err.problem}") from None
    except yaml.YAMLError as err:
        raise FileFormatError(f"{where}: not valid YAML: {err}") from None


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def expect_mapping(data, where: str, *, allow_empty: bool = False) -> dict:
    """``data``, read from the file ``where``, when it is a mapping (``{}`` for an empty file where
    ``allow_empty``); else a :class:`FileFormatError` naming the file and what it holds instead."""
    if data is None and allow_empty:
        return {}
    if isinstance(data, dict):
        return data
    found = "is empty" if data is None else f"holds {_KINDS.get(type(data), f'a {type(data).__name__}')}"
    raise FileFormatError(f"{where}: must be a mapping of keys to values (key: value), but {found}")


def load_yaml_mapping(path: str | Path, where: str | None = None, *, allow_empty: bool = False) -> dict:
    """:func:`load_yaml` of a file that must hold a mapping (:func:`expect_mapping`)."""
    where = where or str(path)
    return expect_mapping(load_yaml(path, where), where, allow_empty=allow_empty)


def load_json_mapping(path: str | Path, where: str | None = None) -> dict:
    """The JSON object of ``path``; a :class:`FileFormatError` naming the file (``where``, default ``path``) when it
    is not UTF-8, not JSON (with the line and column) or not an object (:func:`expect_mapping`). OSError (a
    missing file) propagates."""
    where = where or str(path)
    text = read_text(path, where)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FileFormatError(f"{where}:{err.lineno}: not valid JSON: {err.msg} (column {err.colno})") from None
    return expect_mapping(data, where)
