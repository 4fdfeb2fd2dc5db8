"""Rank-based retrieval losses.

Every loss is called as ``loss(embeddings, labels, ref_embeddings=None, ref_labels=None,
self_index=None)`` and returns a scalar tensor: embeddings [B, D] L2-normalised; labels [B]
or [B, L] (column 0 = finest level is used by the flat losses); the optional reference set
(memory bank) is detached. ``self_index`` [B] (long) gives the column of each query's own
entry in the reference set: :class:`rankrepro.losses.memory.MemoryLoss` passes
``arange(B)`` (its reference set starts with the current batch); without it a reference
set holds no query. Callers that pass no reference set or no ``self_index`` are served as
before. :func:`rankrepro.losses.inputs.retrieval_lists` is the one place that builds these
lists.

``faster_rcnn`` (:mod:`rankrepro.losses.detection`) is the exception: the box-head losses of a
detector (``task = "detection"``), called with a detector's RoI outputs; ``names()`` lists the
retrieval losses only (:mod:`rankrepro.losses.registry`).

The ranking losses (Smooth-AP, PNP, BlackBox-AP / RaMBO, the SupRank family) are heads over
one differentiable-rank core, :mod:`rankrepro.losses.rank`: rank and rank+ of each query's
relevant items with a pluggable step (:mod:`rankrepro.losses.steps`: exact, sigmoid, SupRank's
H^-, blackbox), computed in query blocks with a recomputing backward.

Losses are registered in :data:`rankrepro.losses.registry.LOSSES` (a
:class:`rankrepro.registry.Registry`); variants are registrations with fixed keywords.
:func:`build` checks the hyper-parameters, ``defaults(name)`` gives the keyword defaults
(JSON values). Importing this package imports every module in it so that each registered
loss is available through :func:`build` / :func:`names`.
"""

from .registry import LOSSES, accepted_hparams, build, defaults, get, names, register, task_of

names()  # imports every module of the package (the registrations)

from .smooth_ap import SmoothAP  # noqa: E402

__all__ = ["LOSSES", "accepted_hparams", "build", "defaults", "get", "names", "register", "task_of", "SmoothAP"]
