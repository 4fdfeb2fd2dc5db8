"""Object-detection AP on PASCAL VOC (RaMBO Tables 5 and 8): the VOC devkit / mmdetection v1 ``eval_map``.

Boxes are ``x1, y1, x2, y2`` in VOC's convention: 1-based, inclusive pixel coordinates as written in
the annotation XML (a box covering a whole W×H image is [1, 1, W, H]). :func:`to_voc_convention` and
:func:`from_voc_convention` convert from / to torchvision's continuous pixel-edge boxes ([0, 0, W, H]).

Definition (per class c, IoU threshold θ = ``iou_threshold``; mmdet v1 ``mean_ap.py``: ``tpfp_default``,
``eval_map``, ``average_precision``; the devkit's ``VOCevaldet.m``)
    IoU     with ``legacy_plus1`` (devkit, mmdet v1) sides are x2 − x1 + 1 and y2 − y1 + 1, the
            intersection's max(min(x2) − max(x1) + 1, 0) likewise; without it x2 − x1. On boxes from
            :func:`to_voc_convention` against gts read from the XML, the legacy IoU is exactly the IoU
            of the continuous boxes (both widths are x2e − x1e there).
    Order   the detections of class c of all images, by score descending; ties keep input order
            (image order, then order within the image): a stable sort, like the devkit's MATLAB
            ``sort`` (mmdet uses numpy's unstable default sort: its tie order is unspecified).
    Match   in that order, detection d of image i takes the gt g* of class c in image i with the
            highest IoU among *all* of them, difficult and already matched ones included (IoU ties go
            to the non-difficult gts first, then input order: mmdet v1 stacks ``bboxes_ignore`` after
            the others):
            - no gt of c in i, or IoU(d, g*) < θ: d is a false positive (FP);
            - g* difficult: d is ignored, neither TP nor FP;
            - g* not matched yet: d is a true positive (TP) and matches g*;
            - g* already matched: d is a FP (a duplicate), even when another, unmatched gt overlaps d
              by ≥ θ (the devkit never falls back to the second-best gt; COCO does).
    Curve   after the k-th detection, recall_k = TP_k / N_c with N_c the number of non-difficult gts
            of c, precision_k = TP_k / max(TP_k + FP_k, ε) (ε = float32 eps: 0 while only ignored
            detections came so far).
    AP "11point" (VOC2007; the RaMBO paper's AP^50): (1/11) Σ_{t∈T} max{precision_k : recall_k ≥ t},
            0 where no k reaches t, with T = ``np.arange(0, 1 + 1e-3, 0.1)`` exactly as mmdet and
            py-faster-rcnn: its floats for 0.3, 0.6, 0.7 are 0.30000000000000004, 0.6000000000000001,
            0.7000000000000001, so a recall of exactly 3/10 does not reach the "0.3" point.
    AP "area" (VOC2010+): append (r, p) = (0, 0) before and (1, 0) after the curve, take the
            envelope p̂_k = max_{j≥k} p_j, AP = Σ_k (r_{k+1} − r_k) p̂_{k+1}.
    mAP     the mean AP over the classes with N_c > 0 (mmdet ``eval_map``). A class without
            non-difficult gts reports AP 0 (no TP is possible) and stays out of the mean; mAP is 0
            when no class has one. VOC07 test has gts of all 20 classes.
Arithmetic is float64 (mmdet v1 keeps IoUs and APs in float32: differences of order 1e-7).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MODES", "ELEVEN_POINTS", "voc_ap", "average_precision", "to_voc_convention", "from_voc_convention"]

MODES = ("11point", "area")

#: the 11 recall points, the same floats as mmdet's and py-faster-rcnn's ``np.arange(0, 1 + 1e-3, 0.1)``
ELEVEN_POINTS = np.arange(0, 1 + 1e-3, 0.1)
_EPS = float(np.finfo(np.float32).eps)
_VOC_SHIFT = np.array([1.0, 1.0, 0.0, 0.0])


def to_voc_convention(boxes) -> np.ndarray:
    """torchvision continuous boxes [..., 4] -> VOC 1-based inclusive boxes: (x1 + 1, y1 + 1, x2, y2).

    In torchvision's convention 0-based pixel j spans [j, j + 1] and a box gives its edges; VOC numbers
    that pixel j + 1 and a box names its first and last pixel. A box covering VOC pixels 1..W is
    [0, W] there and [1, W] here; its legacy width x2 − x1 + 1 equals the continuous width."""
    b = _box_array(boxes, "boxes")
    return b + _VOC_SHIFT


def from_voc_convention(boxes) -> np.ndarray:
    """VOC 1-based inclusive boxes [..., 4] -> torchvision continuous boxes: (x1 − 1, y1 − 1, x2, y2);
    the inverse of :func:`to_voc_convention`."""
    b = _box_array(boxes, "boxes")
    return b - _VOC_SHIFT


def voc_ap(detections, ground_truths, *, num_classes: int = 20, iou_threshold: float = 0.5,
           mode: str = "11point", legacy_plus1: bool = True) -> dict:
    """Per-class VOC AP and their mean (definition: the module docstring).

    ``ground_truths``: one dict per image, ``{"boxes": [n, 4], "labels": [n] in 0..num_classes-1,
    "difficult": [n] bool}``; ``detections``: one dict per image in the same order, ``{"boxes": [m, 4],
    "scores": [m], "labels": [m]}``; boxes in VOC's convention, arrays numpy or CPU torch tensors.

    Returns ``{"mAP": float, "ap": [float] * num_classes, "num_gts": [int] (non-difficult gts),
    "num_dets": [int]}``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not 0 < iou_threshold <= 1:
        raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold!r}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    if len(detections) != len(ground_truths):
        raise ValueError(f"detections has {len(detections)} images and ground_truths {len(ground_truths)}: "
                         "give one entry per image, in the same order")
    extra = 1.0 if legacy_plus1 else 0.0
    gt_boxes, gt_labels, gt_image, gt_difficult = _stack(ground_truths, "ground_truths", "difficult",
                                                         num_classes, extra)
    det_boxes, det_labels, det_image, det_scores = _stack(detections, "detections", "scores", num_classes, extra)

    num_gts = np.bincount(gt_labels[~gt_difficult], minlength=num_classes)
    # gts grouped by (image, class), non-difficult first, then input order (lexsort is stable)
    gt_key = gt_image * num_classes + gt_labels
    gt_order = np.lexsort((gt_difficult, gt_key))
    # detections grouped by class, score descending, ties in input order
    order = np.lexsort((-det_scores, det_labels))
    det_labels = det_labels[order]
    best, best_iou = _best_gt(det_boxes[order], det_image[order] * num_classes + det_labels,
                              gt_boxes[gt_order], gt_key[gt_order], extra)
    tp, fp = _true_false_positives(best, best_iou >= iou_threshold, gt_difficult[gt_order])

    bounds = np.searchsorted(det_labels, np.arange(num_classes + 1))
    ap = []
    for c in range(num_classes):
        tp_c = np.cumsum(tp[bounds[c]:bounds[c + 1]])
        fp_c = np.cumsum(fp[bounds[c]:bounds[c + 1]])
        recall = tp_c / max(num_gts[c], _EPS)
        precision = tp_c / np.maximum(tp_c + fp_c, _EPS)
        ap.append(average_precision(recall, precision, mode))
    has_gts = num_gts > 0
    mean = float(np.mean(np.asarray(ap)[has_gts])) if has_gts.any() else 0.0
    return {"mAP": mean, "ap": ap, "num_gts": num_gts.tolist(), "num_dets": np.diff(bounds).tolist()}


