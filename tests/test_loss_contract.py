"""The loss contract, checked for EVERY registered loss (``rankrepro.losses.names()``).

Each loss is built with its defaults plus the training-set sizes its signature declares
(``num_classes``, ``num_classes_per_level``, ``embedding_size``), and called on a random
L2-normalised batch (B = 32, D = 16, 8 classes x 4). Labels: [B] if the loss accepts them
(it must raise ValueError otherwise), then [B, 2] (finest level first). Checks:

* a finite scalar; backward gives finite gradients, not all zero;
* shuffling the batch leaves the value unchanged — skipped for losses that sample
  (declared ``stochastic = True`` or detected: two calls with different seeds differ) or
  that depend on the batch order by construction (declared ``order_dependent = True``);
* wrapped in ``memory={"size": 64}`` it runs for three steps (the memory is used from the
  second step on), gradients stay finite, no gradient reaches the memory;
* ``set_epoch`` (when present) is accepted (through the memory wrapper, which forwards it);
* at B = 256 no tensor saved for backward has B³/4 elements or more.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.nn.functional as F

from rankrepro import losses

from lossutil import one_thread  # noqa: F401  (autouse fixture)

NAMES = losses.names()
B, D, C, M = 32, 16, 8, 4


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "reference set ignored" notices
        yield


def batch(seed, b=B, classes=C, coarse_div=4):
    g = torch.Generator().manual_seed(seed)
    emb = F.normalize(torch.randn(b, D, generator=g), dim=1)
    fine = torch.arange(classes).repeat_interleave(b // classes)
    fine = fine[torch.randperm(b, generator=g)]
    return emb, fine, torch.stack([fine, fine // coarse_div], 1)


def make(name, classes=C, coarse_div=4, **kw):
    per_level = [classes, -(-classes // coarse_div)]
    sizes = {"num_classes": classes, "num_classes_per_level": per_level, "embedding_size": D}
    accepted = losses.accepted_hparams(name)
    kw.update({k: v for k, v in sizes.items() if k in accepted})
    torch.manual_seed(0)  # proxies
    return losses.build(name, **kw)


@functools.lru_cache(maxsize=None)
def label_kind(name) -> str:
    """'flat' if the loss takes [B] labels, 'hier' if it needs [B, 2] (ValueError on [B])."""
    emb, fine, _ = batch(0)
    try:
        make(name)(emb, fine)
        return "flat"
    except ValueError:
        return "hier"


def label_forms(name, fine, hier):
    """[B] (when accepted) and [B, 2] labels: every loss must take [B, L]."""
    return [fine, hier] if label_kind(name) == "flat" else [hier]


def value(loss, emb, y, seed=0):
    torch.manual_seed(seed)
    return loss(emb, y)


@pytest.mark.parametrize("name", NAMES)
def test_finite_scalar_and_gradients(name):
    emb, fine, hier = batch(1)
    for y in label_forms(name, fine, hier):
        loss = make(name)
        e = emb.clone().requires_grad_()
        out = value(loss, e, y)
        assert isinstance(out, torch.Tensor) and out.ndim == 0, f"{name}: not a scalar tensor"
        assert out.is_floating_point() and torch.isfinite(out), f"{name}: {out}"
        out.backward()
        grads = [e.grad] + [p.grad for p in loss.parameters() if p.grad is not None]
        assert e.grad is not None, f"{name}: no gradient to the embeddings"
        assert all(torch.isfinite(g).all() for g in grads), f"{name}: non-finite gradient"
        assert any(g.abs().max() > 0 for g in grads), f"{name}: all gradients are zero"


@pytest.mark.parametrize("name", NAMES)
def test_batch_order_invariance(name):
    emb, fine, hier = batch(2)
    loss = make(name)
    if getattr(loss, "order_dependent", False):
        pytest.skip(f"{name} depends on the batch order by construction (order_dependent = True)")
    if getattr(loss, "stochastic", False):
        pytest.skip(f"{name} samples (stochastic = True)")
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(3))
    for y in label_forms(name, fine, hier):
        with torch.no_grad():
            a, b = value(loss, emb, y, seed=0), value(loss, emb, y, seed=1)
            if not torch.allclose(a, b, atol=1e-6, rtol=0):
                pytest.skip(f"{name} is stochastic (two seeds give {a.item():.6f} / {b.item():.6f})")
            c = value(loss, emb[perm], y[perm], seed=0)
        torch.testing.assert_close(c, a, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}, labels {tuple(y.shape)}: {m}")


@pytest.mark.parametrize("name", NAMES)
def test_memory_wrapper_steps(name):
    for form in range(len(label_forms(name, *batch(0)[1:]))):
        loss = make(name, memory={"size": 64})
        loss.set_epoch(0)  # forwarded to the loss when it has set_epoch
        grads = []
        for step in range(3):
            emb, fine, hier = batch(10 + step)
            y = label_forms(name, fine, hier)[form]
            e = emb.clone().requires_grad_()
            out = value(loss, e, y)
            assert out.ndim == 0 and torch.isfinite(out), f"{name} labels {tuple(y.shape)} step {step}: {out}"
            out.backward()
            assert torch.isfinite(e.grad).all(), f"{name} labels {tuple(y.shape)} step {step}: non-finite gradient"
            grads.append((e, e.grad.clone()))
        # no gradient reached the stored batches: their .grad is what their own step gave
        for e, g in grads:
            torch.testing.assert_close(e.grad, g, atol=0, rtol=0)
        assert loss.embeddings is not None and not loss.embeddings.requires_grad
        assert loss.embeddings.grad_fn is None and loss.embeddings.shape[0] == 64


@pytest.mark.parametrize("name", NAMES)
def test_no_cubic_saved_tensors_at_batch_256(name):
    b = 256
    g = torch.Generator().manual_seed(5)
    emb = F.normalize(torch.randn(b, D, generator=g), dim=1).requires_grad_()
    fine = torch.arange(64).repeat_interleave(4)
    y = torch.stack([fine, fine // 8], 1)
    loss = make(name, classes=64, coarse_div=8)
    biggest = [0]

    def pack(t):
        biggest[0] = max(biggest[0], t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = value(loss, emb, y)
    out.backward()
    assert biggest[0] < b**3 / 4, f"{name}: a saved tensor has {biggest[0]} elements (B³/4 = {b**3 // 4})"
