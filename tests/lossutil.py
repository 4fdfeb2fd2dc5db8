"""Helpers shared by the loss tests: random L2-normalised batches, labels, comparisons.

Imported as ``lossutil`` (pytest puts ``tests/`` on ``sys.path``, as for ``httpserver``).
A test module that imports :func:`one_thread` gets it as an autouse fixture.
"""

from __future__ import annotations

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


def unit(b, d, seed, dtype=torch.float32):
    """[b, d] random rows with unit L2 norm (drawn and normalised in float64 from ``seed``), as ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(b, d, generator=g, dtype=torch.float64), dim=1).to(dtype)


def uneven_labels(seed, sizes=(1, 2, 3, 5, 4, 7, 2)):
    """Shuffled labels with uneven class sizes: class c appears sizes[c] times (size 1 = a query with no positive)."""
    y = torch.cat([torch.full((s,), c) for c, s in enumerate(sizes)])
    g = torch.Generator().manual_seed(seed)
    return y[torch.randperm(len(y), generator=g)]


def close(a, b, atol=1e-5):
    """``assert_close`` of two tensors (or numbers) in float64 with ``atol`` and rtol 1e-4."""
    torch.testing.assert_close(torch.as_tensor(a).double(), torch.as_tensor(b).double(), atol=atol, rtol=1e-4)
