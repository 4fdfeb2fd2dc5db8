"""Which face boxes and 5-landmark sets are plausible: the checks the face datasets apply when they read
them (:mod:`~rankrepro.data.datasets.vggface2`, :mod:`~rankrepro.data.datasets.ijbc`, naming the file and
line) and :class:`~rankrepro.data.face_align.FaceCrop` before it aligns a face.

Pixels of the stored image, in :mod:`~rankrepro.data.face_align`'s pixel-index coordinates; a value NaN is
absent (all 4 of a box, all 10 of a landmark set: the crop then falls back, :mod:`~rankrepro.data.face_align`).

* A **box** ``x, y, w, h`` (top-left corner, width, height) given at all must have 4 finite values, ``w > 0``,
  ``h > 0``, overlap the image (``x + w > 0``, ``y + h > 0``, ``x < W``, ``y < H``) and stay within the image
  grown by its own size on each side (``x >= -W``, ``y >= -H``, ``x + w <= 2 W``, ``y + h <= 2 H``).
* **Landmarks** ([5, 2], x y each) given at all must have 10 finite values, a spread (the root mean square
  distance of the 5 points to their mean) of at least :data:`MIN_LANDMARK_SPREAD` (below it they coincide: no
  similarity transform, or one that blows a speck up to the whole crop), and every point within the face's
  reach: the box grown by its width and height on each side where a valid box is given, else the image
  grown by ``G`` on each side, ``-G <= x <= W + G``, ``-G <= y <= H + G``, where ``G`` =
  :data:`FACE_SCALES` × the face's scale ``s``, at most ``max(W, H)``. ``s`` is the median of the 5 points'
  distances to their coordinate-wise median (25.2 pixels for the 112-pixel ArcFace template, whose face is
  about 4.4 ``s`` wide): one or two stray points do not change it, so a stray point is caught too.

``W, H``: the image's size where known (when cropping), else :data:`MAX_IMAGE_SIDE` each: the datasets open no
image at prepare, so there a point right of or below the image is caught only by the box or that bound.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FACE_SCALES", "MAX_IMAGE_SIDE", "MIN_LANDMARK_SPREAD", "box_problem", "landmark_problem"]

#: the widest or highest image there is, in pixels: a JPEG's limit (its size fields have 16 bits)
MAX_IMAGE_SIDE = 65_535
#: the least spread of 5 landmarks, in pixels (module docstring)
MIN_LANDMARK_SPREAD = 1.0
#: how far, in face scales, landmarks may lie outside the image when no box is given (module docstring)
FACE_SCALES = 4.0


def _given(values: np.ndarray) -> np.ndarray:
    return ~np.isnan(values).all(axis=1)


def _image(image_size) -> tuple[float, float]:
    return (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE) if image_size is None else (float(image_size[0]), float(image_size[1]))


def _median5(values: np.ndarray) -> np.ndarray:
    """The median of each row of 5 values (a sort: faster than ``np.median`` on millions of rows)."""
    return np.sort(values, axis=1)[:, 2]


def _text(values) -> str:
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"


def _usable_boxes(boxes: np.ndarray) -> np.ndarray:
    """Rows whose box has 4 finite values and a positive width and height."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(boxes).all(axis=1) & (boxes[:, 2] > 0) & (boxes[:, 3] > 0)


def box_problem(boxes, image_size=None) -> tuple[int, str] | None:
    """The first row of ``boxes`` ([n, 4] ``x, y, w, h``) whose box is given but not plausible (module
    docstring), with what is wrong; None when there is none. ``image_size``: ``(W, H)``, None: unknown."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    width, height = _image(image_size)
    usable = _usable_boxes(boxes)
    with np.errstate(invalid="ignore", over="ignore"):
        x, y, right, bottom = boxes[:, 0], boxes[:, 1], boxes[:, 0] + boxes[:, 2], boxes[:, 1] + boxes[:, 3]
        inside = (right > 0) & (bottom > 0) & (x < width) & (y < height) & \
            (x >= -width) & (y >= -height) & (right <= 2 * width) & (bottom <= 2 * height)
    bad = np.flatnonzero(_given(boxes) & ~(usable & inside))
    if not len(bad):
        return None
    row = int(bad[0])
    box = boxes[row]
    if not np.isfinite(box).all():
        what = "has a value that is not a finite number"
    elif not usable[row]:
        what = "has a width or height <= 0"
    else:
        what = (f"lies outside the image ({'' if image_size is None else 'its size '}{width:g} x {height:g}"
                f"{'' if image_size is not None else ' at most'}), or farther from it than its size")
    return row, f"face box x, y, w, h {_text(box)} {what}"


def landmark_problem(landmarks, boxes=None, image_size=None) -> tuple[int, str] | None:
    """The first row of ``landmarks`` ([n, 10] ``x1, y1, ..., x5, y5``) whose landmarks are given but not
    plausible (module docstring) given that row of ``boxes`` ([n, 4]; None: no boxes), with what is wrong;
    None when there is none. ``image_size``: ``(W, H)``, None: unknown."""
    marks = np.asarray(landmarks, dtype=np.float64).reshape(-1, 10)
    boxes = np.full((len(marks), 4), np.nan) if boxes is None else np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    width, height = _image(image_size)
    xs, ys = np.ascontiguousarray(marks[:, 0::2]), np.ascontiguousarray(marks[:, 1::2])  # [n, 5] each: fast
    finite = np.isfinite(marks).all(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        spread = np.sqrt(((xs - xs.mean(axis=1, keepdims=True)) ** 2 +
                          (ys - ys.mean(axis=1, keepdims=True)) ** 2).mean(axis=1))
        distance = np.hypot(xs - _median5(xs)[:, None], ys - _median5(ys)[:, None])
        grow = np.minimum(FACE_SCALES * _median5(distance), max(width, height))
        boxed = _usable_boxes(boxes)
        low = np.where(boxed[:, None], boxes[:, :2] - boxes[:, 2:], -grow[:, None])
        high = np.where(boxed[:, None], boxes[:, :2] + 2 * boxes[:, 2:], np.array([width, height]) + grow[:, None])
        outside = (xs < low[:, :1]) | (xs > high[:, :1]) | (ys < low[:, 1:]) | (ys > high[:, 1:])
        bad = np.flatnonzero(_given(marks) & ~(finite & (spread >= MIN_LANDMARK_SPREAD) & ~outside.any(axis=1)))
    if not len(bad):
        return None
    row = int(bad[0])
    what = f"5 landmarks {_text(marks[row])}"
    if not finite[row]:
        return row, f"{what} have a value that is not a finite number"
    if spread[row] < MIN_LANDMARK_SPREAD:
        return row, (f"{what} (nearly) coincide: their spread is {spread[row]:.3g} pixels, under "
                     f"{MIN_LANDMARK_SPREAD:g} (no face alignment fits them)")
    k = int(np.flatnonzero(outside[row])[0])
    reach = (f"the face box {_text(boxes[row])} grown by its width and height on each side" if boxed[row] else
             f"the image{'' if image_size is None else f' ({width:g} x {height:g})'} grown by {grow[row]:.3g} "
             f"on each side ({FACE_SCALES:g} face scales, at most the image's side)")
    return row, (f"{what}: point {k + 1} {_text((xs[row, k], ys[row, k]))} lies outside the face's reach, {reach}: "
                 f"x in [{low[row, 0]:.1f}, {high[row, 0]:.1f}], y in [{low[row, 1]:.1f}, {high[row, 1]:.1f}]")
