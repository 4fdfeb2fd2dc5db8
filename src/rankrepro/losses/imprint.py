"""Weight imprinting: a classifier's class weights set from the network's own embeddings before training.

The idea is Qi, Brown and Lowe's ("Low-Shot Learning with Imprinted Weights", CVPR 2018): a network whose
embeddings already separate the classes gives each class a ready-made weight, the direction of its images'
embeddings, in place of a random one. Here (:func:`class_means`), for class c with the images I_c chosen
(at most ``per_class`` of the training split, drawn with the run's seed)::

    m_c = normalise( sum_{i in I_c} normalise(f(x_i)) / |I_c| )

with f the network in eval mode on the test transform (no augmentation), normalise(v) = v / ||v||. A face
run's base classifier (:mod:`rankrepro.losses.face`, ``init: imprint``) starts from these rows; the retrieval
task computes them once, before the first step of a fresh run (a resumed run restores them with the loss's
state from its checkpoint).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import Dataset, Subset

__all__ = ["chosen_images", "class_means"]


def chosen_images(labels: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    """The indexes (sorted) of at most ``per_class`` images of each class of ``labels`` ([N] class ids), drawn
    without replacement (every image of a class with fewer): each image gets a uniform key from
    ``numpy.random.default_rng(seed)``, and each class keeps its ``per_class`` smallest keys. One sort, whatever the
    number of classes (VGGFace2: 3.1M images of 8,631 identities)."""
    labels = np.asarray(labels)
    keys = np.random.default_rng(seed).random(len(labels))
    order = np.lexsort((keys, labels))  # by class, then by key
    grouped = labels[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(grouped) else np.zeros(0, dtype=int)
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return np.sort(order[rank < per_class])


def class_means(model: torch.nn.Module, dataset: Dataset, labels: np.ndarray, num_classes: int, *, per_class: int,
                seed: int, device: torch.device | str = "cpu", amp: str = "none", batch_size: int = 64,
                num_workers: int = 0) -> torch.Tensor:
    """[num_classes, D] float32 on the CPU: row c the normalised mean of the normalised embeddings ``model`` (eval
    mode, :func:`rankrepro.engine.evaluate.embed`; its mode restored after) gives to :func:`chosen_images` of class c
    in ``dataset`` (whose item i is ``(image, label, index)`` with class ``labels[i]``, 0 .. num_classes - 1); a class
    without an image is an error. Consumes no global random state."""
    from rankrepro.engine.evaluate import embed

    labels = np.asarray(labels)
    missing = sorted(set(range(num_classes)) - set(np.unique(labels).tolist()))
    if missing:
        raise ValueError(f"weight imprinting: {len(missing)} of {num_classes} classes have no training image "
                         f"(first: {missing[0]})")
    chosen = chosen_images(labels, per_class, seed)
    was_training = model.training
    try:
        embeddings = embed(model, Subset(dataset, chosen.tolist()), torch.device(device), amp, batch_size=batch_size,
                           num_workers=num_workers, progress=False, generator=torch.Generator())
    finally:
        model.train(was_training)
    unit = F.normalize(torch.from_numpy(embeddings).double(), dim=1)
    ids = torch.as_tensor(labels[chosen], dtype=torch.long)
    sums = torch.zeros(num_classes, unit.shape[1], dtype=torch.float64).index_add_(0, ids, unit)
    counts = torch.bincount(ids, minlength=num_classes).double()
    return F.normalize(sums / counts.unsqueeze(1), dim=1).float()
