"""Tests for rankrepro.losses.baselines: PML parity, self-pair removal with a reference
set, memory-lean triplets / lifted structure, sampling, XBM vs PML CrossBatchMemory."""

from __future__ import annotations

import functools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import distances as pmld
from pytorch_metric_learning import losses as pml
from pytorch_metric_learning import miners as pmlm
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from rankrepro.losses import build
from rankrepro.losses.triplets import all_triplets, distance_weights, sampled_triplets

import lossutil
from lossutil import close, unit
from lossutil import one_thread  # noqa: F401  (autouse fixture)


uneven_labels = functools.partial(lossutil.uneven_labels, sizes=(1, 2, 3, 5, 4, 6, 3))  # this file's class sizes


def twin(e):
    return e.detach().clone().requires_grad_(), e.detach().clone().requires_grad_()


def as_set(idx):
    return sorted(zip(*[t.tolist() for t in idx]))


# ------------------------------------------------------------------ errors / registry


@pytest.mark.parametrize("name, kw, word", [
    ("triplet", {"mining": "hardest"}, "mining"),
    ("triplet", {"distance": "manhattan"}, "distance"),
    ("triplet", {"margin": -0.1}, "margin"),
    ("contrastive", {"formulation": "xbmm"}, "formulation"),
    ("contrastive", {"formulation": "xbm", "distance": "euclidean"}, "cosine"),
    ("angular", {"alpha": 95}, "alpha"),
    ("multi_similarity", {"beta": 0}, "beta"),
    ("normalized_softmax", {"num_classes": 0, "embedding_size": 8}, "num_classes"),
    ("proxy_nca_pp", {"num_classes": 3, "embedding_size": 8, "temperature": -1}, "temperature"),
])
def test_bad_hyperparameters_name_the_parameter(name, kw, word):
    with pytest.raises(ValueError, match=word):
        build(name, **kw)


# ------------------------------------------------------------ in-batch parity with PML


PAIR_CASES = [
    ("contrastive", {}, lambda: pml.ContrastiveLoss()),
    ("contrastive", {"distance": "cosine"}, lambda: pml.ContrastiveLoss(1.0, 0.5, distance=pmld.CosineSimilarity())),
    ("angular", {}, lambda: pml.AngularLoss(alpha=40)),
    ("multi_similarity", {"mining": False}, lambda: pml.MultiSimilarityLoss()),
    ("npair", {}, lambda: pml.NPairsLoss()),
    ("lifted_structure", {}, lambda: pml.LiftedStructureLoss()),
    ("lifted_structure", {"neg_margin": 0.5, "pos_margin": 0.2}, lambda: pml.LiftedStructureLoss(0.5, 0.2)),
    ("triplet", {}, lambda: pml.TripletMarginLoss()),
    ("triplet", {"distance": "dot", "margin": 0.1},
     lambda: pml.TripletMarginLoss(0.1, distance=pmld.DotProductSimilarity())),
]


@pytest.mark.parametrize("name, kw, make_pml", PAIR_CASES)
def test_matches_pml_in_batch(name, kw, make_pml):
    for seed in range(2):
        y = uneven_labels(seed)
        e1, e2 = twin(unit(len(y), 6, seed))
        ours = build(name, **kw)(e1, y)
        ref = make_pml()(e2, y)
        close(ours, ref)
        ours.backward()
        ref.backward()
        close(e1.grad, e2.grad)
        assert e1.grad.abs().max() > 0


def test_multi_similarity_with_pml_miner():
    y = uneven_labels(3)
    e1, e2 = twin(unit(len(y), 6, 3))
    ours = build("multi_similarity")(e1, y)
    ref = pml.MultiSimilarityLoss()(e2, y, pmlm.MultiSimilarityMiner(0.1)(e2, y))
    close(ours, ref)


