"""The papers' evaluation protocols: one registered :class:`~.base.Protocol` per protocol, each saying
which splits of a manifest are queries and galleries (:meth:`~.base.Protocol.manifest_inputs`) and how
the metrics are scored (:meth:`~.base.Protocol.score`, on top of
:func:`rankrepro.metrics.core.compute_plain`).

:data:`PROTOCOLS` are the registered names (the strings the manifests' ``meta.json`` use), in the
order of the table; :func:`get` builds one, :func:`of_manifest` the one a manifest names,
:func:`run_protocol` (and :func:`rankrepro.metrics.compute` with ``protocol=``) scores with one.
A new protocol is a module here that registers its class in :data:`~.base.REGISTRY`, imported below.
The scoring functions are in the protocols' modules (``vehicleid.vehicleid``, ``dyml.dyml``, ...);
those of GLDv2 and faces are also importable from here.

======================  ========================================================================
protocol (module)       what is searched against what
======================  ========================================================================
same-set (plain)        SOP, CUB, Cars, iNaturalist: every test image is a query
                        against all the other test images (itself removed by index).
query-gallery (plain)   In-shop: query split against the gallery split, nothing removed.
vehicleid               VehicleID small / medium / large (800 / 1600 / 2400 IDs): all-vs-all
                        *within* each test list — the DML convention (FastAP, BIER, Smooth-AP
                        code), not the original one-gallery-image-per-ID protocol.
dyml                    DyML-Vehicle / -Animal: one query/gallery benchmark per level (fine,
                        middle, coarse), binary metrics per benchmark plus their mean
                        ("overall"). DyML-Product: one same-set test set with three label
                        columns, binary metrics per level plus their mean.
gldv2-suprank (gldv2)   SupRank's GLDv2 / H-GLDv2 variant: queries = test images with ground
                        truth, Public and Private pooled; a query's label is the label row of
                        its *first* ground-truth index image and relevance is class-level (same
                        landmark) over the whole index; mAP@100 (DELF normaliser), H-AP, ASI, NDCG.
gldv2-official (gldv2)  The official GLDv2 retrieval metric (DELF ``metrics.py``): relevance is
                        the exact ground-truth index-image list; Public and Private are scored
                        separately, Ignored queries skipped; mAP@100 and P@{1,5,10,50,100}.
face / ijbc (face)      Face retrieval mAP (Smooth-AP §5): same-set, full-list AP averaged over
                        every instance (VGGFace2 test: every image). IJB-C: the frames of a video
                        sighting (the manifest's ``instance`` column) are averaged into one
                        L2-normalised vector, still images stay single instances, identities
                        with fewer than 5 instances (after the averaging) are removed.
voc07 (voc)             Pascal VOC 2007 detection (the detection task's): the test split's
                        detections against its objects, 11-point AP at IoU 0.5 (VOC AP).
======================  ========================================================================

``gldv2-official`` scores arrays but reads no manifest yet: no run evaluates with it
(:func:`of_manifest` says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import REGISTRY, Protocol
from . import plain, vehicleid, dyml, gldv2, face, voc  # noqa: E402,F401  (the registrations, in the order of PROTOCOLS)
from .face import average_templates, face_map
from .gldv2 import gldv2_official, gldv2_suprank, topk_exact

if TYPE_CHECKING:
    from rankrepro.data.manifest import Manifest

__all__ = ["PROTOCOLS", "DEFAULT_METRICS", "REGISTRY", "Protocol", "get", "of_manifest", "run_protocol",
           "gldv2_suprank", "gldv2_official", "face_map", "average_templates", "topk_exact"]

#: every protocol name (the strings dataset manifests use), in registration order
PROTOCOLS = tuple(REGISTRY.registered())


def get(name: str) -> Protocol:
    """The protocol registered as ``name``; a ValueError listing :data:`PROTOCOLS` otherwise."""
    if not isinstance(name, str) or name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; allowed: {', '.join(PROTOCOLS)}")
    protocol = REGISTRY.build(name)
    protocol.name = name
    return protocol


#: protocol -> the metrics it computes when given none (the protocols that have their own)
DEFAULT_METRICS = {name: get(name).default_metrics for name in PROTOCOLS if get(name).default_metrics}


def of_manifest(manifest: Manifest, task: str | None = None) -> Protocol:
    """The protocol a manifest's ``meta.json`` names (``protocol``), able to read the manifest (and, with ``task``,
    one that scores runs of that task).

    An unknown name is a ValueError naming the ``meta.json`` and the registered protocols; a
    protocol that reads no manifest yet a NotImplementedError naming those that do; one of another task a
    ValueError naming the ``meta.json``, the protocol's task and the protocols of ``task``."""
    where = manifest.directory / "meta.json" if manifest.directory else "manifest"
    name = manifest.meta.get("protocol")
    try:
        protocol = get(name)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    if not protocol.reads_manifests:
        readers = [p for p in PROTOCOLS if get(p).reads_manifests]
        raise NotImplementedError(f"{where}: evaluation of protocol {name!r} is not wired into training runs yet "
                                  f"(supported: {', '.join(readers)})")
    if task is not None and protocol.task != task:
        own = [p for p in PROTOCOLS if get(p).task == task]
        raise ValueError(f"{where}: protocol {name!r} scores {protocol.task} runs, not {task} runs (the protocols of "
                         f"{task}: {', '.join(own) or 'none'})")
    return protocol


def run_protocol(name: str, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
    """Score with protocol ``name`` (one of :data:`PROTOCOLS`; anything else is a ValueError listing them).

    ``same-set`` / ``query-gallery`` go to :func:`~rankrepro.metrics.core.compute_plain`; the named
    protocols take their extra inputs (``subsets``, ``benchmarks``, ``ground_truth``, ``usage``,
    ``templates``, ``min_instances``, ``k``, ``precision_at``) and ``compute_plain``'s keyword
    arguments (``device``, ``ties``, ...) in ``kw`` (:meth:`~.base.Protocol.score`)."""
    return get(name).score(query, query_labels, gallery, gallery_labels, metrics=metrics, **kw)
