"""The papers' evaluation protocols, on top of :func:`rankrepro.metrics.core.compute_plain`.

:func:`run_protocol` (and :func:`rankrepro.metrics.compute` with ``protocol=``) accepts exactly the
names in :data:`PROTOCOLS`, the strings the dataset manifests use.

======================  ========================================================================
protocol                what is searched against what
======================  ========================================================================
same-set                SOP, CUB, Cars, iNaturalist, VGGFace2 test: every test image is a query
                        against all the other test images (itself removed by index).
query-gallery           In-shop: query split against the gallery split, nothing removed.
vehicleid               VehicleID small / medium / large (800 / 1600 / 2400 IDs): all-vs-all
                        *within* each test list — the DML convention (FastAP, BIER, Smooth-AP
                        code), not the original one-gallery-image-per-ID protocol.
dyml                    DyML-Vehicle / -Animal: one query/gallery benchmark per level (fine,
                        middle, coarse), binary metrics per benchmark plus their mean
                        ("overall"). DyML-Product: one same-set test set with three label
                        columns, binary metrics per level plus their mean.
gldv2-suprank           SupRank's GLDv2 / H-GLDv2 variant: queries = test images with ground
                        truth, Public and Private pooled; a query's label is the label row of
                        its *first* ground-truth index image and relevance is class-level (same
                        landmark) over the whole index; mAP@100 (DELF normaliser), H-AP, ASI, NDCG.
gldv2-official          The official GLDv2 retrieval metric (DELF ``metrics.py``): relevance is
                        the exact ground-truth index-image list; Public and Private are scored
                        separately, Ignored queries skipped; mAP@100 and P@{1,5,10,50,100}.
face / ijbc             Face retrieval mAP (Smooth-AP §5): same-set, full-list AP averaged over
                        every instance. IJB-C: the frames of a video (a template / media id) are
                        averaged into one L2-normalised vector, still images stay single
                        instances, identities with fewer than 5 instances are removed.
======================  ========================================================================
"""

from __future__ import annotations

import numpy as np
import torch

from .core import PLAIN_PROTOCOLS, compute_plain
from .inputs import as_embeddings

__all__ = ["PROTOCOLS", "run_protocol", "vehicleid", "dyml", "gldv2_suprank", "gldv2_official", "face_map",
           "average_templates", "topk_exact"]

#: every protocol name (the strings dataset manifests use); the first two are compute_plain's own
PROTOCOLS = ("same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank", "gldv2-official", "face", "ijbc")

DEFAULT_METRICS = {
    "vehicleid": ("R@1", "R@5"),
    "dyml": ("mAP", "ASI_level0", "R@1"),
    "gldv2-suprank": ("mAP@100", "H-AP", "ASI", "NDCG"),
    "face": ("mAP",),
    "ijbc": ("mAP",),
}


def _np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def vehicleid(embeddings, labels, subsets: dict, metrics=None, **kw) -> dict:
    """All-vs-all retrieval within each VehicleID test list.

    ``subsets``: {name: indices into embeddings}, e.g. {"small": ..., "medium": ..., "large": ...}.
    Returns ``{"<name>/<metric>": value}`` plus ``"<name>/n_queries"``."""
    metrics = metrics or DEFAULT_METRICS["vehicleid"]
    lab = _np(labels)
    out = {}
    for name, idx in subsets.items():
        idx = _np(idx).astype(np.int64)
        sub = embeddings[torch.from_numpy(idx)] if isinstance(embeddings, torch.Tensor) else np.asarray(embeddings)[idx]
        res = compute_plain(sub, lab[idx], metrics=metrics, **kw)
        out.update({f"{name}/{k}": v for k, v in res.items() if k != "n_lone"})
    return out


