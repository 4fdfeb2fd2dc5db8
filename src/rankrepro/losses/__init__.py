"""Rank-based retrieval losses.

Every loss is called as ``loss(embeddings, labels, ref_embeddings=None, ref_labels=None)``
and returns a scalar tensor: embeddings [B, D] L2-normalised; labels [B] or [B, L]
(column 0 = finest level is used); the optional reference set (memory bank) is detached.
When the reference set comes from :class:`rankrepro.losses.memory.MemoryLoss` it starts
with the current batch (indices 0..B-1), followed by the memory.

Importing this package imports every module in it (except ``registry``) so that each
``@register``-ed loss is available through :func:`build` / :func:`names`.
"""

import importlib
import pkgutil

from .registry import accepted_hparams, build, get, names, register

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "registry" and not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
del _m

from .smooth_ap import SmoothAP  # noqa: E402

__all__ = ["accepted_hparams", "build", "get", "names", "register", "SmoothAP"]
