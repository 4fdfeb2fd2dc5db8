"""``python -m rankrepro <command>``: the one entry point every Snakemake rule calls."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rankrepro.record.runtime import add_runtime_flags
from rankrepro.hgldv2 import cli as hgldv2_cli


def _json(path: str) -> dict:
    return json.loads(Path(path).read_text())


def cmd_replica(args) -> None:
    from rankrepro.data import datasets

    checksums = datasets.load(args.dataset).write_replica(args.out_dir)
    print(f"wrote replica {args.out_dir}: {', '.join(checksums)}")


def cmd_download(args) -> None:
    """Exit status 3: checksum mismatch, 4: manual download required, 5: download failed after
    the in-job retries (rankrepro.data.errors.exit_codes); a rerun at once would not help."""
    from rankrepro.data import datasets
    from rankrepro.data.errors import exit_codes

    with exit_codes():
        record = datasets.load(args.dataset).download(args.data_root, url=args.url, checksum=args.checksum,
                                                      replica_dir=args.replica_dir)
    print(f"downloaded {args.dataset} -> {record}")


def cmd_prepare(args) -> None:
    """Exit status 3: the archive no longer matches its checksum (see cmd_download)."""
    from rankrepro.data import datasets
    from rankrepro.data.errors import exit_codes

    with exit_codes():
        manifest = datasets.load(args.dataset).prepare(args.source, args.out, data_root=args.data_root,
                                                       replica=args.replica)
    print(json.dumps(manifest.meta["counts"]))


def cmd_write_run(args) -> None:
    """Write run ``--run-id`` as its run.json from its plan file ``--plan`` (results/plan/runs/<id>.json:
    the run and its ``id``), checked to hold that run (its id, and a content that hashes to it)."""
    from rankrepro.io import atomic_write_json
    from rankrepro.plan.model import check_run_record
    from rankrepro.plan.schema import PlanError

    try:
        record = check_run_record(_json(args.plan), args.plan, args.run_id)
    except PlanError as err:
        sys.exit(str(err))
    atomic_write_json(args.out, record)


def _threads(n: int | None) -> None:
    if n:
        import torch

        torch.set_num_threads(n)


def cmd_cache(args) -> None:
    from rankrepro.data.cache import build_cache

    record = build_cache(args.manifest, args.size, args.out, quality=args.quality, workers=args.workers,
                         progress=not args.no_progress)
    print(json.dumps(record))


def _task(run_json: str | Path):
    """The run record at ``run_json`` (``results/runs/<id>/run.json``), its id (the folder's name, which its
    ``id`` key must match where it has one) and its task (:mod:`rankrepro.engine.tasks`)."""
    from rankrepro.engine.tasks import task_of

    run, rid = _json(run_json), Path(run_json).parent.name
    if run.get("id", rid) != rid:
        raise ValueError(f"{run_json}: id {run['id']!r} is not the run's folder name {rid!r}")
    return run, rid, task_of(run, where=str(run_json))


def _settings(args, eval_image_cache: str | None):
    """The job's :class:`~rankrepro.record.runtime.JobSettings` of the parsed flags (the runtime's from the flags of
    :func:`rankrepro.record.runtime.add_runtime_flags` where the command has them)."""
    from rankrepro.record.runtime import JobSettings, TrainRuntime, runtime_from_args

    return JobSettings(device=args.device, num_workers=args.num_workers, progress=not args.no_progress,
                       runtime=runtime_from_args(args) if hasattr(args, "checkpoint_minutes") else TrainRuntime(),
                       image_cache=getattr(args, "image_cache", None), eval_image_cache=eval_image_cache,
                       eval_batch_size=args.batch_size)


def _train(args, run_json: str | Path, out_dir: Path, evaluate_out: str | Path | None,
           curve: str | Path | None) -> None:
    """Train the run of ``run_json`` into ``out_dir`` (model.pt, history.csv) through the training loop
    (:func:`rankrepro.engine.loop.train`) and, with ``evaluate_out``, evaluate it into that metrics.json (and plot
    its curve). The runtime settings come from the flags of :func:`rankrepro.record.runtime.add_runtime_flags`."""
    from rankrepro.engine.loop import train

    run, rid, task = _task(run_json)
    model = train(run, args.manifest, out_dir, _settings(args, args.eval_image_cache), run_id=rid, task=task)
    if evaluate_out:  # the evaluation transform's cache, or the originals
        _evaluate(args, run_json, model, evaluate_out, args.eval_image_cache, curve, out_dir / "history.csv")


def cmd_train(args) -> None:
    _threads(args.threads)
    _train(args, args.run, Path(args.run).parent, args.evaluate_out, args.curve)


def cmd_train_batch(args) -> None:
    """Train, then evaluate, each ``--runs`` run not staged yet, in turn in this process
    (runtime.runs_per_job; :func:`rankrepro.engine.batch.train_batch`): each writes model.pt,
    history.csv, metrics.json and curve.png into ``<staged>/<id>/`` as a one-run
    ``train --evaluate-out`` job writes them beside its run.json; then the batch record ``--out``.
    Exit status 1, naming each failed run and its error, when any failed."""
    from rankrepro.engine.batch import BatchRunsFailed, train_batch

    _threads(args.threads)

    def train_one(run_json: Path, out_dir: Path) -> None:
        _train(args, run_json, out_dir, out_dir / "metrics.json", out_dir / "curve.png")

    try:
        record = train_batch(args.runs, args.staged, args.out, train_one)
    except BatchRunsFailed as err:
        sys.exit(str(err))
    print(f"{args.out}: {len(record['runs'])} runs staged")


def cmd_adopt(args) -> None:
    """Put a run's files, staged by its training batch, into its folder (no torch)."""
    from rankrepro.engine.batch import AdoptError, adopt

    try:
        files = adopt(args.batch, args.run_id, args.out)
    except AdoptError as err:
        sys.exit(str(err))
    print(f"{args.out}: {', '.join(f.name for f in files)} from {args.batch}")


