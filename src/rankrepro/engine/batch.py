"""Training batches at run time: one job trains several runs and writes each run's folder itself.

With ``runtime.runs_per_job`` > 1 (the demo) the workflow's job of a training batch
(:mod:`rankrepro.plan.batches`; rule ``train_batch_<batch>``) trains its runs one after the other in one
process (``python -m rankrepro train-batch``, :func:`train_batch`). Each run is written, trained and evaluated
into its staging folder ``results/batches/staged/<id>/`` exactly as a one-run ``train --evaluate-out`` job
writes ``results/runs/<id>/``: its run.json from its plan file, the same seed at its start, the same files
(:data:`STAGED_FILES`), so its results do not depend on its batch. Once every run of the batch is staged, the
job publishes them (:func:`publish`): each run's :func:`run_files` hard-linked (or copied) into
``results/runs/<id>/``, each atomically; these are the job's declared outputs, so there is no job per run.
``model.pt`` is published only with ``keep_model`` (runtime.keep_model); the staging folders are then removed.

A run that fails does not stop its batch: the next runs are trained, and the job then fails naming
each failed run and its error (:class:`BatchRunsFailed`), publishing nothing (Snakemake would delete a failed
job's outputs). Staged runs are not the job's outputs, so Snakemake keeps them: a retry trains only the runs
not staged yet (one interrupted mid-training resumes from its checkpoint; one whose evaluation failed is
evaluated again, not trained: :mod:`rankrepro.engine.kept_training`). A run stopped by SIGTERM (the time limit:
:class:`~rankrepro.engine.preemption.TrainingStopped`, a ``SystemExit``) stops the whole job at once.
Publishing removes the staging folders, so a batch job that runs again (its runs changed, or ``--forcerun``)
trains its runs again, as Snakemake expects of a job it reruns.
"""

from __future__ import annotations

import shutil
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from rankrepro.io import link_or_copy
from rankrepro.messages import ShortMessage
from rankrepro.record.run_folder import OPTIONAL_STAGED_FILES, STAGED_FILES, run_files

__all__ = ["OPTIONAL_STAGED_FILES", "STAGED_FILES", "BatchRunsFailed", "PublishError", "is_staged", "publish",
           "run_files", "train_batch"]

class BatchRunsFailed(ShortMessage, RuntimeError):
    """Runs of a batch failed (the others are staged); the message names each with its error."""

    def __init__(self, failed: dict[str, str], total: int, staged_dir: str | Path):
        self.failed = failed
        lines = [f"  {rid}: {error}" for rid, error in failed.items()]
        super().__init__(f"training batch: {len(failed)} of {total} runs failed (the other runs are staged in "
                         f"{staged_dir}; a retry trains only the missing ones):\n" + "\n".join(lines))


class PublishError(ShortMessage, RuntimeError):
    """A run's staged files are missing; the message names the folder and the files."""


def _missing(folder: Path) -> list[str]:
    return [name for name in STAGED_FILES if not (folder / name).is_file()]


def is_staged(folder: str | Path) -> bool:
    """Whether ``folder`` holds a written, trained and evaluated run (every one of :data:`STAGED_FILES`)."""
    return not _missing(Path(folder))


def train_batch(run_ids: Iterable[str], staged_dir: str | Path, runs_dir: str | Path,
                train_one: Callable[[str, Path], object], keep_model: bool = True) -> dict[str, list[Path]]:
    """Stage each run of ``run_ids`` that is not staged yet with ``train_one(run_id, <staged_dir>/<id>)``, which
    writes its run.json there, trains and evaluates it; then :func:`publish` every run into
    ``<runs_dir>/<id>/`` and return ``{id: [published file, ...]}``. A run that raises is reported with its
    traceback and the next run is trained; :class:`BatchRunsFailed` at the end, publishing nothing, when any
    failed."""
    run_ids, staged_dir = list(run_ids), Path(staged_dir)
    failed = {}
    for rid in run_ids:
        folder = staged_dir / rid
        if is_staged(folder):
            print(f"== run {rid}: staged already in {folder}", flush=True)
            continue
        print(f"== run {rid}", flush=True)
        try:
            train_one(rid, folder)
            if not is_staged(folder):
                raise PublishError(f"{folder}: {', '.join(_missing(folder))} missing after training")
        except Exception as err:  # the batch's other runs still train; the job fails at the end
            traceback.print_exc()
            failed[rid] = f"{type(err).__name__}: {err}"
    if failed:
        raise BatchRunsFailed(failed, len(run_ids), staged_dir)
    return publish(run_ids, staged_dir, runs_dir, keep_model)


def publish(run_ids: Iterable[str], staged_dir: str | Path, runs_dir: str | Path,
            keep_model: bool = True) -> dict[str, list[Path]]:
    """Put the :func:`run_files` of each staged run ``<staged_dir>/<id>/`` into ``<runs_dir>/<id>/`` (each
    atomically; its test curve too where it has one), then remove the staging folders (only once every run is
    published: an interrupted publication loses no training). Returns ``{id: [published file, ...]}``."""
    run_ids, staged_dir = list(run_ids), Path(staged_dir)
    for rid in run_ids:
        if not is_staged(staged_dir / rid):
            raise PublishError(f"run {rid} is not staged ({staged_dir / rid}: "
                               f"{', '.join(_missing(staged_dir / rid))} missing)")
    published = {}
    for rid in run_ids:
        folder, out = staged_dir / rid, Path(runs_dir) / rid
        out.mkdir(parents=True, exist_ok=True)
        names = [n for n in OPTIONAL_STAGED_FILES if (folder / n).is_file()] + list(run_files(keep_model))
        for name in names:
            link_or_copy(folder / name, out / name)
        published[rid] = [out / name for name in names]
    for rid in run_ids:
        shutil.rmtree(staged_dir / rid)
    return published
