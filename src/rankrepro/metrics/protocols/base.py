"""What an evaluation protocol is (:class:`Protocol`) and the registry of them (:data:`REGISTRY`).

A protocol is one object that says both halves of an evaluation:

- :meth:`Protocol.manifest_inputs`: which splits of a manifest are embedded, which are queries
  and which galleries (and what else the scoring reads from the manifest: labels, subsets,
  ground truth), read before any image is embedded, so a malformed manifest fails fast;
- :meth:`Protocol.score`: how the metrics are computed from those embeddings
  (:func:`rankrepro.metrics.compute` with ``protocol=`` calls it).

Nothing here reads files; a protocol module may (``gldv2-suprank`` reads the dataset's ground-truth
file through :mod:`rankrepro.data.datasets.gldv2_ground_truth`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from rankrepro.record.tasks import DEFAULT_TASK
from rankrepro.registry import Registry

if TYPE_CHECKING:
    from rankrepro.data.manifest import Manifest

__all__ = ["REGISTRY", "Protocol", "Inputs", "required", "as_numpy"]

#: protocol name -> its :class:`Protocol` class; the names are the strings the manifests' meta.json use
#: (hyphenated). Its modules are imported, in the order of :data:`rankrepro.metrics.protocols.PROTOCOLS`,
#: by the package's ``__init__``.
REGISTRY = Registry("protocol", name_pattern=r"[a-z0-9]+(-[a-z0-9]+)*")

#: ``inputs(embeddings)``: {split: [rows, D] embeddings} -> the positional and keyword arguments of
#: :func:`rankrepro.metrics.compute` besides ``metrics``, ``protocol`` and ``device``
Inputs = Callable[[dict[str, np.ndarray]], tuple[tuple, dict]]


class Protocol:
    """One evaluation protocol (a registered class; :func:`rankrepro.metrics.protocols.get` builds it).

    ``name``: the registered name. ``task``: the task whose runs it scores. ``default_metrics``: what :meth:`score` computes when it is given
    no metric names (None: :func:`~rankrepro.metrics.core.compute_plain`'s defaults).
    ``one_embedding_pass``: True: the splits of :meth:`manifest_inputs` may share images, so each
    distinct image is embedded once, in one pass over them all; False: each split is embedded in its
    own pass (same-set, query-gallery: a pass's batches decide the last bits of the embeddings on some
    backends, so this keeps their metrics what they have always been)."""

    name: str = ""
    #: the task whose runs it scores (:mod:`rankrepro.engine.tasks`): retrieval, unless it says otherwise
    task: str = DEFAULT_TASK
    default_metrics: tuple[str, ...] | None = None
    one_embedding_pass: bool = True

    @property
    def reads_manifests(self) -> bool:
        """Whether :meth:`manifest_inputs` is implemented (the protocol can evaluate a training run)."""
        return type(self).manifest_inputs is not Protocol.manifest_inputs

    def manifest_inputs(self, manifest: Manifest) -> tuple[dict[str, Manifest], Inputs]:
        """``(parts, inputs)``: ``parts`` {split: its rows} (the splits to embed, in order) and
        ``inputs`` (:data:`Inputs`). Not implemented by protocols that no dataset of a run uses yet."""
        raise NotImplementedError(f"protocol {self.name!r} does not read manifests yet")

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        """The metrics (``{name: value}``) of ``query`` against ``gallery`` (or itself), with the
        protocol's own inputs and :func:`~rankrepro.metrics.core.compute_plain`'s keyword arguments
        (``device``, ``ties``, ...) in ``kw``."""
        raise NotImplementedError


def required(kw: dict, key: str, protocol: str, what: str):
    """Pop ``kw[key]``; a ValueError naming the protocol and the input when it is missing or None."""
    if kw.get(key) is None:
        raise ValueError(f"protocol {protocol!r} needs {key}= ({what})")
    return kw.pop(key)


def as_numpy(x) -> np.ndarray:
    """A numpy view of a numpy array, a list or a torch tensor (detached, on the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)
