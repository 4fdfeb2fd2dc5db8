"""Datasets by name: :data:`DATASETS`, a :class:`rankrepro.registry.Registry` of
:class:`~rankrepro.data.datasets.base.Dataset` subclasses, one module per dataset.

``load(name)`` is the dataset instance (its registered builder called with the
registration's fixed keywords, ``name`` set); ``facts()`` the planner's JSON facts of
every dataset. Adding a dataset: a module here with a ``Dataset`` subclass decorated
``@DATASETS.register("<name>")`` (see :mod:`rankrepro.data.datasets.base` and ``sop.py``);
a variant is another registration with fixed keywords,
``DATASETS.register("dyml_vehicle", domain="vehicle")(DyML)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rankrepro.registry import Registry

if TYPE_CHECKING:
    from rankrepro.data.datasets.base import Dataset

__all__ = ["DATASETS", "names", "load", "facts"]

DATASETS = Registry("dataset", package="rankrepro.data.datasets")


def names() -> list[str]:
    """The registered dataset names, sorted."""
    return DATASETS.names()


def load(name: str) -> Dataset:
    """The dataset registered as ``name`` (an unknown name lists the registered ones)."""
    dataset = DATASETS.build(name)
    dataset.name = name
    return dataset


def facts() -> dict[str, dict]:
    """{name: :meth:`Dataset.facts`} of every registered dataset (JSON; imports no torch)."""
    return {name: load(name).facts() for name in names()}