def cmd_evaluate(args) -> None:
    _threads(args.threads)
    _evaluate(args, args.run, args.model, args.out, args.image_cache, args.curve, Path(args.run).parent / "history.csv")


def _evaluate(args, run_json, model, out, image_cache: str | None, curve, history) -> None:
    """Evaluate the ``model`` of the run of ``run_json`` into ``out`` (metrics.json) with its task's
    evaluator, its datasets read from ``image_cache`` (None: the originals), and, with ``curve``, plot
    the run's training curve (its ``history`` csv, the final metrics in the title)."""
    run, rid, task = _task(run_json)
    result = task.evaluate(run, args.manifest, model, out, _settings(args, image_cache), run_id=rid)
    if curve:
        from rankrepro.tables.plots import training_curve

        training_curve(history, curve, metrics_json=out)
    print(json.dumps(result["metrics"]))


def cmd_table(args) -> None:
    from rankrepro.plan.model import TablePlan
    from rankrepro.tables.render import render

    render(TablePlan.load(args.plan), args.runs_dir, args.out_prefix)
    print(Path(args.out_prefix).with_suffix(".md").read_text())


def cmd_sweep_plot(args) -> None:
    from rankrepro.plan.model import TablePlan
    from rankrepro.tables.kinds.sweep import sweep_plot

    print(sweep_plot(TablePlan.load(args.plan), args.runs_dir, args.out))


def cmd_results_index(args) -> None:
    from rankrepro.tables.index import write_index

    total = write_index(args.plan, args.results_dir, args.out, html_out=args.html)["total"]
    print(f"{args.out}: {total['tables']} tables, {total['reproduced']}/{total['cells']} cells reproduced, "
          f"{total['within']} within one point, {total['gpu_h']:.2f} GPU-hours, {total['cpu_h']:.2f} CPU-hours")


def cmd_table_html(args) -> None:
    from rankrepro.tables.index import write_table_html

    write_table_html(args.plan, args.csv, args.out)


def cmd_plot(args) -> None:
    from rankrepro.tables import plots

    if args.what == "curve":
        plots.training_curve(args.history, args.out, metrics_json=args.metrics, title=args.title)
    else:
        plots.paper_scatter(args.paper, args.tables, args.out)
    print(f"wrote {args.out}")


def cmd_plan(args) -> None:
    from rankrepro.plan.build import plan_from_config, write_plan
    from rankrepro.plan.schema import PlanError, load_yaml

    try:  # validates the config as the Snakefile does (the same function)
        plan = plan_from_config(load_yaml(Path(args.config)))
    except PlanError as err:
        sys.exit(f"invalid plan: {err}")
    path = write_plan(plan, args.out).plan
    print(f"{len(plan['runs'])} runs, {len(plan['tables'])} tables -> {path}")


def cmd_cost(args) -> None:
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.cost import ProfileError, plan_cost, to_text
    from rankrepro.plan.schema import PlanError, load_yaml

    try:
        config = load_yaml(Path(args.config))
        gpu = args.gpu or (config.get("cluster") or {}).get("gpu", "h100")
        cost = plan_cost(plan_from_config(config), gpu, args.results)
    except (PlanError, ProfileError) as err:
        sys.exit(f"cost: {err}")
    print(json.dumps(cost, indent=1) if args.json else to_text(cost, per_run=args.runs), end="")


