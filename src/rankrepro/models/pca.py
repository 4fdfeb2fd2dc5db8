"""PCA initialisation of a retrieval network's projection (SupRank section VII-C3, H-GLDv2: "a ResNet-101
with GeM pooling and initialize a linear projection with a PCA [25]").

The official code (``suprank/models/tools/whiten_utils.py``: ``pca`` + ``create_pca_layer``, default
``whiten=True``) loads the projection from a precomputed file of a PCA *whitening* of L2-normalised GeM
features; here the trainer computes it from the run's own training images before a fresh run
(:func:`init_projection_pca`), with the same definition (:func:`pca_projection`).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

__all__ = ["Moments", "init_projection_pca", "pca_projection"]


class Moments:
    """Streaming count, mean and covariance of rows (float64, shifted by the first batch's mean so that
    a large mean does not cost precision); memory O(D^2) whatever the number of rows."""

    def __init__(self):
        self.n = 0
        self.shift = self.total = self.outer = None

    def update(self, x: torch.Tensor) -> None:
        x = x.detach().double().reshape(len(x), -1)
        if self.shift is None:
            self.shift = x.mean(dim=0)
            self.total = torch.zeros_like(self.shift)
            self.outer = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=x.device)
        x = x - self.shift
        self.n += len(x)
        self.total += x.sum(dim=0)
        self.outer += x.T @ x

    def mean_cov(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean [D], unbiased covariance [D, D]), float64 on the CPU."""
        if self.n < 2:
            raise ValueError(f"PCA needs at least 2 rows, got {self.n}")
        centred_mean = self.total / self.n
        cov = (self.outer - self.n * torch.outer(centred_mean, centred_mean)) / (self.n - 1)
        return (self.shift + centred_mean).cpu(), ((cov + cov.T) / 2).cpu()


def pca_projection(features: torch.Tensor | Moments, dim: int, whiten: bool = True,
                   rtol: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight [dim, D] and bias [dim] (float32) of the PCA projection of ``features`` ([N, D] rows, or their
    :class:`Moments`).

    Definition: with μ the mean of the N rows and C = Σ (x − μ)(x − μ)ᵀ / (N − 1) their covariance, whose
    eigenvalues are λ_1 ≥ … ≥ λ_D with unit eigenvectors u_1 … u_D (the principal components; each
    signed so that its entry of largest magnitude is positive), the projection is
    y = W x + b with W = [u_1 … u_dim]ᵀ and b = −W μ: y_i = u_iᵀ(x − μ). Over the rows, y is then
    centred and its coordinates are uncorrelated with variances λ_1 ≥ … ≥ λ_dim. With ``whiten``
    (the official code's default) row i of W and b is divided by √λ_i: y has identity covariance.

    Whitening a component without variance (λ_i ≤ ``rtol``·λ_1: fewer rows than ``dim``, or
    features confined to a subspace, e.g. LayerNorm outputs, which sum to zero) is an error.
    """
    moments = features if isinstance(features, Moments) else Moments()
    if not isinstance(features, Moments):
        moments.update(features)
    mean, cov = moments.mean_cov()
    if not 1 <= dim <= len(mean):
        raise ValueError(f"PCA of {len(mean)}-d features cannot give {dim} components")
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)
    order = torch.argsort(eigenvalues, descending=True)[:dim]
    variances, components = eigenvalues[order], eigenvectors[:, order].T  # [dim], [dim, D]
    biggest = components.abs().argmax(dim=1)
    components = components * torch.sign(components[torch.arange(dim), biggest]).unsqueeze(1)
    weight = components
    if whiten:
        scale = float(variances[0]) if len(variances) else 0.0
        flat = (variances <= rtol * scale).nonzero()
        if scale <= 0 or len(flat):
            first = int(flat[0]) + 1 if len(flat) else 1
            raise ValueError(f"PCA whitening: component {first} of {dim} has no variance ({moments.n} rows of "
                             f"{len(mean)}-d features); use fewer components, more images, or no whitening")
        weight = weight / variances.sqrt().unsqueeze(1)
    bias = -weight @ mean
    return weight.float(), bias.float()


@torch.no_grad()
def init_projection_pca(model: nn.Module, dataset: Dataset, *, device: torch.device | str = "cpu", amp: str = "none",
                        max_images: int | None = None, whiten: bool | None = None, seed: int = 0,
                        batch_size: int = 64, num_workers: int = 0) -> dict:
    """Set ``model``'s projection to the PCA projection (:func:`pca_projection`, ``embed_dim`` components)
    of :meth:`~rankrepro.models.heads.RetrievalNet.features` (backbone -> pooling -> normalisation, eval
    mode) over ``dataset``'s images (``max_images`` of them drawn with ``seed``; None: all).

    ``whiten``: None takes the model's ``pca_whiten``. Consumes no global random state. Returns
    ``{"images": how many, "whiten": bool}``."""
    from rankrepro.device import autocast

    layer = model.projection_layer
    if not isinstance(layer, nn.Linear):
        raise TypeError("the model has no linear projection to initialise")
    whiten = model.pca_whiten if whiten is None else whiten
    device = torch.device(device)
    if max_images is not None and max_images < len(dataset):
        chosen = np.sort(np.random.default_rng(seed).choice(len(dataset), size=max_images, replace=False))
        dataset = Subset(dataset, chosen.tolist())
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda", generator=torch.Generator())
    was_training = model.training
    model.eval()
    moments = Moments()
    try:
        for images, *_ in loader:
            with autocast(device, amp):
                features = model.features(images.to(device, non_blocking=True))
            moments.update(features.float())
    finally:
        model.train(was_training)
    weight, bias = pca_projection(moments, layer.out_features, whiten=whiten)
    layer.weight.copy_(weight.to(layer.weight))
    layer.bias.copy_(bias.to(layer.bias))
    print(f"projection initialised by PCA{' whitening' if whiten else ''} of {moments.n} training images "
          f"({layer.in_features} -> {layer.out_features})", file=sys.stderr)
    return {"images": moments.n, "whiten": whiten}
