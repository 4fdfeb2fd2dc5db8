"""Training batches at run time: a batch job stages its runs, then each run's own job adopts its files.

With ``runtime.runs_per_job`` > 1 (the demo) the workflow's ``train_batch`` job trains the runs of a
batch (:mod:`rankrepro.plan.batches`) one after the other in one process
(``python -m rankrepro train-batch``, :func:`train_batch`). Each run is trained and evaluated into its
staging folder ``results/batches/staged/<id>/`` exactly as a one-run ``train --evaluate-out`` job
writes ``results/runs/<id>/``: the same seed at its start, the same files (:data:`STAGED_FILES`), so
its results do not depend on its batch. The batch record ``results/batches/<batch>/batch.json``, the
job's only output, is written last, once every run of the batch is staged. Then each run's ``train``
job adopts its files (``python -m rankrepro adopt``, :func:`adopt`; no torch): hard-linked (or copied)
into ``results/runs/<id>/``, each atomically, so a run's files are the outputs of its own job.

A run that fails does not stop its batch: the next runs are trained, and the job then fails naming
each failed run and its error (:class:`BatchRunsFailed`), without the record. Staged runs are not
the job's outputs, so Snakemake keeps them: a retry trains only the runs not staged yet (one
interrupted mid-training resumes from its checkpoint; one whose evaluation failed is evaluated again, not
trained: :mod:`rankrepro.engine.kept_training`). A run stopped by SIGTERM (the time limit:
:class:`~rankrepro.engine.preemption.TrainingStopped`, a ``SystemExit``) stops the whole job at once.
Adopting a run removes its staging folder, so a batch job that runs again (its runs changed, or
``--forcerun``) trains its runs again, as Snakemake expects of a job it reruns.
"""

from __future__ import annotations

import json
import shutil
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from rankrepro.io import atomic_write_json, link_or_copy
from rankrepro.messages import ShortMessage
from rankrepro.record.selection import CURVE_FILE

__all__ = ["OPTIONAL_STAGED_FILES", "STAGED_FILES", "AdoptError", "BatchRunsFailed", "adopt", "is_staged", "train_batch"]

#: what a trained and evaluated run's folder holds (``train --evaluate-out --curve``), the curve written last
STAGED_FILES = ("model.pt", "history.csv", "metrics.json", "curve.png")
#: what it also holds when the run has one: its test curve (eval.every, rankrepro.engine.curve)
OPTIONAL_STAGED_FILES = (CURVE_FILE,)


class BatchRunsFailed(ShortMessage, RuntimeError):
    """Runs of a batch failed (the others are staged); the message names each with its error."""

    def __init__(self, record: str | Path, failed: dict[str, str], total: int, staged_dir: str | Path):
        self.failed = failed
        lines = [f"  {rid}: {error}" for rid, error in failed.items()]
        super().__init__(f"training batch {record}: {len(failed)} of {total} runs failed (the other runs are "
                         f"staged in {staged_dir}; a retry trains only the missing ones):\n" + "\n".join(lines))


class AdoptError(ShortMessage, RuntimeError):
    """A run's staged files cannot be adopted; the message names the record and the run."""


def is_staged(folder: str | Path) -> bool:
    """Whether ``folder`` holds a trained and evaluated run (every one of :data:`STAGED_FILES`)."""
    return all((Path(folder) / name).is_file() for name in STAGED_FILES)


def train_batch(run_jsons: Iterable[str | Path], staged_dir: str | Path, record: str | Path,
                train_one: Callable[[Path, Path], object]) -> dict:
    """Train each run (``results/runs/<id>/run.json``; ``<id>`` is its folder's name) that is not staged
    yet with ``train_one(run_json, <staged_dir>/<id>)``, which trains and evaluates it into that folder;
    then write ``record`` (``{"runs": {id: staged folder}}``) and return it. A run that raises is
    reported with its traceback and the next run is trained; :class:`BatchRunsFailed` at the end, and no
    record, when any failed."""
    run_jsons = [Path(p) for p in run_jsons]
    staged, failed = {}, {}
    for run_json in run_jsons:
        rid = run_json.parent.name
        folder = Path(staged_dir) / rid
        if is_staged(folder):
            print(f"== run {rid}: staged already in {folder}", flush=True)
        else:
            print(f"== run {rid}", flush=True)
            try:
                train_one(run_json, folder)
                if not is_staged(folder):
                    missing = [name for name in STAGED_FILES if not (folder / name).is_file()]
                    raise AdoptError(f"{folder}: {', '.join(missing)} missing after training")
            except Exception as err:  # the batch's other runs still train; the job fails at the end
                traceback.print_exc()
                failed[rid] = f"{type(err).__name__}: {err}"
                continue
        staged[rid] = str(folder)
    if failed:
        raise BatchRunsFailed(record, failed, len(run_jsons), staged_dir)
    result = {"runs": staged}
    atomic_write_json(record, result)
    return result


def adopt(record: str | Path, run_id: str, out_dir: str | Path) -> list[Path]:
    """Put the staged files of run ``run_id`` of the batch whose record is ``record`` into ``out_dir``
    (each atomically), then remove its staging folder. Returns the files."""
    runs = json.loads(Path(record).read_text())["runs"]
    if run_id not in runs:
        raise AdoptError(f"{record}: run {run_id} is not in this training batch; its runs: {', '.join(runs)}")
    folder, out_dir = Path(runs[run_id]), Path(out_dir)
    if not is_staged(folder):
        missing = [name for name in STAGED_FILES if not (folder / name).is_file()]
        raise AdoptError(f"{record}: run {run_id} is not staged ({folder}: {', '.join(missing)} missing): it was "
                         f"adopted already, or removed; to train it again, rerun its batch: "
                         f"snakemake --forcerun {record}")
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for name in [n for n in OPTIONAL_STAGED_FILES if (folder / n).is_file()] + list(STAGED_FILES):
        link_or_copy(folder / name, out_dir / name)
        files.append(out_dir / name)
    shutil.rmtree(folder)
    return files
