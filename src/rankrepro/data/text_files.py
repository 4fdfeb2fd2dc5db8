"""The one reader of the datasets' text files (image lists, CSVs, JSON, checksum files; the GLDv2 CSVs
H-GLDv2 reads): UTF-8, or an error that says where it is not.

Every such file of the datasets is UTF-8 text (most are plain ASCII; VGGFace2's ``identity_meta.csv``
and the GLDv2 CSVs hold non-ASCII names, read as UTF-8 as public loaders of the releases read them).
A leading UTF-8 byte-order mark is dropped. Bytes that are not UTF-8 raise :class:`TextEncodingError`,
naming the file, the line (1-based), the bad bytes' position in that line and in the file (1-based
byte counts) and the bytes themselves, never a bare :class:`UnicodeDecodeError`.

A line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (universal newlines, as Python's text files,
the :mod:`csv` module and pandas read them), in :func:`read_lines` and in the error's line number alike.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

__all__ = ["TextEncodingError", "read_text", "read_lines", "text_stream"]

BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")
_SHOWN_CHARS = 100  # of the offending line, in the error message


class TextEncodingError(ValueError):
    """A text file holds bytes that are not UTF-8; the message names the file, line and bytes."""


def read_text(file: str | Path) -> str:
    """The text of ``file``, decoded as UTF-8 (a leading byte-order mark dropped); bytes that are not
    UTF-8 raise :class:`TextEncodingError` naming the file, the line and the bytes' position."""
    data = Path(file).read_bytes()
    start = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise TextEncodingError(_describe(file, data, start + err.start, start + err.end, err.reason)) from None


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
