"""Helpers shared by the loss tests: random L2-normalised batches, labels, comparisons.

Imported as ``lossutil`` (pytest puts ``tests/`` on ``sys.path``, as for ``httpserver``).
A test module that imports :func:`one_thread` gets it as an autouse fixture.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small tensors: one thread avoids OpenMP waits on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def sig(x: float) -> float:
    """The logistic function of a Python float."""
    return 1.0 / (1.0 + math.exp(-x))


def h_minus(t, tau=0.01, rho=100.0, delta=0.05, start=0.5, offset=None, fix="post_pr13"):
    """SupRank's H^- (paper eq. 4), branch by branch on a 0-d tensor (keeps autograd): the one
    reference of the step, used by the core and the loss tests."""
    if offset is None:
        offset = sig(delta / tau) + start
    if t.item() <= 0:
        return torch.sigmoid(t / tau)
    if t.item() <= delta:
        return start + torch.sigmoid(t / tau)
    return rho * ((t - delta) if fix == "post_pr13" else t) + offset


def unit(b, d, seed, dtype=torch.float32):
    """[b, d] random rows with unit L2 norm (drawn and normalised in float64 from ``seed``), as ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(b, d, generator=g, dtype=torch.float64), dim=1).to(dtype)


def uneven_labels(seed, sizes=(1, 2, 3, 5, 4, 7, 2)):
    """Shuffled labels with uneven class sizes: class c appears sizes[c] times (size 1 = a query with no positive)."""
    y = torch.cat([torch.full((s,), c) for c, s in enumerate(sizes)])
    g = torch.Generator().manual_seed(seed)
    return y[torch.randperm(len(y), generator=g)]


OFFICIAL_FIXTURES = Path(__file__).parent / "fixtures" / "official"


def official_fixture(name: str) -> dict:
    """tests/fixtures/official/<name>.json: values and gradients the official code computed outside the
    repository (its "source" names the repository, commit, file, function and how it was run)."""
    return json.loads((OFFICIAL_FIXTURES / f"{name}.json").read_text())


def input_digest(t: torch.Tensor) -> str:
    """The first 16 hex digits of the SHA-256 of a tensor's bytes: a fixture's inputs, regenerated from their
    seeds here, are checked against the ones the official code was given."""
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def close(a, b, atol=1e-5):
    """``assert_close`` of two tensors (or numbers) in float64 with ``atol`` and rtol 1e-4."""
    torch.testing.assert_close(torch.as_tensor(a).double(), torch.as_tensor(b).double(), atol=atol, rtol=1e-4)


def peak_bytes(fn) -> tuple[int, object]:
    """Run ``fn()`` and return (peak bytes of the tensors it allocated alive at once, its result).

    On CPU, where torch keeps no allocator statistics: a dispatch mode adds each op's new output
    storages to a running total and takes them off when their tensor is collected (a view that
    outlives its base is undercounted; fine for "nothing cubic" bounds)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    live: dict = {}
    state = {"cur": 0, "peak": 0}

    def free(key, n):
        if live.pop(key, None) is not None:
            state["cur"] -= n

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    key, n = st.data_ptr(), st.nbytes()
                    if n and key not in live:
                        live[key] = n
                        state["cur"] += n
                        state["peak"] = max(state["peak"], state["cur"])
                        weakref.finalize(t, free, key, n)
            return out

    with Track():
        result = fn()
    return state["peak"], result


# ------------------------------------------------------------- property checks shared by the loss tests


def assert_order_and_label_invariant(loss, e, y, relabel=(10, 3), seed=1):
    """The value is unchanged by shuffling the batch, by renaming the classes (ids ``c * a + b``
    for ``relabel = (a, b)``) and by [B, L] labels whose column 0 is ``y``."""
    base = loss(e, y)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    ids = torch.randperm(int(y.max()) + 1, generator=g) * relabel[0] + relabel[1]  # any integer ids
    torch.testing.assert_close(loss(e[perm], ids[y[perm]]), base, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss(e, torch.stack([y, torch.zeros_like(y)], 1)), base)
    return base


def assert_zero_with_graph(loss, n=6, d=4):
    """Singletons only (no query has a positive): the loss is 0, attached to the graph, with a 0 gradient."""
    e = unit(n, d, 0).requires_grad_()
    out = loss(e, torch.arange(n))
    assert out.item() == 0.0 and out.requires_grad
    out.backward()
    assert torch.count_nonzero(e.grad) == 0


def assert_score_gradient_signs(loss, rows=1, tol=0.0, reseed=False):
    """With ref = identity the embeddings are the scores (s_j = query[j]): dL/ds <= tol on the
    positives and >= -tol on the negatives, and not all zero on either side (5 random draws)."""
    n = 12
    ref = torch.eye(n)
    ref_y = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0])
    pos = ref_y == 0
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        scores = (0.5 + 0.02 * torch.randn(rows, n, generator=g)).requires_grad_()
        if reseed:
            torch.manual_seed(0)
        out = loss(scores, torch.zeros(rows, dtype=torch.long), ref, ref_y)
        (grad,) = torch.autograd.grad(out, scores)
        assert (grad[:, pos] <= tol).all() and (grad[:, ~pos] >= -tol).all()
        assert grad[:, pos].min() < 0 and grad[:, ~pos].max() > 0


def assert_descent_lowers_loss(loss, y, e, step):
    """A small step against the gradient (of norm ``step``) lowers the loss."""
    e = e.clone().requires_grad_()
    v = loss(e, y)
    (g,) = torch.autograd.grad(v, e)
    e2 = F.normalize(e.detach() - step * g / g.norm(), dim=1)
    assert loss(e2, y).item() < v.item()
