"""How a run is trained on this machine: settings that are never part of the run record or its id.

:class:`JobSettings` is everything a training or evaluation job is given besides the run (device, loader
workers, progress bars, image caches, evaluation batch and the speed settings below): the one object the
training loop (:mod:`rankrepro.engine.loop`) and every task (:mod:`rankrepro.engine.tasks`) take.

:class:`TrainRuntime` holds the config's ``runtime`` keys below (src/rankrepro/plan/schemas/config.schema.yaml);
``python -m rankrepro train`` / ``train-batch`` take them as flags (:func:`add_runtime_flags`,
:func:`runtime_from_args`) and hand the object to the training loop, :func:`rankrepro.engine.loop.train`.

Each one leaves a CPU run's results unchanged, bit for bit:

- ``channels_last`` (default on): the model and its input batches in the channels-last memory format; CUDA only;
- ``cudnn_benchmark`` (default on): ``torch.backends.cudnn.benchmark`` (cuDNN picks the fastest convolution
  per input shape); CUDA only;
- ``persistent_workers`` (default on): the training loader's workers live for the whole run instead of one
  epoch; a worker reseeds itself from the epoch's seed and the batch's number before each batch
  (:mod:`rankrepro.engine.loader`), so the data, and an exact resume, do not change; with ``num_workers`` > 0;
- ``prefetch_factor`` (default 4): batches each worker prepares ahead (which worker loads which batch does not
  change); with ``num_workers`` > 0;
- ``pin_memory`` (default on): page-locked batches, copied to the GPU with ``non_blocking``; CUDA only;
- ``compile`` (default off): the forward pass through ``torch.compile`` (the model's state dict, checkpoints and
  ``model.pt`` stay those of the plain module); numerically close to, not identical with, eager mode;
- ``gpu_decode`` (default off): workers read the JPEG bytes only; the main process decodes each batch on the GPU
  (``torchvision.io.decode_jpeg(device='cuda')``) and applies the run's train transform to the GPU tensors
  (:mod:`rankrepro.engine.gpu_decode`); the random crops and flips are drawn as before, the resize is
  torchvision's tensor resize (antialiased), so pixels differ slightly from Pillow's. CUDA only: refused on CPU;
- ``checkpoint_minutes`` (default 30, our choice: a GLDv2 epoch lasts hours): a checkpoint inside an epoch every
  that many minutes of wall clock, besides the one after each epoch, so a job killed at its time limit loses at
  most that much; 0: after each epoch only. A resumed run continues at the same step, exactly
  (:mod:`rankrepro.engine.preemption`, which also saves and stops on SIGTERM).

Mixed precision is the run's own ``amp`` key (fp16 where the official code used it, bf16, none): it is part of
the recipe, not of the runtime.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rankrepro.messages import ShortMessage

if TYPE_CHECKING:  # torch is imported where it is used: the CLI parses these flags without it
    import torch

__all__ = ["JobSettings", "TrainRuntime", "RuntimeSettingError", "add_runtime_flags", "runtime_from_args"]


class RuntimeSettingError(ShortMessage, ValueError):
    """A runtime setting that cannot apply on this device (``gpu_decode`` without CUDA), or a GPU claim that
    cannot be made (a malformed ``RANKREPRO_GPUS``, a lock folder that cannot be written:
    :mod:`rankrepro.gpu_claim`)."""


@dataclass(frozen=True)
class TrainRuntime:
    """The speed settings of a training (module docstring); the defaults are the config schema's."""

    channels_last: bool = True
    cudnn_benchmark: bool = True
    persistent_workers: bool = True
    prefetch_factor: int = 4
    pin_memory: bool = True
    compile: bool = False
    gpu_decode: bool = False
    checkpoint_minutes: float = 30.0

    def check(self, device: torch.device) -> None:
        """Refuse a setting that cannot apply on ``device``, naming the config key."""
        if self.gpu_decode and device.type != "cuda":
            raise RuntimeSettingError(f"runtime.gpu_decode (--gpu-decode) needs CUDA, but the device is {device}; "
                                "set runtime.gpu_decode: false to decode with Pillow in the loader workers")
        if self.prefetch_factor < 1:
            raise RuntimeSettingError(f"runtime.prefetch_factor must be >= 1, got {self.prefetch_factor}")
        if not (math.isfinite(self.checkpoint_minutes) and self.checkpoint_minutes >= 0):  # NaN: no checkpoint ever
            raise RuntimeSettingError(f"runtime.checkpoint_minutes must be a finite number >= 0 (0: after each epoch "
                                      f"only), got {self.checkpoint_minutes}")

    def apply_backends(self, device: torch.device) -> None:
        """Process-wide switches: ``cudnn.benchmark`` on CUDA."""
        if device.type == "cuda" and self.cudnn_benchmark:
            import torch

            torch.backends.cudnn.benchmark = True

    def memory_format(self, device: torch.device) -> torch.memory_format:
        """channels-last on CUDA when asked, else the default contiguous format."""
        import torch

        return torch.channels_last if self.channels_last and device.type == "cuda" else torch.contiguous_format

    def pin(self, device: torch.device) -> bool:
        return self.pin_memory and device.type == "cuda"


