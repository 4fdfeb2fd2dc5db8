"""``python -m rankrepro hgldv2 <step>``: the five rules of workflow/rules/hgldv2.smk, and seed-curation."""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path


def none_or(value: str | None) -> str | None:
    return None if value in (None, "", "none", "None", "null") else value


def cmd_scrape(args) -> None:
    from rankrepro.hgldv2 import fake_api, scrape

    with ExitStack() as stack:
        commons, wikidata = args.commons_url, args.wikidata_url
        if args.fake_world:
            world = fake_api.demo_world() if args.fake_world == "demo" else args.fake_world
            api = stack.enter_context(fake_api.FakeWikimedia(world))
            commons, wikidata = api.commons_url, api.wikidata_url
            print(f"scrape: fake Wikimedia APIs on {api.base_url} ({args.fake_world})", flush=True)
        summary = scrape.run_scrape(
            {"train": args.train, "index": args.index}, args.out, args.cache, commons_url=commons,
            wikidata_url=wikidata, user_agent=args.user_agent or scrape.default_user_agent(none_or(args.contact)),
            maxlag=args.maxlag, min_interval=args.min_interval, max_retries=args.max_retries,
            max_redirects=args.max_redirects, progress=not args.no_progress)
    print(json.dumps(summary, indent=2))


def cmd_clean(args) -> None:
    from rankrepro.hgldv2 import clean

    report = clean.run_clean(args.scrape, args.out, irrelevant_file=args.irrelevant or clean.IRRELEVANT_FILE,
                             several=args.several)
    print(clean.render(report))


def cmd_cluster(args) -> None:
    from rankrepro.device import resolve_device
    from rankrepro.hgldv2 import cluster

    args.device = str(resolve_device(args.device))
    info = cluster.run_cluster(args.landmarks, args.out, model=args.model, pretrained=none_or(args.pretrained),
                               k=args.k, seed=args.seed, niter=args.niter, nredo=args.nredo, prompt=args.prompt,
                               device=args.device)
    print(json.dumps(info, indent=2))


def cmd_curate(args) -> None:
    from rankrepro.hgldv2 import curate

    release = Path(args.release_dir) if args.release_dir else None
    if release is not None and (release / "train_label_to_hierarchical.csv").is_file():
        print(f"curate: the official release is in {release}; to start from the authors' choices, seed a "
              f"curation file from it:\n  python -m rankrepro hgldv2 seed-curation --release-dir {release} "
              f"--out my_curation.yaml\nthen set hgldv2.curation: my_curation.yaml in the config", flush=True)
    info = curate.run_curate(args.landmarks, args.cluster_dir, args.curation or curate.CURATION_FILE, args.out)
    print(json.dumps(info, indent=2, default=str)[:4000])


def cmd_compare(args) -> None:
    from rankrepro.hgldv2 import compare

    info = compare.run_compare(args.ours, args.release_dir, args.out_prefix)
    print(Path(args.out_prefix + ".md").read_text())
    del info


def cmd_seed(args) -> None:
    from rankrepro.hgldv2 import curate

    print(json.dumps(curate.seed_curation(args.release_dir, args.out, base_curation=args.base), indent=2,
                     default=str))


def register(sub) -> None:
    """Add ``hgldv2`` and its steps to the top-level subparsers ``sub``."""
    parser = sub.add_parser("hgldv2", help="build the H-GLDv2 labels: scrape, clean, cluster, curate, compare")
    steps = parser.add_subparsers(dest="step", required=True)

    p = steps.add_parser("scrape", help="Commons category -> Wikidata P31 classes, cached and resumable")
    p.add_argument("--train", required=True, help="train_label_to_category.csv")
    p.add_argument("--index", required=True, help="index_label_to_category.csv")
    p.add_argument("--out", required=True, help="writes landmarks.jsonl and scrape.json")
    p.add_argument("--cache", required=True, help="raw answers, one file per request (a rerun asks nothing twice)")
    p.add_argument("--commons-url", default="https://commons.wikimedia.org/w/api.php")
    p.add_argument("--wikidata-url", default="https://www.wikidata.org/w/api.php")
    p.add_argument("--user-agent", help="default: rankrepro-hgldv2-bot/<version> (<project url>; <contact>) ...")
    p.add_argument("--contact", help="an e-mail or URL added to the User-Agent (Wikimedia's policy asks for one)")
    p.add_argument("--maxlag", type=int, default=5)
    p.add_argument("--min-interval", type=float, default=0.5, help="seconds between two requests (serial)")
    p.add_argument("--max-retries", type=int, default=8)
    p.add_argument("--max-redirects", type=int, default=3)
    p.add_argument("--fake-world", help="answer from a loopback fake of the APIs: 'demo' (the GLDv2 replica's "
                   "world) or a world JSON file (rankrepro.hgldv2.fake_api)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_scrape)

    p = steps.add_parser("clean", help="one supercategory per landmark; the paper's counts beside ours")
    p.add_argument("--scrape", required=True, help="scrape/landmarks.jsonl")
    p.add_argument("--out", required=True)
    p.add_argument("--irrelevant", help="irrelevant classes YAML (default: the packaged list)")
    p.add_argument("--several", default="drop", choices=["drop", "first"])
    p.set_defaults(func=cmd_clean)

    p = steps.add_parser("cluster", help="CLIP text embeddings of the names, spherical k-means, review sheet")
    p.add_argument("--landmarks", required=True, help="clean/landmarks.csv")
    p.add_argument("--out", required=True)
    p.add_argument("--model", required=True, help="open_clip model name, local-dir:<dir>, or rankrepro-tiny")
    p.add_argument("--pretrained", default="none", help="open_clip tag, a local checkpoint file, or none (random)")
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--niter", type=int, default=25)
    p.add_argument("--nredo", type=int, default=5)
    p.add_argument("--prompt", default="{}", help="text encoded per name, {} = the name")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.set_defaults(func=cmd_cluster)

    p = steps.add_parser("curate", help="apply the curation file; the release's CSV columns")
    p.add_argument("--landmarks", required=True, help="clean/landmarks.csv")
    p.add_argument("--cluster-dir", help="cluster/ (names.csv, cluster.json) for cluster rules")
    p.add_argument("--curation", help="curation YAML (default: the packaged one)")
    p.add_argument("--release-dir", help="the official *_label_to_hierarchical.csv folder, when present")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_curate)

    p = steps.add_parser("compare", help="coverage, ARI, per-supercategory P/R against the release")
    p.add_argument("--ours", required=True, help="our labels folder")
    p.add_argument("--release-dir", required=True, help="the official *_label_to_hierarchical.csv folder")
    p.add_argument("--out-prefix", required=True, help="writes <prefix>.md, .csv, .json")
    p.set_defaults(func=cmd_compare)

    p = steps.add_parser("seed-curation", help="a curation file from the release (each name's majority label)")
    p.add_argument("--release-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--base", help="a curation file whose other names are kept")
    p.set_defaults(func=cmd_seed)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - python -m rankrepro.hgldv2.cli
    parser = argparse.ArgumentParser(prog="rankrepro")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    args.func(args)
    return 0
