"""Tests for SoftBin-AP (rankrepro.losses.softbin) and FastAP (rankrepro.losses.fastap)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import FastAPLoss

from rankrepro.losses import build
from rankrepro.losses.softbin import soft_bins

import lossutil
from lossutil import assert_descent_lowers_loss, close, unit
from lossutil import one_thread  # noqa: F401  (autouse fixture)


uneven_labels = functools.partial(lossutil.uneven_labels, sizes=(1, 2, 3, 5, 4, 6, 3))  # this file's class sizes


# ------------------------------------------------------------- SoftBin-AP references


def naver_quantizer(nq, vmin=-1.0, vmax=1.0):
    """The official non-trainable Conv1d quantiser (NAVER / SupRank softbin_ap_loss.py)."""
    q = torch.nn.Conv1d(1, 2 * nq, kernel_size=1, bias=True).double()
    a = (nq - 1) / (vmax - vmin)
    with torch.no_grad():
        q.weight[:nq] = -a
        q.bias[:nq] = torch.from_numpy(a * vmin + np.arange(nq, 0, -1))
        q.weight[nq:] = a
        q.bias[nq:] = torch.from_numpy(np.arange(2 - nq, 2, 1) - a * vmin)
        q.weight[0] = q.weight[-1] = 0
        q.bias[0] = q.bias[-1] = 1
    return q


def loop_softbin(emb, labels, nq, include_query=True, ref=None, ref_labels=None, n_self=None):
    """Quantised AP with loops over queries and bins (float64), official quantiser."""
    emb = emb.double()
    same = ref is None
    ref = emb if same else ref.double()
    ref_labels = labels if same else ref_labels
    n_self = len(labels) if same else (n_self or 0)
    quant = naver_quantizer(nq)
    aps = []
    for i in range(len(labels)):
        cols = [j for j in range(len(ref_labels)) if include_query or not (j == i and i < n_self)]
        rel = [float(ref_labels[j] == labels[i]) for j in cols]
        if sum(r for j, r in zip(cols, rel) if not (j == i and i < n_self)) == 0:
            continue
        s = ref[cols] @ emb[i]
        out = quant(s.view(1, 1, -1))[0]  # [2nq, M]
        qm = torch.min(out[:nq], out[nq:]).clamp(min=0)  # [nq, M]
        ap, cum_pos, cum_all = 0.0, 0.0, 0.0
        n_rel = sum(rel)
        for k in range(nq):
            pos_k = sum(qm[k, m] * rel[m] for m in range(len(cols)))
            all_k = qm[k].sum()
            cum_pos, cum_all = cum_pos + pos_k, cum_all + all_k
            ap = ap + (cum_pos / (1e-16 + cum_all)) * (pos_k / n_rel)
        aps.append(ap)
    return 1 - torch.stack(aps).mean()


def test_soft_bins_equal_official_quantizer_and_partition_unity():
    s = torch.linspace(-1.3, 1.3, 101, dtype=torch.float64)
    for nq in (2, 5, 20):
        ours = soft_bins(s, nq, -1.0, 1.0)
        out = naver_quantizer(nq)(s.view(1, 1, -1))[0]
        ref = torch.min(out[:nq], out[nq:]).clamp(min=0)
        close(ours, ref.detach(), atol=1e-9)
        close(ours.sum(0), torch.ones(101), atol=1e-9)


@pytest.mark.parametrize("include_query", [True, False])
@pytest.mark.parametrize("nq", [20, 7])
def test_softbin_matches_loop(include_query, nq):
    y = uneven_labels(nq)
    e = unit(len(y), 6, nq).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    ours = build("softbin_ap", num_bins=nq, include_query=include_query)(e, y)
    ref = loop_softbin(e2, y, nq, include_query)
    close(ours, ref)
    ours.backward()
    ref.backward()
    # s_qq = |x_q|² = 1 sits on the kink of the top bin, where the two implementations
    # take different sub-gradients; that gradient is radial (2 x_q), so compare the
    # tangential parts (what moves a normalised embedding).
    close(tangent(e.grad, e), tangent(e2.grad, e), atol=1e-4)


def tangent(g, e):
    e = e.detach()
    return g - (g * e).sum(1, keepdim=True) * e


@pytest.mark.parametrize("include_query", [True, False])
def test_softbin_with_memory_ref_set_matches_loop(include_query):
    y = uneven_labels(3)
    e = unit(len(y), 6, 3)
    mem, mem_y = unit(30, 6, 4), torch.randint(0, 9, (30,), generator=torch.Generator().manual_seed(0))
    ref, ref_y = torch.cat([e, mem]), torch.cat([y, mem_y])
    own = torch.arange(len(y))  # the batch at the front, as MemoryLoss passes it
    ours = build("softbin_ap", include_query=include_query)(e, y, ref, ref_y, self_index=own)
    close(ours, loop_softbin(e, y, 20, include_query, ref, ref_y, n_self=len(y)))
    # ref = the batch itself gives the in-batch value
    loss = build("softbin_ap", include_query=include_query)
    close(loss(e, y, e.clone(), y.clone(), self_index=own), loss(e, y))


def exact_ap_of_list(scores, rel):
    order = torch.argsort(scores, descending=True)
    r = rel[order].double()
    prec = r.cumsum(0) / torch.arange(1, len(r) + 1, dtype=torch.float64)
    return float((prec * r).sum() / r.sum())


@pytest.mark.parametrize("nq", [20, 200, 2000])
def test_softbin_equals_exact_ap_on_bin_centres(nq):
    """Scores on distinct bin centres (one item per bin): quantised AP = exact AP. With
    scores between centres an item's mass is split over two bins and the quantised
    precision counts only part of it, so it does not converge to the exact AP in general."""
    g = torch.Generator().manual_seed(nq)
    n = 15
    centres = 1.0 - 2.0 / (nq - 1) * torch.randperm(nq, generator=g)[:n].double()
    rel = (torch.rand(n, generator=g) < 0.4).long()
    rel[0] = 1
    scores = centres.float().view(1, n)
    loss = build("softbin_ap", num_bins=nq)(scores, torch.tensor([1]), torch.eye(n), rel)
    assert loss.item() == pytest.approx(1 - exact_ap_of_list(centres, rel), abs=1e-5)


def test_softbin_perfect_ranking_and_descent():
    y = torch.arange(4).repeat_interleave(4)
    e = F.normalize(torch.eye(8)[y] + 0.01 * unit(16, 8, 0), dim=1)
    assert build("softbin_ap")(e, y).item() < 1e-6
    # a small gradient step lowers the loss (the quantised AP has no per-item sign
    # guarantee: moving a positive into a bin of negatives can lower that bin's precision)
    assert_descent_lowers_loss(build("softbin_ap"), y, unit(16, 8, 1), step=0.02)


def test_softbin_singletons_skipped_and_errors():
    e = unit(5, 6, 0).requires_grad_()
    out = build("softbin_ap")(e, torch.arange(5))
    assert out.item() == 0.0 and out.requires_grad
    with pytest.raises(ValueError, match="num_bins"):
        build("softbin_ap", num_bins=1)
    with pytest.raises(ValueError, match="s_min"):
        build("softbin_ap", s_min=1.0, s_max=-1.0)


# ---------------------------------------------------------------------- FastAP references


def loop_fastap(emb, labels, num_bins, ref=None, ref_labels=None, n_self=None):
    """FastAP paper (Cakir et al. 2019, eq. 9-10): histogram over squared L2 distances on
    [0, 4], L = num_bins + 1 triangular bins, self excluded; loops over queries/bins."""
    emb = F.normalize(emb.double(), dim=1)
    same = ref is None
    ref = emb if same else F.normalize(ref.double(), dim=1)
    ref_labels = labels if same else ref_labels
    n_self = len(labels) if same else (n_self or 0)
    delta = 4.0 / num_bins
    centres = [l * delta for l in range(num_bins + 1)]
    vals = []
    for i in range(len(labels)):
        idx = [j for j in range(len(ref_labels)) if not (j == i and i < n_self)]
        d = ((ref[idx] - emb[i]) ** 2).sum(1)
        rel = torch.tensor([float(ref_labels[j] == labels[i]) for j in idx], dtype=torch.float64)
        n_pos = rel.sum()
        if n_pos == 0:
            continue
        h_pos, h_all = [], []
        for z in centres:
            w = torch.clamp(1 - (d - z).abs() / delta, min=0)
            h_pos.append((w * rel).sum())
            h_all.append(w.sum())
        ap, Hp, H = 0.0, 0.0, 0.0
        for hp, ha in zip(h_pos, h_all):
            Hp, H = Hp + hp, H + ha
            if hp * Hp > 0 and H > 0:
                ap = ap + hp * Hp / H
        vals.append(1 - ap / n_pos)
    return torch.stack(vals).mean()


@pytest.mark.parametrize("num_bins", [10, 4])
def test_fastap_equals_pml_and_paper_loop(num_bins):
    for seed in range(2):
        y = uneven_labels(seed)
        e = unit(len(y), 6, seed).requires_grad_()
        e2 = e.detach().clone().requires_grad_()
        e3 = e.detach().clone().requires_grad_()
        ours = build("fast_ap", num_bins=num_bins)(e, y)
        pml = FastAPLoss(num_bins=num_bins)(e2, y)
        loop = loop_fastap(e3, y, num_bins)
        close(ours, pml)
        close(ours, loop)
        ours.backward()
        pml.backward()
        loop.backward()
        close(e.grad, e2.grad)
        close(e.grad, e3.grad, atol=1e-4)


def test_fastap_ref_set_path():
    y = uneven_labels(2)
    e = unit(len(y), 6, 2).requires_grad_()
    loss = build("fast_ap")
    # ref = batch (memory convention) -> the in-batch (PML) value
    own = torch.arange(len(y))
    close(loss(e, y, e.detach(), y, self_index=own), loss(e, y))
    mem, mem_y = unit(25, 6, 3), torch.randint(0, 7, (25,), generator=torch.Generator().manual_seed(2))
    ref, ref_y = torch.cat([e.detach(), mem]), torch.cat([y, mem_y])
    e2 = e.detach().clone().requires_grad_()
    ours = loss(e, y, ref, ref_y, self_index=own)
    expect = loop_fastap(e2, y, 10, ref, ref_y, n_self=len(y))
    close(ours, expect)
    ours.backward()
    expect.backward()
    close(e.grad, e2.grad, atol=1e-4)
    # a ref set that does not start with the batch: nothing is excluded
    close(loss(e, y, mem, mem_y), loop_fastap(e.detach(), y, 10, mem, mem_y, n_self=0))


@pytest.mark.parametrize("num_bins", [10, 100, 1000])
def test_fastap_equals_exact_ap_on_bin_centres(num_bins):
    """Squared distances on distinct bin centres: FastAP = exact AP (query (1, 0), ref items
    on the unit circle at d² = z_l)."""
    g = torch.Generator().manual_seed(num_bins)
    n = 9
    z = 4.0 / num_bins * (1 + torch.randperm(num_bins - 1, generator=g)[:n].double())
    theta = torch.arccos(1 - z / 2)
    ref = torch.stack([torch.cos(theta), torch.sin(theta)], 1)
    rel = (torch.rand(n, generator=g) < 0.5).long()
    rel[0] = 1
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    loss = build("fast_ap", num_bins=num_bins)
    val = loss._with_ref(q, torch.tensor([1]), ref, rel, 0)
    assert val.item() == pytest.approx(1 - exact_ap_of_list(-z, rel), abs=1e-6)


def test_fastap_gradient_direction_and_errors():
    y = torch.arange(4).repeat_interleave(4)
    assert_descent_lowers_loss(build("fast_ap"), y, unit(16, 8, 5), step=0.05)
    with pytest.raises(ValueError, match="num_bins"):
        build("fast_ap", num_bins=0)
    out = build("fast_ap")(unit(4, 6, 0).requires_grad_(), torch.arange(4))
    assert out.item() == 0.0 and out.requires_grad
