"""GLDv2's two protocols.

- ``gldv2-suprank``: SupRank's GLDv2 / H-GLDv2 variant: queries = test images with ground truth,
  Public and Private pooled; a query's label is the label row of its *first* ground-truth index
  image and relevance is class-level (same landmark) over the whole index; mAP@100 (DELF
  normaliser), H-AP, ASI, NDCG.
- ``gldv2-official``: the official GLDv2 retrieval metric (DELF ``metrics.py``): relevance is the
  exact ground-truth index-image list; Public and Private are scored separately, Ignored queries
  skipped; mAP@100 and P@{1,5,10,50,100}. No run uses it yet (it reads no manifest).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import compute_plain
from ..inputs import as_embeddings
from .base import REGISTRY, Protocol, as_numpy, required
from .plain import query_gallery_inputs

__all__ = ["gldv2_suprank", "gldv2_official", "topk_exact", "GLDv2SupRank", "GLDv2Official", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("mAP@100", "H-AP", "ASI", "NDCG")


def gldv2_suprank(query, index, index_labels, ground_truth, *, metrics=None, **kw) -> dict:
    """SupRank's GLDv2 protocol (hgldv2.md §3; suprank.md §3.2).

    ``index_labels`` [Ni] or [Ni, L] (landmark id first, then coarser H-GLDv2 levels; a negative
    value at any level marks an image without hierarchy, dropped with its queries as SupRank's
    ``remove_nan``). ``ground_truth``: per query, the index positions of its ground-truth images
    (None or empty: not scored). A scored query takes the label row of its first ground-truth
    image; Public and Private are pooled."""
    metrics = metrics or DEFAULT_METRICS
    lab = as_numpy(index_labels)
    lab2 = lab[:, None] if lab.ndim == 1 else lab
    keep_index = (lab2 >= 0).all(1) if np.issubdtype(lab2.dtype, np.number) else np.ones(len(lab2), bool)
    first = np.array([int(g[0]) if g is not None and len(g) else -1 for g in ground_truth], np.int64)
    scored = first >= 0
    scored[scored] &= keep_index[first[scored]]
    qsel = np.flatnonzero(scored)
    isel = np.flatnonzero(keep_index)
    q = query[torch.from_numpy(qsel)] if isinstance(query, torch.Tensor) else np.asarray(query)[qsel]
    if len(isel) == len(lab):  # every index image has its hierarchy: no copy of the index (6 GB at full size)
        g, g_lab = index, lab
    else:
        g = index[torch.from_numpy(isel)] if isinstance(index, torch.Tensor) else np.asarray(index)[isel]
        g_lab = lab[isel]
    res = compute_plain(q, lab[first[qsel]], g, g_lab, metrics=metrics, **kw)
    res["n_scored"] = int(len(qsel))
    return res


def topk_exact(query, gallery, k: int, *, chunk: int = 1024, device=None):
    """Exact top-k ``(scores [Nq, k], indices [Nq, k])`` by decreasing score, ties by decreasing
    gallery index (the ``"index"`` convention), computed in chunks of queries."""
    q = as_embeddings(query, "query", device)
    g = as_embeddings(gallery, "gallery", q.device)
    k = min(int(k), g.shape[0])
    scores, ids = [], []
    for a in range(0, q.shape[0], chunk):
        s = q[a : a + chunk] @ g.T
        v = torch.topk(s, k, dim=1).values
        thr = v[:, -1:]
        n_ge = (s >= thr).sum(1)
        out_i = torch.empty((s.shape[0], k), dtype=torch.int64, device=s.device)
        for r in range(s.shape[0]):  # all items >= the k-th score, exact order, first k
            cand = (s[r] >= thr[r]).nonzero(as_tuple=True)[0]
            if int(n_ge[r]) > 4 * k:  # pragma: no cover - massive ties: fall back to a full order
                cand = torch.arange(s.shape[1], device=s.device)
            key = s[r, cand]
            o = np.lexsort((-cand.cpu().numpy(), -key.cpu().numpy()))[:k]
            out_i[r] = cand[torch.from_numpy(o).to(s.device)]
        scores.append(s.gather(1, out_i).cpu())
        ids.append(out_i.cpu())
    return torch.cat(scores).numpy(), torch.cat(ids).numpy()


def gldv2_official(query, index, ground_truth, usage, *, k: int = 100, precision_at=(1, 5, 10, 50, 100),
                   device=None) -> dict:
    """Official GLDv2 retrieval metrics (DELF ``MeanAveragePrecision``, max_predictions=100).

    AP@k(q) = 1/min(m_q, k) Σ_{i<=k} P_q(i) rel_q(i), m_q = number of ground-truth index images,
    relevance = membership in the exact ground-truth list; each usage group ("Public",
    "Private") is scored separately and "Ignored" queries are skipped. Also P@n (mean precision
    in the top n). Returns ``"<Usage>/mAP@100"``, ``"<Usage>/P@n"``, ``"<Usage>/n_queries"``."""
    usage = as_numpy(usage).astype(str)
    bad = set(usage.tolist()) - {"Public", "Private", "Ignored"}
    if bad:
        raise ValueError(f"usage values must be Public, Private or Ignored, got {sorted(bad)}")
    scored = np.flatnonzero(usage != "Ignored")
    for i in scored:
        if ground_truth[i] is None or len(ground_truth[i]) == 0:
            raise ValueError(f"query {i} is {usage[i]} but has no ground-truth images")
    q = query[torch.from_numpy(scored)] if isinstance(query, torch.Tensor) else np.asarray(query)[scored]
    _, top = topk_exact(q, index, k, device=device)
    ap = np.zeros(len(scored))
    prec = {n: np.zeros(len(scored)) for n in precision_at}
    for j, i in enumerate(scored):
        gt = np.asarray(ground_truth[i], np.int64)
        rel = np.isin(top[j], gt)
        hits = np.cumsum(rel)
        pos = np.arange(1, len(rel) + 1)
        ap[j] = float((hits / pos * rel).sum() / min(len(np.unique(gt)), k))
        for n in precision_at:
            prec[n][j] = hits[min(n, len(rel)) - 1] / n
    out = {}
    for group in ("Public", "Private"):
        sel = usage[scored] == group
        if not sel.any():
            continue
        out[f"{group}/mAP@{k}"] = float(ap[sel].mean())
        for n in precision_at:
            out[f"{group}/P@{n}"] = float(prec[n][sel].mean())
        out[f"{group}/n_queries"] = int(sel.sum())
    return out


@REGISTRY.register("gldv2-suprank")
class GLDv2SupRank(Protocol):
    """``query`` against ``gallery`` (the index) with every label level of the gallery (H-GLDv2: -1 =
    no hierarchy, dropped by :func:`gldv2_suprank`) and the ground-truth positions read from the
    dataset's solution file (:func:`rankrepro.data.datasets.gldv2_ground_truth.ground_truth_positions`)."""

    default_metrics = DEFAULT_METRICS

    def manifest_inputs(self, manifest):
        from rankrepro.data.datasets.gldv2_ground_truth import ground_truth_positions

        parts, plain = query_gallery_inputs(manifest)  # query-gallery's splits and labels, plus the ground truth
        ground_truth = ground_truth_positions(manifest, parts["query"], parts["gallery"])
        return parts, lambda emb: (plain(emb)[0], {"ground_truth": ground_truth})

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        ground_truth = required(kw, "ground_truth", self.name, "per query, its ground-truth index positions")
        return gldv2_suprank(query, gallery, gallery_labels, ground_truth, metrics=metrics, **kw)


#: keyword arguments of compute_plain that the official metric has no use for (dropped)
_PLAIN_ONLY = ("ties", "alpha", "hap_relevance", "hap_count_self", "sigma_w", "n_clusters", "kmeans_niter",
               "kmeans_seed", "memory_budget", "max_rows")


@REGISTRY.register("gldv2-official")
class GLDv2Official(Protocol):
    """:func:`gldv2_official`: fixed metrics, inputs ``ground_truth`` and ``usage``."""

    def score(self, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
        for key in _PLAIN_ONLY:
            kw.pop(key, None)
        if metrics is not None:
            raise ValueError("gldv2-official has fixed metrics (mAP@100, P@n); do not pass metrics")
        ground_truth = required(kw, "ground_truth", self.name, "per query, its ground-truth index positions")
        usage = required(kw, "usage", self.name, "per query, Public / Private / Ignored")
        return gldv2_official(query, gallery, ground_truth, usage, **kw)
