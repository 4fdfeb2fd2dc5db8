"""``write-run``, ``train``, ``evaluate`` and ``train-batch``: a run's record, its training and its evaluation
(workflow/rules/train.smk, evaluate.smk)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rankrepro.record.runtime import add_runtime_flags


def _json(path: str) -> dict:
    """The JSON object of a run's record or plan file (:func:`rankrepro.io.load_json_mapping`: an error naming the
    file when it is not one)."""
    from rankrepro.io import load_json_mapping

    return load_json_mapping(path)


def _write_run(plan: str | Path, run_id: str, out: str | Path) -> None:
    """Write run ``run_id`` as its run.json ``out`` from its plan file ``plan`` (results/plan/runs/<id>.json:
    the run and its ``id``), checked to hold that run (its id, and a content that hashes to it); a
    :class:`~rankrepro.plan.schema.PlanError` naming the file when it does not."""
    from rankrepro.io import atomic_write_json
    from rankrepro.plan.model import check_run_record

    atomic_write_json(out, check_run_record(_json(plan), plan, run_id))


def cmd_write_run(args) -> None:
    """Write run ``--run-id`` as its run.json from its plan file ``--plan`` (:func:`_write_run`)."""
    from rankrepro.plan.schema import PlanError

    try:
        _write_run(args.plan, args.run_id, args.out)
    except PlanError as err:
        sys.exit(str(err))


def add_write_run(sub) -> None:
    p = sub.add_parser("write-run", help="write a planned run's run.json (the run and its id)")
    p.add_argument("--plan", required=True, help="the run's plan file, results/plan/runs/<run_id>.json")
    p.add_argument("--run-id", required=True, help="a run id of that plan")
    p.add_argument("--out", required=True, help="results/runs/<run_id>/run.json")
    p.set_defaults(func=cmd_write_run)


def _start_job(args) -> None:
    """What a training or evaluation job does before anything imports torch's CUDA: claim a free GPU of this
    machine for ``--device`` (:func:`rankrepro.gpu_claim.claim_for_job`: ``CUDA_VISIBLE_DEVICES`` set to it,
    ``--num-workers`` split between the machine's GPUs; nothing under SLURM's own assignment, on CPU or without
    GPUs), then set torch's ``--threads``."""
    from rankrepro.gpu_claim import claim_for_job
    from rankrepro.record.runtime import RuntimeSettingError

    try:
        args.num_workers = claim_for_job(args.device, args.num_workers)[1]
    except RuntimeSettingError as err:
        sys.exit(f"rankrepro: {err}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def _task(run_json: str | Path):
    """The run record at ``run_json`` (``results/runs/<id>/run.json``), its id (the folder's name, which its
    ``id`` key must match where it has one) and its task (:mod:`rankrepro.engine.tasks`)."""
    from rankrepro.engine.tasks import task_of

    run, rid = _json(run_json), Path(run_json).parent.name
    if run.get("id", rid) != rid:
        raise ValueError(f"{run_json}: id {run['id']!r} is not the run's folder name {rid!r}")
    return run, rid, task_of(run, where=str(run_json))


def _run_parser(sub, name: str, help_text: str, func) -> argparse.ArgumentParser:
    """The subparser of ``train`` or ``evaluate`` (one run, from its run.json) with the flags both take."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--run", required=True, help="results/runs/<run_id>/run.json")
    p.add_argument("--manifest", required=True, help="manifest directory")
    p.add_argument("--device", default="auto")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--image-cache", help="a resized image cache folder (python -m rankrepro cache), read when "
                   "it matches the manifest and the transform; else the originals, with a warning")
    p.set_defaults(func=func)
    p.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    return p


def _settings(args, eval_image_cache: str | None):
    """The job's :class:`~rankrepro.record.runtime.JobSettings` of the parsed flags (the runtime's from the flags of
    :func:`rankrepro.record.runtime.add_runtime_flags` where the command has them)."""
    from rankrepro.record.runtime import JobSettings, TrainRuntime, runtime_from_args

    return JobSettings(device=args.device, num_workers=args.num_workers, progress=not args.no_progress,
                       runtime=runtime_from_args(args) if hasattr(args, "checkpoint_minutes") else TrainRuntime(),
                       image_cache=getattr(args, "image_cache", None), eval_image_cache=eval_image_cache,
                       eval_batch_size=args.batch_size)


def _train(args, run_json: str | Path, out_dir: Path, evaluate_out: str | Path | None) -> None:
    """Train the run of ``run_json`` into ``out_dir`` (model.pt, history.csv) through the training loop
    (:func:`rankrepro.engine.loop.train`) and, with ``evaluate_out``, evaluate it into that metrics.json. The
    runtime settings come from the flags of :func:`rankrepro.record.runtime.add_runtime_flags`.

    With ``evaluate_out``, the manifests of the run's ``eval.datasets`` are read before training (a broken
    meta.json fails first, naming the file), and the training is kept until the evaluation succeeds
    (:mod:`rankrepro.engine.kept_training`): an attempt after a failed evaluation evaluates without training."""
    from rankrepro.data.manifest import read_meta
    from rankrepro.engine import kept_training
    from rankrepro.engine.loop import train

    run, rid, task = _task(run_json)
    if not evaluate_out:
        train(run, args.manifest, out_dir, _settings(args, args.eval_image_cache), run_id=rid, task=task)
        return
    for name in run["eval"].get("datasets", []):  # the other manifests the evaluation reads, beside the run's
        read_meta(Path(args.manifest).parent / name)
    model = kept_training.restore(out_dir)
    if model is not None:
        print(f"run {rid}: evaluating the model trained by an earlier attempt, kept in "
              f"{out_dir / kept_training.KEPT_DIR} when its evaluation failed (delete that folder to train again)",
              file=sys.stderr)
    else:
        model = train(run, args.manifest, out_dir, _settings(args, args.eval_image_cache), run_id=rid, task=task)
        kept_training.keep(out_dir)
    # the evaluation transform's cache, or the originals
    _evaluate(args, run_json, model, evaluate_out, args.eval_image_cache)
    kept_training.discard(out_dir)


def cmd_train(args) -> None:
    """Train (and evaluate) one run; with ``--no-model`` (runtime.keep_model: false), remove its model.pt once
    its evaluation is written."""
    if args.no_model and not args.evaluate_out:
        sys.exit("rankrepro train: --no-model needs --evaluate-out (nothing else would ever read the model)")
    _start_job(args)
    _train(args, args.run, Path(args.run).parent, args.evaluate_out)
    if args.no_model:
        from rankrepro.engine.model_file import MODEL_FILE

        (Path(args.run).parent / MODEL_FILE).unlink(missing_ok=True)


def add_train(sub) -> None:
    p = _run_parser(sub, "train", "train one run (resumes from its checkpoint)", cmd_train)
    p.add_argument("--evaluate-out", help="then evaluate the trained model into this metrics.json in the "
                   "same process (runtime.evaluate_in_train_job)")
    p.add_argument("--eval-image-cache", help="the image cache of that evaluation and of the run's test curve "
                   "(eval.every; default: the originals)")
    p.add_argument("--no-model", action="store_true", help="remove model.pt once the evaluation is written "
                   "(runtime.keep_model: false; needs --evaluate-out)")
    add_runtime_flags(p)


def cmd_train_batch(args) -> None:
    """Write, train, then evaluate each ``--runs`` run not staged yet, in turn in this process
    (runtime.runs_per_job; :func:`rankrepro.engine.batch.train_batch`): each writes run.json (from its plan
    file), model.pt, history.csv and metrics.json into ``<staged>/<id>/`` as a one-run ``train --evaluate-out``
    job writes them beside its run.json; then each run's files go into ``<runs-dir>/<id>/`` (model.pt only
    without ``--no-model``). Exit status 1, naming each failed run and its error, when any failed."""
    from rankrepro.engine.batch import BatchRunsFailed, train_batch

    plans = {Path(plan).name.removesuffix(".json"): plan for plan in args.runs}
    _start_job(args)

    def train_one(run_id: str, out_dir: Path) -> None:
        _write_run(plans[run_id], run_id, out_dir / "run.json")
        _train(args, out_dir / "run.json", out_dir, out_dir / "metrics.json")

    try:
        published = train_batch(plans, args.staged, args.runs_dir, train_one, keep_model=not args.no_model)
    except BatchRunsFailed as err:
        sys.exit(str(err))
    print(f"{args.runs_dir}: {len(published)} runs written")


def add_train_batch(sub) -> None:
    p = sub.add_parser("train-batch", help="train and evaluate several runs of one dataset in one process "
                       "(runtime.runs_per_job)")
    p.add_argument("--runs", nargs="+", required=True, help="each run's plan file, results/plan/runs/<run_id>.json")
    p.add_argument("--staged", required=True, help="where each run is trained: <staged>/<run_id>/ "
                   "(results/batches/staged; a run staged already is not trained again)")
    p.add_argument("--runs-dir", required=True, help="where the runs' files go once every run is staged: "
                   "<runs-dir>/<run_id>/ (results/runs)")
    p.add_argument("--no-model", action="store_true", help="do not keep the runs' model.pt "
                   "(runtime.keep_model: false)")
    p.add_argument("--manifest", required=True, help="manifest directory (the runs' dataset)")
    p.add_argument("--device", default="auto")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--image-cache", help="the training transform's image cache (as for train)")
    p.add_argument("--eval-image-cache", help="the evaluation transform's image cache (default: the originals)")
    p.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    add_runtime_flags(p)
    p.set_defaults(func=cmd_train_batch)


def cmd_evaluate(args) -> None:
    _start_job(args)
    _evaluate(args, args.run, args.model, args.out, args.image_cache)


def add_evaluate(sub) -> None:
    p = _run_parser(sub, "evaluate", "evaluate one trained run", cmd_evaluate)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)


def _evaluate(args, run_json, model, out, image_cache: str | None) -> None:
    """Evaluate the ``model`` of the run of ``run_json`` into ``out`` (metrics.json) with its task's
    evaluator, its datasets read from ``image_cache`` (None: the originals). Its training curve is drawn by
    another job (``plot curves``: no matplotlib in a training process)."""
    run, rid, task = _task(run_json)
    result = task.evaluate(run, args.manifest, model, out, _settings(args, image_cache), run_id=rid)
    print(json.dumps(result["metrics"]))
