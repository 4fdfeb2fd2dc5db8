"""Reading torch files (rankrepro.torchfile): a truncated file names itself, a crafted one says what was refused
and never advises turning the protection off, a state dict that does not fit a module lists how; ``load_model``
says to retrain a ``model.pt`` it cannot use.

The crafted files are pickles of objects whose ``__reduce__`` names a function (``os.system``, ``exec``) or of a
class of this module: pickling them runs nothing, and ``load_plain`` must refuse them unbuilt."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from test_train import tiny_run
from rankrepro.engine.model_file import load_model, save_model
from rankrepro.models import build_model
from rankrepro.torchfile import (UnreadableTorchFileError, UnsafeTorchFileError, load_plain,
                                 state_dict_mismatch)


class CallsSystem:
    """Pickles as a call of ``os.system`` (posix.system): what a crafted file runs when loaded unsafely."""

    def __reduce__(self):
        return os.system, ("echo crafted",)


class CallsExec:
    """Pickles as a call of the builtin ``exec``."""

    def __reduce__(self):
        return exec, ("x = 1",)


class Custom:
    """A class of this module: its instance pickles as a global ``test_torchfile.Custom`` to build."""


@pytest.mark.parametrize("obj, refused", [
    (CallsSystem(), f"the global {os.system.__module__}.system"),
    (CallsExec(), "the global exec"),
    (Custom(), f"the global {__name__}.Custom"),
])
def test_a_crafted_file_says_what_was_refused_and_never_to_load_it_unsafely(tmp_path, obj, refused):
    path = tmp_path / "weights.pt"
    torch.save({"state": obj}, path)
    with pytest.raises(UnsafeTorchFileError) as err:
        load_plain(path, remedy="remove it")
    message = str(err.value)
    assert message.startswith(f"{path}: refused: its pickle names {refused}") and message.endswith("; remove it")
    assert "nothing in it was run" in message
    assert "weights_only" not in message and "safe_globals" not in message and "trust" not in message


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore:'torch.load' received a zip file:UserWarning")
def test_a_torchscript_archive_is_refused_without_torchs_advice(tmp_path):
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(nn.Linear(2, 2)), path)
    with pytest.raises(UnsafeTorchFileError, match=r"scripted\.pt: refused: it is a TorchScript program") as err:
        load_plain(path, remedy="remove it")
    assert "weights_only" not in str(err.value)


@pytest.mark.parametrize("kept", [0, 10, 4096, 8192, 65536, "half"])
def test_a_truncated_file_names_itself_and_what_is_wrong(tmp_path, kept):
    """Torch fails on these prefixes with EOFError, RuntimeError or a bare ``OSError: [Errno 22]`` (8 kB, 64 kB)."""
    path = tmp_path / "checkpoint.pt"
    torch.save({"w": torch.zeros(256, 256)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if kept == "half" else kept])
    with pytest.raises(UnreadableTorchFileError) as err:
        load_plain(path, remedy="remove it")
    assert str(err.value).startswith(f"{path}: cannot be read, it is truncated or not a torch file (")
    assert str(err.value).endswith("; remove it") and len(str(err.value)) < 400


def test_a_missing_file_is_the_oserror_of_opening_it(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_plain(tmp_path / "absent.pt", remedy="-")


def test_a_state_dict_mismatch_lists_missing_unexpected_and_reshaped_keys():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))  # keys 0.weight 3x2, 0.bias 3, 1.weight 1x3, 1.bias 1
    state = {"0.weight": torch.zeros(4, 2), "0.bias": torch.zeros(3), "1.weight": torch.zeros(1, 3),
             "head.weight": torch.zeros(1)}
    assert state_dict_mismatch(model, state) == ("keys missing: 1.bias; keys unexpected: head.weight; "
                                                 "shapes differ: 0.weight (4x2 in the file, 3x2 in the module)")
    assert state_dict_mismatch(model, model.state_dict()) == ""
    assert state_dict_mismatch(model, [1, 2]) == "not a state dict (a list)"


def test_a_state_dict_mismatch_lists_at_most_five_keys_of_a_kind():
    state = {f"extra{k}": torch.zeros(1) for k in range(7)} | nn.Linear(1, 1).state_dict()
    assert state_dict_mismatch(nn.Linear(1, 1), state) == (
        "keys unexpected: extra0, extra1, extra2, extra3, extra4 ... (7 in all)")


# ------------------------------------------------------------------------------------ model.pt

@pytest.fixture
def model_file(tmp_path):
    """A ``model.pt`` of a small retrieval net (resnet_tiny), as the training loop writes it."""
    run = tiny_run()
    model = build_model(run["model"])
    return save_model(tmp_path, "m", run, model, criterion_state={}, history=[]), model


def test_a_truncated_model_says_to_retrain_and_is_left_in_place(model_file):
    path, _ = model_file
    data = path.read_bytes()
    path.write_bytes(data[:8192])
    with pytest.raises(UnreadableTorchFileError, match=rf"{path}: cannot be read.*the run must be retrained"):
        load_model(path, torch.device("cpu"))
    assert path.read_bytes() == data[:8192]


def test_a_model_whose_weights_do_not_fit_names_the_keys_and_says_to_retrain(model_file):
    path, model = model_file
    saved = torch.load(path, weights_only=True)
    first, *_ = saved["state_dict"]
    saved["state_dict"]["stale.weight"] = saved["state_dict"].pop(first)
    torch.save(saved, path)
    with pytest.raises(RuntimeError) as err:
        load_model(path, torch.device("cpu"))
    assert str(err.value) == (f"{path}: its weights do not fit the model its model_cfg builds (written by another "
                              f"version of the code, or edited): keys missing: {first}; keys unexpected: "
                              "stale.weight; the run must be retrained: remove it and run the run's training again "
                              "(Snakemake retrains a run whose model.pt is missing)")