def dyml(embeddings=None, labels=None, *, benchmarks: dict | None = None, metrics=None, **kw) -> dict:
    """DyML protocols.

    Vehicle / Animal: ``benchmarks`` = {level name: dict(query=, query_labels=, gallery=,
    gallery_labels=, and optionally query_ids=, gallery_ids=)}. When the gallery holds the query
    images (SupRank's "gallery_distractor" case), pass ``query_ids``/``gallery_ids`` (e.g. file
    names): each query's own image is then removed from its list by identity (SupRank drops the
    top-1 neighbour instead, which differs only on exact ties). Returns ``"<level>/<metric>"`` and
    ``"overall/<metric>"`` (mean over the benchmarks).

    Product: ``embeddings``, ``labels`` [N, 3] (same set); returns ``"level{c}/<metric>"`` (binary
    metrics at column c) and ``"overall/<metric>"`` (mean over levels)."""
    metrics = list(metrics or DEFAULT_METRICS["dyml"])
    out = {}
    if benchmarks is not None:
        for name, b in benchmarks.items():
            excl = None
            if b.get("query_ids") is not None:
                gid = {v: i for i, v in enumerate(_np(b["gallery_ids"]).tolist())}
                excl = np.array([gid.get(v, -1) for v in _np(b["query_ids"]).tolist()], np.int64)
            res = compute_plain(b["query"], b["query_labels"], b["gallery"], b["gallery_labels"], metrics=metrics,
                                exclude=excl, **kw)
            out.update({f"{name}/{k}": v for k, v in res.items()})
        names = list(benchmarks)
    else:
        if embeddings is None or labels is None:
            raise ValueError("dyml needs either benchmarks=... or embeddings and [N, L] labels")
        lab = _np(labels)
        names = [f"level{c}" for c in range(lab.shape[1])]
        for c, name in enumerate(names):
            per = [m if "_level" not in m else m.split("_level")[0] for m in metrics]
            res = compute_plain(embeddings, lab, metrics=[f"{m}_level{c}" for m in per], **kw)
            out.update({f"{name}/{m}": res[f"{p}_level{c}"] for m, p in zip(metrics, per)})
            out[f"{name}/n_queries"] = res["n_queries"] if c == 0 else None
    for m in metrics:
        vals = [out[f"{n}/{m}"] for n in names]
        out[f"overall/{m}"] = float(np.mean(vals))
    return {k: v for k, v in out.items() if v is not None}


def gldv2_suprank(query, index, index_labels, ground_truth, *, metrics=None, **kw) -> dict:
    """SupRank's GLDv2 protocol (hgldv2.md §3; suprank.md §3.2).

    ``index_labels`` [Ni] or [Ni, L] (landmark id first, then coarser H-GLDv2 levels; a negative
    value at any level marks an image without hierarchy, dropped with its queries as SupRank's
    ``remove_nan``). ``ground_truth``: per query, the index positions of its ground-truth images
    (None or empty: not scored). A scored query takes the label row of its first ground-truth
    image; Public and Private are pooled."""
    metrics = metrics or DEFAULT_METRICS["gldv2-suprank"]
    lab = _np(index_labels)
    lab2 = lab[:, None] if lab.ndim == 1 else lab
    keep_index = (lab2 >= 0).all(1) if np.issubdtype(lab2.dtype, np.number) else np.ones(len(lab2), bool)
    first = np.array([int(g[0]) if g is not None and len(g) else -1 for g in ground_truth], np.int64)
    scored = first >= 0
    scored[scored] &= keep_index[first[scored]]
    qsel = np.flatnonzero(scored)
    isel = np.flatnonzero(keep_index)
    q = query[torch.from_numpy(qsel)] if isinstance(query, torch.Tensor) else np.asarray(query)[qsel]
    g = index[torch.from_numpy(isel)] if isinstance(index, torch.Tensor) else np.asarray(index)[isel]
    res = compute_plain(q, lab[first[qsel]], g, lab[isel], metrics=metrics, **kw)
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
    usage = _np(usage).astype(str)
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


def average_templates(embeddings, labels, templates, *, normalize: bool = True):
    """Average the embeddings of each template (IJB-C media: the frames of one video).

    Returns ``(template_embeddings [T, D], template_labels [T], template_ids [T])``; a template
    whose frames carry different labels is an error."""
    x = _np(embeddings).astype(np.float64)
    lab = _np(labels)
    ids, inv = np.unique(_np(templates), return_inverse=True)
    inv = inv.reshape(-1)
    sums = np.zeros((len(ids), x.shape[1]))
    np.add.at(sums, inv, x)
    counts = np.bincount(inv, minlength=len(ids))
    emb = sums / counts[:, None]
    if normalize:
        emb = emb / np.linalg.norm(emb, axis=1, keepdims=True).clip(min=1e-12)
    first = np.zeros(len(ids), np.int64)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    t_lab = lab[first]
    if (t_lab[inv] != lab).any():
        raise ValueError("a template holds frames of different identities")
    return emb.astype(np.float32), t_lab, ids


