"""``same-set`` and ``query-gallery``: :func:`~rankrepro.metrics.core.compute_plain`'s own protocols.

- ``same-set`` (SOP, CUB, Cars, iNaturalist): every image of the ``test`` split is a
  query against all the other test images (itself removed by index).
- ``query-gallery`` (In-shop): the ``query`` split against the ``gallery`` split, nothing removed.

Each split is embedded in its own pass (:attr:`Protocol.one_embedding_pass` False).
Their manifest readers, :func:`same_set_inputs` and :func:`query_gallery_inputs`, are shared with the
protocols whose manifests have the same splits (DyML-Product; ``gldv2-suprank``, which adds its ground truth).
"""

from __future__ import annotations

from ..core import compute_plain
from .base import REGISTRY, Protocol

__all__ = ["SameSet", "QueryGallery", "same_set_inputs", "query_gallery_inputs"]


def same_set_inputs(manifest):
    """:meth:`~.base.Protocol.manifest_inputs` of the ``test`` split against itself, all its label levels."""
    parts = {"test": manifest.split("test")}
    labels = parts["test"].labels()
    return parts, lambda emb: ((emb["test"], labels), {})


def query_gallery_inputs(manifest):
    """:meth:`~.base.Protocol.manifest_inputs` of the ``query`` split against the ``gallery`` split, all
    their label levels."""
    parts = {"query": manifest.split("query"), "gallery": manifest.split("gallery")}
    query_labels, gallery_labels = parts["query"].labels(), parts["gallery"].labels()
    return parts, lambda emb: ((emb["query"], query_labels, emb["gallery"], gallery_labels), {})


class _Plain(Protocol):
    """A protocol of :func:`compute_plain` (``protocol=`` its name)."""

    one_embedding_pass = False

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        return compute_plain(query, query_labels, gallery, gallery_labels, metrics=metrics, protocol=self.name, **kw)


@REGISTRY.register("same-set")
class SameSet(_Plain):
    """The ``test`` split against itself."""

    def manifest_inputs(self, manifest):
        return same_set_inputs(manifest)


@REGISTRY.register("query-gallery")
class QueryGallery(_Plain):
    """The ``query`` split against the ``gallery`` split."""

    def manifest_inputs(self, manifest):
        return query_gallery_inputs(manifest)
