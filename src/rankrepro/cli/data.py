"""``replica``, ``download``, ``prepare`` and ``cache``: a dataset's files, its manifest and its image caches
(workflow/rules/data.smk, cache.smk)."""

from __future__ import annotations

import json


def cmd_replica(args) -> None:
    from rankrepro.data import datasets

    checksums = datasets.load(args.dataset).write_replica(args.out_dir)
    print(f"wrote replica {args.out_dir}: {', '.join(checksums)}")


def add_replica(sub) -> None:
    p = sub.add_parser("replica", help="write a generated replica of a dataset's raw files (and replica.json)")
    p.add_argument("dataset")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(func=cmd_replica)


def cmd_download(args) -> None:
    """Exit status 3: checksum mismatch, 4: manual download required, 5: download failed after
    the in-job retries (rankrepro.data.errors.exit_codes); a rerun at once would not help."""
    from rankrepro.data import datasets
    from rankrepro.data.errors import exit_codes

    with exit_codes():
        record = datasets.load(args.dataset).download(args.data_root, url=args.url, checksum=args.checksum,
                                                      replica_dir=args.replica_dir)
    print(f"downloaded {args.dataset} -> {record}")


def add_download(sub) -> None:
    p = sub.add_parser("download", help="download and verify a dataset's files (resumable), then write "
                       "downloads/<source>/download.json; exit status 3: checksum mismatch, 4: manual download "
                       "required, 5: download failed")
    p.add_argument("dataset")
    p.add_argument("--data-root", required=True)
    p.add_argument("--url", help="single-file datasets: default the dataset's")
    p.add_argument("--checksum", help="md5:<hex> or sha256:<hex> (single-file datasets; default the dataset's)")
    p.add_argument("--replica-dir", help="download the generated replica in this folder (file://) instead")
    p.set_defaults(func=cmd_download)


def cmd_prepare(args) -> None:
    """Exit status 3: the archive no longer matches its checksum (see cmd_download)."""
    from rankrepro.data import datasets
    from rankrepro.data.errors import exit_codes

    with exit_codes():
        manifest = datasets.load(args.dataset).prepare(args.source, args.out, data_root=args.data_root,
                                                       replica=args.replica)
    print(json.dumps(manifest.meta["counts"]))


def add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="re-verify and extract a dataset, write its manifest; exit status 3: "
                       "the archive no longer matches its checksum")
    p.add_argument("dataset")
    p.add_argument("--source", required=True, help="downloads/<source>/download.json, a single archive, an "
                   "already-extracted copy, or (derived datasets) the base manifest's folder")
    p.add_argument("--data-root", required=True)
    p.add_argument("--out", required=True, help="manifest directory")
    p.add_argument("--replica", action="store_true", help="the source is a generated replica")
    p.set_defaults(func=cmd_prepare)


def cmd_cache(args) -> None:
    from rankrepro.data.cache import build_cache

    record = build_cache(args.manifest, args.size, args.out, quality=args.quality, workers=args.workers,
                         progress=not args.no_progress)
    print(json.dumps(record))


def add_cache(sub) -> None:
    p = sub.add_parser("cache", help="write a manifest's images with the shorter side resized to --size "
                       "(JPEG q95; resumable; cache.json last)")
    p.add_argument("--manifest", required=True, help="manifest directory")
    p.add_argument("--size", type=int, required=True, help="shorter side S (images already <= S are copied)")
    p.add_argument("--out", required=True, help="cache folder, e.g. results/cache/<dataset>/s<S>")
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--workers", type=int, default=1, help="processes")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_cache)
