"""Face preprocessing before the usual resizes and crops: VGG's box extension and insightface's 5-point alignment.

A run asks for it with ``images.face`` (run schema); :class:`FaceCrop` applies it to each image of an
:class:`~rankrepro.data.images.ImageDataset` from its manifest row's columns (pixels of the stored image,
NaN when absent): :data:`BOX_COLUMNS` ``box_x, box_y, box_w, box_h`` (top-left corner, width, height) and
:data:`LANDMARK_COLUMNS` ``lmk_x1, lmk_y1, ..., lmk_x5, lmk_y5`` (left eye, right eye, nose, left and right
mouth corners, in the order of the template below).

* ``{name: extend_box, factor: f}`` — :func:`extend_box`, VGG's "tight" crop of VGGFace2: the face box
  (MTCNN's, VGGFace2's ``loose_bb_*.csv``) extended by ``f`` (0.3 for VGG's networks) and clipped to the image.
* ``{name: align5, size: s}`` — :func:`similarity_align`, insightface's ArcFace alignment: the least-squares
  similarity transform of the 5 landmarks onto :data:`ARCFACE_TEMPLATE` (scaled by ``s / 112``), warped to
  ``s`` × ``s`` as OpenCV's ``warpAffine`` does it (:func:`warp_bilinear`: bilinear, rounded to the nearest
  grey level; Pillow's affine warp truncates, half a grey level darker on average).

Fallbacks (per image): ``align5`` without all 10 landmark values crops the box extended by
:data:`VGG_FACTOR` instead; either crop without a box (any of the 4 values NaN, or a width or height <= 0)
keeps the whole image. ``align5`` refuses 10 landmark values that
:func:`~rankrepro.data.face_geometry.landmark_problem` refuses (coinciding, or far from the box or the
image) with a ``ValueError``, which the reader reraises naming the image
(:class:`~rankrepro.data.images.ImageDataset`); the datasets refuse them already at prepare.

Landmark coordinates are pixel-index coordinates as in OpenCV and insightface: pixel ``(i, j)`` (column, row)
has its centre at ``(i, j)``; the template is in the same convention. Boxes are read as demo_proj.m reads
them, in MATLAB's pixel numbers (:func:`extend_box`).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from rankrepro.data.face_geometry import landmark_problem

__all__ = ["ARCFACE_TEMPLATE", "BOX_COLUMNS", "LANDMARK_COLUMNS", "VGG_FACTOR", "VGG_MIN_ASPECT", "FaceCrop",
           "WARP_POSITION_STEPS", "extend_box", "similarity_align", "similarity_transform", "warp_bilinear"]

BOX_COLUMNS = ("box_x", "box_y", "box_w", "box_h")
LANDMARK_COLUMNS = tuple(f"lmk_{axis}{k}" for k in range(1, 6) for axis in "xy")

#: insightface's 5-point ArcFace template for 112 × 112 crops (x, y): left eye, right eye, nose tip, left and
#: right mouth corners — ``arcface_src`` of deepinsight/insightface python-package/insightface/utils/face_align.py
#: @e896172e (named ``arcface_dst`` in later versions, whose ``estimate_norm`` scales it by ``image_size / 112``
#: for sizes that are multiples of 112)
ARCFACE_TEMPLATE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                             [41.5493, 92.3655], [70.7299, 92.2041]])

#: VGG's extension of the MTCNN box, in total (half on each side): ``det_tight_ratio = 0.3`` of
#: ox-vgg/vgg_face2 standard_evaluation/demo_proj.m @78201f62 (README: "extended by a factor 0.3")
VGG_FACTOR = 0.3
#: demo_proj.m's ``scal_ratio_min = 112/128``: the crop is at least this wide relative to the box height
VGG_MIN_ASPECT = 112 / 128


def _round(value: float) -> int:
    """MATLAB's ``round`` (half away from zero) for positive values; :func:`extend_box` clips the others to
    the image's first pixel, where the two agree."""
    return math.floor(value + 0.5)