@pytest.mark.parametrize("mining, make_miner", [
    ("hard", lambda d: pmlm.BatchHardMiner(distance=d)),
    ("easy_semihard", lambda d: pmlm.BatchEasyHardMiner(distance=d)),
    ("semihard", lambda d: pmlm.TripletMarginMiner(margin=0.3, type_of_triplets="semihard", distance=d)),
])
@pytest.mark.parametrize("distance", ["euclidean", "dot"])
def test_triplet_mining_matches_pml_miners(mining, make_miner, distance):
    d = pmld.LpDistance() if distance == "euclidean" else pmld.DotProductSimilarity()
    for seed in range(2):
        y = uneven_labels(seed)
        e1, e2 = twin(unit(len(y), 6, seed))
        loss = build("triplet", mining=mining, margin=0.3, distance=distance)
        ours = loss(e1, y)
        idx = make_miner(d)(e2, y)
        ref = pml.TripletMarginLoss(0.3, distance=d)(e2, y, idx)
        close(ours, ref)
        if mining == "semihard":  # same triplet set as PML's B x B x B miner
            mat = d(e2.detach())
            gap = lambda a, p, n: (mat[a, p] - mat[a, n]) if d.is_inverted else (mat[a, n] - mat[a, p])  # noqa: E731
            ours_idx = all_triplets(y, y, len(y), lambda a, p, n: (gap(a, p, n) > 0) & (gap(a, p, n) <= 0.3))
            assert as_set(ours_idx) == as_set(idx) and len(idx[0]) > 0


def test_squared_euclidean_triplet_by_hand():
    """FaceNet's triplet: margin 0.2 on squared distances. Unit vectors e0 = (1, 0), e1 = (0, 1) (class 0) and
    e2 = (0.6, -0.8) (class 1): |e0 - e1|^2 = 2, |e0 - e2|^2 = 2 - 1.2 = 0.8, |e1 - e2|^2 = 2 + 1.6 = 3.6.
    Triplets (0, 1, 2): 2 - 0.8 + 0.2 = 1.4; (1, 0, 2): 2 - 3.6 + 0.2 < 0; mean of the non-zero terms 1.4
    (plain distances: sqrt 2 - sqrt 0.8 + 0.2 = 0.7198)."""
    e, y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, -0.8]]), torch.tensor([0, 0, 1])
    assert build("triplet", margin=0.2, distance="squared_euclidean")(e, y).item() == pytest.approx(1.4, abs=1e-6)
    plain = math.sqrt(2) - math.sqrt(0.8) + 0.2
    assert build("triplet", margin=0.2)(e, y).item() == pytest.approx(plain, abs=1e-6)  # the default: unchanged


def test_semihard_mining_compares_squared_distances_when_the_loss_does():
    """e2 = (-0.28, -0.96): |e0 - e2|^2 = 2.56 (distance 1.6), |e1 - e2|^2 = 3.92. Anchor e0, positive e1:
    squared gap 2.56 - 2 = 0.56 > 0.2, not semi-hard for FaceNet; the plain gap 1.6 - sqrt 2 = 0.186 is, and
    its loss is sqrt 2 - 1.6 + 0.2."""
    e, y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-0.28, -0.96]]), torch.tensor([0, 0, 1])
    assert build("triplet", margin=0.2, mining="semihard", distance="squared_euclidean")(e, y).item() == 0.0
    plain = build("triplet", margin=0.2, mining="semihard")(e, y).item()
    assert plain == pytest.approx(math.sqrt(2) - 1.6 + 0.2, abs=1e-6)


def test_all_triplets_equals_pml_enumeration_and_drops_self():
    y = uneven_labels(4)
    ours = all_triplets(y, y, len(y))
    assert as_set(ours) == as_set(lmu.get_all_triplets_indices(y))
    # with a reference set that starts with the batch: self never a positive
    yr = torch.cat([y, uneven_labels(5)])
    a, p, n = all_triplets(y, yr, len(y))
    assert (a != p).all() and (y[a] == yr[p]).all() and (y[a] != yr[n]).all()
    expect = sum(int(((yr == y[i]).sum() - 1) * (yr != y[i]).sum()) for i in range(len(y)))
    assert len(a) == expect


# ----------------------------------------------------- reference set = batch + memory


