"""Metric names: the grammar of ``metrics=[...]`` (see :mod:`rankrepro.metrics.core`).

:func:`parse_metric` checks a name without computing anything (e.g. when a run is planned); this
module imports nothing but the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Spec", "parse_metric"]


@dataclass(frozen=True)
class Spec:
    """One parsed metric name."""

    name: str
    family: str  # "ranked" | "full" | "hier" | "cluster" | "dists"
    kind: str  # R@k, TR@k, P@k, mAP@R, RP, mAP@k, MRR, mAP, ASI, NDCG, H-AP, SwAP, NMI, F1, dists@...
    k: int | None = None
    col: int | None = None  # label column (binary metrics, clustering)


def parse_metric(name: str) -> Spec:
    """Parse a metric name (:mod:`rankrepro.metrics.core`); raises ValueError listing the grammar."""
    base, col = name, None
    m = re.fullmatch(r"(.+)_level(\d+)", name)
    if m:
        base, col = m.group(1), int(m.group(2))
    m = re.fullmatch(r"(R|TR|P|mAP)@(\d+)", base)
    if m and int(m.group(2)) >= 1:
        kind = {"R": "R@k", "TR": "TR@k", "P": "P@k", "mAP": "mAP@k"}[m.group(1)]
        return Spec(name, "ranked", kind, int(m.group(2)), col or 0)
    if base in ("mAP@R", "RP", "MRR"):
        return Spec(name, "ranked", base, None, col or 0)
    if base in ("mAP", "AP"):
        return Spec(name, "full", "mAP", None, col or 0)
    if base in ("ASI", "NDCG"):
        return Spec(name, "full" if col is not None else "hier", base, None, col)
    if base in ("H-AP", "ΣwAP", "SwAP") and col is None:
        return Spec(name, "hier", "SwAP" if base != "H-AP" else "H-AP")
    if base in ("NMI", "F1"):
        return Spec(name, "cluster", base, None, col or 0)
    if base in ("dists@intra", "dists@inter", "dists@intra_over_inter"):
        return Spec(name, "dists", base, None, col or 0)
    raise ValueError(
        f"unknown metric {name!r}; allowed: R@k, TR@k, P@k, mAP@k (k >= 1), mAP@R, RP, MRR, mAP (AP), "
        "ASI, NDCG, H-AP, ΣwAP (SwAP), NMI, F1, dists@intra, dists@inter, dists@intra_over_inter; "
        "binary metrics take a _level{c} suffix (label column c, finest = 0)"
    )
