"""The loss contract, checked for EVERY registered retrieval loss (``rankrepro.losses.names()``).

(A loss that declares another task -- ``faster_rcnn``, task ``detection`` -- scores a detector's RoIs,
not embeddings: its contract is in test_detection_loss.py, which also checks that it is the only one.)

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
* the losses over the rank core give the same value and gradient with ``chunk_size=4``;
* under bf16 autocast the value is the float32 one, as a float32 tensor;
* ``set_epoch`` (when present) is accepted (through the memory wrapper, which forwards it);
* at B = 256 no tensor saved for backward has B³/4 elements or more, and the tensors alive at
  once during forward + backward stay below B³/4 float32 elements (B³ bytes) for the losses
  over the rank core and below one B x B x B float32 tensor for every loss: with 4 per
  class, with one class of 32 and pairs, with two super-classes of 128 (hierarchical P =
  128), and wrapped in a memory of 2B. This is the one memory check of every loss (the
  loss-specific test files do not repeat it); a few non-default settings that take another
  code path are checked too (``EXTRA``).
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.nn.functional as F

from rankrepro import losses
from rankrepro.losses.rank import RankingLoss
from rankrepro.losses.registry import data_context

from lossutil import one_thread  # noqa: F401  (autouse fixture)
from lossutil import peak_bytes, uneven_labels, unit

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


def make(name, classes=C, coarse_div=4, embedding_size=D, **kw):
    """``losses.build`` with the data sizes as context (each loss takes those it declares)."""
    per_level = [classes, -(-classes // coarse_div)]
    torch.manual_seed(0)  # proxies
    return losses.build(name, context=data_context(per_level, embedding_size), **kw)


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
def test_registry_defaults_are_typed_json(name):
    """The planner pins every default into a run: each is a JSON value of its declared JSON type."""
    import json

    from rankrepro.registry import check_json_type

    params = losses.get(name).parameters()
    defaults = losses.defaults(name)
    assert json.loads(json.dumps(defaults)) == defaults, f"{name}: defaults are not JSON values"
    for key, p in params.items():
        assert p.types, f"{name}: parameter {key} has no JSON type (annotate it)"
        assert p.required or check_json_type(p.default, p.types), f"{name}: {key}={p.default!r} is not {p.types}"
    # the data sizes are context, never run parameters
    assert not set(params) & {"num_classes", "num_classes_per_level", "embedding_size"}


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
def test_autocast_computes_in_float32(name):
    """Under bf16 autocast a loss computes in float32: same value, float32 result."""
    emb, fine, hier = batch(4)
    for y in label_forms(name, fine, hier):
        base = value(make(name), emb, y)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = value(make(name), emb, y)
        assert out.dtype == torch.float32, f"{name}: {out.dtype}"
        torch.testing.assert_close(out, base, msg=lambda m: f"{name}, labels {tuple(y.shape)}: {m}")


CHUNKED = [n for n in NAMES if "chunk_size" in losses.accepted_hparams(n)]


@pytest.mark.parametrize("name", CHUNKED)
def test_chunked_equals_unchunked(name):
    """The rank core's query blocks (``chunk_size``) change neither the value nor the gradient."""
    y = uneven_labels(10, sizes=(3, 4, 5, 6, 2, 1, 9))
    y = torch.stack([y, y // 3], 1) if label_kind(name) == "hier" else y
    e = unit(len(y), 8, 10).requires_grad_()
    e2 = e.detach().clone().requires_grad_()
    a = value(make(name, embedding_size=8), e, y)
    b = value(make(name, embedding_size=8, chunk_size=4), e2, y)
    torch.testing.assert_close(a, b)
    a.backward()
    b.backward()
    torch.testing.assert_close(e.grad, e2.grad)


# ------------------------------------------------------------------ memory at B = 256

MB = 256
#: non-default settings with their own code path, checked beside every loss's defaults
EXTRA = [("triplet", {"mining": "semihard"}), ("triplet", {"mining": "easy_semihard", "distance": "dot"}),
         ("pnp_dq", {"include_query": False}), ("smooth_ap", {"include_query": False})]


def layout_labels(layout):
    """[B, 2] labels at B = 256: fine classes and a coarse level."""
    if layout == "m4":  # 64 classes x 4, 8 super-classes of 32
        fine = torch.arange(64).repeat_interleave(4)
        return torch.stack([fine, fine // 8], 1)
    if layout == "uneven":  # one big class of 32, the rest in pairs
        fine = torch.cat([torch.zeros(32, dtype=torch.long), torch.arange(1, 113).repeat_interleave(2)])
        return torch.stack([fine, (fine > 0).long()], 1)
    fine = torch.arange(64).repeat_interleave(4)  # two super-classes: 128 relevant items per query
    return torch.stack([fine, fine // 32], 1)


CASES = [(n, {}, lay, None) for n in NAMES for lay in ("m4", "uneven", "coarse")] + \
        [(n, {}, "m4", 2 * MB) for n in NAMES] + [(n, kw, "m4", None) for n, kw in EXTRA]


@pytest.mark.parametrize("name, kw, layout, memory", CASES,
                         ids=[f"{n}-{lay}{'-memory' if m else ''}{'-' + str(kw) if kw else ''}"
                              for n, kw, lay, m in CASES])
def test_no_cubic_saved_tensors_or_peak_memory_at_batch_256(name, kw, layout, memory):
    y = layout_labels(layout)
    sizes = data_context([int(c) + 1 for c in y.max(0).values], 64)
    if label_kind(name) == "flat" and layout != "coarse":
        y = y[:, 0]
    torch.manual_seed(0)  # proxies
    loss = losses.build(name, context=sizes, **kw, **({"memory": {"size": memory}} if memory else {}))
    biggest = [0]

    def pack(t):
        biggest[0] = max(biggest[0], t.numel())
        return t

    for seed in range(2 if memory else 1):  # with a memory: the second step uses it
        g = torch.Generator().manual_seed(5 + seed)
        emb = F.normalize(torch.randn(MB, 64, generator=g), dim=1).requires_grad_()

        def step():
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = value(loss, emb, y)
            out.backward()
            return out

        peak, out = peak_bytes(step)
        assert torch.isfinite(out) and torch.isfinite(emb.grad).all(), f"{name}: {out}"
        assert biggest[0] < MB**3 / 4, f"{name}: a saved tensor has {biggest[0]} elements (B³/4 = {MB**3 // 4})"
        # the rank-core losses bound their blocks (B³/4 float32); the others hold at most O(B N Q)
        # (soft bins) or O(#triplets) tensors: less than one B x B x B float32 tensor
        bound = MB**3 if isinstance(getattr(loss, "loss", loss), RankingLoss) else 4 * MB**3
        assert peak < bound, f"{name}: {peak / 2**20:.1f} MiB alive at once (bound {bound / 2**20:.0f} MiB)"
