"""Optimizer parameter groups and per-group schedule floors (rankrepro.engine.optim)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rankrepro.engine.optim import build_optimizer, build_scheduler, cosine_factor
from rankrepro.models import build_model


def group(lr, optimizer="adam", weight_decay=1e-4, lr_min=None, warmup_frozen=False):
    return {"lr": lr, "optimizer": optimizer, "weight_decay": weight_decay, "lr_min": lr_min,
            "warmup_frozen": warmup_frozen}


class Proxies(nn.Module):
    def __init__(self):
        super().__init__()
        self.proxies = nn.Parameter(torch.randn(5, 8))


@pytest.fixture
def model():
    return build_model({"name": "retrieval_net", "backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8})


def test_groups_of_two_optimizer_types_make_two_optimizers(model):
    block = {"name": "adamw", "weight_decay": 5e-4, "betas": [0.9, 0.999], "eps": 1e-8,
             "groups": {"net": group(1e-5, "adamw", 5e-4), "loss": group(10.0, "adam", 0.0, 0.1)}}
    opts = build_optimizer(block, model, Proxies())
    kinds = [type(o).__name__ for o in opts.optimizers]
    assert kinds == ["AdamW", "Adam"]
    net, loss = opts.optimizers[0].param_groups[0], opts.optimizers[1].param_groups[0]
    assert len(net["params"]) == len(list(model.parameters())) and net["weight_decay"] == 5e-4
    assert loss["lr"] == 10.0 and loss["weight_decay"] == 0.0 and opts.lr("loss") == 10.0


def test_a_loss_without_parameters_has_no_group(model):
    block = {"name": "adam", "groups": {"backbone": group(1e-5), "head": group(2e-5), "loss": group(2e-5)}}
    opts = build_optimizer(block, model, nn.Module())
    assert [g["name"] for g in opts.param_groups] == ["backbone", "head"] and opts.lr("loss") is None


def test_cosine_decays_each_group_to_its_own_floor(model):
    block = {"name": "adam", "groups": {"backbone": group(5e-5, lr_min=0.0), "head": group(1e-4, lr_min=0.0),
                                        "loss": group(10.0, weight_decay=0.0, lr_min=0.1)}}
    opts = build_optimizer(block, model, Proxies())
    schedule = build_scheduler({"name": "cosine", "t_max": None, "eta_min": 0.0}, opts, epochs=4)
    seen = []
    for _ in range(4):
        opts.optimizers[0].step()
        schedule.step()
        seen.append((opts.lr("head"), opts.lr("loss")))
    # by hand: lr_min + (lr - lr_min) (1 + cos(pi t / 4)) / 2 at t = 2 and at the end t = 4
    assert seen[1][0] == pytest.approx(1e-4 / 2) and seen[1][1] == pytest.approx(0.1 + 9.9 / 2)
    assert seen[-1] == pytest.approx((0.0, 0.1))


def test_cosine_factor_matches_torch_cosine_annealing():
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.3)
    reference = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=7, eta_min=0.01)
    for step in range(1, 12):
        opt.step()
        reference.step()
        assert 0.3 * cosine_factor(step, 7, 0.3, 0.01) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9)
    assert cosine_factor(3, 7, 0.0, 0.0) == 1.0 and math.isclose(cosine_factor(0, 7, 0.3, 0.01), 1.0)


def test_warmup_freezes_only_the_marked_groups(model):
    block = {"name": "adam", "groups": {"backbone": group(1e-5, warmup_frozen=True), "head": group(2e-5),
                                        "loss": group(2e-5)}}
    proxies = Proxies()
    opts = build_optimizer(block, model, proxies)
    opts.set_warmup(True)
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert all(p.requires_grad for p in model.head.parameters()) and proxies.proxies.requires_grad
    opts.set_warmup(False)
    assert all(p.requires_grad for p in model.parameters())


def test_state_round_trips(model):
    block = {"name": "adam", "groups": {"net": group(1e-3), "loss": group(1.0, "sgd", 0.0)}}
    proxies = Proxies()
    opts = build_optimizer(block, model, proxies)
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    proxies.proxies.sum().backward()
    opts.step(torch.amp.GradScaler("cpu", enabled=False))
    state = opts.state_dict()
    again = build_optimizer(block, model, proxies)
    again.load_state_dict(state)
    assert [len(o.state) for o in again.optimizers] == [len(o.state) for o in opts.optimizers]
