"""Cross-batch memory wrapper: FIFO order, warm-up, no gradient into it, checkpointable."""

import pytest
import torch
import torch.nn.functional as F

from rankrepro import losses
from rankrepro.losses.memory import MemoryLoss


class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None):
        self.calls.append((None if ref_labels is None else ref_labels.tolist()))
        return embeddings.sum() * 0


def test_fifo_order_and_warmup():
    inner = Recorder()
    loss = MemoryLoss(inner, size=4, warmup_epochs=1)
    e = torch.zeros(2, 3)
    loss(e, torch.tensor([0, 1]))          # warm-up epoch: in-batch, nothing stored
    loss.set_epoch(1)
    loss(e, torch.tensor([2, 3]))          # memory empty: in-batch, then stored
    loss(e, torch.tensor([4, 5]))
    loss(e, torch.tensor([6, 7]))
    loss(e, torch.tensor([8, 9]))
    assert inner.calls == [None, None, [4, 5, 2, 3], [6, 7, 4, 5, 2, 3], [8, 9, 6, 7, 4, 5]]


class IndexRecorder(Recorder):
    def forward(self, embeddings, labels, ref_embeddings=None, ref_labels=None, self_index=None):
        self.calls.append(None if self_index is None else self_index.tolist())
        return embeddings.sum() * 0


def test_memory_passes_the_own_index_explicitly():
    """The reference set starts with the batch and the wrapper says so (``self_index``); a loss
    whose forward takes no ``self_index`` (``Recorder``) is called without it."""
    inner = IndexRecorder()
    loss = MemoryLoss(inner, size=4)
    e = torch.zeros(3, 2)
    loss(e, torch.tensor([0, 1, 2]))
    loss(e, torch.tensor([3, 4, 5]))
    assert inner.calls == [None, [0, 1, 2]]
    with pytest.raises(ValueError, match="no external reference set"):
        loss(e, torch.tensor([0, 1, 2]), self_index=torch.arange(3))


def test_no_gradient_into_memory_and_state_roundtrip():
    loss = losses.build("smooth_ap", memory={"size": 8, "warmup_epochs": 0})
    e1 = F.normalize(torch.randn(4, 5), dim=1)
    y = torch.tensor([0, 0, 1, 1])
    loss(e1, y)
    e2 = F.normalize(torch.randn(4, 5), dim=1).requires_grad_()
    loss(e2, y).backward()
    assert e2.grad is not None and not loss.embeddings.requires_grad
    clone = losses.build("smooth_ap", memory={"size": 8, "warmup_epochs": 0})
    clone.load_state_dict(loss.state_dict())
    torch.testing.assert_close(clone.embeddings, loss.embeddings)
    torch.testing.assert_close(clone.labels, loss.labels)


def test_memory_config_errors_name_the_key():
    with pytest.raises(ValueError, match="sizes"):
        losses.build("smooth_ap", memory={"sizes": 8})
    with pytest.raises(ValueError, match=">= 1"):
        losses.build("smooth_ap", memory={"size": 0})
