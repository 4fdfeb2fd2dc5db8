"""Metric speed benchmark: ``python -m rankrepro bench metrics`` writes ``<out>/metrics.md``.

On random L2-normalised embeddings of the evaluation shapes (SOP test: 60,502 x 512, 11,316 classes
in 12 super-classes; an iNaturalist-shaped test set: 136,093 x 512, 2,452 long-tailed classes in 13
super-classes), each stage runs in a fresh process (peak memory = that process's max RSS, data
included):

(a) floor: the bare similarity matrix product in chunks of 512 queries (4096 on a GPU; the faster of
    whole-gallery rows and 4096-column blocks) — no exact method can beat it;
(b) ours: R@1/10/100/1000 + mAP@R (``rankrepro.metrics.compute``, counting path);
(c) PML's AccuracyCalculator (faiss IndexFlatIP, k = max(1000, largest class), plus R@10/100/1000
    added the way ROADMAP does) on the same data — the numbers must equal (b)'s;
(d) ours: full-list mAP, H-AP, ASI, NDCG (sort path).

Targets: (b) <= 1.1x the floor, (d) <= 2x the floor in < 4 GB. Times are wall-clock seconds on
whatever machine runs it; the table records the CPU count, torch threads and load average.

``--device cuda`` runs the same stages with the embeddings on the GPU (``metrics-cuda.md``): times
are taken after ``torch.cuda.synchronize()`` and after a warm-up of the stage on 2,048 rows (CUDA
context, kernels), memory is the GPU's peak allocation, and (c) uses
PML's ``CustomKNN`` (a batched dot product and ``topk`` on the GPU) instead of CPU faiss.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch

SHAPES = (("SOP", 60502, 11316, 12, 2), ("iNat", 136093, 2452, 13, 1))  # (name, n, classes, supers, repeats)
RANKED = ("R@1", "R@10", "R@100", "R@1000", "mAP@R")
FULL = ("mAP", "H-AP", "ASI", "NDCG")
STAGES = ("floor", "ours-ranked", "pml", "ours-full")
CHUNK = 512  # rows per matrix product, as compute()'s default max_rows


def long_tail_sizes(n: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Images per class, summing to ``n``: 2 each, the rest drawn with probability ∝ 1 / (i + 10)^0.9
    for class i (a long tail, as iNaturalist's)."""
    if n < 2 * n_classes:
        raise ValueError("need at least two images per class")
    w = 1.0 / (np.arange(n_classes) + 10.0) ** 0.9
    return 2 + rng.multinomial(n - 2 * n_classes, w / w.sum())


def make_data(n: int, n_classes: int, n_super: int, dim: int, seed: int = 0):
    """Random unit embeddings and [n, 2] tree labels (fine, super).

    SOP-like (< 10 images per class): 2..~12 images per class, classes spread evenly over the
    super-classes. iNat-like: long-tailed class sizes and skewed super-classes."""
    rng = np.random.default_rng(seed)
    x = torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))
    x = torch.nn.functional.normalize(x, dim=1)
    if n < 2 * n_classes:
        raise ValueError("need at least two images per class")
    if n / n_classes < 10:  # SOP-like: 2..~12 images per class
        extra = rng.multinomial(n - 2 * n_classes, np.full(n_classes, 1.0 / n_classes))
        sizes = 2 + extra
    else:  # iNat-like long tail
        sizes = long_tail_sizes(n, n_classes, rng)
    fine = rng.permutation(np.repeat(np.arange(n_classes), sizes))
    if n / n_classes < 10:  # SOP: 12 categories of similar size
        sup_of = rng.permutation(np.arange(n_classes) % n_super)
    else:  # iNat: skewed iconic super-categories (a few hold most species)
        p_super = 1.0 / (np.arange(n_super) + 2.0)
        sup_of = rng.choice(n_super, size=n_classes, p=p_super / p_super.sum())
    return x, np.stack([fine, sup_of[fine]], 1)