def average_precision(recall: np.ndarray, precision: np.ndarray, mode: str) -> float:
    """AP of one precision-recall curve (recall non-decreasing) in ``mode`` "11point" or "area"."""
    if mode == "11point":
        if recall.size == 0:
            return 0.0
        envelope = np.maximum.accumulate(precision[::-1])[::-1]  # max precision at index >= k
        first = np.searchsorted(recall, ELEVEN_POINTS, side="left")  # first k with recall_k >= t
        reached = first < recall.size
        return float(np.where(reached, envelope[np.minimum(first, recall.size - 1)], 0.0).sum() / 11)
    if mode != "area":
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.maximum.accumulate(np.concatenate(([0.0], precision, [0.0]))[::-1])[::-1]
    step = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[step + 1] - mrec[step]) * mpre[step + 1]))


def _best_gt(det_boxes, det_key, gt_boxes, gt_key, extra):
    """Per detection, the gt (index into the ``gt_key``-sorted arrays) of the same (image, class) key
    with the highest IoU, the first on ties, and that IoU; -1 and -1 where the key has no gt."""
    starts = np.searchsorted(gt_key, det_key, side="left")
    counts = np.searchsorted(gt_key, det_key, side="right") - starts
    best = np.full(det_key.shape, -1, dtype=np.int64)
    best_iou = np.full(det_key.shape, -1.0)
    for k in range(int(counts.max(initial=0))):  # the k-th gt of each detection's group
        rows = np.flatnonzero(counts > k)
        cand = starts[rows] + k
        iou = _paired_iou(det_boxes[rows], gt_boxes[cand], extra)
        better = iou > best_iou[rows]
        best[rows[better]] = cand[better]
        best_iou[rows[better]] = iou[better]
    return best, best_iou


