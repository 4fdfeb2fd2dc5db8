"""Checkpoints a run cannot resume from (rankrepro.engine.checkpoint): one policy for all of them -- moved aside to
``checkpoint.pt.unusable-<n>`` with a warning naming the file and what is wrong, nothing of them loaded, and the run
trains from its start; a restore that fails part-way moves the file aside and fails once, naming it.

Small parts (a linear model, a loss with one weight, SGD, a step schedule) stand in for a run's; the training loop's
own resume and restart are in tests/test_train.py."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from rankrepro.engine.checkpoint import load_checkpoint, restore, rng_state
from rankrepro.engine.preemption import EpochProgress
from rankrepro.torchfile import TorchFileError
from test_train import WritesMarker


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))


def parts(width: int = 3) -> dict:
    """The parts of a run, as built from seed 0: model (Linear 2 -> ``width``), criterion, optimizer, scheduler."""
    torch.manual_seed(0)
    model, criterion = nn.Linear(2, width), Loss()
    optimizer = torch.optim.SGD([*model.parameters(), *criterion.parameters()], lr=0.1, momentum=0.9)
    return {"model": model, "criterion": criterion, "optimizer": optimizer,
            "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)}


def write(path, run_id="r", width=3, **changes) -> dict:
    """A checkpoint of run ``run_id`` after epoch 1 (0-based 0) and 2 batches into the next, as
    :func:`~rankrepro.engine.checkpoint.save_checkpoint` writes it, with ``changes``; returns its parts."""
    built = parts(width)
    with torch.no_grad():
        built["model"].weight.add_(1.0)
    torch.save({"run_id": run_id, "epoch": 0, "history": [{"epoch": 1, "loss": 0.5}], "rng": rng_state(),
                "partial": EpochProgress(1, seed=7, batches=2).state(),
                **{k: v.state_dict() for k, v in built.items()}, **changes}, path)
    return built


def resume(path, run_id="r", width=3):
    """What the loop does: the usable checkpoint for the run's fresh parts (or None), the parts and the RNG
    states before the call."""
    fresh = parts(width)
    before = (random.getstate(), torch.get_rng_state())
    state = load_checkpoint(path, run_id, model=fresh["model"], criterion=fresh["criterion"])
    return state, fresh, before


def assert_set_aside(path, state, fresh, before, capsys, *what):
    """None returned, the file moved to ``checkpoint.pt.unusable-1`` (bytes kept), a warning naming both and
    ``what``, the parts as built and every RNG untouched: the run trains exactly as a fresh one."""
    err = capsys.readouterr().err
    aside = path.with_name("checkpoint.pt.unusable-1")
    assert state is None and not path.exists() and aside.exists()
    assert err.startswith(f"warning: {path}: ") and f"moved it to {aside}" in err and "trains from epoch 1" in err
    assert all(w in err for w in what), err
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
    built = parts(fresh["model"].out_features)
    assert all(torch.equal(a, b) for a, b in zip(fresh["model"].state_dict().values(),
                                                   built["model"].state_dict().values()))


def test_a_usable_checkpoint_is_restored(tmp_path):
    path = tmp_path / "checkpoint.pt"
    saved = write(path)
    state, fresh, _ = resume(path)
    history, start, position = restore(state, path, **fresh)
    assert (history, start, position) == ([{"epoch": 1, "loss": 0.5}], 1, EpochProgress(1, seed=7, batches=2))
    assert torch.equal(fresh["model"].weight, saved["model"].weight) and path.exists()


@pytest.mark.parametrize("kept", [8192, "half"])
def test_a_truncated_checkpoint_is_set_aside_and_the_run_starts_over(tmp_path, capsys, kept):
    """8 kB: torch's own error is a bare ``OSError: [Errno 22] Invalid argument``."""
    path = tmp_path / "checkpoint.pt"
    write(path, extra=torch.zeros(256, 256))  # 256 kB, so that 8 kB is a truncation inside it
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if kept == "half" else kept])
    assert_set_aside(path, *resume(path), capsys, "cannot be read, it is truncated")
    assert path.with_name("checkpoint.pt.unusable-1").read_bytes() == data[: len(data) // 2 if kept == "half" else kept]


def test_a_checkpoint_set_aside_never_overwrites_an_earlier_one(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    path.with_name("checkpoint.pt.unusable-1").write_bytes(b"kept")
    path.write_bytes(b"not a torch file")
    assert resume(path)[0] is None
    assert path.with_name("checkpoint.pt.unusable-1").read_bytes() == b"kept"
    assert path.with_name("checkpoint.pt.unusable-2").read_bytes() == b"not a torch file"
    assert "moved it to " + str(path.with_name("checkpoint.pt.unusable-2")) in capsys.readouterr().err


def test_a_checkpoint_of_another_run_is_set_aside(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    write(path, run_id="other")
    assert_set_aside(path, *resume(path, run_id="r"), capsys, "a checkpoint of run 'other', not of 'r'")


def test_a_checkpoint_of_another_model_is_set_aside_naming_the_keys(tmp_path, capsys):
    """Written for Linear 2 -> 4 (a stale architecture), resumed into Linear 2 -> 3: both tensors differ in shape."""
    path = tmp_path / "checkpoint.pt"
    write(path, width=4)
    assert_set_aside(path, *resume(path, width=3), capsys,
                     "its model does not fit the run's (another architecture, or written before a code change): "
                     "shapes differ: weight (4x2 in the file, 3x2 in the module), bias (4 in the file, 3 in the "
                     "module)")


def test_a_checkpoint_whose_loss_has_other_keys_is_set_aside(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    write(path, criterion={"proxies": torch.zeros(2)})
    assert_set_aside(path, *resume(path), capsys, "its criterion does not fit the run's",
                     "keys missing: scale; keys unexpected: proxies")


def test_a_crafted_checkpoint_is_set_aside_without_running_its_code(tmp_path, capsys):
    path, marker = tmp_path / "checkpoint.pt", tmp_path / "marker"
    write(path, history=WritesMarker(marker))
    assert_set_aside(path, *resume(path), capsys, "refused: its pickle names the global exec", "nothing in it was run")
    assert not marker.exists()


def test_an_old_format_checkpoint_is_set_aside(tmp_path, capsys):
    import numpy as np

    path = tmp_path / "checkpoint.pt"
    write(path, rng={**rng_state(), "numpy": np.random.get_state()})  # numpy arrays: rankrepro before plain data
    assert_set_aside(path, *resume(path), capsys, "refused: its pickle names the global numpy")


def test_a_file_without_a_checkpoints_keys_is_set_aside(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    torch.save({"state_dict": {}}, path)
    assert_set_aside(path, *resume(path), capsys, "not a checkpoint of this version (keys ['state_dict']")


def test_a_restore_failing_part_way_sets_the_file_aside_and_fails_once_naming_it(tmp_path):
    """The optimizer's saved state has one group where the run's has two: torch refuses it after the model was
    loaded, so the job cannot go on from its parts; the retry finds no checkpoint."""
    path = tmp_path / "checkpoint.pt"
    write(path)
    state, fresh, _ = resume(path)
    model, criterion = fresh["model"], fresh["criterion"]
    two_groups = torch.optim.SGD([{"params": model.parameters()}, {"params": criterion.parameters()}], lr=0.1)
    aside = path.with_name("checkpoint.pt.unusable-1")
    with pytest.raises(TorchFileError) as err:
        restore(state, path, model=model, criterion=criterion, optimizer=two_groups)
    assert str(err.value).startswith(f"{path}: cannot be resumed from (ValueError: ")
    assert str(err.value).endswith(f"; moved it to {aside} (kept for inspection): the retry (the same command) "
                                   "trains the run from epoch 1")
    assert aside.exists() and not path.exists()
    assert load_checkpoint(path, "r", model=model) is None