def _recipe_plan(args):
    """The plan ``recipe`` reads, and how messages name it: the ``--plan`` file, else the plan of
    ``--config`` (:func:`~rankrepro.plan.build.plan_from_config`, as ``plan`` and ``cost``)."""
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.model import Plan
    from rankrepro.plan.schema import PlanError, load_yaml

    try:
        if args.plan:
            return Plan.load(args.plan), args.plan
        return Plan.from_json(plan_from_config(load_yaml(Path(args.config)))), f"the plan of {args.config}"
    except PlanError as err:
        sys.exit(f"recipe: {err}")
    except (OSError, ValueError, KeyError) as err:  # a plan file missing, not JSON, or not a plan
        sys.exit(f"recipe: {args.plan}: not a readable plan file ({type(err).__name__}: {err})")


def cmd_recipe(args) -> None:
    """Print (or ``--out``) the recipe card of run ``RUN_ID``, or of every run (``--all``): text, ``--json``
    or ``--markdown`` (with ``--all``: the report's page); ``--html``: that page as HTML too. Exit status 2:
    no RUN_ID and no ``--all``, or a run id the plan does not hold (the message names close ones)."""
    from rankrepro.io import atomic_write_text
    from rankrepro.recipe import card_markdown, card_text, close_run_ids, recipe_card, recipes_page
    from rankrepro.tables.index import markdown_html

    if bool(args.all) == bool(args.run_id):
        print("recipe: give a RUN_ID or --all (not both)", file=sys.stderr)
        sys.exit(2)
    plan, where = _recipe_plan(args)
    if not args.all and args.run_id not in plan.runs:
        close = close_run_ids(args.run_id, plan.runs)
        print(f"recipe: run {args.run_id!r} is not in {where} ({len(plan.runs)} runs); "
              + (f"close ids: {', '.join(close)}" if close else "`--all` lists them"), file=sys.stderr)
        sys.exit(2)
    ids = sorted(plan.runs) if args.all else [args.run_id]
    cards = {rid: recipe_card(rid, plan.runs[rid], plan.provenance.get(rid), plan.tables) for rid in ids}

    def markdown() -> str:
        return recipes_page(cards, plan.tables) if args.all else card_markdown(cards[args.run_id], plan.tables)

    if args.json:
        text = json.dumps(cards if args.all else cards[args.run_id], indent=1) + "\n"
    elif args.markdown:
        text = markdown()
    else:
        text = "\n".join(card_text(card, plan.tables) for card in cards.values())
    if args.out:
        atomic_write_text(args.out, text)
    else:
        print(text, end="")
    if args.html:
        atomic_write_text(args.html, markdown_html(markdown(), title="recipes"))


def cmd_synthetic(args) -> None:
    from rankrepro.synthetic import run

    record = run(args.name, args.out_prefix, scale=args.scale, seed=args.seed)
    print(Path(args.out_prefix).with_suffix(".md").read_text() if record else "")


def cmd_catalog(args) -> None:
    from rankrepro import catalog

    if args.check:
        try:
            catalog.check()
        except catalog.CatalogError as err:
            sys.exit(str(err))
        print(f"{catalog.CATALOG_PATH} matches the code")
    else:
        print(f"wrote {catalog.write()}")


def cmd_track(args) -> None:
    from rankrepro.tracking import import_runs

    runs, tables = list(args.runs), list(args.tables)
    if args.plan:  # every run and table of the plan
        from rankrepro.plan.model import Plan

        plan = Plan.load(args.plan)
        runs += [str(Path(args.runs_dir) / rid) for rid in plan.runs]
        tables += [str(Path(args.tables_dir) / key) for key in plan.tables]
    imported = import_runs(runs, tables, args.tracking_uri, args.experiment, args.out,
                           artifact_root=args.artifact_root)
    print(f"imported {len(imported)} runs/tables into {args.tracking_uri}")


