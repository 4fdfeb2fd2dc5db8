"""Retrieval evaluation: exact, chunked metrics and the papers' evaluation protocols.

``compute(query, query_labels, gallery=None, gallery_labels=None, metrics=[...], protocol=...,
device=...)`` is the entry point (:mod:`rankrepro.metrics.api`; ``protocol`` one of
:data:`PROTOCOLS`). Definitions live in ``ranking`` (engine and tie conventions; its parts
``inputs``, ``chunks``, ``workers``, ``full_list``, ``counting``, ``cpu_kernels``), ``binary``
(binary metrics), ``hierarchical`` (H-AP, ΣwAP, ASI, NDCG), ``clustering`` (NMI, F1, dists),
``names`` (metric-name grammar), ``core`` (one query set against a gallery) and ``protocols``
(dataset protocols); ``retrieval`` is the PML-compatible ``retrieval_metrics`` and ``knn`` exact
k-NN search; ``detection`` (apart from the rest) is ``voc_ap``, PASCAL VOC detection AP. No module
imports one above it (``tests/test_imports.py``).

The names below are loaded on first use, so that ``rankrepro.metrics.names`` (checking metric
names while planning) imports neither numpy nor torch.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module

#: public name -> the submodule defining it
_EXPORTS = {"compute": "api", "PROTOCOLS": "protocols", "parse_metric": "names", "knn": "knn",
            "knn_chunks": "knn", "retrieval_metrics": "retrieval", "voc_ap": "detection"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # importing the submodule ``knn`` binds it on the package; ``rankrepro.metrics.knn`` stays
        # the function whichever is imported first
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
