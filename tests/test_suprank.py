"""Tests for rankrepro.losses.suprank: Sup-AP, Sup/Smooth-R@k, (Sup/Smooth-)H-AP, NDCG, ROD."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import accepted_hparams, build, names
from rankrepro.losses.calibration import CalibrationLoss, NormalizedSoftmaxDG
from rankrepro.losses.smooth_ap import SmoothAP
from rankrepro.losses.suprank import HAPPIER, ROADMAP, SupAP, SupHAP, SupNDCG, SupRecall

from lossutil import h_minus, sig, unit

SUP = dict(tau=0.01, rho=100.0, delta=0.05, start=0.5, offset=1.44, fix="post_pr13")
K = (1, 2, 4, 8, 16)
RANK_LOSSES = ["sup_ap", "sup_recall", "smooth_recall", "sup_hap", "smooth_hap", "sup_ndcg", "smooth_ndcg"]
HIER = {"sup_hap", "smooth_hap", "sup_ndcg", "smooth_ndcg"}


def hier_labels(seed, sizes=(1, 2, 3, 5, 2, 4, 2), n_super=3):
    """[B, 2] shuffled labels (fine, coarse) with uneven class sizes (1 = no fine positive)."""
    fine = torch.cat([torch.full((s,), c) for c, s in enumerate(sizes)])
    g = torch.Generator().manual_seed(seed)
    fine = fine[torch.randperm(len(fine), generator=g)]
    return torch.stack([fine, fine % n_super], 1)


# ------------------------------------------------------- reference: the paper, with loops


def loop_loss(kind, emb, labels, ref=None, ref_labels=None, include_query=True, surrogate="sup", tau=0.01,
              sup=SUP, alpha=1.0, at_k=K, temp=1.0, recall_tie=1.0):
    """1 - mean metric, from the paper's equations with explicit loops (float64).

    kind: "ap" (eq. 9/11), "hap" (eq. 18-21), "ndcg" (eq. 23/24), "recall" (eq. 15/16).
    surrogate: "sup" (H^- on lower-level pairs, exact H elsewhere and in rank+),
    "sigmoid" (every pair), "exact" (H everywhere; recall uses H(k - rank) with H(0) =
    ``recall_tie``). The list: the batch (query kept iff include_query) or the ref set
    (own entry = index q when the ref set starts with the batch, kept iff include_query).
    """
    emb = emb.double()
    labels = labels if labels.ndim == 2 else labels[:, None]
    flat = kind in ("ap", "recall")
    if flat:
        labels = labels[:, :1]
    if ref is None:
        ref, ref_labels, own = emb, labels, True
    else:
        ref = ref.detach().double()
        ref_labels = ref_labels if ref_labels.ndim == 2 else ref_labels[:, None]
        ref_labels = ref_labels[:, : labels.shape[1]]
        n = emb.shape[0]
        own = (ref.shape[0] >= n and torch.equal(ref[:n], emb.detach())
               and torch.equal(ref_labels[:n], labels))
    L = labels.shape[1]
    vals = []
    for q in range(emb.shape[0]):
        s = ref @ emb[q]
        items = [j for j in range(ref.shape[0]) if include_query or not (own and j == q)]
        lev = {j: int(sum(int(labels[q, lv] == ref_labels[j, lv]) for lv in range(L))) for j in items}
        if not [j for j in items if lev[j] > 0 and not (own and j == q)]:
            continue
        if kind == "hap":
            counts = {lv: sum(1 for j in items if lev[j] == lv) for lv in range(L + 1)}
            rel = {j: ((lev[j] / L) ** alpha / counts[lev[j]] if lev[j] > 0 else 0.0) for j in items}
        else:
            rel = {j: float(lev[j]) for j in items}

        def step_rank(i, j, t):
            if surrogate == "exact":
                return (t >= 0).double()
            if surrogate == "sigmoid":
                return torch.sigmoid(t / tau)
            if lev[j] < lev[i]:
                return h_minus(t, sup["tau"], sup["rho"], sup["delta"], sup["start"], sup["offset"], sup["fix"])
            return (t >= 0).double()

        ranks, rplus = {}, {}
        for i in items:
            if lev[i] == 0:
                continue
            rank, rp = 1.0, rel[i]
            for j in items:
                if j == i:
                    continue
                t = s[j] - s[i]
                rank = rank + step_rank(i, j, t)
                r = torch.sigmoid(t / tau) if surrogate == "sigmoid" else (t >= 0).double()
                rp = rp + r * min(rel[i], rel[j])
            ranks[i], rplus[i] = rank, rp
        if kind in ("ap", "hap"):
            v = sum(rplus[i] / ranks[i] for i in ranks) / sum(rel.values())
        elif kind == "ndcg":
            gains = sorted((2.0 ** lev[j] - 1 for j in items), reverse=True)
            idcg = sum(g / math.log2(1 + r) for r, g in enumerate(gains, start=1))
            v = sum((2.0 ** lev[i] - 1) / torch.log2(1 + torch.as_tensor(ranks[i])) for i in ranks) / idcg
        else:
            n_pos = len(ranks)
            v = 0.0
            for k in at_k:
                if surrogate == "exact":
                    hit = sum(float(ranks[i] < k) + recall_tie * float(ranks[i] == k) for i in ranks)
                else:
                    hit = sum(torch.sigmoid((k - ranks[i]) / temp) for i in ranks)
                v = v + hit / min(n_pos, k)
            v = v / len(at_k)
        vals.append(torch.as_tensor(v, dtype=torch.float64))
    if not vals:
        return emb.sum() * 0
    return 1 - torch.stack(vals).mean()


KIND = {"sup_ap": ("ap", "sup"), "sup_recall": ("recall", "sup"), "smooth_recall": ("recall", "sigmoid"),
        "sup_hap": ("hap", "sup"), "smooth_hap": ("hap", "sigmoid"), "sup_ndcg": ("ndcg", "sup"),
        "smooth_ndcg": ("ndcg", "sigmoid")}


def exact_loss(kind, emb, labels, include_query=True, alpha=1.0, at_k=K, recall_tie=1.0):
    """1 - mean exact metric, vectorised per query (same conventions as :func:`loop_loss`,
    no reference set): ranks by pairwise comparison (ties count as ranked before)."""
    emb = emb.double()
    y = labels if labels.ndim == 2 else labels[:, None]
    if kind in ("ap", "recall"):
        y = y[:, :1]
    L = y.shape[1]
    vals = []
    for q in range(emb.shape[0]):
        keep = torch.ones(len(y), dtype=torch.bool)
        keep[q] = include_query
        s = (emb @ emb[q])[keep]
        lev = (y[keep] == y[q]).sum(1).double()
        others = lev.clone()
        if include_query:
            others[int(keep[:q].sum())] = 0
        if not (others > 0).any():
            continue
        ahead = (s[None, :] >= s[:, None]).double()  # ahead[i, j] = 1 if j at or above i
        ahead.fill_diagonal_(0)
        rank = 1 + ahead.sum(1)
        pos = lev > 0
        if kind == "hap":
            counts = torch.stack([(lev == lv).sum() for lv in range(L + 1)]).double()
            rel = torch.where(pos, (lev / L) ** alpha / counts[lev.long()], torch.zeros_like(lev))
        else:
            rel = lev
        if kind in ("ap", "hap"):
            hplus = rel + (ahead * torch.minimum(rel[:, None], rel[None, :])).sum(1)
            vals.append((hplus / rank)[pos].sum() / rel.sum())
        elif kind == "ndcg":
            gain = 2.0**lev - 1
            ideal = torch.sort(gain, descending=True).values
            idcg = (ideal / torch.log2(1 + torch.arange(1.0, len(gain) + 1, dtype=torch.float64))).sum()
            vals.append((gain / torch.log2(1 + rank)).sum() / idcg)
        else:
            r = rank[pos]
            v = sum((((r < k).double() + recall_tie * (r == k).double()).sum() / min(int(pos.sum()), k))
                    for k in at_k)
            vals.append(torch.as_tensor(v / len(at_k)))
    return 1 - torch.stack(vals).mean().item()


def test_exact_reference_agrees_with_the_loop_reference():
    y = hier_labels(1, sizes=(1, 2, 3, 4, 2, 3))
    e = unit(len(y), 4, 1)
    for kind in ("ap", "hap", "ndcg", "recall"):
        for include_query in (True, False):
            with torch.no_grad():
                loop = loop_loss(kind, e, y, include_query=include_query, surrogate="exact", alpha=2.0).item()
            assert exact_loss(kind, e, y, include_query, alpha=2.0) == pytest.approx(loop, abs=1e-9)


# --------------------------------------------------------------------- (1) differential


@pytest.mark.parametrize("name", RANK_LOSSES)
@pytest.mark.parametrize("include_query", [True, False])
def test_matches_loop_reference_value_and_grad(name, include_query):
    seed = RANK_LOSSES.index(name) + 10 * include_query
    y = hier_labels(seed)
    e = (unit(len(y), 6, seed) * 1.0).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    loss = build(name, include_query=include_query)
    ours = loss(e, y)
    kind, surrogate = KIND[name]
    expect = loop_loss(kind, e2, y, include_query=include_query, surrogate=surrogate)
    torch.testing.assert_close(ours.double(), expect, atol=2e-5, rtol=0)
    ours.backward()
    expect.backward()
    assert e.grad.abs().max() > 0
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=2e-4, rtol=2e-3)


@pytest.mark.parametrize("name", RANK_LOSSES)
@pytest.mark.parametrize("ref_kind", ["foreign", "memory"])
def test_matches_loop_reference_with_ref_set(name, ref_kind):
    seed = RANK_LOSSES.index(name)
    y = hier_labels(seed, sizes=(2, 3, 1, 4, 2))
    e = unit(len(y), 6, seed).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    other = unit(10, 6, seed + 100)
    other_y = hier_labels(seed + 100, sizes=(3, 2, 4, 1))[:10]
    if ref_kind == "memory":  # as MemoryLoss builds it: [batch (detached), memory]
        ref, ref_y = torch.cat([e.detach(), other]), torch.cat([y, other_y])
    else:
        ref, ref_y = other, other_y
    ref = ref.clone().requires_grad_()
    own = {"self_index": torch.arange(len(y))} if ref_kind == "memory" else {}  # what MemoryLoss passes
    kind, surrogate = KIND[name]
    for include_query in (True, False):
        e.grad = e2.grad = None
        ours = build(name, include_query=include_query)(e, y, ref, ref_y, **own)
        expect = loop_loss(kind, e2, y, ref, ref_y, include_query=include_query, surrogate=surrogate)
        torch.testing.assert_close(ours.double(), expect, atol=2e-5, rtol=0)
        ours.backward()
        expect.backward()
        torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=2e-4, rtol=2e-3)
        assert ref.grad is None  # no gradient into the reference set
    if ref_kind == "memory":  # the own entry is recognised: include_query changes the value
        a = build(name, include_query=True)(e, y, ref, ref_y, **own)
        b = build(name, include_query=False)(e, y, ref, ref_y, **own)
        assert abs(a.item() - b.item()) > 1e-4


def test_pre_pr13_and_offset_none_match_loop():
    y = hier_labels(4)
    e = unit(len(y), 5, 4).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    sup = dict(SUP, fix="pre_pr13", offset=None, rho=10.0)
    ours = SupAP(step_fix="pre_pr13", offset=None, rho=10.0)(e, y)
    expect = loop_loss("ap", e2, y, sup=sup)
    torch.testing.assert_close(ours.double(), expect, atol=2e-5, rtol=0)
    ours.backward()
    expect.backward()
    torch.testing.assert_close(e.grad.double(), e2.grad.double(), atol=2e-4, rtol=2e-3)
    assert abs(ours.item() - SupAP()(e, y).item()) > 1e-3


def test_memory_loss_wrapper_feeds_the_batch_first():
    """build(..., memory=...) over a few batches equals the loop on [batch, memory]."""
    loss = build("sup_ap", include_query=False, memory={"size": 20})
    mem_e, mem_y = None, None
    for step in range(3):
        y = hier_labels(step, sizes=(2, 3, 4, 1))[:, 0] + 10 * (step % 2)
        e = unit(len(y), 6, step).requires_grad_()
        ours = loss(e, y)
        if mem_e is None:
            expect = loop_loss("ap", e, y, include_query=False)
        else:
            expect = loop_loss("ap", e, y, torch.cat([e.detach(), mem_e]), torch.cat([y, mem_y]),
                               include_query=False)
        torch.testing.assert_close(ours.double(), expect, atol=2e-5, rtol=0)
        ours.backward()
        mem_e = torch.cat([e.detach(), mem_e])[:20] if mem_e is not None else e.detach()[:20]
        mem_y = torch.cat([y, mem_y])[:20] if mem_y is not None else y[:20]


# ------------------------------------------------------------------- (2) upper bounds


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("include_query", [True, False])
def test_sup_losses_upper_bound_the_exact_losses(seed, include_query):
    """Sup-AP >= 1 - AP, Sup-H-AP >= 1 - H-AP, Sup-NDCG >= 1 - NDCG (post_pr13, start 0.5),
    and (empirically, see the counterexample below) Sup-R@K >= 1 - R@K."""
    y = hier_labels(seed, sizes=(2, 5, 3, 1, 4, 6, 2, 3, 4))
    e = unit(len(y), 3 + seed % 4, seed)
    for name, kind, kw in [("sup_ap", "ap", {}), ("sup_hap", "hap", {}), ("sup_ndcg", "ndcg", {}),
                           ("sup_recall", "recall", {}), ("sup_ap", "ap", {"offset": None}),
                           ("sup_ap", "ap", {"step_fix": "pre_pr13"}), ("sup_hap", "hap", {"alpha": 3.0})]:
        sup_val = build(name, include_query=include_query, **kw)(e, y).item()
        exact = exact_loss(kind, e, y, include_query, alpha=kw.get("alpha", 1.0))
        assert sup_val >= exact - 1e-6, (name, kw, sup_val, exact)


def test_inat_start_zero_is_not_an_upper_bound_on_0_delta():
    """With start=0, offset=1 (iNat configs) H^-(t) = sigmoid(t/tau) < 1 on (0, delta]:
    one negative 0.01 above the only positive gives Sup-AP < 1 - AP."""
    ref = torch.eye(2)
    ref_y = torch.tensor([0, 1])  # item 0 positive, item 1 negative
    q = torch.tensor([[0.50, 0.51]])  # scores: the negative is ranked first, t = 0.01
    exact = 1 - 1 / 2  # positive at rank 2: AP = 1/2
    inat = SupAP(start=0.0, offset=1.0)(q, torch.tensor([0]), ref, ref_y).item()
    assert inat == pytest.approx(1 - 1 / (1 + sig(1.0)), abs=1e-6)  # 0.4223
    assert inat < exact
    sop = SupAP(start=0.5, offset=1.44)(q, torch.tensor([0]), ref, ref_y).item()
    assert sop == pytest.approx(1 - 1 / (1.5 + sig(1.0)), abs=1e-6) and sop >= exact
    # beyond delta both configs are bounds again
    q = torch.tensor([[0.50, 0.60]])
    assert SupAP(start=0.0, offset=1.0)(q, torch.tensor([0]), ref, ref_y).item() >= exact


def test_sup_recall_outer_sigmoid_is_not_a_guaranteed_bound():
    """The second sigmoid of eq. 16 (tau* = 1) credits a positive just beyond rank k with
    sigma(-1) > 0: 3 positives on top, 13 negatives a hair above a 4th positive, K = {16}."""
    n_neg = 13
    s = torch.tensor([0.9, 0.8, 0.7] + [0.5 + 1e-6 * (i + 1) for i in range(n_neg)] + [0.5, -0.5])
    ref_y = torch.tensor([0, 0, 0] + [1] * n_neg + [0, 1])
    q, ref = s[None, :], torch.eye(len(s))
    exact = 1 - 3 / 4  # TR@16: the 4th positive is at rank 17
    val = SupRecall(at_k=[16])(q, torch.tensor([0]), ref, ref_y).item()
    assert val < exact
    assert val == pytest.approx(1 - (3 + sig(16 - 17.0)) / 4, abs=2e-3)
    # as tau* -> 0 the outer sigmoid becomes a step and the bound is restored
    assert SupRecall(at_k=[16], temp=1e-3)(q, torch.tensor([0]), ref, ref_y).item() >= exact - 1e-6


# ------------------------------------------------------------------ (3) tau -> 0 limits


def test_smooth_losses_tend_to_the_exact_metrics():
    y = hier_labels(7, sizes=(2, 5, 3, 4, 6, 2, 3, 4))
    e = unit(len(y), 8, 7)
    for name, kind in [("smooth_hap", "hap"), ("smooth_ndcg", "ndcg")]:
        exact = exact_loss(kind, e, y)
        errs = [abs(build(name, tau=t)(e, y).item() - exact) for t in (0.1, 0.01, 1e-6)]
        assert errs[2] < 1e-4 and errs[0] > errs[2], (name, errs)
    # Smooth-R@k: both temperatures -> 0 give R@k with a positive at rank exactly k
    # counted 1/2 (sigma(0)); the query itself sits at rank 1 = k for k = 1.
    exact = exact_loss("recall", e, y, recall_tie=0.5)
    errs = [abs(build("smooth_recall", tau=t, temp=t2)(e, y).item() - exact)
            for t, t2 in ((0.1, 1.0), (0.01, 0.1), (1e-7, 1e-5))]
    assert errs[2] < 1e-4 and errs[0] > errs[2], errs
    # SupRank with start 0, offset 1, rho 0 and tiny tau, delta is the exact rank
    for name, kind in [("sup_ap", "ap"), ("sup_hap", "hap"), ("sup_ndcg", "ndcg")]:
        v = build(name, tau=1e-7, delta=1e-6, rho=0.0, start=0.0, offset=1.0)(e, y).item()
        assert v == pytest.approx(exact_loss(kind, e, y), abs=1e-5), name


def test_sigma_w_relevance_trains_the_sigma_w_ap_it_is_tested_on():
    """relevance="sigma_w" (supplementary eq. 44): at the exact-rank limit, 1 - loss is the ΣwAP
    metric (query out of its list, as in evaluation) for uniform and for given weights, and it
    differs from H-AP (eq. 20) on the same ranking."""
    from rankrepro.metrics import compute

    y = hier_labels(11, sizes=(2, 3, 4, 2, 5, 3))
    e = unit(len(y), 8, 11)
    exact = {"tau": 1e-7, "delta": 1e-6, "rho": 0.0, "start": 0.0, "offset": 1.0, "include_query": False}
    for weights in (None, [0.8, 0.2]):
        got = 1 - build("sup_hap", relevance="sigma_w", weights=weights, **exact)(e, y).item()
        metrics = compute(e, y, metrics=["SwAP", "H-AP"], sigma_w=weights)
        assert got == pytest.approx(metrics["SwAP"], abs=1e-5), weights
        assert abs(metrics["SwAP"] - metrics["H-AP"]) > 1e-3
    hap = 1 - build("sup_hap", **exact)(e, y).item()
    assert hap == pytest.approx(compute(e, y, metrics=["H-AP"], hap_count_self=False)["H-AP"], abs=1e-5)
    with pytest.raises(ValueError, match="relevance must be"):
        build("sup_hap", relevance="swap")
    with pytest.raises(ValueError, match="weights"):
        build("sup_hap", weights=[0.5, 0.5])  # weights without relevance sigma_w
    with pytest.raises(ValueError, match="2 weights"):
        build("sup_hap", relevance="sigma_w", weights=[1.0])(e, y)


def test_hap_with_one_level_equals_ap():
    y = hier_labels(8)
    e = unit(len(y), 6, 8)
    for include_query in (True, False):
        torch.testing.assert_close(SupHAP(include_query=include_query)(e, y[:, :1]),
                                   SupAP(include_query=include_query)(e, y[:, 0]))
        torch.testing.assert_close(build("smooth_hap", include_query=include_query, tau=0.02)(e, y[:, 0]),
                                   SmoothAP(tau=0.02, include_query=include_query)(e, y[:, 0]),
                                   atol=1e-6, rtol=0)
        # and the relevance exponent does not matter with one level
        torch.testing.assert_close(SupHAP(alpha=5.0, include_query=include_query)(e, y[:, :1]),
                                   SupAP(include_query=include_query)(e, y[:, 0]))


# ----------------------------------------------------------------- (4) other properties


@pytest.mark.parametrize("name", ["sup_ap", "sup_recall", "sup_hap", "sup_ndcg"])
def test_gradient_pushes_positives_up_and_negatives_down(name):
    """ref = identity so that s_j = query[j]: dL/ds <= 0 on the most relevant items (same
    fine class), >= 0 on the negatives (no shared level)."""
    n = 14
    ref = torch.eye(n)
    ref_y = torch.tensor([[0, 0], [1, 0], [0, 0], [2, 1], [1, 0], [0, 0], [3, 1], [2, 1], [1, 0],
                          [0, 0], [4, 0], [3, 1], [0, 0], [5, 1]])
    qy = torch.tensor([[0, 0]])
    g = torch.Generator().manual_seed(0)
    top = (ref_y == qy).all(1)
    neg = (ref_y[:, 1] != 0) if name in HIER else ~top
    for _ in range(5):
        scores = (0.5 + 0.05 * torch.randn(1, n, generator=g)).requires_grad_()
        loss = build(name)(scores, qy, ref, ref_y)
        (grad,) = torch.autograd.grad(loss, scores)
        assert (grad[0, top] <= 1e-9).all() and (grad[0, neg] >= -1e-9).all()
        assert grad[0, top].min() < 0 and grad[0, neg].max() > 0


@pytest.mark.parametrize("name", RANK_LOSSES)
def test_label_order_and_values_do_not_matter(name):
    y = hier_labels(9)
    e = unit(len(y), 8, 9)
    loss = build(name)
    base = loss(e, y)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    relabel = torch.stack([y[:, 0] * 7 + 1000, 50 - y[:, 1] * 3], 1)  # other, non-contiguous ids
    torch.testing.assert_close(loss(e[perm], relabel[perm]), base, atol=1e-6, rtol=0)
    assert 0.0 <= base.item() <= 1.0


@pytest.mark.parametrize("name", ["sup_ap", "sup_hap", "sup_ndcg"])
def test_perfect_hierarchical_ranking_with_margin_is_zero(name):
    """Same class s ~ 1 > same super-class s ~ 0.8 > other s ~ 0: SupRank's margin is met
    (lower-level items sit >> tau below; the same-level pairs use the exact step)."""
    y = hier_labels(10, sizes=(2, 3, 4, 3, 2, 5))
    basis = torch.eye(16)
    e = F.normalize(basis[y[:, 1]] + 0.5 * basis[4 + y[:, 0]] + 0.02 * unit(len(y), 16, 10), dim=1)
    assert exact_loss(KIND[name][0], e, y) == 0.0
    assert build(name)(e, y).item() < 1e-4


def test_singletons_only_gives_zero_with_graph():
    e = unit(6, 4, 0).requires_grad_()
    for name in RANK_LOSSES:
        out = build(name)(e, torch.arange(6))
        assert out.item() == 0.0 and out.requires_grad
        out.backward()
        assert torch.count_nonzero(e.grad) == 0


# --------------------------------------------------------------------- (5) ROD combinations


def test_roadmap_and_happier_are_convex_combinations():
    y = hier_labels(12)
    e = unit(len(y), 8, 12)
    nc = int(y[:, 0].max()) + 1
    r = ROADMAP(num_classes=nc, embedding_size=8)
    assert isinstance(r.dg, NormalizedSoftmaxDG) and r.lam == 0.1 and len(list(r.parameters())) == 1
    torch.testing.assert_close(r(e, y), 0.9 * SupAP()(e, y) + 0.1 * r.dg(e, y))
    r = ROADMAP(decomposability="pair")
    assert isinstance(r.dg, CalibrationLoss) and not list(r.parameters())
    torch.testing.assert_close(r(e, y), 0.9 * SupAP()(e, y) + 0.1 * CalibrationLoss(0.9, 0.6)(e, y))
    h = HAPPIER(num_classes=nc, embedding_size=8)
    torch.testing.assert_close(h(e, y), 0.9 * SupHAP()(e, y) + 0.1 * h.dg(e, y))
    hf = build("happier_f", num_classes=nc, embedding_size=8)
    assert hf.lam == 0.5 and hf.rank_loss.alpha == 5.0
    torch.testing.assert_close(hf(e, y), 0.5 * SupHAP(alpha=5.0)(e, y) + 0.5 * hf.dg(e, y))
    rr = build("rod_recall", decomposability="pair")
    assert rr.lam == 0.5
    torch.testing.assert_close(rr(e, y), 0.5 * SupRecall()(e, y) + 0.5 * CalibrationLoss()(e, y))
    rn = build("rod_ndcg", num_classes=nc, embedding_size=8)
    torch.testing.assert_close(rn(e, y), 0.9 * SupNDCG()(e, y) + 0.1 * rn.dg(e, y))


# ------------------------------------------------------------------------- (6) registry


SIZES = {"num_classes": 12, "embedding_size": 16}


@pytest.mark.parametrize("name", ["sup_ap", "sup_recall", "smooth_recall", "sup_hap", "smooth_hap", "sup_ndcg",
                                  "smooth_ndcg", "roadmap", "rod_recall", "happier", "happier_f", "rod_ndcg",
                                  "calibration", "normalized_softmax_dg"])
def test_registered_and_runs_with_defaults(name):
    assert name in names()
    kw = {k: v for k, v in SIZES.items() if k in accepted_hparams(name)}
    loss = build(name, **kw)
    y = torch.stack([torch.arange(12).repeat_interleave(2), torch.arange(12).repeat_interleave(2) % 3], 1)
    e = unit(24, 16, 0).requires_grad_()
    out = loss(e, y)
    assert out.ndim == 0 and torch.isfinite(out)
    out.backward()
    assert torch.isfinite(e.grad).all() and e.grad.abs().max() > 0


@pytest.mark.parametrize(
    "name,kw,match",
    [
        ("sup_ap", {"step_fix": "pr13"}, "step_fix"),
        ("sup_ap", {"tau": 0.0}, "tau"),
        ("sup_ap", {"chunk_size": 0}, "chunk_size"),
        ("sup_recall", {"at_k": []}, "at_k"),
        ("smooth_recall", {"temp": 0}, "temp"),
        ("sup_hap", {"alpha": -1.0}, "alpha"),
        ("roadmap", {"decomposability": "both"}, "decomposability"),
        ("roadmap", {"lam": 1.5, "decomposability": "pair"}, "lam"),
        ("happier", {}, "num_classes"),
        ("sup_ap", {"temperature": 0.1}, "temperature"),
    ],
)
def test_bad_hyper_parameters_are_clear_errors(name, kw, match):
    with pytest.raises(ValueError, match=match):
        build(name, **kw)


# --------------------------------------------------------------------------- (7) memory


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_peak_memory_below_cubic():
    B = 256
    y = torch.arange(B // 4).repeat_interleave(4)
    y = torch.stack([y, y // 32], 1)
    e = unit(B, 512, 0)
    for name in ("sup_ap", "sup_hap", "sup_ndcg", "sup_recall"):
        ec = e.cuda().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = build(name)(ec, y.cuda())
        out.backward()
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_allocated() - base < B**3 * 4 / 4
        torch.testing.assert_close(out.cpu(), build(name)(e, y), atol=1e-5, rtol=0)
