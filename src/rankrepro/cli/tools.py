"""``catalog`` and ``bench``: the registries' catalog and the benchmarks."""

from __future__ import annotations

import sys


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