def _pml(x: torch.Tensor, labels: np.ndarray) -> dict:
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    class WithRecall(AccuracyCalculator):
        """AccuracyCalculator plus R@k = any positive in the top k (as ROADMAP's CustomCalculator)."""

        def _recall(self, knn_labels, query_labels, not_lone_query_mask, k):
            keep = not_lone_query_mask
            hit = (knn_labels[keep][:, :k] == query_labels[keep][:, None]).any(1)
            return hit.double().mean().item()

        def calculate_recall_at_10(self, knn_labels, query_labels, not_lone_query_mask, **kw):
            return self._recall(knn_labels, query_labels, not_lone_query_mask, 10)

        def calculate_recall_at_100(self, knn_labels, query_labels, not_lone_query_mask, **kw):
            return self._recall(knn_labels, query_labels, not_lone_query_mask, 100)

        def calculate_recall_at_1000(self, knn_labels, query_labels, not_lone_query_mask, **kw):
            return self._recall(knn_labels, query_labels, not_lone_query_mask, 1000)

        def requires_knn(self):
            return super().requires_knn() + ["recall_at_10", "recall_at_100", "recall_at_1000"]

    y = torch.from_numpy(labels[:, 0])
    k = int(min(len(y) - 1, max(1000, np.bincount(labels[:, 0]).max())))  # >= PML's max bin count
    if x.is_cuda:  # a batched dot product + topk on the GPU (faiss here is the CPU build)
        from pytorch_metric_learning.distances import DotProductSimilarity
        from pytorch_metric_learning.utils.inference import CustomKNN

        knn_func = CustomKNN(DotProductSimilarity(normalize_embeddings=False), batch_size=CHUNK)
    else:
        import faiss
        from pytorch_metric_learning.utils.inference import FaissKNN

        knn_func = FaissKNN(index_init_fn=faiss.IndexFlatIP)
    ac = WithRecall(include=("precision_at_1", "mean_average_precision_at_r", "recall_at_10", "recall_at_100",
                             "recall_at_1000"), k=k, device=x.device, knn_func=knn_func)
    r = ac.get_accuracy(x, y)
    return {"R@1": r["precision_at_1"], "R@10": r["recall_at_10"], "R@100": r["recall_at_100"],
            "R@1000": r["recall_at_1000"], "mAP@R": r["mean_average_precision_at_r"]}


def time_stage(stage: str, n: int, n_classes: int, n_super: int, dim: int, threads: int | None,
           device: str = "cpu") -> dict:
    """Run one stage on freshly generated data; returns seconds, values and peak memory (MiB: the
    process's max RSS on CPU, the GPU's peak allocation on CUDA)."""
    if threads:
        torch.set_num_threads(threads)
    x, labels = make_data(n, n_classes, n_super, dim)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        x = x.to(device)
        # CUDA context, cuBLAS handle and the stage's kernels loaded outside the timing: the same
        # stage on the first 2048 rows
        (x[:CHUNK] @ x[:4096].T).sum().item()
        if stage != "floor":
            _run(stage, x[:2048], labels[:2048])
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rows = CHUNK if not cuda else 4096  # as compute()'s default max_rows on that device

    def peak() -> float:
        if cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    def now() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    start_rss = peak()
    load0 = os.getloadavg()[0]
    cpu0 = _cpu()
    t0 = now()
    values: dict = {}
    if stage == "floor":  # the faster of two plain chunkings: query rows x whole gallery, or blocks
        for a in range(0, n, rows):
            s = x[a : a + rows] @ x.T
        t_rows, c_rows = now() - t0, _cpu() - cpu0
        t1, cpu1 = now(), _cpu()
        for a in range(0, n, rows):
            q = x[a : a + rows]
            for c in range(0, n, 4096):
                s = q @ x[c : c + 4096].T
        t_blocks, c_blocks = now() - t1, _cpu() - cpu1
        del s
        rss = peak()
        return {"stage": stage, "seconds": min(t_rows, t_blocks), "cpu": min(c_rows, c_blocks), "values": {},
                "peak_mib": rss, "start_mib": start_rss, "load": (load0 + os.getloadavg()[0]) / 2,
                "detail": f"rows {t_rows:.1f} s, blocks {t_blocks:.1f} s"}
    values = _run(stage, x, labels)
    seconds = now() - t0
    cpu = _cpu() - cpu0
    rss = peak()
    values = {k: float(v) for k, v in values.items() if k in RANKED + FULL}
    return {"stage": stage, "seconds": seconds, "cpu": cpu, "values": values, "peak_mib": rss,
            "start_mib": start_rss, "load": (load0 + os.getloadavg()[0]) / 2}


