"""The test curve of a run in training: its test metrics every ``eval.every`` epochs and at its last.

The retrieval task (:mod:`rankrepro.engine.tasks.retrieval`) builds one :class:`TestCurve` per run and calls
:meth:`TestCurve.after_epoch` at the end of each epoch, before it writes the epoch's checkpoint (which
holds :attr:`TestCurve.rows`, so a resumed run continues its curve). At a curve epoch
(:func:`rankrepro.record.selection.curve_epochs`) the model is scored exactly as the evaluate step scores
the final model (:func:`rankrepro.engine.evaluate.score`: the run's test protocol, transform and
metrics) and the row ``{"epoch", "seconds", <metric key>: value ...}`` is added to ``curve.csv`` in the
run's folder (:data:`~rankrepro.record.selection.CURVE_FILE`, rewritten whole, atomically).

Scoring leaves training as it was: every RNG state (Python, numpy, torch, CUDA; the evaluation's
DataLoader draws a seed from torch's) is restored afterwards, and so is each module's train/eval flag,
so a run with ``every`` set trains exactly as the same run without it (tests/test_train.py).
``eval.every`` null: no curve, nothing is scored, no file is written.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rankrepro.data.manifest import read_manifest
from rankrepro.engine.checkpoint import rng_state, set_rng_state
from rankrepro.engine.evaluate import score
from rankrepro.record.selection import CURVE_FILE, curve_csv, curve_epochs
from rankrepro.io import atomic_write_text

__all__ = ["TestCurve"]


class TestCurve:
    """The test curve of ``run`` trained into ``out_dir`` (module docstring).

    ``rows``: the curve a checkpoint holds (a resumed run), or None for a fresh run (a curve.csv left by
    an earlier attempt is then removed). ``manifest_dir``: the run's manifest (its test protocol);
    ``device``, ``batch_size``, ``num_workers``, ``image_cache`` (the test transform's image cache, None:
    the originals) and ``progress``: how it is scored, as for the evaluate step."""

    __test__ = False  # not a pytest test class

    def __init__(self, run: dict, manifest_dir: str | Path, out_dir: str | Path, device: torch.device, *,
                 rows: list[dict] | None = None, batch_size: int = 256, num_workers: int = 0,
                 image_cache: str | Path | None = None, progress: bool = False):
        self.run, self.manifest_dir, self.device = run, manifest_dir, device
        self.path = Path(out_dir) / CURVE_FILE
        self.epochs = set(curve_epochs(run["epochs"], run["eval"].get("every")))
        self.options = {"batch_size": batch_size, "num_workers": num_workers, "image_cache": image_cache,
                        "progress": progress}
        self.rows: list[dict] = list(rows or [])
        self._manifest = None
        if not self.epochs:
            return
        if rows is None:
            self.path.unlink(missing_ok=True)
        elif self.rows:
            atomic_write_text(self.path, curve_csv(self.rows))

    def after_epoch(self, model: torch.nn.Module, epoch: int) -> None:
        """Score ``model`` when ``epoch`` (1-based) is a curve epoch, and add its row to the curve."""
        if epoch not in self.epochs:
            return
        if self._manifest is None:
            self._manifest = read_manifest(self.manifest_dir)
        rng, modes = rng_state(), [(module, module.training) for module in model.modules()]
        t0 = time.perf_counter()
        try:
            metrics = score(model, self._manifest, self.run, self.device, **self.options)["metrics"]
        finally:
            for module, training in modes:
                module.training = training
            set_rng_state(rng)
        row = {"epoch": epoch, "seconds": round(time.perf_counter() - t0, 3), **metrics}
        self.rows = [r for r in self.rows if r["epoch"] != epoch] + [row]
        atomic_write_text(self.path, curve_csv(self.rows))