def extend_box(x: float, y: float, w: float, h: float, image_size: tuple[int, int],
               factor: float = VGG_FACTOR) -> tuple[int, int, int, int] | None:
    """``(left, top, right, bottom)`` (0-based, right and bottom exclusive: PIL's ``crop`` box) of the box
    ``x, y, w, h`` extended as VGG's demo_proj.m does it, or None when the box is missing (a NaN), empty, or
    outside the image.

    Centred on the box centre ``(cx, cy) = (x + w/2, y + h/2)``, the crop is ``H = (1 + factor) h`` high and
    ``W = (1 + factor) max(w, 112/128 h)`` wide (``factor`` in total: ``factor/2`` on each side). demo_proj.m
    reads the box in MATLAB's 1-based pixel numbers and keeps the pixel columns ``round(cx - W/2)`` through
    ``round(cx + W/2)``, both ends included, clipped to ``1 .. width`` (rows alike, ``round`` half away from
    zero). The same pixels, numbered from 0 with the right end excluded (``image_size``: PIL's
    ``(width, height)``): ``left = max(0, round(cx - W/2) - 1)``, ``right = min(width, round(cx + W/2))``; so
    the crop is one pixel wider and higher than ``W`` x ``H`` when neither end is clipped."""
    if not all(math.isfinite(v) for v in (x, y, w, h)) or w <= 0 or h <= 0:
        return None
    cx, cy = x + w / 2, y + h / 2
    height = (1 + factor) * h
    width = (1 + factor) * max(w, VGG_MIN_ASPECT * h)
    left, top = max(0, _round(cx - width / 2) - 1), max(0, _round(cy - height / 2) - 1)
    right, bottom = min(image_size[0], _round(cx + width / 2)), min(image_size[1], _round(cy + height / 2))
    if right <= left or bottom <= top:
        return None
    return left, top, right, bottom


def similarity_transform(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 2 × 3 matrix ``M = [s R | t]`` (scale ``s``, rotation ``R``, no reflection) minimising
    ``sum_k |s R src_k + t - dst_k|^2``: Umeyama (1991), as scikit-image's ``SimilarityTransform.estimate``.

    With centred points ``a_k = src_k - mean(src)``, ``b_k = dst_k - mean(dst)`` and ``A = (1/n) sum b_k a_k^T
    = U S V^T``: ``R = U D V^T`` with ``D = diag(1, sign det A)``, ``s = tr(S D) / ((1/n) sum |a_k|^2)``,
    ``t = mean(dst) - s R mean(src)``."""
    src, dst = np.asarray(src, dtype=np.float64), np.asarray(dst, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[1] != 2:
        raise ValueError(f"similarity_transform: src {src.shape} and dst {dst.shape} must both be [n, 2]")
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    a, b = src - src_mean, dst - dst_mean
    variance = (a ** 2).sum(axis=1).mean()
    if variance == 0:
        raise ValueError("similarity_transform: the source points all coincide")
    u, singular, vt = np.linalg.svd(b.T @ a / len(src))
    d = np.array([1.0, 1.0 if np.linalg.det(u) * np.linalg.det(vt) >= 0 else -1.0])
    rotation = u @ np.diag(d) @ vt
    scale = float(singular @ d) / variance
    return np.hstack([scale * rotation, (dst_mean - scale * rotation @ src_mean)[:, None]])


#: OpenCV's ``INTER_BITS = 5`` (opencv2/imgproc.hpp ``InterpolationMasks``): ``warpAffine`` samples the input at
#: positions rounded to 1/32 pixel
WARP_POSITION_STEPS = 32


def warp_bilinear(pixels: np.ndarray, inverse: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` x ``size`` image whose pixel ``(i, j)`` (column, row) is ``pixels`` sampled at
    ``(u, v) = inverse @ (i, j, 1)`` (pixel-index coordinates), as OpenCV's ``warpAffine`` with bilinear
    interpolation and a black constant border computes it for 8-bit images.

    ``u`` and ``v`` are rounded to the nearest 1/32 pixel (:data:`WARP_POSITION_STEPS`); with ``x0 = floor(u)``,
    ``a = u - x0`` and ``y0 = floor(v)``, ``b = v - y0``, the value is ``(1-a)(1-b) p(x0, y0) + a(1-b) p(x0+1, y0)
    + (1-a) b p(x0, y0+1) + a b p(x0+1, y0+1)``, a pixel outside the image counting as 0, rounded to the
    nearest integer (halves up). ``pixels``: ``[height, width]`` or ``[height, width, channels]``, uint8."""
    source = pixels[..., None] if pixels.ndim == 2 else pixels  # read per output pixel: the image is not copied
    height, width = source.shape[:2]
    rows, columns = np.mgrid[0:size, 0:size].astype(np.float64)
    u, v = (np.floor((inverse[k, 0] * columns + inverse[k, 1] * rows + inverse[k, 2]) * WARP_POSITION_STEPS + 0.5)
            / WARP_POSITION_STEPS for k in (0, 1))
    # neighbours beyond the image by 2 or more pixels are all outside: clipping there keeps the integers small
    x0, y0 = np.clip(np.floor(u), -2, width), np.clip(np.floor(v), -2, height)
    a, b = u - np.floor(u), v - np.floor(v)
    value = np.zeros((size, size, source.shape[2]))
    for dx, dy, weight in ((0, 0, (1 - a) * (1 - b)), (1, 0, a * (1 - b)), (0, 1, (1 - a) * b), (1, 1, a * b)):
        x, y = (x0 + dx).astype(np.int64), (y0 + dy).astype(np.int64)
        inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
        value += (weight * inside)[..., None] * source[np.clip(y, 0, height - 1), np.clip(x, 0, width - 1)].astype(
            np.float64)
    out = np.clip(np.floor(value + 0.5), 0, 255).astype(np.uint8)
    return out[..., 0] if pixels.ndim == 2 else out


def similarity_align(image: Image.Image, landmarks5, size: int = 112) -> Image.Image:
    """``image`` warped to ``size`` × ``size`` by the similarity transform ``M`` taking ``landmarks5`` ([5, 2],
    x y in pixel-index coordinates) onto :data:`ARCFACE_TEMPLATE` × ``size / 112``: insightface's ``norm_crop``
    (``cv2.warpAffine(img, M, (size, size), borderValue=0.0)``), which samples the input at ``M^-1`` of each
    output pixel (:func:`warp_bilinear`). An ``image`` in another mode than ``RGB`` or ``L`` is taken as RGB."""
    landmarks = np.asarray(landmarks5, dtype=np.float64).reshape(5, 2)
    matrix = similarity_transform(landmarks, ARCFACE_TEMPLATE * (size / 112))
    inverse = np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))[:2]
    image = image if image.mode in ("RGB", "L") else image.convert("RGB")
    # only the input pixels the warp can read (the output corners mapped back, a pixel of margin) become an
    # array: a multi-megapixel frame is not copied whole for a 112-pixel face; outside them nothing is read
    corners = inverse @ np.array([[0, size - 1, 0, size - 1], [0, 0, size - 1, size - 1], [1, 1, 1, 1]])
    low = np.clip(np.floor(corners.min(axis=1)) - 1, 0, image.size).astype(int)
    high = np.clip(np.ceil(corners.max(axis=1)) + 2, 0, image.size).astype(int)
    region = image.crop((*low, *np.maximum(high, low + 1)))
    shifted = inverse - np.hstack([np.zeros((2, 2)), low[:, None]])
    return Image.fromarray(warp_bilinear(np.asarray(region), shifted, size))