REF_CASES = [
    ("contrastive", {}), ("contrastive", {"distance": "cosine"}), ("contrastive", {"formulation": "xbm"}),
    ("angular", {}), ("multi_similarity", {}), ("multi_similarity", {"mining": False}),
    ("lifted_structure", {}), ("triplet", {}), ("triplet", {"mining": "hard"}),
    ("triplet", {"mining": "semihard", "margin": 0.3}), ("triplet", {"mining": "easy_semihard", "distance": "dot"}),
]


@pytest.mark.parametrize("name, kw", REF_CASES)
def test_ref_equal_to_batch_gives_in_batch_value(name, kw):
    """ref = the batch itself (memory convention): self pairs are removed, so the value is
    the in-batch value (the gradient differs: the reference side is detached)."""
    y = uneven_labels(6)
    e = unit(len(y), 6, 6).requires_grad_()
    loss = build(name, **kw)
    close(loss(e, y, e.detach(), y, self_index=torch.arange(len(y))), loss(e, y))


def test_self_pairs_matter_control():
    """Control for the test above: when the ref set is not said to hold the batch (no
    ``self_index``; here a tiny perturbation of it), the easiest positive of easy_semihard
    mining is the query itself."""
    y = uneven_labels(6)
    e = unit(len(y), 6, 6)
    loss = build("triplet", mining="easy_semihard", distance="dot")
    fake = e + 1e-4 * unit(len(y), 6, 7)
    assert abs(loss(e, y, fake, y).item() - loss(e, y).item()) > 1e-3


@pytest.mark.parametrize("name, kw", REF_CASES)
def test_ref_set_with_memory_matches_pml_with_self_pairs_removed(name, kw):
    y = uneven_labels(8)
    e = unit(len(y), 6, 8)
    mem = unit(20, 6, 9)
    mem_y = torch.randint(0, 7, (20,), generator=torch.Generator().manual_seed(1))
    ref, ref_y = torch.cat([e, mem]), torch.cat([y, mem_y])
    e1, e2 = twin(e)
    ours = build(name, **kw)(e1, y, ref, ref_y, self_index=torch.arange(len(y)))  # as MemoryLoss passes it
    a1, p, a2, n = lmu.get_all_pairs_indices(y, ref_y)
    keep = a1 != p
    pairs = (a1[keep], p[keep], a2, n)
    if name == "contrastive" and kw.get("formulation") == "xbm":
        expect = xbm_loop(e2, y, ref, ref_y)
    elif name == "contrastive":
        d = kw.get("distance", "euclidean")
        pl = pml.ContrastiveLoss() if d == "euclidean" else pml.ContrastiveLoss(1.0, 0.5, distance=pmld.CosineSimilarity())
        expect = pl(e2, y, pairs, ref, ref_y)
    elif name == "angular":
        expect = pml.AngularLoss()(e2, y, pairs, ref, ref_y)
    elif name == "multi_similarity":
        if kw.get("mining", True):
            ma1, mp, ma2, mn = pmlm.MultiSimilarityMiner(0.1)(e2, y, ref, ref_y)
            keep = ma1 != mp
            pairs = (ma1[keep], mp[keep], ma2, mn)
        expect = pml.MultiSimilarityLoss()(e2, y, pairs, ref, ref_y)
    elif name == "lifted_structure":
        expect = pml.LiftedStructureLoss()(e2, y, pairs, ref, ref_y)
    else:
        mining = kw.get("mining", "all")
        dist = pmld.DotProductSimilarity() if kw.get("distance") == "dot" else pmld.LpDistance()
        margin = kw.get("margin", 0.05)
        t = lmu.get_all_triplets_indices(y, ref_y)
        keep = t[0] != t[1]
        t = tuple(x[keep] for x in t)
        mat = dist(e2.detach(), ref)
        ap, an = mat[t[0], t[1]], mat[t[0], t[2]]
        gap = ap - an if dist.is_inverted else an - ap
        if mining == "semihard":
            m = (gap > 0) & (gap <= margin)
            t = tuple(x[m] for x in t)
        elif mining in ("hard", "easy_semihard"):
            t = per_anchor_pick(t, ap, an, gap, dist.is_inverted, mining)
        expect = pml.TripletMarginLoss(margin, distance=dist)(e2, y, t, ref, ref_y)
    close(ours, expect)
    ours.backward()
    expect.backward()
    close(e1.grad, e2.grad)