def cmd_bench(args) -> None:
    import importlib

    kwargs = {"device": args.device} if args.device else {}
    importlib.import_module(f"rankrepro.bench.{args.what}").main(args.out, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rankrepro", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replica", help="write a generated replica of a dataset's raw files (and replica.json)")
    p.add_argument("dataset")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(func=cmd_replica)

    p = sub.add_parser("download", help="download and verify a dataset's files (resumable), then write "
                       "downloads/<source>/download.json; exit status 3: checksum mismatch, 4: manual download "
                       "required, 5: download failed")
    p.add_argument("dataset")
    p.add_argument("--data-root", required=True)
    p.add_argument("--url", help="single-file datasets: default the dataset's")
    p.add_argument("--checksum", help="md5:<hex> or sha256:<hex> (single-file datasets; default the dataset's)")
    p.add_argument("--replica-dir", help="download the generated replica in this folder (file://) instead")
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("prepare", help="re-verify and extract a dataset, write its manifest; exit status 3: "
                       "the archive no longer matches its checksum")
    p.add_argument("dataset")
    p.add_argument("--source", required=True, help="downloads/<source>/download.json, a single archive, an "
                   "already-extracted copy, or (derived datasets) the base manifest's folder")
    p.add_argument("--data-root", required=True)
    p.add_argument("--out", required=True, help="manifest directory")
    p.add_argument("--replica", action="store_true", help="the source is a generated replica")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("write-run", help="write a planned run's run.json (the run and its id)")
    p.add_argument("--plan", required=True, help="the run's plan file, results/plan/runs/<run_id>.json")
    p.add_argument("--run-id", required=True, help="a run id of that plan")
    p.add_argument("--out", required=True, help="results/runs/<run_id>/run.json")
    p.set_defaults(func=cmd_write_run)

    for name, func, help_text in (("train", cmd_train, "train one run (resumes from its checkpoint)"),
                                  ("evaluate", cmd_evaluate, "evaluate one trained run")):
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
        p.add_argument("--curve", help="also plot the run's training curve (history.csv beside --run, the "
                       "final metrics in the title) to this PNG")
        if name == "evaluate":
            p.add_argument("--model", required=True)
            p.add_argument("--out", required=True)
        else:
            p.add_argument("--evaluate-out", help="then evaluate the trained model into this metrics.json in the "
                           "same process (runtime.evaluate_in_train_job)")
            p.add_argument("--eval-image-cache", help="the image cache of that evaluation and of the run's test curve "
                           "(eval.every; default: the originals)")
            add_runtime_flags(p)

    p = sub.add_parser("train-batch", help="train and evaluate several runs of one dataset in one process "
                       "(runtime.runs_per_job)")
    p.add_argument("--runs", nargs="+", required=True, help="results/runs/<run_id>/run.json of each run")
    p.add_argument("--staged", required=True, help="where each run is trained: <staged>/<run_id>/ "
                   "(results/batches/staged; a run staged already is not trained again)")
    p.add_argument("--out", required=True, help="the batch record, written once every run is staged: "
                   "results/batches/<batch>/batch.json")
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

    p = sub.add_parser("adopt", help="put a run's files, staged by its training batch, into its folder "
                       "(hard links or copies, atomically)")
    p.add_argument("--batch", required=True, help="the batch record: results/batches/<batch>/batch.json")
    p.add_argument("--run-id", required=True)
    p.add_argument("--out", required=True, help="results/runs/<run_id>")
    p.set_defaults(func=cmd_adopt)

    p = sub.add_parser("cache", help="write a manifest's images with the shorter side resized to --size "
                       "(JPEG q95; resumable; cache.json last)")
    p.add_argument("--manifest", required=True, help="manifest directory")
    p.add_argument("--size", type=int, required=True, help="shorter side S (images already <= S are copied)")
    p.add_argument("--out", required=True, help="cache folder, e.g. results/cache/<dataset>/s<S>")
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--workers", type=int, default=1, help="processes")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_cache)

    for name, func, help_text, out, out_help in (
            ("table", cmd_table, "render a paper table (paper vs ours)", "--out-prefix",
             "results/tables/<paper>/<table> (writes .md, .csv, .tex)"),
            ("sweep-plot", cmd_sweep_plot, "plot a sweep spec's points (a paper figure: ours beside the paper's)",
             "--out", "results/tables/<paper>/<table>.png")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--plan", required=True, help="the table's plan: results/plan/tables/<paper>/<table>.<hash>.json")
        p.add_argument("--runs-dir", required=True)
        p.add_argument(out, required=True, help=out_help)
        p.set_defaults(func=func)

    p = sub.add_parser("results-index", help="write results/README.md: per table, cells reproduced, within one "
                       "point, pending (why), replica or real data, GPU- and CPU-hours")
    p.add_argument("--plan", required=True, help="results/plan/plan.<hash>.json")
    p.add_argument("--results-dir", default="results", help="where tables/, runs/, synthetic/, hgldv2/ are")
    p.add_argument("--out", required=True, help="results/README.md")
    p.add_argument("--html", help="also the index as an HTML page (the report's copy)")
    p.set_defaults(func=cmd_results_index)

    p = sub.add_parser("table-html", help="an HTML page of a rendered table (for the Snakemake report)")
    p.add_argument("--plan", required=True, help="the table's plan: results/plan/tables/<paper>/<table>.<hash>.json")
    p.add_argument("--csv", required=True, help="the rendered table: results/tables/<paper>/<table>.csv")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_table_html)

    p = sub.add_parser("plot", help="a run's training curve, or a paper's paper-vs-ours scatter (PNG)")
    p.add_argument("what", choices=["curve", "scatter"])
    p.add_argument("--out", required=True)
    p.add_argument("--history", help="curve: results/runs/<id>/history.csv")
    p.add_argument("--metrics", help="curve: results/runs/<id>/metrics.json (final metrics in the title)")
    p.add_argument("--title", help="curve: default the run folder's name")
    p.add_argument("--paper", help="scatter: the paper's name")
    p.add_argument("--tables", nargs="*", default=[], help="scatter: the paper's table CSVs")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("plan", help="validate a config file and write its plan (what the Snakefile does at start)")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--out", default="results/plan")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("cost", help="estimate the GPU-hours of every run, table and paper of a config's plan "
                       "(throughput profile profiles/throughput/<gpu>.yaml)")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--gpu", default=None,
                   help="the GPU kind: profiles/throughput/<gpu>.yaml (default: the config's cluster.gpu, h100)")
    p.add_argument("--results", default="results", help="where prepared manifests are (their image counts)")
    p.add_argument("--runs", action="store_true", help="also one line per run")
    p.add_argument("--json", action="store_true", help="the whole estimate as JSON")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("recipe", help="a run's recipe card: its resolved values and where each came from (setup, "
                       "table row or column, override, default); exit status 2: an unknown run id")
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id of the plan (results/runs/<RUN_ID>)")
    p.add_argument("--all", action="store_true", help="every run of the plan (--json: an object keyed by run id; "
                   "--markdown: the report's page, by paper and table)")
    p.add_argument("--config", default="config.yaml", help="plan this config (as `plan` and `cost` do)")
    p.add_argument("--plan", help="read this plan file instead: results/plan/plan.<hash>.json")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the card as JSON (the full origins)")
    form.add_argument("--markdown", action="store_true", help="the card as Markdown")
    p.add_argument("--out", help="write to this file instead of printing")
    p.add_argument("--html", help="also the Markdown as an HTML page (the report's copy)")
    p.set_defaults(func=cmd_recipe)

    p = sub.add_parser("synthetic", help="compute a result that needs no image dataset (toy figure, timing table)")
    p.add_argument("name", help="a registered result (rankrepro.synthetic)")
    p.add_argument("--out-prefix", required=True, help="writes <prefix>.md, .json (and .png for figures)")
    p.add_argument("--scale", default="paper", choices=["paper", "demo"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_synthetic)

    p = sub.add_parser("catalog", help="rewrite src/rankrepro/catalog.json from the registries (or --check it)")
    p.add_argument("--check", action="store_true", help="fail when the catalog does not match the code")
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser("track", help="import finished runs and tables into MLflow")
    p.add_argument("--plan", help="results/plan/plan.<hash>.json: import its runs and tables")
    p.add_argument("--runs-dir", default="results/runs", help="where the plan's runs are (with --plan)")
    p.add_argument("--tables-dir", default="results/tables", help="where the plan's tables are (with --plan)")
    p.add_argument("--runs", nargs="*", default=[], help="run directories")
    p.add_argument("--tables", nargs="*", default=[], help="table path prefixes (without suffix)")
    p.add_argument("--tracking-uri", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--artifact-root")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_track)

    hgldv2_cli.register(sub)

    p = sub.add_parser("bench", help="benchmarks that write results/bench/<what>.md")
    p.add_argument("what", choices=["losses", "metrics", "plan", "pipeline", "demo", "train", "eval"])
    p.add_argument("--out", default="results/bench")
    p.add_argument("--device", help="cpu or cuda (metrics: default cpu, writes metrics-cuda.md on cuda; "
                   "losses: default every device present; pipeline: default cuda when present, "
                   "cpu skips the GPU rows; train: likewise, and on cuda writes profiles/throughput/<gpu>.yaml; "
                   "eval: CPU rows always, GPU rows on cuda, default when present)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