def _paired_iou(a: np.ndarray, b: np.ndarray, extra: float) -> np.ndarray:
    """IoU of box a[i] with box b[i]; ``extra`` (1 or 0) is added to every side length."""
    iw = np.maximum(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]) + extra, 0.0)
    ih = np.maximum(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]) + extra, 0.0)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0] + extra) * (a[:, 3] - a[:, 1] + extra)
    area_b = (b[:, 2] - b[:, 0] + extra) * (b[:, 3] - b[:, 1] + extra)
    return inter / (area_a + area_b - inter)


def _true_false_positives(best, matched, gt_difficult):
    """TP and FP flags (float) of detections in ranked order from their best gt and whether it
    reaches the threshold: the first detection to match a non-difficult gt is its TP, later ones FP;
    those matching a difficult gt are neither; unmatched ones are FP."""
    claims = matched.copy()
    claims[matched] = ~gt_difficult[best[matched]]
    tp = np.zeros(best.shape, dtype=bool)
    claiming = np.flatnonzero(claims)
    _, first = np.unique(best[claiming], return_index=True)  # first claim of each gt in ranked order
    tp[claiming[first]] = True
    fp = ~matched | (claims & ~tp)
    return tp.astype(np.float64), fp.astype(np.float64)


def _stack(per_image, name: str, value_key: str, num_classes: int, extra: float):
    """Concatenate per-image dicts into boxes [N, 4] float64, labels [N] int64, image index [N] and
    ``value_key`` [N] (difficult: bool, scores: float64), checking every entry; errors name
    ``name[image]['key']``."""
    boxes, labels, image, values = [], [], [], []
    for i, entry in enumerate(per_image):
        where = f"{name}[{i}]"
        if not hasattr(entry, "keys"):
            raise TypeError(f"{where} must be a dict with 'boxes', 'labels', {value_key!r}, "
                            f"got {type(entry).__name__}")
        missing = [k for k in ("boxes", "labels", value_key) if k not in entry]
        if missing:
            raise KeyError(f"{where} lacks {missing} (has {sorted(entry.keys())})")
        b = _box_array(entry["boxes"], f"{where}['boxes']")
        if b.ndim == 1 and b.size == 0:
            b = b.reshape(0, 4)
        if b.ndim != 2:
            raise ValueError(f"{where}['boxes'] has shape {b.shape}, expected [n, 4]")
        n = b.shape[0]
        lab = _vector(entry["labels"], n, f"{where}['labels']")
        if n and not np.issubdtype(lab.dtype, np.integer):
            raise ValueError(f"{where}['labels'] must hold integers, got dtype {lab.dtype}")
        bad = (lab < 0) | (lab >= num_classes)
        if bad.any():
            raise ValueError(f"{where}['labels'] holds {int(lab[bad][0])}, outside 0..{num_classes - 1}")
        val = _vector(entry[value_key], n, f"{where}[{value_key!r}]")
        if value_key == "difficult":
            if n and not (val.dtype == bool or np.isin(val, (0, 1)).all()):
                raise ValueError(f"{where}['difficult'] must be bool (or 0/1), got {val[:5]!r}")
            val = val.astype(bool)
        else:
            val = val.astype(np.float64)
            if not np.isfinite(val).all():
                raise ValueError(f"{where}['scores'] holds a non-finite score")
        if not np.isfinite(b).all():
            raise ValueError(f"{where}['boxes'] holds a non-finite coordinate")
        side = np.minimum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]) + extra
        # a gt needs an area (the IoU's union is at least the gt's area); a detection may be empty
        bad = side <= 0 if value_key == "difficult" else side < 0
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}['boxes'][{j}] = {b[j].tolist()} has a side of {side[j]:g} pixels "
                             f"(x2 - x1{' + 1' if extra else ''}); boxes are x1, y1, x2, y2 in VOC's convention")
        boxes.append(b)
        labels.append(lab.astype(np.int64))
        image.append(np.full(n, i, dtype=np.int64))
        values.append(val)
    if not boxes:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros((0, 4)), empty, empty, np.zeros(0, dtype=bool if value_key == "difficult" else np.float64)
    return np.concatenate(boxes), np.concatenate(labels), np.concatenate(image), np.concatenate(values)


def _box_array(boxes, where: str) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64)
    if b.size and b.shape[-1] != 4:
        raise ValueError(f"{where} has shape {b.shape}, expected [..., 4] (x1, y1, x2, y2)")
    return b


def _vector(values, n: int, where: str) -> np.ndarray:
    v = np.asarray(values)
    if v.shape != (n,):
        raise ValueError(f"{where} has shape {v.shape}, expected [{n}] (one per box)")
    return v