def per_anchor_pick(t, ap, an, gap, inverted, mining):
    """Brute force over all triplets (self excluded): batch-hard = hardest positive and
    hardest negative; easy/semihard = easiest positive, then the hardest negative that is
    still farther than it (PML BatchEasyHardMiner semantics)."""
    a, p, n = t
    out = [], [], []
    # "hardness" of a positive / negative as a distance (bigger = farther)
    far = (lambda x: -x) if inverted else (lambda x: x)
    for i in a.unique().tolist():
        m = a == i
        P = {int(pi): float(far(v)) for pi, v in zip(p[m], ap[m])}
        N = {int(ni): float(far(v)) for ni, v in zip(n[m], an[m])}
        if mining == "hard":
            pi, ni = max(P, key=P.get), min(N, key=N.get)
        else:
            pi = min(P, key=P.get)
            cands = {k: v for k, v in N.items() if v > P[pi]}
            if not cands:
                continue
            ni = min(cands, key=cands.get)
        out[0].append(i)
        out[1].append(pi)
        out[2].append(ni)
    return tuple(torch.tensor(x, dtype=torch.long) for x in out)


def xbm_loop(e, y, ref, ref_y, margin=0.5, n_self=None):
    """SupRank / research-xbm XBMLoss, loop per anchor (self dropped by index here)."""
    n_self = len(y) if n_self is None else n_self
    sims = F.normalize(e, dim=1) @ F.normalize(ref, dim=1).T  # as the loss: cosine
    total = 0.0
    for i in range(len(y)):
        pos = [j for j in range(len(ref_y)) if ref_y[j] == y[i] and not (j == i and i < n_self)]
        neg = [j for j in range(len(ref_y)) if ref_y[j] != y[i] and sims[i, j] > margin]
        total = total + sum(1 - sims[i, j] for j in pos) + sum(sims[i, j] for j in neg)
    return total / len(y)


def test_xbm_formulation_in_batch_matches_loop():
    y = uneven_labels(2)
    e1, e2 = twin(unit(len(y), 6, 2))
    ours = build("contrastive", formulation="xbm")(e1, y)
    expect = xbm_loop(e2, y, e2, y)
    close(ours, expect)
    ours.backward()
    expect.backward()
    close(e1.grad, e2.grad)


def test_xbm_memory_equals_pml_cross_batch_memory():
    """build("contrastive", memory={"size": N}) vs PML CrossBatchMemory(ContrastiveLoss()):
    PML enqueues the batch first and keeps N + B items; ours keeps N and puts the batch in
    front. Same pairs (self removed) -> same values. Gradients agree once the memory is in
    use; on the very first batch ours is plain in-batch (both pair sides get gradient) while
    PML compares the batch with its detached copy (half the gradient for symmetric pairs)."""
    B, N, D = 12, 24, 6
    ours = build("contrastive", memory={"size": N, "warmup_epochs": 0})
    ref = pml.CrossBatchMemory(pml.ContrastiveLoss(), D, memory_size=N + B)
    g = torch.Generator().manual_seed(0)
    for step in range(5):
        y = torch.randint(0, 5, (B,), generator=g)
        e1, e2 = twin(F.normalize(torch.randn(B, D, generator=g), dim=1))
        a, b = ours(e1, y), ref(e2, y)
        close(a, b)
        a.backward()
        b.backward()
        if step == 0:
            close(e1.grad, 2 * e2.grad)
        else:
            close(e1.grad, e2.grad)


def test_xbm_warmup_epoch_is_in_batch():
    loss = build("contrastive", memory={"size": 32, "warmup_epochs": 1})
    y = uneven_labels(1)
    e = unit(len(y), 6, 1)
    plain = build("contrastive")
    close(loss(e, y), plain(e, y))
    assert loss.embeddings is None  # nothing stored during the warm-up epoch
    loss.set_epoch(1)
    loss(e, y)
    assert loss.embeddings.shape[0] == len(y)


