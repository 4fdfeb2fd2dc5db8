"""Images per training epoch of a run's batch sampler, before it runs (:mod:`rankrepro.plan.cost` counts with it).

An ``m_per_class`` sampler (:class:`rankrepro.data.samplers.MPerClassBatchSampler`) takes ``m`` =
``samples_per_class`` images of ``k`` = ``batch_size / m`` distinct classes per batch, from at most
``reduce_per_class`` images of each class (``None``: all of them), and drops what cannot fill a batch: class ``c``
of ``n_c`` images gives ``g_c = floor(min(n_c, cap) / m)`` groups, and an epoch is ``B x batch_size`` images, ``B``
the most batches of ``k`` distinct classes the groups fill (:func:`most_batches`). The sampler's own greedy
passes can stop a batch or so earlier: an upper bound, exact when every class has few groups (a small cap).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["most_batches", "epoch_images"]


def most_batches(groups: Sequence[int], k: int) -> int:
    """The most batches of ``k`` distinct classes that classes holding ``groups`` groups each can fill: the largest
    ``B`` with ``sum(min(g, B)) >= k x B`` (the feasible ``B`` form an interval from 0: a binary search)."""
    g = np.asarray(groups, dtype=np.int64)
    low, high = 0, int(g.sum()) // k
    while low < high:
        mid = (low + high + 1) // 2
        if int(np.minimum(g, mid).sum()) >= k * mid:
            low = mid
        else:
            high = mid - 1
    return low


def epoch_images(run: dict, train_images: int, class_sizes: Sequence[int] | None = None) -> int:
    """Images one training epoch of ``run`` draws (module docstring): with ``class_sizes`` (the images of each class
    of an ``m_per_class`` sampler's training split: :func:`rankrepro.plan.cost.train_class_sizes`) whole batches of
    its groups, else ``train_images``; at most ``max_batches_per_epoch`` batches."""
    sampler = run["sampler"]
    batch = sampler["batch_size"]
    per_epoch = train_images
    if class_sizes is not None:
        m = sampler["samples_per_class"]
        cap = sampler.get("reduce_per_class")
        groups = [(n if cap is None else min(n, cap)) // m for n in class_sizes]
        per_epoch = most_batches(groups, batch // m) * batch
    if run.get("max_batches_per_epoch"):
        per_epoch = min(per_epoch, run["max_batches_per_epoch"] * batch)
    return per_epoch
