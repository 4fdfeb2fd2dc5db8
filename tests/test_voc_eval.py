"""VOC detection AP (rankrepro.metrics.detection): hand-computed cases and a loop re-derivation.

Boxes are VOC 1-based inclusive; with the legacy +1 the box A = [1, 1, 10, 10] is 10×10 pixels.
Every expected value is worked out in the comment beside it (R: recall, P: precision after each
ranked detection)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rankrepro.metrics.detection import (
    ELEVEN_POINTS,
    average_precision,
    from_voc_convention,
    to_voc_convention,
    voc_ap,
)

A = [1, 1, 10, 10]
B = [21, 21, 30, 30]
FAR = [101, 101, 110, 110]  # overlaps nothing
MODES = ("11point", "area")


def gt(boxes, labels, difficult=None):
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    n = len(boxes)
    diff = np.zeros(n, bool) if difficult is None else np.asarray(difficult, bool)
    return {"boxes": boxes, "labels": np.asarray(labels, np.int64).reshape(n), "difficult": diff}


def det(boxes, scores, labels=None):
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    n = len(boxes)
    labels = np.zeros(n, np.int64) if labels is None else np.asarray(labels, np.int64)
    return {"boxes": boxes, "scores": np.asarray(scores, np.float64).reshape(n), "labels": labels}


def ap(dets, gts, mode, **kw):
    return voc_ap(dets, gts, num_classes=kw.pop("num_classes", 1), mode=mode, **kw)


def interpolated_ap(recall, precision, thresholds):
    """(1/|T|) Σ_t max{P_k : R_k >= t} (0 if none): the 11-point (VOC07) or 101-point (COCO) AP."""
    total = 0.0
    for t in thresholds:
        reached = [p for r, p in zip(recall, precision) if r >= t]
        total += max(reached) if reached else 0.0
    return total / len(thresholds)


# ------------------------------------------------------------------ hand-computed cases
@pytest.mark.parametrize("mode", MODES)
def test_perfect_detections(mode):
    gts = [gt([A, B], [0, 1]), gt([A, B], [2, 0])]
    dets = [det([A, B], [0.9, 0.3], [0, 1]), det([A, B], [0.5, 0.7], [2, 0])]
    res = voc_ap(dets, gts, num_classes=3, mode=mode)
    assert res == {"mAP": 1.0, "ap": [1.0, 1.0, 1.0], "num_gts": [2, 1, 1], "num_dets": [2, 1, 1]}


@pytest.mark.parametrize("mode", MODES)
def test_one_fp_ranked_above_the_only_tp(mode):
    # FP, TP: R 0, 1; P 0, 1/2 -> every recall point sees 1/2; area 1 · 1/2
    res = ap([det([FAR, A], [0.9, 0.8])], [gt([A], [0])], mode)
    assert res["ap"] == [pytest.approx(0.5)] and res["mAP"] == pytest.approx(0.5)


# TP, FP, TP over 2 gts: R 1/2, 1/2, 1; P 1, 1/2, 2/3.
# 11-point: t = 0..0.5 (6 points) see 1, t = 0.6..1 (5 points) see 2/3 -> (6 + 10/3) / 11 = 28/33;
# area: 1/2 · 1 + 1/2 · 2/3 = 5/6
TP_FP_TP = {"11point": 28 / 33, "area": 5 / 6}


@pytest.mark.parametrize("mode", MODES)
def test_one_fp_between_two_tps(mode):
    dets = [det([A, FAR], [0.9, 0.8]), det([A], [0.7])]
    assert ap(dets, [gt([A], [0]), gt([A], [0])], mode)["ap"][0] == pytest.approx(TP_FP_TP[mode])


@pytest.mark.parametrize("mode", MODES)
def test_duplicate_detection_is_fp(mode):
    # the second detection on image 0's gt (IoU 0.81 with it) comes after the first: FP, as above
    dets = [det([A, [2, 2, 10, 10]], [0.9, 0.8]), det([A], [0.7])]
    assert ap(dets, [gt([A], [0]), gt([A], [0])], mode)["ap"][0] == pytest.approx(TP_FP_TP[mode])


# G1 and G2 overlap (IoU 70/130); D = [2, 1, 11, 10] has IoU 90/110 with G1 and 80/120 with G2
G1, G2, D = [1, 1, 10, 10], [4, 1, 13, 10], [2, 1, 11, 10]


@pytest.mark.parametrize("mode", MODES)
def test_best_gt_already_matched_makes_a_fp(mode):
    # D's best gt G1 is taken by the exact detection: D is FP although G2 (IoU 0.67) is free.
    # TP, FP over 2 gts: R 1/2, 1/2; P 1, 1/2 -> 11-point 6/11, area 1/2. (COCO would give D to G2: AP 1.)
    res = ap([det([G1, D], [0.9, 0.8])], [gt([G1, G2], [0, 0])], mode)
    assert res["ap"][0] == pytest.approx({"11point": 6 / 11, "area": 0.5}[mode])


@pytest.mark.parametrize("mode", MODES)
def test_detection_on_a_difficult_only_image_is_ignored(mode):
    gts = [gt([A], [0]), gt([A], [0], difficult=[True])]
    dets = [det([A], [0.8]), det([A, [2, 2, 10, 10]], [0.9, 0.85])]  # two on the difficult gt, ranked first
    # ignored, ignored, TP: R 0, 0, 1; P 0, 0, 1 -> AP 1 (as a FP they would give 1/3, as a TP recall 2)
    res = ap(dets, gts, mode)
    assert res == {"mAP": 1.0, "ap": [1.0], "num_gts": [1], "num_dets": [3]}
    no_gt = ap(dets, [gt([A], [0]), gt(np.zeros((0, 4)), [])], mode)  # the same detections without that gt
    assert no_gt["ap"][0] == pytest.approx(1 / 3)  # FP, FP, TP: R 0, 0, 1; P 0, 0, 1/3


@pytest.mark.parametrize("mode", MODES)
def test_difficult_best_gt_shadows_a_free_gt(mode):
    # D's best gt is the difficult G1, so D is ignored even though G2 (non-difficult) overlaps it by 0.67;
    # then the exact detection of B: R 0, 1/2; P 0, 1 -> 11-point 6/11, area 1/2
    # (D as a FP: P 0, 1/2 -> 3/11, 1/4; D as a TP on G2: AP 1)
    gts = [gt([G1, G2, B], [0, 0, 0], difficult=[True, False, False])]
    res = ap([det([D, B], [0.9, 0.5])], gts, mode)
    assert res["ap"][0] == pytest.approx({"11point": 6 / 11, "area": 0.5}[mode])
    assert res["num_gts"] == [2]


def test_iou_tie_goes_to_the_non_difficult_gt():
    # the same box listed twice, difficult first: mmdet v1 stacks ignored gts last, so the tie goes to
    # the non-difficult copy and the detection is a TP (the devkit, in XML order, would ignore it)
    gts = [gt([A, A], [0, 0], difficult=[True, False])]
    assert ap([det([A], [0.9])], gts, "11point")["ap"] == [1.0]


def test_score_ties_keep_input_order():
    one_image = [gt([A], [0])]
    assert ap([det([FAR, A], [0.5, 0.5])], one_image, "area")["ap"] == [0.5]  # FP first
    assert ap([det([A, FAR], [0.5, 0.5])], one_image, "area")["ap"] == [1.0]  # TP first
    # across images: image order. FP (image 0), TP (image 1) over 2 gts: R 0, 1/2; P 0, 1/2 -> area 1/4
    two = [gt([A], [0]), gt([A], [0])]
    assert ap([det([FAR], [0.5]), det([A], [0.5])], two, "area")["ap"] == [0.25]
    assert ap([det([A], [0.5]), det([FAR], [0.5])], two, "area")["ap"] == [0.5]  # TP, FP: R 1/2; P 1


@pytest.mark.parametrize("mode", MODES)
def test_class_without_gts_reports_zero_and_stays_out_of_the_mean(mode):
    # class 0: perfect; class 1: only a difficult gt (a detection on it and a FP); class 2: no gt at all
    gts = [gt([A, B], [0, 1], difficult=[False, True])]
    dets = [det([A, B, FAR, FAR], [0.9, 0.8, 0.7, 0.6], [0, 1, 1, 2])]
    res = voc_ap(dets, gts, num_classes=3, mode=mode)
    assert res == {"mAP": 1.0, "ap": [1.0, 0.0, 0.0], "num_gts": [1, 0, 0], "num_dets": [1, 2, 1]}
    assert voc_ap([det([FAR], [0.9])], [gt([B], [0], [True])], num_classes=1, mode=mode)["mAP"] == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_two_classes_averaged(mode):
    # class 0: exact (AP 1); class 1: FP above the TP (AP 1/2, as above) -> mAP 3/4
    gts = [gt([A, B], [0, 1])]
    dets = [det([A, FAR, B], [0.9, 0.8, 0.7], [0, 1, 1])]
    res = voc_ap(dets, gts, num_classes=2, mode=mode)
    assert res["ap"] == [1.0, pytest.approx(0.5)] and res["mAP"] == pytest.approx(0.75)


def test_legacy_plus1_decides_the_match():
    # gt 10×10, detection its top half: +1 -> 10·5 / 100 = 0.5 (TP); without -> 9·4 / 81 = 0.44 (FP)
    gts, dets = [gt([A], [0])], [det([[1, 1, 10, 5]], [0.9])]
    assert ap(dets, gts, "11point")["ap"] == [1.0]
    assert ap(dets, gts, "11point", legacy_plus1=False)["ap"] == [0.0]
    assert ap(dets, gts, "11point", iou_threshold=0.51)["ap"] == [0.0]


def test_11point_area_and_101point_differ_on_a_crafted_curve():
    # 3 gts (one per image); ranked TP, FP, TP, FP, FP, TP
    gts = [gt([A], [0]), gt([A], [0]), gt([A], [0])]
    dets = [det([A, FAR], [0.9, 0.8]), det([A, FAR, FAR], [0.7, 0.6, 0.5]), det([A], [0.4])]
    recall = [1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3, 1]
    precision = [1, 1 / 2, 2 / 3, 1 / 2, 2 / 5, 1 / 2]
    eleven, area = ap(dets, gts, "11point")["ap"][0], ap(dets, gts, "area")["ap"][0]
    coco = interpolated_ap(recall, precision, np.linspace(0, 1, 101))
    # 11-point: 4 points (t <= 0.3) see 1, 3 (0.4..0.6) see 2/3, 4 (0.7..1) see 1/2 -> 8/11
    assert eleven == pytest.approx(8 / 11) == interpolated_ap(recall, precision, [k / 10 for k in range(11)])
    assert area == pytest.approx((1 + 2 / 3 + 1 / 2) / 3)  # 13/18: three recall steps of 1/3
    assert coco == pytest.approx((34 + 33 * 2 / 3 + 34 / 2) / 101)  # 73/101
    assert min(abs(eleven - area), abs(eleven - coco), abs(area - coco)) > 4e-4


def test_11point_thresholds_are_numpy_arange_floats():
    # 10 gts, 3 exact detections: R 0.1, 0.2, 0.3 with P 1. arange's "0.3" is 0.30000000000000004 > 3/10,
    # so the points 0, 0.1, 0.2 see 1 and the rest 0: 3/11 (4/11 with exact thresholds); area 0.3
    boxes = [[1 + 20 * j, 1, 10 + 20 * j, 10] for j in range(10)]
    dets = [det(boxes[:3], [0.9, 0.8, 0.7])]
    assert ELEVEN_POINTS[3] > 0.3 and ELEVEN_POINTS.tolist() == [k * 0.1 for k in range(11)]
    assert ap(dets, [gt(boxes, [0] * 10)], "11point")["ap"][0] == pytest.approx(3 / 11)
    assert ap(dets, [gt(boxes, [0] * 10)], "area")["ap"][0] == pytest.approx(0.3)


def test_average_precision_of_an_empty_curve_is_zero():
    for mode in MODES:
        assert average_precision(np.zeros(0), np.zeros(0), mode) == 0.0
    with pytest.raises(ValueError, match="mode must be one of"):
        average_precision(np.zeros(0), np.zeros(0), "11points")  # mmdet's spelling is not ours


# ------------------------------------------------------------------ conventions and inputs
def test_convention_converters():
    assert to_voc_convention([0, 0, 500, 375]).tolist() == [1, 1, 500, 375]
    assert from_voc_convention([1, 1, 500, 375]).tolist() == [0, 0, 500, 375]
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 100, (7, 4))
    np.testing.assert_allclose(from_voc_convention(to_voc_convention(boxes)), boxes, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(to_voc_convention(torch.tensor(boxes)), to_voc_convention(boxes))
    assert to_voc_convention(np.zeros((0, 4))).shape == (0, 4)
    with pytest.raises(ValueError, match=r"boxes has shape \(3,\)"):
        to_voc_convention([1, 2, 3])


def test_legacy_iou_of_converted_boxes_is_the_continuous_iou():
    # torchvision's IoU of continuous boxes equals voc_ap's legacy IoU after conversion: the match flips
    # exactly at it
    from torchvision.ops import box_iou

    rng = np.random.default_rng(1)
    for _ in range(5):
        x1, y1 = rng.uniform(0, 50, 2)
        g = np.array([x1, y1, x1 + rng.uniform(10, 40), y1 + rng.uniform(10, 40)])
        p = g + rng.uniform(-3, 3, 4)
        iou = float(box_iou(torch.from_numpy(p[None]), torch.from_numpy(g[None]))[0, 0])
        assert 0.3 < iou < 1
        gts, dets = [gt(to_voc_convention(g), [0])], [det(to_voc_convention(p), [0.5])]
        assert ap(dets, gts, "area", iou_threshold=iou - 1e-9)["ap"] == [1.0]
        assert ap(dets, gts, "area", iou_threshold=iou + 1e-9)["ap"] == [0.0]


def test_torch_inputs_give_the_numpy_result():
    gts = [gt([A, B], [0, 1], [False, True]), gt([B], [1])]
    dets = [det([A, B, FAR], [0.9, 0.8, 0.7], [0, 1, 0]), det([B], [0.6], [1])]
    as_torch = [{k: torch.as_tensor(v) for k, v in d.items()} for d in gts], \
        [{k: torch.as_tensor(v) for k, v in d.items()} for d in dets]
    assert voc_ap(*as_torch[::-1], num_classes=2) == voc_ap(dets, gts, num_classes=2)


@pytest.mark.parametrize("edit, error, message", [
    (lambda d, g: (d, g + [gt([A], [0])]), ValueError, "detections has 1 images and ground_truths 2"),
    (lambda d, g: (d, [gt([A], [3])]), ValueError, r"ground_truths\[0\]\['labels'\] holds 3, outside 0..2"),
    (lambda d, g: ([det([A], [0.5], [-1])], g), ValueError, r"detections\[0\]\['labels'\] holds -1"),
    (lambda d, g: ([{**d[0], "labels": np.array([0.0])}], g), ValueError,
     r"detections\[0\]\['labels'\] must hold integers"),
    (lambda d, g: (d, [{"boxes": np.array([A]), "labels": np.array([0])}]), KeyError, r"lacks \['difficult'\]"),
    (lambda d, g: ([{**d[0], "scores": np.array([0.5, 0.4])}], g), ValueError,
     r"detections\[0\]\['scores'\] has shape \(2,\), expected \[1\]"),
    (lambda d, g: ([{**d[0], "boxes": np.zeros((1, 5))}], g), ValueError, r"detections\[0\]\['boxes'\] has shape"),
    (lambda d, g: (d, [{**g[0], "difficult": np.array([2])}]), ValueError, "must be bool"),
    (lambda d, g: (d, [gt([[10, 1, 1, 10]], [0])]), ValueError, r"ground_truths\[0\]\['boxes'\]\[0\]"),
    (lambda d, g: ([det([A], [float("nan")])], g), ValueError, "non-finite score"),
])
def test_input_errors_name_the_entry(edit, error, message):
    dets, gts = edit([det([A], [0.5])], [gt([A], [0])])
    with pytest.raises(error, match=message):
        voc_ap(dets, gts, num_classes=3)


def test_argument_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        voc_ap([], [], mode="101point")
    with pytest.raises(ValueError, match="iou_threshold"):
        voc_ap([], [], iou_threshold=0)
    assert voc_ap([], [], num_classes=2) == {"mAP": 0.0, "ap": [0.0, 0.0], "num_gts": [0, 0], "num_dets": [0, 0]}


# ------------------------------------------------------------------ differential: a per-class loop
def reference_voc_ap(dets, gts, num_classes, iou_threshold, mode, legacy_plus1):
    """mmdet v1 ``eval_map`` re-derived with plain loops (one class, one detection, one gt at a time)."""
    e = 1.0 if legacy_plus1 else 0.0
    eps = float(np.finfo(np.float32).eps)

    def iou(a, b):
        iw = max(min(a[2], b[2]) - max(a[0], b[0]) + e, 0.0)
        ih = max(min(a[3], b[3]) - max(a[1], b[1]) + e, 0.0)
        inter = iw * ih
        return inter / ((a[2] - a[0] + e) * (a[3] - a[1] + e) + (b[2] - b[0] + e) * (b[3] - b[1] + e) - inter)

    aps, num_gts, num_dets = [], [], []
    for c in range(num_classes):
        per_image, npos = [], 0
        for g in gts:  # mmdet v1: the image's bboxes, then its bboxes_ignore
            rows = [j for j in range(len(g["labels"])) if g["labels"][j] == c]
            rows = [j for j in rows if not g["difficult"][j]] + [j for j in rows if g["difficult"][j]]
            per_image.append([(list(g["boxes"][j]), bool(g["difficult"][j])) for j in rows])
            npos += sum(not g["difficult"][j] for j in rows)
        ranked = sorted(((float(d["scores"][j]), i, list(d["boxes"][j])) for i, d in enumerate(dets)
                         for j in range(len(d["labels"])) if d["labels"][j] == c), key=lambda x: -x[0])
        covered = [[False] * len(x) for x in per_image]
        tp, fp = [], []
        for _, i, box in ranked:
            best, jbest = -1.0, -1
            for j, (gbox, _) in enumerate(per_image[i]):
                o = iou(box, gbox)
                if o > best:
                    best, jbest = o, j
            if jbest < 0 or best < iou_threshold:
                tp.append(0), fp.append(1)
            elif per_image[i][jbest][1]:
                tp.append(0), fp.append(0)
            elif not covered[i][jbest]:
                covered[i][jbest] = True
                tp.append(1), fp.append(0)
            else:
                tp.append(0), fp.append(1)
        rec, prec, ctp, cfp = [], [], 0, 0
        for a, b in zip(tp, fp):
            ctp, cfp = ctp + a, cfp + b
            rec.append(ctp / max(npos, eps))
            prec.append(ctp / max(ctp + cfp, eps))
        if mode == "11point":
            value = interpolated_ap(rec, prec, [k * 0.1 for k in range(11)])
        else:
            mrec, mpre = [0.0] + rec + [1.0], [0.0] + prec + [0.0]
            for k in range(len(mpre) - 2, -1, -1):
                mpre[k] = max(mpre[k], mpre[k + 1])
            value = sum((mrec[k + 1] - mrec[k]) * mpre[k + 1] for k in range(len(mrec) - 1) if mrec[k + 1] != mrec[k])
        aps.append(value), num_gts.append(npos), num_dets.append(len(ranked))
    kept = [a for a, n in zip(aps, num_gts) if n > 0]
    return {"mAP": sum(kept) / len(kept) if kept else 0.0, "ap": aps, "num_gts": num_gts, "num_dets": num_dets}


def random_voc(seed, n_images=40, num_classes=4, integer=True):
    """Random gts (clusters of same-class boxes, 20 % difficult) and detections (jittered copies with
    duplicates, random boxes, scores rounded to one decimal so that ties occur)."""
    rng = np.random.default_rng(seed)
    gts, dets = [], []
    for _ in range(n_images):
        n = int(rng.integers(0, 7))
        centre = rng.uniform(20, 80, 2)
        xy = centre + rng.uniform(-15, 15, (n, 2))
        wh = rng.uniform(6, 30, (n, 2))
        boxes = np.concatenate([xy, xy + wh], 1)
        boxes = np.round(boxes) if integer else boxes
        labels = rng.integers(0, num_classes, n)
        gts.append({"boxes": boxes, "labels": labels, "difficult": rng.random(n) < 0.2})
        copies = np.repeat(np.arange(n), rng.integers(0, 3, n))
        jitter = rng.uniform(-5, 5, (len(copies), 4))
        noise = rng.uniform(1, 60, (int(rng.integers(0, 4)), 2))
        d_boxes = np.concatenate([boxes[copies] + (np.round(jitter) if integer else jitter),
                                  np.concatenate([noise, noise + rng.uniform(5, 30, noise.shape)], 1)])
        d_boxes[:, 2:] = np.maximum(d_boxes[:, 2:], d_boxes[:, :2])
        d_labels = np.concatenate([labels[copies], rng.integers(0, num_classes, len(noise))])
        dets.append({"boxes": d_boxes, "labels": d_labels, "scores": np.round(rng.random(len(d_boxes)), 1)})
    return dets, gts


@pytest.mark.parametrize("seed, integer", [(0, True), (1, True), (2, False), (3, False)])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("legacy_plus1", [True, False])
def test_matches_a_loop_re_derivation(seed, integer, mode, legacy_plus1):
    dets, gts = random_voc(seed, integer=integer)
    for thr in (0.5, 0.7):
        got = voc_ap(dets, gts, num_classes=4, iou_threshold=thr, mode=mode, legacy_plus1=legacy_plus1)
        want = reference_voc_ap(dets, gts, 4, thr, mode, legacy_plus1)
        assert got["num_gts"] == want["num_gts"] and got["num_dets"] == want["num_dets"]
        assert got["ap"] == pytest.approx(want["ap"], abs=1e-12)
        assert got["mAP"] == pytest.approx(want["mAP"], abs=1e-12)
        assert 0 < got["mAP"] < 1 and not math.isnan(got["mAP"])