# --------------------------------------------------------------------------- sampling


def test_sampled_triplets_one_per_positive_pair_without_self():
    y = uneven_labels(3)
    yr = torch.cat([y, uneven_labels(4)])
    w = torch.rand(len(y), len(yr), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    a, p, n = sampled_triplets(y, yr, len(y), w)
    pairs = sorted(zip(a.tolist(), p.tolist()))
    expect = sorted((i, j) for i in range(len(y)) for j in range(len(yr)) if yr[j] == y[i] and j != i)
    assert pairs == expect
    assert (y[a] != yr[n]).all()


def test_distance_weighted_sampling_matches_pml_miner_distribution():
    """Negative frequencies of PML's DistanceWeightedMiner (empirical) vs our weights."""
    y = torch.arange(4).repeat_interleave(4)
    e = unit(16, 4, 0)
    w = distance_weights(e, e)
    w = w * (y.unsqueeze(1) != y.unsqueeze(0))
    prob = w / w.sum(1, keepdim=True)
    miner = pmlm.DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4)
    counts = torch.zeros(16, 16)
    torch.manual_seed(0)
    for _ in range(150):
        a, _, n = miner(e, y)
        counts.index_put_((a, n), torch.ones(len(a)), accumulate=True)
    freq = counts / counts.sum(1, keepdim=True)
    tv = 0.5 * (freq - prob).abs().sum(1)
    assert tv.max() < 0.1, tv
    # and the triplet loss with distance_weighted mining samples from these weights
    torch.manual_seed(1)
    ours = torch.zeros(16, 16)
    loss = build("triplet", mining="distance_weighted")
    for _ in range(150):
        a, _, n = loss._indices(e, y, None, None, 0)
        ours.index_put_((a, n), torch.ones(len(a)), accumulate=True)
    tv2 = 0.5 * (ours / ours.sum(1, keepdim=True) - prob).abs().sum(1)
    assert tv2.max() < 0.1, tv2


def test_uniform_mining_negatives_are_uniform():
    y = torch.arange(4).repeat_interleave(4)
    e = unit(16, 6, 3)
    loss = build("triplet", mining="uniform")
    counts = torch.zeros(16, 16)
    torch.manual_seed(0)
    for _ in range(100):
        a, p, n = loss._indices(e, y, None, None, 0)
        assert (a != p).all() and len(a) == 16 * 3
        counts.index_put_((a, n), torch.ones(len(a)), accumulate=True)
    freq = counts / counts.sum(1, keepdim=True)
    assert ((freq - (y.unsqueeze(1) != y.unsqueeze(0)) / 12).abs() < 0.06).all()


# ------------------------------------------------------------------------ proxy losses


def test_proxy_nca_pp_equals_suprank_formula():
    """SupRank ProxyNCAppLoss: scale 3 on normalised X and P, squared distances, CE."""
    torch.manual_seed(0)
    loss = build("proxy_nca_pp", num_classes=5, embedding_size=6)
    y = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 2, 2])
    e1, e2 = twin(unit(len(y), 6, 0))
    P = loss.loss.proxies.detach().clone().requires_grad_()
    ours = loss(e1, y)
    X, Pn = 3 * F.normalize(e2, dim=1), 3 * F.normalize(P, dim=1)
    D = torch.cdist(X, Pn) ** 2
    expect = F.cross_entropy(-D, y)
    close(ours, expect)
    ours.backward()
    expect.backward()
    close(e1.grad, e2.grad)
    close(loss.loss.proxies.grad, P.grad)


def test_normalized_softmax_equals_ce_on_cosine_logits():
    loss = build("normalized_softmax", num_classes=5, embedding_size=6, temperature=0.1)
    y = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    e = unit(len(y), 6, 1)
    W = F.normalize(loss.loss.W.detach(), dim=0)
    close(loss(e, y), F.cross_entropy(e @ W / 0.1, y))
    bound = 1 / math.sqrt(6)
    assert loss.loss.W.abs().max() <= bound  # SupRank's U(-1/sqrt(D), 1/sqrt(D)) init


