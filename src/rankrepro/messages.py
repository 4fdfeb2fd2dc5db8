"""Messages of a bounded length, whatever the value they quote.

A user file can hold a huge value (a giant list; before :func:`rankrepro.io.load_yaml` bounded YAML aliases,
one 5 kB config expanded to 10^8 values whose repr was 722 MB), and an error message that quotes it would print
all of it. :func:`short_text` cuts a message's middle out, saying how long it was; :func:`short_repr` quotes a
value with bounded work (never the repr of the whole value); :class:`ShortMessage` gives an error type a
``str`` cut by :func:`short_text` (the project's error types derive from it); and the CLI's entry point cuts
whatever message reaches it (:func:`rankrepro.cli.run`).
"""

from __future__ import annotations

import reprlib

__all__ = ["MESSAGE_LIMIT", "VALUE_LIMIT", "ShortMessage", "short_repr", "short_text"]

#: the most characters of a message printed whole: a screenful, ~10x the longest message the project writes
#: (lists of the registered names of a kind)
MESSAGE_LIMIT = 4000

#: the most characters of a value quoted into a message
VALUE_LIMIT = 200


def short_text(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` when it has at most ``limit`` characters; else its start and its end, about ``limit`` characters
    together, around ``... [N characters in all] ...`` (N: the length of ``text``), so that a message keeps both
    the value it starts quoting and the problem it ends with."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]} ... [{len(text):,} characters in all] ... {text[-half:]}"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 6, 6, 6, 6
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 80, 80, 40


def short_repr(value, limit: int = VALUE_LIMIT) -> str:
    """The repr of ``value`` for a message: :mod:`reprlib`'s (at most 3 levels deep, 6 items per container, each
    of its strings cut to 80 characters: bounded work, whatever the size of ``value``), cut to ``limit`` by
    :func:`short_text`; a list, tuple, set, mapping or string with more items than it shows says how many it
    has: ``[1, 2, 3, 4, 5, 6, ...] (1,000,000 items)``."""
    text = short_text(_REPR.repr(value), limit)
    if isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > _REPR.maxlist:
        return f"{text} ({len(value):,} items)"
    if isinstance(value, str) and len(value) > _REPR.maxstring:
        return f"{text} ({len(value):,} characters)"
    return text


class ShortMessage(Exception):
    """An error whose ``str`` is cut to :data:`MESSAGE_LIMIT` characters by :func:`short_text`: put it first
    among an error type's bases (``class PlanError(ShortMessage, ValueError)``)."""

    def __str__(self) -> str:
        return short_text(super().__str__())
