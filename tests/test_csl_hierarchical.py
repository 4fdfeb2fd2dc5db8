"""Tests for CSL (rankrepro.losses.csl) and the Σ-level baselines (rankrepro.losses.hierarchical)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from rankrepro.losses import build
from rankrepro.losses.csl import DEFAULT_MARGINS

from lossutil import close, input_digest, official_fixture, unit
from lossutil import one_thread  # noqa: F401  (autouse fixture)


# a 3-level tree: 12 fine classes -> 6 middle -> 2 coarse
FINE = torch.arange(12)
TREE = torch.stack([FINE, FINE // 2, FINE // 6], 1)


def hier_batch(seed, n=30, levels=3):
    g = torch.Generator().manual_seed(seed)
    fine = torch.randint(0, 12, (n,), generator=g)
    return TREE[fine][:, :levels]


# ------------------------------------------------------------------------------- CSL


def csl_by_definition(emb, labels, weight, table, margins, scale=32.0):
    """CSL in our words: with cosine similarities to the normalised proxies, level l's loss for an item is
    softplus(logsumexp of scale x the similarities to the proxies of the other level-l classes - scale x the
    similarity to its own (finest) proxy + scale x m_l), averaged over the batch; the levels are summed. A proxy
    whose level-l class is unknown in ``table`` (-1) is no level-l negative."""
    sims = scale * emb @ F.normalize(weight).T
    own = sims.gather(1, labels[:, :1]).squeeze(1)
    total = 0
    for lvl, m in enumerate(margins):
        neg = (table[:, lvl].unsqueeze(0) != labels[:, lvl].unsqueeze(1)) & (table[:, lvl] >= 0)
        total = total + F.softplus(torch.logsumexp(sims.masked_fill(~neg, -float("inf")), 1) - own + scale * m).mean()
    return total


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("levels", [2, 3])
def test_csl_matches_official_forward(reduction, levels):
    """The official CSLLoss's value and gradients (fixture suprank_csl.json: suprank/losses/csl_loss.py of
    elias-ramzi/SupRank, run outside the repository) for the embeddings and the proxies."""
    (ref,) = [c for c in official_fixture("suprank_csl")["cases"]
              if (c["levels"], c["reduction"]) == (levels, reduction)]
    loss = build("csl", num_classes_per_level=[12, 6, 2][:levels], embedding_size=8, reduction=reduction)
    assert loss.margins == ref["margins"] and loss.scale == 32.0
    loss.register_labels(TREE[:, :levels])
    y = hier_batch(ref["hier_batch_seed"], levels=levels)
    assert y.tolist() == ref["labels"]
    e, W = unit(len(y), 8, ref["embeddings_seed"]), unit(12, 8, ref["proxies_seed"])
    assert (input_digest(e), input_digest(W)) == (ref["embeddings_sha256_16"], ref["proxies_sha256_16"])
    with torch.no_grad():
        loss.weight.copy_(W)
    e.requires_grad_()
    ours = loss(e, y)
    official = {k: torch.tensor(ref[k], dtype=torch.float64) for k in ("loss", "grad_embeddings", "grad_proxies")}
    torch.testing.assert_close(ours.double(), official["loss"], atol=1e-6, rtol=1e-6)
    ours.backward()
    torch.testing.assert_close(e.grad.double(), official["grad_embeddings"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss.weight.grad.double(), official["grad_proxies"], atol=1e-5, rtol=1e-5)
    # our words give the same value
    expect = csl_by_definition(e.detach(), y, W, TREE[:, :levels], ref["margins"])
    close(ours, expect / (levels if reduction == "mean" else 1))


def test_csl_learns_ancestry_from_batches():
    loss = build("csl", num_classes_per_level=[12, 6, 2], embedding_size=8)
    W = loss.weight.detach().clone()
    y = TREE[torch.tensor([0, 1, 2, 3, 2, 0])]  # only classes 0..3 seen
    e = unit(6, 8, 0)
    val = loss(e, y)
    known = loss.proxy_labels
    assert (known[:4] == TREE[:4]).all() and (known[4:, 1:] == -1).all() and (known[:, 0] == FINE).all()
    # unseen classes are negatives at level 0 only: their coarse labels (-1) match nobody and are
    # excluded from the coarse negatives
    close(val, csl_by_definition(e, y, W, known, DEFAULT_MARGINS[3]))
    # after seeing every class the table is complete: every proxy takes part at every level
    loss(unit(12, 8, 1), TREE)
    assert (loss.proxy_labels == TREE).all()
    close(loss(e, y), csl_by_definition(e, y, W, TREE, DEFAULT_MARGINS[3]))


def test_csl_eval_mode_does_not_record_and_tree_violation_is_an_error():
    loss = build("csl", num_classes_per_level=[12, 6, 2], embedding_size=8).eval()
    loss(unit(12, 8, 0), TREE)
    assert (loss.proxy_labels[:, 1:] == -1).all()
    loss.train()
    bad = TREE.clone()
    bad[0, 1] = 5  # class 0 now under two middle classes
    with pytest.raises(ValueError, match="tree"):
        loss.register_labels(torch.cat([TREE, bad]))
    loss.register_labels(TREE)
    with pytest.raises(ValueError, match="tree"):
        loss(unit(12, 8, 0), bad)


def test_csl_defaults_and_errors():
    for L, margins in DEFAULT_MARGINS.items():
        loss = build("csl", num_classes_per_level=[5] * L, embedding_size=4)
        assert loss.margins == margins and loss.scale == 32.0 and loss.reduction == "sum"
    with pytest.raises(ValueError, match="margins"):
        build("csl", num_classes_per_level=[5, 4, 3, 2], embedding_size=4)
    build("csl", num_classes_per_level=[5, 4, 3, 2], embedding_size=4, margins=[0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="margins"):
        build("csl", num_classes_per_level=[5, 4], embedding_size=4, margins=[0.1])
    with pytest.raises(ValueError, match="reduction"):
        build("csl", num_classes_per_level=[5, 4], embedding_size=4, reduction="max")
    with pytest.raises(ValueError, match="num_classes_per_level"):
        build("csl", num_classes_per_level=12, embedding_size=4)
    loss = build("csl", num_classes_per_level=[12, 6, 2], embedding_size=8)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        loss(unit(4, 8, 0), torch.arange(4))
    with pytest.raises(ValueError, match="level 1"):
        loss(unit(2, 8, 0), torch.tensor([[0, 0, 0], [1, 7, 0]]))


def test_csl_proxies_seeded_without_touching_global_rng():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build("csl", num_classes_per_level=[6, 2], embedding_size=4)
    after = torch.rand(3)
    b = build("csl", num_classes_per_level=[6, 2], embedding_size=4)
    assert torch.equal(before, after)
    assert torch.equal(a.weight, b.weight)
    assert a.weight.abs().max() <= 0.5  # U(-1/sqrt(4), 1/sqrt(4))


def test_csl_near_zero_at_own_orthogonal_proxies_and_descent():
    loss = build("csl", num_classes_per_level=[12, 6, 2], embedding_size=16)
    with torch.no_grad():
        loss.weight.copy_(torch.eye(16)[:12])
    loss.register_labels(TREE)
    y = hier_batch(5)
    e = torch.eye(16)[y[:, 0]]
    assert loss(e, y).item() < 1e-5
    e = unit(len(y), 16, 5).requires_grad_()
    v = loss(e, y)
    (g,) = torch.autograd.grad(v, e)
    e2 = F.normalize(e.detach() - 0.05 * g / g.norm(), dim=1)
    assert loss(e2, y).item() < v.item()
    own = torch.eye(16)[y[:, 0]]
    assert (e2 * own).sum(1).mean() > (e.detach() * own).sum(1).mean()


def test_csl_ignores_reference_set():
    loss = build("csl", num_classes_per_level=[12, 6, 2], embedding_size=8)
    y = hier_batch(2)
    e = unit(len(y), 8, 2)
    close(loss(e, y, unit(7, 8, 3), TREE[:7]), loss(e, y))


# -------------------------------------------------------------------------- Σ losses


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_sum_nsm_is_the_level_average_of_nsm(reduction):
    loss = build("sum_nsm", num_classes_per_level=[12, 6, 2], embedding_size=8, reduction=reduction)
    assert len(list(loss.parameters())) == 3
    y = hier_batch(0)
    e = unit(len(y), 8, 0)
    parts = []
    for lvl, C in enumerate([12, 6, 2]):
        flat = build("normalized_softmax", num_classes=C, embedding_size=8)
        flat.load_state_dict(loss.per_level[str(lvl)].state_dict())
        parts.append(flat(e, y[:, lvl]))
    expect = sum(parts) / (3 if reduction == "mean" else 1)
    close(loss(e, y), expect)


def test_sum_nca_pp_is_the_level_average_and_levels_subset():
    loss = build("sum_nca_pp", num_classes_per_level=[12, 6, 2], embedding_size=8, levels=[0, 2])
    assert sorted(loss.per_level) == ["0", "2"]
    y = hier_batch(1)
    e = unit(len(y), 8, 1)
    parts = []
    for lvl, C in ((0, 12), (2, 2)):
        flat = build("proxy_nca_pp", num_classes=C, embedding_size=8)
        flat.load_state_dict(loss.per_level[str(lvl)].state_dict())
        parts.append(flat(e, y[:, lvl]))
    close(loss(e, y), sum(parts) / 2)
    with pytest.raises(ValueError, match="levels"):
        build("sum_nca_pp", num_classes_per_level=[12, 6], embedding_size=8, levels=[0, 2])


@pytest.mark.parametrize("mining", ["easy_semihard", "all"])
def test_sum_triplet_sh_is_the_level_average_of_triplet(mining):
    y = hier_batch(3)
    e = unit(len(y), 8, 3)
    loss = build("sum_triplet_sh", mining=mining)
    flat = build("triplet", mining=mining, distance="dot", margin=0.05)
    expect = sum(flat(e, y[:, lvl]) for lvl in range(3)) / 3
    close(loss(e, y), expect)
    # with a reference set (memory convention): each level uses its own reference labels
    mem, mem_y = unit(10, 8, 4), hier_batch(5, n=10)
    ref, ref_y = torch.cat([e, mem]), torch.cat([y, mem_y])
    expect = sum(flat(e, y[:, lvl], ref, ref_y[:, lvl]) for lvl in range(3)) / 3
    close(loss(e, y, ref, ref_y), expect)
    # levels subset and sum reduction
    sub = build("sum_triplet_sh", mining=mining, levels=[0, 2], reduction="sum")
    close(sub(e, y), flat(e, y[:, 0]) + flat(e, y[:, 2]))


def test_sigma_losses_need_hierarchical_labels():
    e = unit(6, 8, 0)
    y = torch.arange(6)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        build("sum_triplet_sh")(e, y)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        build("sum_nsm", num_classes_per_level=[6, 3], embedding_size=8)(e, y)
    with pytest.raises(ValueError, match="level 1"):
        build("sum_nsm", num_classes_per_level=[6, 3], embedding_size=8)(e, torch.stack([y, y], 1))
    with pytest.raises(ValueError, match="reduction"):
        build("sum_triplet_sh", reduction="max")


def test_sum_nsm_single_level_equals_nsm_and_ignores_memory():
    loss = build("sum_nsm", num_classes_per_level=[12], embedding_size=8)
    flat = build("normalized_softmax", num_classes=12, embedding_size=8)
    flat.load_state_dict(loss.per_level["0"].state_dict())
    y = hier_batch(6)
    e = unit(len(y), 8, 6)
    close(loss(e, y), flat(e, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(loss(e, y, e, y), loss(e, y))


def test_sum_triplet_sh_gradient_separates_coarse_groups():
    """Coarse-level triplets pull same-coarse items together: a descent step raises the
    mean similarity of different-fine / same-coarse pairs versus different-coarse pairs."""
    y = TREE.repeat(2, 1)
    e = unit(24, 8, 7).requires_grad_()
    loss = build("sum_triplet_sh", mining="all", levels=[2])
    v = loss(e, y)
    (g,) = torch.autograd.grad(v, e)
    e2 = F.normalize(e.detach() - 0.05 * g / g.norm(), dim=1)
    same_c = y[:, 2].unsqueeze(1) == y[:, 2].unsqueeze(0)
    off = ~torch.eye(24, dtype=torch.bool)
    gap = lambda x: (x @ x.T)[same_c & off].mean() - (x @ x.T)[~same_c].mean()  # noqa: E731
    assert gap(e2) > gap(e.detach())
