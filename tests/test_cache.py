"""The resized image cache (rankrepro.data.cache), how the loader uses it, its Snakemake wiring,
and the data-pipeline benchmark at a tiny size."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from datautil import replica_archive
from PIL import Image
from test_job_imports import modules_loaded_by
from test_workflow import _jobs, smk
from torchvision import transforms as T
from torchvision.transforms import functional as F

from rankrepro.bench.plan import workflow_copy
from rankrepro.data import cache as C
from rankrepro.data import datasets, transforms
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest, write_manifest

S = 32
CFG = {"train_resize": S, "train_crop": 24, "rrc_scale": [0.16, 1.0], "rrc_ratio": [0.75, 1.33],
       "test_resize": [S, S], "test_crop": 24}
# originals replaced by other sizes and modes: larger non-square ones (resized), smaller ones (copied)
ODD = {0: ((60, 45), "RGB", "JPEG"), 1: ((45, 80), "L", "JPEG"), 2: ((30, 20), "RGB", "JPEG"),
       3: ((32, 50), "RGB", "PNG"), 4: ((70, 40), "RGBA", "PNG")}


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    """A small SOP replica (48 px images) whose first images are replaced by odd sizes and modes."""
    tmp = tmp_path_factory.mktemp("cache")
    archive = tmp / "replica.zip"
    replica_archive("sop", archive, classes_per_super=1, images_per_class=(2, 3), image_size=48, seed=3)
    manifest = datasets.load("sop").prepare(archive, tmp / "manifest", data_root=tmp / "data", replica=True)
    rng = np.random.default_rng(0)
    for index, (size, mode, fmt) in ODD.items():
        yy, xx = np.mgrid[0:size[1], 0:size[0]]
        waves = [np.sin(xx / (3 + c) + yy / (5 + 2 * c) + index) for c in range(4)]
        pixels = 128 + 90 * np.stack(waves, -1) + rng.normal(0, 8, (size[1], size[0], 4))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGBA").convert(mode)
        image.save(manifest.paths()[index], format=fmt)  # keeps the .JPG name: Pillow reads the bytes
    return tmp / "manifest"


def fresh_copy(manifest_dir, tmp_path):
    """A copy of the manifest folder (same root) that a test may change."""
    return shutil.copytree(manifest_dir, tmp_path / "manifest")


def mean_abs(a, b):
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).mean() / 255)


def test_cache_mirrors_paths_with_shorter_side_s(manifest_dir, tmp_path):
    out = tmp_path / "cache"
    record = C.build_cache(manifest_dir, S, out)
    manifest = read_manifest(manifest_dir)
    assert record == json.loads((out / C.CACHE_JSON).read_text())
    assert record["count"] == len(manifest.table) and record["size"] == S and record["quality"] == 95
    assert record["manifest"] == C.manifest_fingerprint(manifest_dir) and record["root"] == manifest.meta["root"]
    assert not (out / C.PARTIAL_JSON).exists()
    copied = 0
    for rel, original in zip(manifest.table["path"], manifest.paths()):
        cached = out / rel
        with Image.open(original) as o, Image.open(cached) as c:
            if min(o.size) <= S:  # no upscaling: copied byte for byte
                assert cached.read_bytes() == original.read_bytes()
                copied += 1
                continue
            assert c.format == "JPEG" and min(c.size) == S
            expected = F.resize(o.convert("RGB"), S)  # the pipeline's own Resize(S)
            assert c.size == expected.size
            assert mean_abs(c.convert("RGB"), expected) < 0.03  # JPEG q95
    assert copied == record["copied"] == 2 and record["resized"] == len(manifest.table) - 2
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.relative_to(out).as_posix() for p in files} == {*manifest.table["path"], C.CACHE_JSON}
    newest_image = max(p.stat().st_mtime_ns for p in files if p.name != C.CACHE_JSON)
    assert (out / C.CACHE_JSON).stat().st_mtime_ns >= newest_image  # written last
    assert C.build_cache(manifest_dir, S, out) == record  # complete: nothing to do


@pytest.mark.parametrize("size, shape, expected", [
    (32, (60, 45), (42, 32)),   # landscape: long side int(32 * 60 / 45) = int(42.67) = 42
    (32, (45, 80), (32, 56)),   # portrait: int(32 * 80 / 45) = int(56.9) = 56
    (7, (100, 30), (23, 7)),    # int(7 * 100 / 30) = int(23.33) = 23
    (20, (49, 49), (20, 20)),   # square
    (3, (10, 7), (4, 3)),       # int(3 * 10 / 7) = int(4.29) = 4
])
def test_resize_shorter_side_is_torchvisions_resize_bit_for_bit(size, shape, expected):
    rng = np.random.default_rng(size)
    image = Image.fromarray(rng.integers(0, 256, (shape[1], shape[0], 3), dtype=np.uint8), "RGB")
    ours = C.resize_shorter_side(image, size)
    theirs = F.resize(image, size)  # what the pipeline's Resize(S) does to a PIL image
    assert ours.size == theirs.size == expected
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))
    assert C.resize_shorter_side(ours, size) is ours  # shorter side already S: unchanged, as torchvision's


def test_building_a_cache_imports_no_torch(manifest_dir, tmp_path):
    """The image_cache job (``python -m rankrepro cache``) resizes with Pillow alone: no torch to import."""
    out = tmp_path / "cache"
    loaded = modules_loaded_by("from rankrepro import cli\n"
                               f"cli.main(['cache', '--manifest', {str(manifest_dir)!r}, '--size', '{S}', "
                               f"'--out', {str(out)!r}, '--no-progress'])")
    assert json.loads((out / C.CACHE_JSON).read_text())["resized"] > 0  # it did resize images
    assert {"PIL", "pandas"} <= loaded
    heavy = {"torch", "torchvision", "matplotlib", "sklearn"}
    assert loaded.isdisjoint(heavy), sorted(loaded & heavy)


def test_interrupted_build_has_no_cache_json_and_resumes(manifest_dir, tmp_path, monkeypatch):
    out = tmp_path / "cache"
    real, calls = C._cache_one, []

    def dies_after_five(task):
        if len(calls) == 5:
            raise KeyboardInterrupt  # the job is killed
        calls.append(task)
        return real(task)

    monkeypatch.setattr(C, "_cache_one", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        C.build_cache(manifest_dir, S, out)
    assert not (out / C.CACHE_JSON).exists() and C.read_record(out) is None
    assert (out / C.PARTIAL_JSON).exists()
    done = {t[1] for t in calls}
    assert len(done) == 5 and all(Path(p).is_file() for p in done)
    stray = out / "bicycle_final" / ".x.JPG.abc.tmp"  # a write cut short by a kill -9
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"half")
    manifest = read_manifest(manifest_dir)
    with pytest.warns(C.ImageCacheWarning, match="does not exist"):
        assert ImageDataset(manifest.split("train"), transforms.train_transform(CFG), cache=out).source == "originals"

    calls.clear()
    monkeypatch.setattr(C, "_cache_one", lambda task: calls.append(task) or real(task))
    record = C.build_cache(manifest_dir, S, out)
    assert record["skipped"] == 5 and len(calls) == record["count"] - 5
    assert not ({t[1] for t in calls} & done)  # finished images are skipped
    assert not stray.exists() and not (out / C.PARTIAL_JSON).exists()
    assert ImageDataset(manifest.split("train"), transforms.train_transform(CFG), cache=out).source == "cache"


def test_other_settings_rebuild_and_a_foreign_folder_is_refused(manifest_dir, tmp_path):
    out = tmp_path / "cache"
    C.build_cache(manifest_dir, S, out)
    record = C.build_cache(manifest_dir, S, out, quality=80)
    assert record["quality"] == 80 and record["skipped"] == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not an image cache"):
        C.build_cache(manifest_dir, S, foreign)
    assert (foreign / "notes.txt").read_text() == "keep"


def test_loader_uses_the_cache_only_for_its_manifest(manifest_dir, tmp_path):
    mdir = fresh_copy(manifest_dir, tmp_path)
    out = tmp_path / "cache"
    C.build_cache(mdir, S, out)
    manifest = read_manifest(mdir)
    train = ImageDataset(manifest.split("train"), transforms.train_transform(CFG), contiguous=True, cache=out)
    assert train.source == "cache" and all(str(p).startswith(str(out)) for p in train.paths)
    assert train[0][0].shape == (3, 24, 24)
    assert ImageDataset(manifest.split("test"), transforms.test_transform(CFG), cache=out).source == "cache"

    # the manifest changes (a row fewer): the cache no longer matches -> the originals, with a warning
    write_manifest(mdir, manifest.table.iloc[1:], {k: v for k, v in manifest.meta.items() if k != "counts"})
    changed = read_manifest(mdir)
    with pytest.warns(C.ImageCacheWarning, match="another manifest.*manifest"):
        dataset = ImageDataset(changed.split("train"), transforms.train_transform(CFG), cache=out)
    assert dataset.source == "originals" and dataset.paths == changed.split("train").paths()
    assert dataset[0][0].shape == (3, 24, 24)
    # and the rebuild follows the new manifest
    C.build_cache(mdir, S, out)
    assert ImageDataset(changed.split("train"), transforms.train_transform(CFG), cache=out).source == "cache"


def test_transforms_from_the_cache_equal_the_originals_up_to_jpeg(manifest_dir, tmp_path):
    out = tmp_path / "cache"
    C.build_cache(manifest_dir, S, out)
    manifest = read_manifest(manifest_dir)
    resized = 0
    for rel in manifest.table["path"]:
        with Image.open(out / rel) as c:
            cached = c.convert("RGB")
        if min(cached.size) == S:  # resized (the copies of smaller images are upscaled as the originals are)
            assert T.Resize(S)(cached) is cached  # Resize(S) of a shorter side already S: the identity
            resized += 1
    assert resized == len(manifest.table) - 1  # all but the 30x20 copy (the 32x50 copy has S too)
    pairs = {}
    for split, make in (("train", transforms.train_transform), ("test", transforms.test_transform)):
        rows = manifest.split(split)
        plain = ImageDataset(rows, make(CFG), cache=None)
        cached = ImageDataset(rows, make(CFG), cache=out)
        assert cached.source == "cache"
        for i in range(len(plain)):
            torch.manual_seed(i)
            a = plain[i][0]
            torch.manual_seed(i)
            b = cached[i][0]
            assert a.shape == b.shape  # same geometry: same random crop boxes, same squash
            pairs.setdefault(split, []).append((a - b).abs().mean().item())
    # mean |difference| in normalised units (the pixel range is ~4.4): JPEG q95 (~0.01 of the range on these
    # noisy images; measured median 0.04, max 0.12), plus the test squash's second resampling of the long side
    assert max(pairs["train"]) < 0.2 and max(pairs["test"]) < 0.2
    assert np.median(pairs["train"] + pairs["test"]) < 0.08


@pytest.mark.parametrize("images, reason", [
    ({"test_resize": 24}, "needs the originals"),                   # Resize(t), t != S
    ({"test_resize": [S + 8, S + 8]}, "needs the originals"),       # a squash larger than S
])
def test_incompatible_test_transform_reads_the_originals(manifest_dir, tmp_path, images, reason):
    out = tmp_path / "cache"
    C.build_cache(manifest_dir, S, out)
    test = read_manifest(manifest_dir).split("test")
    with pytest.warns(C.ImageCacheWarning, match=reason):
        dataset = ImageDataset(test, transforms.test_transform({**CFG, **images}), cache=out)
    assert dataset.source == "originals"


def test_no_train_resize_reads_the_originals(manifest_dir, tmp_path):
    out = tmp_path / "cache"
    C.build_cache(manifest_dir, S, out)
    with pytest.warns(C.ImageCacheWarning, match="does not start with a Resize"):
        dataset = ImageDataset(read_manifest(manifest_dir).split("train"),
                               transforms.train_transform({**CFG, "train_resize": None}), cache=out)
    assert dataset.source == "originals"


def test_resize_uses_cache():
    assert C.resize_uses_cache(256, 256) and C.resize_uses_cache([256], 256)
    assert C.resize_uses_cache([256, 256], 256) and C.resize_uses_cache([224, 256], 256)
    for resize in (255, 257, 288, [257, 256], None, True, [1, 2, 3]):
        assert not C.resize_uses_cache(resize, 256), resize
    assert not C.resize_uses_cache(256, None)


def test_cache_is_explicit_and_cli(manifest_dir, tmp_path, capsys):
    from rankrepro import cli

    out = tmp_path / "s32"
    assert cli.main(["cache", "--manifest", str(manifest_dir), "--size", str(S), "--out", str(out),
                     "--workers", "2", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == len(read_manifest(manifest_dir).table)
    train = read_manifest(manifest_dir).split("train")
    assert ImageDataset(train, transforms.train_transform(CFG)).source == "originals"
    # what `train/evaluate --image-cache` hands down (no process-wide default)
    assert ImageDataset(train, transforms.train_transform(CFG), cache=out).source == "cache"
    assert ImageDataset(train, transforms.train_transform(CFG), cache=None).source == "originals"


def _dry_run(wf, *args):
    result = smk(wf, "-n", "--cores", "1", "-p", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _blocks(stdout, rule):
    return [block for block in stdout.split("\nrule ")[1:] if block.startswith(f"{rule}:")]


def _sop_cache_reads(wf, stdout):
    """{rule: how many SOP train / evaluate jobs read the s256 cache} of a dry run, after checking each
    job against its run (in the plan the dry run used: its track job's input results/plan/plan.<hash>.json):
    a job reads the cache, as input and as
    ``--image-cache``, exactly when its run's first resize can use it (SupRank's SOP: Resize(256) and a
    (256, 256) squash of the s256 cache; not PNP's RandomResizedCrop of the originals nor top-k's
    (256, 256) training squash)."""
    plan_file = re.search(r"results/plan/plan\.[0-9a-f]{12}\.json", stdout).group(0)
    plan = json.loads((wf / plan_file).read_text())
    reading = {"train": 0, "evaluate": 0}
    for rule in reading:
        blocks = [b for b in _blocks(stdout, rule) if "results/runs/sop-" in b]
        assert blocks, rule
        for block in blocks:
            run = plan["runs"][re.search(r"results/runs/(sop-[a-z0-9_]+-[0-9a-f]{10})/", block).group(1)]
            size = run["images"]["train_resize"]
            resize = run["images"]["train_resize" if rule == "train" else "test_resize"]
            expected = size == 256 and C.resize_uses_cache(resize, size)
            assert ("results/cache/sop/s256/cache.json" in block.split("output:")[0]) == expected, block[:300]
            assert ("--image-cache results/cache/sop/s256" in block) == expected, block[:300]
            reading[rule] += expected
    return reading


@pytest.mark.slow
def test_workflow_wiring(tmp_path):
    wf = workflow_copy(tmp_path)
    on = _dry_run(wf)
    cache_json = "results/cache/sop/s256/cache.json"
    assert _jobs(on).get("image_cache", 0) >= 1
    assert any(cache_json in b.split("output:")[1] for b in _blocks(on, "image_cache"))
    reading = _sop_cache_reads(wf, on)
    assert reading["train"] and reading["evaluate"]

    (wf / "off.yaml").write_text(yaml.safe_dump({"runtime": {"image_cache": False}}))
    off = _dry_run(wf, "--configfile", "off.yaml")
    assert "image_cache" not in _jobs(off) and "results/cache/" not in off and "--image-cache" not in off

    # a test resize the cache cannot serve: training reads the cache, evaluation the originals
    (wf / "t224.yaml").write_text(yaml.safe_dump({"run_overrides": {"images": {"test_resize": 224}}}))
    mixed = _dry_run(wf, "--configfile", "t224.yaml")
    assert _jobs(mixed).get("image_cache", 0) >= 1
    reading = _sop_cache_reads(wf, mixed)
    assert reading["train"] and not reading["evaluate"]
    assert _blocks(mixed, "evaluate") and not any("results/cache/" in b for b in _blocks(mixed, "evaluate"))


@pytest.mark.slow
def test_bench_tiny_writes_its_tables(tmp_path):
    from rankrepro.bench import pipeline

    record = pipeline.run(tmp_path, classes_per_super=1, image_size=48, workers=(0,), repeats=1, device="cpu",
                          profile_images=4)
    md = (tmp_path / "pipeline.md").read_text()
    assert json.loads((tmp_path / "pipeline.json").read_text())["cpu"] == record["cpu"]
    assert [(r["source"], r["num_workers"]) for r in record["cpu"]] == [("originals", 0), ("cache", 0)]
    assert all(r["images_per_s"] > 0 for r in record["cpu"])
    assert "| cache | 0 |" in md and "JPEG q95 (the cache)" in md and "2,000 images/s" in md
    assert "not measured" in md and isinstance(record["gpu"], str)
    assert record["machine"]["cpu_count"] >= 1 and "torch threads" in md


def test_bench_training_step_runs_on_cpu(manifest_dir):
    """The GPU rows' code path, on the CPU with a tiny backbone."""
    from rankrepro.bench import pipeline

    run = pipeline.sop_run()
    kw = {"batch_size": 4, "workers": 0, "warmup": 1, "steps": 1, "backbone": "resnet_tiny"}
    assert pipeline.train_throughput(manifest_dir, run, "cpu", **kw) > 0