def face_map(embeddings, labels, *, templates=None, min_instances: int | None = None, metrics=None,
             **kw) -> dict:
    """Face retrieval mAP (Smooth-AP §5): same-set, every instance a query, full-list AP.

    ``templates``: per image, its template / media id (IJB-C videos: the frames of one video share
    an id; still images have their own) — frames are averaged per template. ``min_instances``:
    identities with fewer instances (after averaging) are removed (IJB-C: 5)."""
    metrics = metrics or DEFAULT_METRICS["face"]
    x, lab = embeddings, _np(labels)
    if templates is not None:
        x, lab, _ = average_templates(x, lab, templates)
    if min_instances:
        _, inv, cnt = np.unique(lab, return_inverse=True, return_counts=True)
        keep = np.flatnonzero(cnt[inv.reshape(-1)] >= min_instances)
        x = x[torch.from_numpy(keep)] if isinstance(x, torch.Tensor) else np.asarray(x)[keep]
        lab = lab[keep]
    res = compute_plain(x, lab, metrics=metrics, **kw)
    res["n_instances"] = int(len(lab))
    return res


def _required(kw: dict, key: str, name: str, what: str):
    if kw.get(key) is None:
        raise ValueError(f"protocol {name!r} needs {key}= ({what})")
    return kw.pop(key)


def run_protocol(name: str, query, query_labels, gallery=None, gallery_labels=None, *, metrics=None, **kw) -> dict:
    """Run protocol ``name`` (one of :data:`PROTOCOLS`; anything else is a ValueError listing them).

    ``same-set`` / ``query-gallery`` go to :func:`compute_plain`; the named protocols to the
    functions above, with their extra inputs (``subsets``, ``benchmarks``, ``ground_truth``,
    ``usage``, ``templates``, ``min_instances``, ``k``, ``precision_at``) and ``compute_plain``'s
    keyword arguments (``device``, ``ties``, ...) in ``kw``."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; allowed: {', '.join(PROTOCOLS)}")
    if name in PLAIN_PROTOCOLS:
        return compute_plain(query, query_labels, gallery, gallery_labels, metrics=metrics, protocol=name, **kw)
    if name == "vehicleid":
        subsets = _required(kw, "subsets", name, "{list name: indices}")
        return vehicleid(query, query_labels, subsets, metrics=metrics, **kw)
    if name == "dyml":
        return dyml(query, query_labels, benchmarks=kw.pop("benchmarks", None), metrics=metrics, **kw)
    if name == "gldv2-suprank":
        ground_truth = _required(kw, "ground_truth", name, "per query, its ground-truth index positions")
        return gldv2_suprank(query, gallery, gallery_labels, ground_truth, metrics=metrics, **kw)
    if name == "gldv2-official":
        for key in ("ties", "alpha", "hap_relevance", "hap_count_self", "sigma_w", "n_clusters", "kmeans_niter",
                    "kmeans_seed", "memory_budget", "max_rows"):
            kw.pop(key, None)
        if metrics is not None:
            raise ValueError("gldv2-official has fixed metrics (mAP@100, P@n); do not pass metrics")
        ground_truth = _required(kw, "ground_truth", name, "per query, its ground-truth index positions")
        usage = _required(kw, "usage", name, "per query, Public / Private / Ignored")
        return gldv2_official(query, gallery, ground_truth, usage, **kw)
    # face, ijbc
    if name == "ijbc":
        kw.setdefault("min_instances", 5)
        if kw.get("templates") is None:
            raise ValueError("protocol 'ijbc' needs templates= (the media / video id of each frame)")
    return face_map(query, query_labels, metrics=metrics, **kw)
