"""Table kinds: :data:`TABLE_KINDS`, a :class:`rankrepro.registry.Registry` of
:class:`~rankrepro.tables.kinds.base.TableKind` subclasses, one module per kind.

A spec's ``kind`` (default ``runs``) names what its cells are computed from: ``runs`` (trained
runs' metrics), ``dataset_statistics`` (dataset manifests), ``sweep`` (a figure sweeping one run
setting), ``static`` (the paper's text, nothing to reproduce), ``leaderboard`` (a table of our own: every
registered retrieval loss on one dataset, its rows from the loss registry). Its kind checks the spec, plans
it, says what it reads, renders it and gives its entry in the results index. This module is the
one place that reads a spec's ``kind``. Adding a kind: a module here with a ``TableKind``
subclass decorated ``@TABLE_KINDS.register("<name>")`` (and the name in the table schema's
``kind`` enum).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from rankrepro.registry import Registry

if TYPE_CHECKING:
    from rankrepro.tables.kinds.base import TableKind

__all__ = ["DEFAULT_KIND", "TABLE_KINDS", "find_kind", "spec_kind", "table_kind"]

TABLE_KINDS = Registry("table kind", package="rankrepro.tables.kinds")
#: the kind of a spec that names none
DEFAULT_KIND = "runs"


@lru_cache(maxsize=None)
def table_kind(name: str) -> TableKind:
    """The kind registered as ``name`` (an unknown name lists the registered ones)."""
    kind = TABLE_KINDS.build(name)
    kind.name = name
    return kind


def spec_kind(spec: dict) -> TableKind:
    """The kind of a (checked) spec: its ``kind``, :data:`DEFAULT_KIND` when it names none."""
    return table_kind(spec.get("kind", DEFAULT_KIND))


def find_kind(spec) -> TableKind | None:
    """The kind of a spec not checked yet: None when it is no mapping or names no registered kind."""
    if not isinstance(spec, dict) or spec.get("kind", DEFAULT_KIND) not in TABLE_KINDS:
        return None
    return spec_kind(spec)
