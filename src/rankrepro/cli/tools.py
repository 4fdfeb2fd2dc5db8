"""``catalog``, ``bench`` and ``pilot``: the registries' catalog, the benchmarks and the pilot at real size."""

from __future__ import annotations

import sys
from pathlib import Path


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


def add_catalog(sub) -> None:
    p = sub.add_parser("catalog", help="rewrite src/rankrepro/catalog.json from the registries (or --check it)")
    p.add_argument("--check", action="store_true", help="fail when the catalog does not match the code")
    p.set_defaults(func=cmd_catalog)


def cmd_bench(args) -> None:
    import importlib

    kwargs = {"device": args.device} if args.device else {}
    importlib.import_module(f"rankrepro.bench.{args.what}").main(args.out, **kwargs)


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks that write results/bench/<what>.md")
    p.add_argument("what", choices=["losses", "metrics", "plan", "pipeline", "demo", "train", "eval", "gpu"])
    p.add_argument("--out", default="results/bench")
    p.add_argument("--device", help="cpu or cuda (metrics: default cpu, writes metrics-cuda.md on cuda; "
                   "losses: default every device present; pipeline: default cuda when present, "
                   "cpu skips the GPU rows; train: likewise, and on cuda writes profiles/throughput/<gpu>.yaml; "
                   "eval: CPU rows always, GPU rows on cuda, default when present; gpu: full size on cuda (default when "
                   "present, and its profile), tiny sizes on cpu)")
    p.set_defaults(func=cmd_bench)


def cmd_pilot(args) -> None:
    """The pilot (:mod:`rankrepro.bench.pilot`) of ``--plan`` or the merged ``--config`` files; like a training job
    it first claims a free GPU of this machine (:func:`rankrepro.gpu_claim.claim_for_job`), before torch starts."""
    from rankrepro.gpu_claim import claim_for_job
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.cost import ProfileError
    from rankrepro.plan.merge import deep_merge
    from rankrepro.plan.model import Plan
    from rankrepro.plan.schema import PlanError, load_yaml_mapping
    from rankrepro.record.runtime import RuntimeSettingError

    try:
        if args.plan:
            plan, cluster, runtime = Plan.load(args.plan), {}, {}
        else:
            config: dict = {}
            for path in args.config or ["config.yaml"]:
                config = deep_merge(config, load_yaml_mapping(Path(path)))
            plan = Plan.from_json(plan_from_config(config))
            cluster, runtime = config.get("cluster") or {}, config.get("runtime") or {}
        workers = runtime.get("num_workers", 0) if args.workers is None else args.workers
        workers = claim_for_job(args.device, workers)[1]
        from rankrepro.bench import pilot

        record = pilot.run(plan, out_dir=args.out, results=args.results, device=args.device,
                           gpu=args.gpu or cluster.get("gpu", "h100"), gpu_profile=args.gpu_profile,
                           warmup=args.warmup, steps=args.steps, eval_steps=args.eval_steps, workers=workers,
                           max_batch=args.max_batch)
    except (PlanError, ProfileError, RuntimeSettingError) as err:
        sys.exit(f"pilot: {err}")
    print(f"{len(record['rows'])} signatures in {record['seconds']:.0f} s -> {Path(args.out) / 'report.md'}, "
          f"{record['profile']}")


def add_pilot(sub) -> None:
    p = sub.add_parser("pilot", help="a few real-size training steps and an evaluation slice per training signature "
                       "of a config's plan: results/pilot/report.md and a measured throughput profile")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--config", action="append",
                        help="config file(s), later over earlier (default: config.yaml; the demo: config.yaml "
                        "then profiles/demo/demo.yaml)")
    source.add_argument("--plan", help="a written plan file (results/plan/plan.<hash>.json) instead")
    p.add_argument("--out", default="results/pilot")
    p.add_argument("--results", default="results", help="where prepared manifests are (the real data)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--gpu", default=None, help="the GPU kind whose memory a peak must fit (default: the config's "
                   "cluster.gpu, h100)")
    p.add_argument("--gpu-profile", default=None, help="that GPU's profile file instead (its memory_gb)")
    p.add_argument("--warmup", type=int, default=1, help="steps after the first before timing (default 1)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per signature (default 2)")
    p.add_argument("--eval-steps", type=int, default=2, help="timed evaluation batches per signature (default 2)")
    p.add_argument("--workers", type=int, default=None,
                   help="loader workers (default: the config's runtime.num_workers; 0 with --plan)")
    p.add_argument("--max-batch", type=int, default=None, help="at most this batch (e.g. a quick check on a laptop)")
    p.set_defaults(func=cmd_pilot)