def _run(stage: str, x: torch.Tensor, labels: np.ndarray) -> dict:
    if stage == "ours-ranked":
        from rankrepro.metrics import compute

        return compute(x, labels, metrics=list(RANKED))
    if stage == "pml":
        return _pml(x, labels)
    if stage == "ours-full":
        from rankrepro.metrics import compute

        return compute(x, labels, metrics=list(FULL))
    raise ValueError(stage)


def _cpu() -> float:
    """CPU seconds used by this process (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _run_isolated(args, timeout: float | None):
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        res = pool.apply_async(time_stage, args)
        try:
            return res.get(timeout=timeout)
        except mp.TimeoutError:
            pool.terminate()
            return {"stage": args[0], "seconds": float("nan"), "cpu": float("nan"), "values": {},
                    "peak_mib": float("nan"), "start_mib": float("nan"), "load": os.getloadavg()[0],
                    "skipped": f"not finished within {timeout:.0f} s"}


def run(out_dir, shapes=SHAPES, dim: int = 512, stages=STAGES, isolate: bool = True, threads: int | None = None,
        pml_timeout: float | None = 1800.0, repeats: int = 2, device: str = "cpu") -> list[dict]:
    """Run the benchmark and write ``<out_dir>/metrics.md`` (``metrics-cuda.md`` for ``device="cuda"``);
    returns one row per (shape, stage).

    ``shapes``: (name, n, classes, super-classes[, repeats]) tuples; ``isolate``: one spawned
    process per stage (peak-memory numbers need it; tests turn it off); ``repeats`` (default for
    shapes that give none): the floor and ours-ranked (the 1.1x comparison) run alternately this
    many times and keep their best time."""
    table = Path(out_dir) / ("metrics.md" if torch.device(device).type == "cpu" else f"metrics-{device}.md")
    rows = []
    for shape in shapes:
        name, n, n_classes, n_super = shape[:4]
        reps = shape[4] if len(shape) > 4 else repeats
        order = [st for st in stages if st in ("floor", "ours-ranked")] * max(1, reps)
        order += [st for st in stages if st not in ("floor", "ours-ranked")]
        best: dict = {}
        for stage in order:
            args = (stage, n, n_classes, n_super, dim, threads, device)
            if isolate:
                r = _run_isolated(args, pml_timeout if stage == "pml" else None)
            else:
                r = time_stage(*args)
            print(f"[bench metrics] {name} {stage}: {r['seconds']:.1f} s (load {r['load']:.1f})", flush=True)
            prev = best.get(stage)
            if prev is not None:
                r["peak_mib"] = max(r["peak_mib"], prev["peak_mib"])
                r["runs"] = prev.get("runs", 1) + 1
                if not r["seconds"] < prev["seconds"]:
                    r = {**prev, "peak_mib": r["peak_mib"], "runs": r["runs"]}
            best[stage] = r
            partial = [dict(best[st], shape=name, n=n, classes=n_classes) for st in stages if st in best]
            write_table(rows + partial, table, dim=dim, device=device)  # progress survives a kill
        for stage in stages:
            r = best[stage]
            r.update(shape=name, n=n, classes=n_classes)
            rows.append(r)
    write_table(rows, table, dim=dim, device=device)
    return rows


def _fmt(v, nd=4):
    return "—" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{nd}f}"


def write_table(rows: list[dict], path: Path, dim: int = 512, device: str = "cpu") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if torch.device(device).type == "cuda":
        where = (f"on the GPU ({torch.cuda.get_device_name(device)}, embeddings and scores in its memory; "
                 "times after torch.cuda.synchronize()). 'peak MiB' is the GPU's peak allocation "
                 "(torch.cuda.max_memory_allocated, the embeddings included); 'start MiB' the same just "
                 "before the stage.")
    else:
        where = ("on the CPU. 'peak MiB' is the process's max RSS (Python, torch and the data included); "
                 "'start MiB' the same just before the stage, so their difference is what the stage "
                 "itself added.")
    lines = ["# Metric speed benchmark", "",
             f"Random unit embeddings (dim {dim}); machine: {platform.machine()}, {os.cpu_count()} CPU(s), "
             f"torch {torch.__version__} with {torch.get_num_threads()} thread(s), "
             f"{'CUDA' if torch.cuda.is_available() else 'no CUDA'}. Each stage in a fresh process, {where} "
             "'load' is the 1-minute load average during the stage (the machine may be shared: wall "
             "times then vary by tens of percent; 'CPU s' — process CPU time, all threads — is steadier).", "",
             "| shape | stage | seconds | × floor | CPU s | CPU × floor | peak MiB | start MiB | load | values |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    floors = {r["shape"]: r for r in rows if r["stage"] == "floor"}
    for r in rows:
        fl = floors.get(r["shape"])
        ratio = r["seconds"] / fl["seconds"] if fl and np.isfinite(r["seconds"]) else None
        cpu_ratio = r.get("cpu", np.nan) / fl["cpu"] if fl and fl.get("cpu") else None
        vals = ", ".join(f"{k} {v:.6f}" for k, v in r["values"].items()) or r.get("skipped", r.get("detail", ""))
        if r.get("runs", 1) > 1:
            vals += f" (best of {r['runs']})"
        lines.append(f"| {r['shape']} ({r['n']:,} × {dim}, {r['classes']:,} classes) | {r['stage']} | "
                     f"{_fmt(r['seconds'], 1)} | {_fmt(ratio, 2)} | {_fmt(r.get('cpu'), 1)} | {_fmt(cpu_ratio, 2)} | "
                     f"{_fmt(r['peak_mib'], 0)} | "
                     f"{_fmt(r.get('start_mib'), 0)} | {_fmt(r['load'], 1)} | "
                     f"{vals} |")
    lines += ["", "Agreement of (b) ours-ranked with (c) PML (max |difference| over R@1/10/100/1000, mAP@R):", ""]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        ours = next((r["values"] for r in rows if r["shape"] == shape and r["stage"] == "ours-ranked"), None)
        ref = next((r["values"] for r in rows if r["shape"] == shape and r["stage"] == "pml"), None)
        if ours and ref:
            worst = max(RANKED, key=lambda k: abs(ours[k] - ref[k]))
            diff = abs(ours[worst] - ref[worst])
            if diff <= 1e-12:
                verdict = "identical (to 1e-12)"
            elif diff <= 1e-9:  # the same ranks but where two float32 scores differ in their last bit
                verdict = (f"equal to {diff:.0e} (on {worst}): scores within an ulp of each other, "
                           "rounded differently by the two products (faiss or another batch shape)")
            else:
                verdict = f"DIFFERENT (largest on {worst})"
            lines.append(f"- {shape}: max |Δ| = {diff:.1e}, {verdict}")
        else:
            lines.append(f"- {shape}: not compared (a stage was skipped)")
    lines += ["", "Targets: ours-ranked ≤ 1.1 × floor with the same numbers as PML; ours-full ≤ 2 × floor "
              "in < 4 GB.", ""]
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


def main(out_dir="results/bench", device: str = "cpu") -> None:
    run(out_dir, device=device)