class FaceCrop:
    """The run's ``images.face`` crop for each row of a manifest table (module docstring).

    ``config``: ``{"name": "extend_box", "factor": f}`` or ``{"name": "align5", "size": s}``; ``manifest``: a
    :class:`~rankrepro.data.manifest.Manifest` (or split) whose table has :data:`BOX_COLUMNS`, and
    :data:`LANDMARK_COLUMNS` for ``align5``. ``crop(image, index)`` crops the image of its row ``index``."""

    def __init__(self, config: dict, manifest):
        table = manifest.table
        where = (f"{manifest.directory}/manifest.csv" if manifest.directory is not None
                 else f"the manifest of dataset {manifest.meta.get('dataset')!r}")
        self.name = config["name"]
        if self.name not in ("extend_box", "align5"):
            raise ValueError(f"images.face: unknown crop {self.name!r} (extend_box or align5)")
        needed = list(BOX_COLUMNS) + (list(LANDMARK_COLUMNS) if self.name == "align5" else [])
        missing = [c for c in needed if c not in table.columns]
        if missing:
            raise ValueError(f"images.face {self.name} needs the manifest columns {', '.join(missing)}, "
                             f"absent from {where}")
        self.factor = float(config["factor"]) if self.name == "extend_box" else VGG_FACTOR
        self.size = int(config["size"]) if self.name == "align5" else None
        self.boxes = table[list(BOX_COLUMNS)].to_numpy(dtype=np.float64)
        self.landmarks = (table[list(LANDMARK_COLUMNS)].to_numpy(dtype=np.float64).reshape(-1, 5, 2)
                          if self.name == "align5" else None)

    def crop(self, image: Image.Image, index: int) -> Image.Image:
        """Row ``index``'s face: aligned (``align5`` with 5 landmarks), else its extended box, else ``image``;
        landmarks that are not plausible in this image (module docstring) raise a ``ValueError``."""
        if self.landmarks is not None and np.isfinite(self.landmarks[index]).all():
            found = landmark_problem(self.landmarks[index].reshape(1, 10), self.boxes[index], image.size)
            if found is not None:
                raise ValueError(f"images.face align5: {found[1]}")
            return similarity_align(image, self.landmarks[index], self.size)
        box = extend_box(*self.boxes[index], image.size, self.factor)
        return image if box is None else image.crop(box)
