"""``compute``: every metric of the papers, under any evaluation protocol, in one call.

The layers, bottom to top (no module imports one above it):

* ``names`` (the metric-name grammar), ``ranking``, ``inputs``, ``chunks``, ``workers``,
  ``full_list``, ``counting``, ``cpu_kernels``, ``binary``, ``hierarchical``, ``clustering``:
  definitions and the ranking engine;
* ``core``: :func:`~rankrepro.metrics.core.compute_plain`, one query set against a gallery or
  itself (``same-set``, ``query-gallery``), metric names and tie conventions;
* ``protocols`` (VehicleID, DyML, GLDv2, face / IJB-C) and ``retrieval`` (PML-compatible
  ``retrieval_metrics``), on top of ``compute_plain``;
* this module: :func:`compute`, which checks ``protocol`` and dispatches.
"""

from __future__ import annotations

from .core import PLAIN_PROTOCOLS, Spec, compute_plain, parse_metric
from .protocols import PROTOCOLS, run_protocol

__all__ = ["compute", "parse_metric", "Spec", "PROTOCOLS"]


def compute(query, query_labels, gallery=None, gallery_labels=None, metrics=None,
            protocol: str | None = None, *, exclude=None, ties: str | None = None, alpha: float = 1.0,
            hap_relevance: str = "pop", hap_count_self: bool | None = None, sigma_w=None,
            n_clusters: int | None = None, kmeans_niter: int = 20, kmeans_seed: int = 1234,
            device=None, memory_budget: int | None = None, max_rows: int | None = None, per_query: bool = False,
            **protocol_kwargs) -> dict:
    """Compute ``metrics`` for ``query`` against ``gallery`` (or against itself) under ``protocol``.

    Args:
        query: [Nq, D] embeddings (numpy or torch; any float dtype, scored in float32). Assumed
            L2-normalised: scores are inner products.
        query_labels: [Nq] or [Nq, L] labels, finest level first (any hashable dtype).
        gallery, gallery_labels: the reference set. ``None``: same-set protocol, each query
            searched against all the others (itself removed by index).
        metrics: metric names (:mod:`rankrepro.metrics.core`); default R@1/10/100/1000, mAP@R, RP
            (or the named protocol's own defaults).
        protocol: ``None`` (same-set without a gallery, query-gallery with one) or one of
            :data:`~rankrepro.metrics.protocols.PROTOCOLS`: ``"same-set"``, ``"query-gallery"``
            (:func:`~rankrepro.metrics.core.compute_plain`), ``"vehicleid"``, ``"dyml"``,
            ``"gldv2-suprank"``, ``"gldv2-official"``, ``"face"``, ``"ijbc"``
            (:mod:`rankrepro.metrics.protocols`; their extra inputs are keyword arguments, e.g.
            ``subsets=``, ``benchmarks=``, ``ground_truth=``, ``usage=``, ``templates=``). Any
            other name is a ValueError listing these.
        exclude: [Nq] gallery index removed from each query's list (-1: none); default: the query
            itself in same-set mode, nothing otherwise. Same-set / query-gallery only.
        ties: tie convention override (:mod:`rankrepro.metrics.core`).
        alpha, hap_relevance, hap_count_self, sigma_w: H-AP relevance (``"pop"``: eq. 20 with
            exponent alpha; ``"property1"``: ΣwAP's relevance with weights ``sigma_w``);
            ``hap_count_self`` counts the query in |Ω(L)| as SupRank's code does (default: True
            when queries are excluded from their own list). ``sigma_w``: ΣwAP weights per label
            column, finest first (default uniform).
        n_clusters, kmeans_niter, kmeans_seed: NMI/F1 k-means (k defaults to the number of labels).
        device: where to score, e.g. ``"cpu"``, ``"cuda"``, ``torch.device("cuda:1")`` (default: the
            query's device; numpy input: CPU); the embeddings are moved there, every protocol
            scores there, CUDA gives the same results.
        memory_budget: bytes per chunk of queries (peak memory ~ this plus the embeddings; default
            1 GiB on CPU, 3 GiB on a GPU, where larger chunks of the row sorts run faster).
        max_rows: most queries per chunk (default 512 on CPU, 4096 on a GPU, where fewer, larger
            chunks save kernel launches and synchronisations).
        per_query: also return ``"per_query"``: {metric: float64 [Nq] (NaN where undefined)}.
            Same-set / query-gallery only.

    Returns:
        ``{metric: float}`` plus ``n_queries`` (queries with a positive at the finest level) and
        ``n_lone`` (the others, left out of binary finest-level metrics).

    Returns:
        ``{metric: float}`` plus ``n_queries`` (queries with a positive at the finest level) and
        ``n_lone`` (the others, left out of binary finest-level metrics); named protocols prefix
        their per-subset / per-level values (``"small/R@1"``, ``"overall/mAP"``, ...).
    """
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; allowed: {', '.join(PROTOCOLS)} (or None)")
    common = dict(ties=ties, alpha=alpha, hap_relevance=hap_relevance, hap_count_self=hap_count_self,
                  sigma_w=sigma_w, n_clusters=n_clusters, kmeans_niter=kmeans_niter, kmeans_seed=kmeans_seed,
                  device=device, memory_budget=memory_budget, max_rows=max_rows)
    if protocol is None or protocol in PLAIN_PROTOCOLS:
        if protocol_kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(protocol_kwargs)}")
        return compute_plain(query, query_labels, gallery, gallery_labels, metrics, protocol, exclude=exclude,
                             per_query=per_query, **common)
    if exclude is not None or per_query:
        raise ValueError(f"protocol {protocol!r} builds its own lists: exclude= and per_query= are for "
                         "same-set / query-gallery only")
    return run_protocol(protocol, query, query_labels, gallery, gallery_labels, metrics=metrics, **common,
                        **protocol_kwargs)