#: config key -> CLI flag of ``train`` / ``train-batch``
FLAGS = {f.name: "--" + f.name.replace("_", "-") for f in fields(TrainRuntime)}


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every :class:`TrainRuntime` field (``--channels-last`` / ``--no-channels-last``, ...,
    ``--prefetch-factor N``, ``--checkpoint-minutes X``), defaulting to the field's default."""
    for f in fields(TrainRuntime):
        key = f"runtime.{f.name}"
        if f.type in (bool, "bool"):
            parser.add_argument(FLAGS[f.name], action=argparse.BooleanOptionalAction, default=f.default,
                                help=f"{key} (default {'on' if f.default else 'off'})")
        else:
            parser.add_argument(FLAGS[f.name], type=type(f.default), default=f.default,
                                help=f"{key} (default {f.default})")


def runtime_flags(runtime: dict) -> list[str]:
    """The flags of :func:`add_runtime_flags` that give a config's ``runtime`` block (its keys named as
    the :class:`TrainRuntime` fields; other keys of the block are not the trainer's)."""
    flags = []
    for f in fields(TrainRuntime):
        value = runtime.get(f.name, f.default)
        if f.type in (bool, "bool"):
            flags.append(FLAGS[f.name] if value else "--no-" + FLAGS[f.name][2:])
        else:
            flags += [FLAGS[f.name], str(value)]
    return flags


def runtime_from_args(args: argparse.Namespace) -> TrainRuntime:
    """The :class:`TrainRuntime` of parsed flags (:func:`add_runtime_flags`)."""
    return TrainRuntime(**{f.name: getattr(args, f.name) for f in fields(TrainRuntime)})


@dataclass(frozen=True)
class JobSettings:
    """How one job trains and evaluates its runs on this machine (none of it is part of a run's record):

    - ``device``: ``auto`` (CUDA when present), ``cpu``, ``cuda``, ``cuda:1`` ...;
    - ``num_workers``: data loader worker processes (0: the main process loads);
    - ``progress``: show progress bars (on stderr);
    - ``runtime``: the speed settings (:class:`TrainRuntime`);
    - ``image_cache``: the resized image cache the training set reads (None: the original images);
    - ``eval_image_cache``: the cache of the test transform, read by the evaluation and the test curve;
    - ``eval_batch_size``: images per evaluation batch.

    A task uses what applies to it (a detection run reads the original images and keeps no test curve).
    """

    device: str = "auto"
    num_workers: int = 0
    progress: bool = True
    runtime: TrainRuntime = field(default_factory=TrainRuntime)
    image_cache: str | Path | None = None
    eval_image_cache: str | Path | None = None
    eval_batch_size: int = 256

    @classmethod
    def of(cls, settings: JobSettings | None = None, **values) -> JobSettings:
        """``settings`` (None: the defaults) with ``values`` replacing its fields (a runtime of None: the
        default runtime); an unknown name is a ``TypeError`` naming it."""
        if values.get("runtime", False) is None:
            values["runtime"] = TrainRuntime()
        return replace(settings or cls(), **values)
