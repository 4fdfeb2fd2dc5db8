"""Object detection runs (``task: detection``, RaMBO Tables 5 and 8): a Faster R-CNN trained on a VOC
manifest (:mod:`rankrepro.data.datasets.voc`) and scored by VOC07 AP at IoU 0.5 (:mod:`rankrepro.metrics.detection`).

Registered in :data:`rankrepro.engine.tasks.TASKS` (:class:`DetectionTask`); it trains through the one loop,
:func:`rankrepro.engine.loop.train`, and gives it its parts, batches and step.

**Training**: the run's ``model`` (``faster_rcnn``, :func:`rankrepro.models.detection.build_detector`)
with its ``loss`` (``faster_rcnn``, :class:`rankrepro.losses.detection.FasterRCNNLoss`) in the RoI heads; the
optimizer groups and schedule of :mod:`rankrepro.engine.optim` (a ``net`` group: every trainable parameter);
batches of the ``shuffle`` sampler; each image flipped horizontally with probability 0.5 (mmdetection's
``flip_ratio=0.5``), the flips drawn with the epoch's order so that a resumed run sees the same batches; the
loader draws from the epoch's own generator, never torch's global RNG, so that a run resumed mid-epoch equals one
trained straight through (:func:`~rankrepro.engine.loader.epoch_loader`). Training
targets are the non-difficult objects (mmdetection v1 puts difficult boxes in ``gt_bboxes_ignore``, which its
assigner ignores), boxes converted from VOC's 1-based inclusive pixels to torchvision's continuous coordinates
(:func:`~rankrepro.metrics.detection.from_voc_convention`), labels 1..20 (0: background). The loss is the sum of
the four losses the detector returns; ``grad_clip`` (a run key) clips the global gradient norm. ``checkpoint.pt``
holds the model, the loss's state (RaMBO's memory of the last batches), the optimizer, schedule, history, the
position inside the epoch and every RNG (the loop's). ``history.csv`` has every task's columns.

**Evaluation** (:func:`evaluate`): the test split's detections (torchvision's post-processing: score > 0.05,
NMS 0.5, 100 per image, mmdetection's test settings), converted back to VOC's convention and scored under the
manifest's protocol, ``voc07`` (:mod:`rankrepro.metrics.protocols.voc`: every object of the XML, difficult ones
ignored, :func:`~rankrepro.metrics.detection.voc_ap`'s 11-point AP at IoU 0.5 with the legacy +1 pixel, the VOC
2007 protocol mmdetection applies: reference/detection.md A.1). ``metrics``: ``AP50`` (the mean over the 20
classes) and ``AP50/<class>``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torchvision.transforms.functional import to_tensor
from tqdm import tqdm

from rankrepro import losses
from rankrepro.data.image_files import read_rgb
from rankrepro.data.manifest import read_manifest
from rankrepro.data.samplers import build_sampler
from rankrepro.device import resolve_device
from rankrepro.engine.loader import epoch_loader
from rankrepro.engine.model_file import load_model
from rankrepro.engine.tasks import TASKS
from rankrepro.engine.tasks.base import Parts, Task
from rankrepro.io import atomic_write_json
from rankrepro.metrics import protocols
from rankrepro.metrics.detection import from_voc_convention, to_voc_convention
from rankrepro.models import build_model
from rankrepro.models.detection import DETECTION_BACKBONES
from rankrepro.record.selection import selection_record
from rankrepro.record.tasks import TaskFacts

__all__ = ["DetectionTask", "VOCImages", "evaluate", "NUM_CLASSES"]

NUM_CLASSES = 21  # the 20 VOC classes and the background (index 0), mmdetection v1


class VOCImages(torch.utils.data.Dataset):
    """Item ``(i, flip)`` of a VOC manifest: ``(image [3, H, W] RGB in [0, 1], target)``, target ``boxes`` (the
    non-difficult objects, torchvision's continuous coordinates, mirrored when ``flip``) and ``labels`` (class + 1).
    An unreadable image raises :class:`~rankrepro.data.image_files.ImageReadError` naming the file and its manifest
    row, as the retrieval reader does (:func:`~rankrepro.data.image_files.read_rgb`)."""

    def __init__(self, manifest):
        self.root = Path(manifest.meta["root"])
        self.paths = manifest.table["path"].tolist()
        self.describe_row = manifest.describe_row
        self.objects = [np.asarray(json.loads(o), dtype=np.float64).reshape(-1, 6) for o in manifest.table["objects"]]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, item):
        i, flip = item
        image = to_tensor(read_rgb(self.root / self.paths[i], self.describe_row(i)))
        kept = self.objects[i][self.objects[i][:, 5] == 0]
        boxes = torch.as_tensor(from_voc_convention(kept[:, 1:5]), dtype=torch.float32).reshape(-1, 4)
        if flip:
            image = image.flip(-1)
            width = image.shape[-1]
            boxes = torch.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], dim=1)
        return image, {"boxes": boxes, "labels": torch.as_tensor(kept[:, 0], dtype=torch.int64) + 1}


def _collate(items):
    return [image for image, _ in items], [target for _, target in items]


def _batches(dataset, batches: list[list[int]], flips: np.ndarray, num_workers: int, seed: int = 0):
    """The images and targets of ``batches`` (lists of indexes), each image flipped where ``flips`` says; the
    loader's own draws come from a generator seeded with ``seed`` (:func:`~rankrepro.engine.loader.epoch_loader`)."""
    return epoch_loader(dataset, [[(i, bool(flips[i])) for i in batch] for batch in batches],
                        torch.Generator().manual_seed(seed), num_workers=num_workers, collate_fn=_collate)


@torch.no_grad()
def detections(model, dataset: VOCImages, device: torch.device, batch_size: int, num_workers: int = 0,
               progress: bool = True) -> list[dict]:
    """The detector's output for every image of ``dataset`` (unflipped), in VOC's box convention, labels 0..19."""
    model.eval()
    order = list(range(len(dataset)))
    loader = _batches(dataset, [order[a:a + batch_size] for a in range(0, len(order), batch_size)],
                      np.zeros(len(dataset), dtype=bool), num_workers)
    out = []
    for images, _ in tqdm(loader, desc="detecting", file=sys.stderr, disable=not progress, mininterval=5.0):
        for found in model([im.to(device) for im in images]):
            out.append({"boxes": to_voc_convention(found["boxes"].float().cpu().numpy()),
                        "scores": found["scores"].float().cpu().numpy(), "labels": found["labels"].cpu().numpy() - 1})
    return out


def evaluate(run: dict, manifest_dir: str | Path, model_path: str | Path, out_path: str | Path, *,
             device: str = "auto", num_workers: int = 0, batch_size: int = 256, run_id: str = "",
             progress: bool = True, image_cache=None) -> dict:
    """Write ``metrics.json``: the detector in ``model_path`` scored under the manifest's protocol (a detection
    protocol: ``voc07``, :mod:`rankrepro.metrics.protocols.voc`) on its test split (module docstring), in batches of
    at most the run's training batch (``batch_size`` caps it)."""
    dev = resolve_device(device)
    manifest = read_manifest(manifest_dir)
    protocol = protocols.of_manifest(manifest, task=run.get("task"))
    parts, inputs = protocol.manifest_inputs(manifest)
    model = load_model(model_path, dev, context={"num_classes": NUM_CLASSES})
    dataset = VOCImages(parts["test"])
    t0 = time.perf_counter()
    found = detections(model, dataset, dev, min(batch_size, run["sampler"]["batch_size"]), num_workers, progress)
    t_detect = time.perf_counter() - t0
    args, kwargs = inputs({"test": found})
    metrics = {**protocol.score(*args, metrics=run["eval"]["metrics"], **kwargs), "n_images": len(dataset)}
    result = {"run_id": run_id, "dataset": run["dataset"], "protocol": protocol.name, "splits": list(parts),
              "replica": bool(manifest.meta.get("replica", False)), "n_images": len(dataset), "metrics": metrics,
              "seconds": {"embed": round(t_detect, 3), "metrics": round(time.perf_counter() - t0 - t_detect, 3)},
              **selection_record(run, metrics, [])}
    atomic_write_json(out_path, result)
    return result


@TASKS.register("detection")
class DetectionTask(Task):
    """Detection training (module docstring): the loop's parts and step for a Faster R-CNN."""

    facts = TaskFacts(metrics=("AP50",), backbones=tuple(DETECTION_BACKBONES),
                      refused={"eval.every": None, "eval.datasets": [], "base_loss": None, "images.face": None},
                      throughput_key="{name}/{backbone}", bench_dataset="voc07")
    evaluator = staticmethod(evaluate)

    def build(self, run, manifest_dir, out_dir, settings, device) -> Parts:
        self.device, self.num_workers = device, settings.num_workers
        self.dataset = VOCImages(read_manifest(manifest_dir).split(run["train_split"]))
        self.sampler = build_sampler(run["sampler"], np.zeros(len(self.dataset), dtype=np.int64), seed=run["seed"])
        criterion = losses.build(**run["loss"]).to(device)
        self.model = build_model(run["model"], context={"num_classes": NUM_CLASSES, "roi_loss": criterion}).to(device)
        return Parts(self.model, criterion, self.sampler)

    def batches(self, position, cap):
        flips = np.random.default_rng(position.seed).random(len(self.dataset)) < 0.5
        return _batches(self.dataset, list(self.sampler)[:cap or None][position.batches:], flips, self.num_workers,
                        position.seed)

    def step(self, batch):
        images, targets = batch
        images = [im.to(self.device) for im in images]
        targets = [{k: v.to(self.device) for k, v in t.items()} for t in targets]
        return sum(self.model(images, targets).values()), len(images)

    def infer(self, batch) -> int:
        self.model([im.to(self.device) for im in batch[0]])
        return len(batch[0])
