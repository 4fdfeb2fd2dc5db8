"""What a job's process imports: only what its code path needs (issue 37: the demo's ~30 training
processes each paid ~1.7 s for pytorch-metric-learning and scikit-learn at module level, used by some
losses and samplers only; its image-cache jobs paid ~4 s for torch to resize tiny images).

Each check runs in a fresh interpreter (this one has imported everything already) and reads its
``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import rankrepro

SRC = str(Path(rankrepro.__file__).parents[1])

#: the modules a train_batch job imports (its command, the batch, the training loop and the evaluation, the
#: registries of tasks, losses, samplers, models and metric protocols), however its runs are configured
TRAINING_MODULES = ("rankrepro.cli", "rankrepro.cli.runs", "rankrepro.engine.batch", "rankrepro.engine.loop",
                    "rankrepro.engine.evaluate", "rankrepro.engine.tasks", "rankrepro.losses",
                    "rankrepro.data.samplers", "rankrepro.models", "rankrepro.metrics.protocols")
#: imported where a run needs them only: curves and figures, PML's losses and samplers, NMI
NOT_AT_IMPORT = ("matplotlib", "sklearn", "pytorch_metric_learning")


def modules_loaded_by(code: str, cwd: str | Path | None = None) -> set[str]:
    """The top-level packages in ``sys.modules`` after a fresh ``python -c code`` (this checkout's rankrepro
    first on the path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_training_entry_point_imports_no_plotting_nor_pml_nor_sklearn():
    loaded = modules_loaded_by("\n".join(f"import {m}" for m in TRAINING_MODULES)
                               + "\nfrom rankrepro import losses\nlosses.build('smooth_ap')")
    assert {"torch", "torchvision", "rankrepro"} <= loaded  # the check sees what was imported
    assert loaded.isdisjoint(NOT_AT_IMPORT), sorted(loaded & set(NOT_AT_IMPORT))


def test_a_loss_over_pml_imports_it_when_built():
    loaded = modules_loaded_by("from rankrepro import losses\nlosses.build('triplet', mining='hard')")
    assert "pytorch_metric_learning" in loaded and "matplotlib" not in loaded
