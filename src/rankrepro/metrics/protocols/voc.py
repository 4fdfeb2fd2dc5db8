"""``voc07``: the Pascal VOC 2007 detection protocol (RaMBO Tables 5 and 8), scored by
:func:`rankrepro.metrics.detection.voc_ap`.

:meth:`VOC07.manifest_inputs` reads the test split of a VOC manifest (:mod:`rankrepro.data.datasets.voc`): each
row's ``objects`` (``[class, xmin, ymin, xmax, ymax, difficult]`` in VOC's 1-based inclusive pixels) become its
ground truth; ``inputs({"test": detections})`` pairs the detector's output for those rows (one dict per image,
in order, boxes in VOC's convention, labels 0..19) with it. :meth:`VOC07.score`: the per-class AP at IoU 0.5,
11-point, with the legacy +1 pixel (mmdetection's VOC 2007 evaluation, reference/detection.md A.1), difficult
objects ignored: ``AP50`` (their mean over the classes with objects) and ``AP50/<class>``.

The protocol belongs to the ``detection`` task (``task``): a retrieval run cannot evaluate with it, nor a
detection run with a retrieval protocol.
"""

from __future__ import annotations

import json

import numpy as np

from ..detection import voc_ap
from .base import REGISTRY, Protocol

__all__ = ["VOC07"]


@REGISTRY.register("voc07")
class VOC07(Protocol):
    """VOC07 AP50 of a detector (module docstring)."""

    task = "detection"
    default_metrics = ("AP50",)

    def manifest_inputs(self, manifest):
        test = manifest.split("test")
        objects = [np.asarray(json.loads(o), dtype=np.float64).reshape(-1, 6) for o in test.table["objects"]]
        truth = [{"boxes": o[:, 1:5], "labels": o[:, 0].astype(np.int64), "difficult": o[:, 5] > 0} for o in objects]
        names = list(manifest.meta.get("class_names") or [])

        def inputs(found: dict) -> tuple[tuple, dict]:
            return (found["test"], truth), {"class_names": names}

        return {"test": test}, inputs

    def score(self, detections, truth, gallery=None, gallery_labels=None, *, metrics=None, class_names=(),
              num_classes: int = 20, **kw) -> dict:
        """``AP50`` and ``AP50/<class>`` (``class_names``; their indexes when none) of ``detections`` against
        ``truth`` (one dict per image each, :func:`~rankrepro.metrics.detection.voc_ap`'s); ``num_classes``: when
        no names are given."""
        names = list(class_names) or [str(c) for c in range(num_classes)]
        scored = voc_ap(detections, truth, num_classes=len(names), iou_threshold=0.5, mode="11point",
                        legacy_plus1=True)
        return {"AP50": float(scored["mAP"]), **{f"AP50/{n}": float(a) for n, a in zip(names, scored["ap"])}}
