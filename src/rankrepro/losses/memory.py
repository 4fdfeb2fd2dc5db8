"""Cross-batch memory: a loss computed against the embeddings of earlier batches.

Serves XBM (Wang et al. 2020), RaMBO's batch memory (the last few batches) and
SupRank's memory. The memory is a FIFO of the last ``size`` detached embeddings
and labels. From epoch ``warmup_epochs`` on, the wrapped loss is called with
``ref_embeddings = [current batch (detached), memory]`` and ``self_index =
arange(B)``: the batch occupies indices 0..B-1 of the reference set and the
wrapper says so (each query's own entry is column q), followed by the memory,
newest first. A loss whose ``forward`` takes no ``self_index`` keyword is called
without it. Before that epoch, the loss is
computed in-batch only. Gradients never flow into the memory. The memory is part
of the module's state dict, so a checkpoint resumes it exactly.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn


class MemoryLoss(nn.Module):
    def __init__(self, loss: nn.Module, size: int, warmup_epochs: int = 0):
        super().__init__()
        if size < 1:
            raise ValueError(f"memory size must be >= 1, got {size}")
        self.loss = loss
        self.size = int(size)
        self.warmup_epochs = int(warmup_epochs)
        self.epoch = 0
        self.embeddings: torch.Tensor | None = None  # [n, D], newest first
        self.labels: torch.Tensor | None = None
        params = inspect.signature(loss.forward).parameters.values()
        self._passes_self_index = any(p.name == "self_index" or p.kind is p.VAR_KEYWORD for p in params)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.loss, "set_epoch"):
            self.loss.set_epoch(epoch)

    @property
    def active(self) -> bool:
        return self.epoch >= self.warmup_epochs

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        if ref_embeddings is not None or self_index is not None:
            raise ValueError("a loss with a memory takes no external reference set")
        labels = torch.as_tensor(labels, device=embeddings.device)
        if self.active and self.embeddings is not None:
            ref = torch.cat([embeddings.detach(), self.embeddings.to(embeddings.device, embeddings.dtype)])
            ref_labels = torch.cat([labels, self.labels.to(labels.device)])
            kw = {"self_index": torch.arange(embeddings.shape[0], device=embeddings.device)} \
                if self._passes_self_index else {}
            value = self.loss(embeddings, labels, ref_embeddings=ref, ref_labels=ref_labels, **kw)
        else:
            value = self.loss(embeddings, labels)
        if self.active and torch.is_grad_enabled():
            self._enqueue(embeddings.detach(), labels)
        return value

    @torch.no_grad()
    def _enqueue(self, embeddings, labels) -> None:
        if self.embeddings is None:
            self.embeddings, self.labels = embeddings[: self.size].clone(), labels[: self.size].clone()
        else:
            self.embeddings = torch.cat([embeddings, self.embeddings])[: self.size]
            self.labels = torch.cat([labels, self.labels])[: self.size]

    def get_extra_state(self):
        return {"epoch": self.epoch, "embeddings": self.embeddings, "labels": self.labels}

    def set_extra_state(self, state) -> None:
        self.epoch, self.embeddings, self.labels = state["epoch"], state["embeddings"], state["labels"]