def test_proxy_nca_matches_pml_with_same_proxies():
    torch.manual_seed(3)
    ours = build("proxy_nca", num_classes=4, embedding_size=6)
    ref = pml.ProxyNCALoss(4, 6)
    ref.proxies.data.copy_(ours.loss.proxies.data)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    e = unit(6, 6, 2)
    close(ours(e, y), ref(e, y))


def test_proxy_losses_ignore_ref_set_and_check_label_range():
    loss = build("normalized_softmax", num_classes=3, embedding_size=6)
    e = unit(6, 6, 0)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(loss(e, y, unit(9, 6, 1), torch.zeros(9, dtype=torch.long)), loss(e, y))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        loss(e, torch.tensor([0, 1, 2, 3, 0, 1]))
    assert len(list(loss.parameters())) == 1


# -------------------------------------------------------------------------- properties


@pytest.mark.parametrize("name, kw", [("contrastive", {}), ("lifted_structure", {}), ("angular", {}),
                                      ("multi_similarity", {"mining": False}), ("triplet", {}),
                                      ("contrastive", {"formulation": "xbm"})])
def test_gradient_step_pulls_positives_and_pushes_negatives(name, kw):
    """A small gradient step raises the mean positive similarity and lowers the mean
    negative similarity (and the loss)."""
    y = torch.arange(4).repeat_interleave(4)
    e = unit(16, 8, 11).requires_grad_()
    loss = build(name, **kw)
    v = loss(e, y)
    (g,) = torch.autograd.grad(v, e)
    e2 = F.normalize(e.detach() - 0.02 * g / g.norm(), dim=1)
    same = y.unsqueeze(1) == y.unsqueeze(0)
    off = ~torch.eye(16, dtype=torch.bool)
    s1, s2 = e.detach() @ e.detach().T, e2 @ e2.T
    assert s2[same & off].mean() > s1[same & off].mean()
    assert s2[~same].mean() < s1[~same].mean()
    assert loss(e2, y).item() < v.item()


def test_zero_at_well_separated_embeddings():
    y = torch.arange(4).repeat_interleave(3)
    e = F.normalize(torch.eye(8)[y] + 1e-3 * unit(12, 8, 0), dim=1)
    for name, kw in [("triplet", {}), ("triplet", {"mining": "hard"}), ("contrastive", {"pos_margin": 0.1}),
                     ("contrastive", {"formulation": "xbm"})]:
        assert build(name, **kw)(e, y).item() < 1e-3, name


def test_labels_2d_use_finest_column_and_autocast_float32():
    y = uneven_labels(9)
    e = unit(len(y), 6, 9)
    y2 = torch.stack([y, y // 2], 1)
    for name in ("contrastive", "triplet", "lifted_structure", "angular", "multi_similarity"):
        loss = build(name)
        close(loss(e, y2), loss(e, y))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = loss(e, y)
        assert out.dtype == torch.float32


def test_no_triplet_is_zero_and_attached():
    e = unit(5, 6, 0).requires_grad_()
    for kw in ({}, {"mining": "hard"}, {"mining": "semihard"}, {"mining": "uniform"}):
        out = build("triplet", **kw)(e, torch.arange(5))
        assert out.item() == 0.0 and out.requires_grad
        out.backward()


def test_multi_similarity_builds_with_its_own_base_hyper_parameter():
    """MS's ``base`` (lambda of the MS paper, 0.5) is a hyper-parameter like any other: it reaches the loss, not the
    base-loss slot of ``build`` (a run of it with every default pinned, as the plan writes it, trained nowhere)."""
    from rankrepro import losses
    from rankrepro.engine.tasks.retrieval import build_loss

    assert losses.build("multi_similarity", base=0.7).base == 0.7
    block = {"name": "multi_similarity", "memory": None, **losses.defaults("multi_similarity")}
    loss = build_loss(block, torch.tensor([[0], [0], [1], [1]]).numpy(), 4)
    assert loss.base == 0.5 and loss.loss.base == 0.5
