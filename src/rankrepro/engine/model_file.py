"""A trained run's files: ``model.pt`` (the model and the loss's state) and ``history.csv`` (one row per epoch),
written by the training loop (:mod:`rankrepro.engine.loop`) and read by every task's evaluation.

``model.pt`` is ``{"run_id", "model_cfg" (the run's model block), "state_dict", "criterion"}``, read back with
:func:`rankrepro.torchfile.load_plain` (tensors and plain data only: a crafted file is refused, nothing in it
runs). ``history.csv`` has the columns of :data:`HISTORY_FIELDS`, one ``lr_<group>`` column per optimizer
parameter group after ``loss``.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import torch

from rankrepro.io import atomic_path, atomic_write_text
from rankrepro.models import MODELS, build_model
from rankrepro.torchfile import TorchFileError, load_plain, state_dict_mismatch

__all__ = ["HISTORY_FIELDS", "MODEL_FILE", "RETRAIN", "history_csv", "history_row", "load_model", "save_model"]

MODEL_FILE = "model.pt"

#: history.csv: epoch, loss, lr_<group> (the rate each parameter group trained at), seconds, batches,
#: images_per_s, device (where the epoch ran: "cpu", or "cuda: <GPU name>"; with seconds, what the results index,
#: rankrepro.tables.index, sums into GPU-hours and CPU-hours) and warmup (a warm-up epoch: groups frozen, schedule
#: paused)
HISTORY_FIELDS = ["epoch", "loss", "seconds", "batches", "images_per_s", "device", "warmup"]

#: what to do about a ``model.pt`` that cannot be used
RETRAIN = ("the run must be retrained: remove it and run the run's training again "
           "(Snakemake retrains a run whose model.pt is missing)")


def history_row(epoch: int, position, seconds: float, optimizer, device: torch.device, warmup: bool) -> dict:
    """The history row of epoch ``epoch`` (0-based) that ``position`` (its
    :class:`~rankrepro.engine.preemption.EpochProgress`) trained in ``seconds``: the mean loss per image, the rate of
    each of ``optimizer``'s groups, the images per second and where it ran."""
    return {"epoch": epoch + 1, "loss": position.loss_sum / max(position.seen, 1),
            **{f"lr_{g['name']}": g["lr"] for g in optimizer.param_groups}, "seconds": round(seconds, 3),
            "batches": position.batches,
            "images_per_s": round(position.seen / seconds, 2) if seconds > 0 else math.nan, "warmup": warmup,
            "device": f"cuda: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type}


def history_csv(history: list[dict]) -> str:
    """The text of ``history.csv`` for ``history`` (rows of :func:`history_row`)."""
    buffer = io.StringIO()
    rates = [k for k in history[0] if k.startswith("lr_")] if history else []
    writer = csv.DictWriter(buffer, fieldnames=[*HISTORY_FIELDS[:2], *rates, *HISTORY_FIELDS[2:]])
    writer.writeheader()
    writer.writerows(history)
    return buffer.getvalue()


def save_model(out_dir: str | Path, run_id: str, run: dict, model, criterion_state: dict,
               history: list[dict]) -> Path:
    """Write the final ``model.pt`` and ``history.csv`` into ``out_dir``, each atomically; return the model's path."""
    model_path = Path(out_dir) / MODEL_FILE
    with atomic_path(model_path) as tmp:
        torch.save({"run_id": run_id, "model_cfg": run["model"], "state_dict": model.state_dict(),
                    "criterion": criterion_state}, tmp)
    atomic_write_text(Path(out_dir) / "history.csv", history_csv(history))
    return model_path


def load_model(model_path: str | Path, device: torch.device, context: dict | None = None):
    """The model saved in ``model_path``, built from its ``model_cfg`` (``pretrained: none`` where the model takes
    it: the file holds the weights) with the builder's ``context`` (e.g. a detector's ``num_classes``), its weights
    loaded, on ``device``. An unusable file -- unreadable (truncated), refused (not tensors and plain data), or
    weights that do not fit the model (keys missing or unexpected, shapes; listed) -- raises
    :class:`~rankrepro.torchfile.TorchFileError` naming it and saying to retrain (:data:`RETRAIN`); it is left in
    place: an evaluation never retrains."""
    state = load_plain(model_path, remedy=RETRAIN)
    if not isinstance(state, dict) or not {"model_cfg", "state_dict"} <= state.keys():
        raise TorchFileError(Path(model_path), "not a model file of this version (no model_cfg and state_dict)",
                             RETRAIN)
    cfg = dict(state["model_cfg"])
    if "pretrained" in MODELS.get(cfg.get("name")).parameters():  # the weights are the file's: none read
        cfg["pretrained"] = "none"
    model = build_model(cfg, context=context)
    mismatch = state_dict_mismatch(model, state["state_dict"])
    if mismatch:
        raise TorchFileError(Path(model_path), "its weights do not fit the model its model_cfg builds (written by "
                             f"another version of the code, or edited): {mismatch}", RETRAIN)
    model.load_state_dict(state["state_dict"])
    return model.to(device)
