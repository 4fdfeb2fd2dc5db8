"""Face preprocessing (rankrepro.data.face_align): VGG's box extension, insightface's 5-point similarity
alignment, the per-row crop of ImageDataset and the run key images.face (id-neutral while null)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from rankrepro.data.cache import ImageCacheWarning
from rankrepro.data.face_align import (ARCFACE_TEMPLATE, BOX_COLUMNS, LANDMARK_COLUMNS, extend_box,
                                       similarity_align, similarity_transform, warp_bilinear)
from rankrepro.data.image_files import ImageReadError
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import Manifest
from rankrepro.plan.complete import run_id
from rankrepro.plan.planner import resolve_run
from rankrepro.plan.schema import PlanError
from rankrepro.plan.targets import run_cache_size


def _similarity(scale: float, degrees: float, shift) -> np.ndarray:
    angle = math.radians(degrees)
    rotation = scale * np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return np.hstack([rotation, np.asarray(shift, dtype=float)[:, None]])


def _apply(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    return points @ matrix[:, :2].T + matrix[:, 2]


# ----------------------------------------------------------------- the similarity transform (Umeyama)


def test_the_similarity_transform_inverts_a_known_one_exactly():
    forward = _similarity(1.7, 20.0, (60.0, 40.0))  # template -> "detected" landmarks
    landmarks = _apply(forward, ARCFACE_TEMPLATE)
    matrix = similarity_transform(landmarks, ARCFACE_TEMPLATE)
    np.testing.assert_allclose(_apply(matrix, landmarks), ARCFACE_TEMPLATE, atol=1e-9)
    linear = matrix[:, :2]
    assert math.isclose(math.sqrt(np.linalg.det(linear)), 1 / 1.7, rel_tol=1e-12)
    assert math.isclose(math.degrees(math.atan2(linear[1, 0], linear[0, 0])), -20.0, abs_tol=1e-9)


def test_the_similarity_transform_never_reflects_and_fits_least_squares():
    rng = np.random.default_rng(0)
    landmarks = _apply(_similarity(2.0, -35.0, (10.0, 5.0)), ARCFACE_TEMPLATE) + rng.normal(0, 1.5, (5, 2))
    mirrored = landmarks * [-1.0, 1.0]  # a mirror image: the best similarity still has no reflection
    for points in (landmarks, mirrored):
        matrix = similarity_transform(points, ARCFACE_TEMPLATE)
        assert np.linalg.det(matrix[:, :2]) > 0
        best = np.square(_apply(matrix, points) - ARCFACE_TEMPLATE).sum()
        for _ in range(20):  # no nearby similarity fits better
            nudged = _apply(_similarity(1 + rng.normal(0, 0.01), rng.normal(0, 0.5), rng.normal(0, 0.2, 2)),
                            _apply(matrix, points))
            assert np.square(nudged - ARCFACE_TEMPLATE).sum() >= best - 1e-9
    with pytest.raises(ValueError, match="coincide"):
        similarity_transform(np.ones((5, 2)), ARCFACE_TEMPLATE)


# ----------------------------------------------------------------- alignment of an image


def _blobs(size: tuple[int, int], points: np.ndarray, sigma: float) -> Image.Image:
    """A black RGB image with a white Gaussian blob centred on each point (pixel-index coordinates)."""
    ys, xs = np.mgrid[0:size[1], 0:size[0]]
    canvas = sum(np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * sigma ** 2)) for x, y in points)
    return Image.fromarray(np.repeat((255 * np.clip(canvas, 0, 1)).astype(np.uint8)[..., None], 3, axis=2))


def _centroids(image: Image.Image, near: np.ndarray, radius: int = 6) -> np.ndarray:
    """The intensity-weighted centroid of ``image`` within ``radius`` of each point (NaN where it is black)."""
    pixels = np.asarray(image, dtype=np.float64)[..., 0]
    ys, xs = np.mgrid[0:pixels.shape[0], 0:pixels.shape[1]]
    out = []
    for x, y in near:
        weight = pixels * (((xs - x) ** 2 + (ys - y) ** 2) <= radius ** 2)
        total = weight.sum()
        out.append([(weight * xs).sum() / total, (weight * ys).sum() / total] if total > 0 else [np.nan, np.nan])
    return np.array(out)


def _errors(found: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.linalg.norm(found - expected, axis=1), nan=np.inf)


@pytest.mark.parametrize("scale, degrees, shift", [(1.7, 20.0, (60.0, 40.0)), (3.0, -12.0, (25.5, 70.25)),
                                                    (0.8, 5.0, (100.0, 30.0))])
def test_aligned_landmarks_land_on_the_template(scale, degrees, shift):
    landmarks = _apply(_similarity(scale, degrees, shift), ARCFACE_TEMPLATE)
    image = _blobs((420, 420), landmarks, sigma=1.5 * scale)
    aligned = similarity_align(image, landmarks, size=112)
    assert aligned.size == (112, 112)
    assert _errors(_centroids(aligned, ARCFACE_TEMPLATE), ARCFACE_TEMPLATE).max() < 0.25  # well within 1 px
    # the warp taken the wrong way round (the landmarks->template matrix handed to PIL as the output->input map)
    matrix = similarity_transform(landmarks, ARCFACE_TEMPLATE)
    wrong = image.transform((112, 112), Image.Transform.AFFINE, tuple(matrix.ravel()),
                            resample=Image.Resampling.BILINEAR)
    assert _errors(_centroids(wrong, ARCFACE_TEMPLATE), ARCFACE_TEMPLATE).max() > 1


def test_alignment_scales_the_template_with_the_size():
    landmarks = _apply(_similarity(1.5, 10.0, (30.0, 20.0)), ARCFACE_TEMPLATE)
    aligned = similarity_align(_blobs((300, 300), landmarks, sigma=3.0), landmarks, size=224)
    assert aligned.size == (224, 224)
    assert _errors(_centroids(aligned, 2 * ARCFACE_TEMPLATE, radius=10), 2 * ARCFACE_TEMPLATE).max() < 0.25


def test_alignment_samples_pixel_centres_as_opencv_does():
    """A landmark set at twice the template plus an integer shift: output pixel (i, j) is input pixel
    (2i + 7, 2j + 4) exactly (OpenCV's warpAffine, pixel centres at integers); a half-pixel slip would blend."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (260, 260, 3), dtype=np.uint8)
    aligned = similarity_align(Image.fromarray(pixels), 2 * ARCFACE_TEMPLATE + [7, 4], size=112)
    np.testing.assert_array_equal(np.asarray(aligned), pixels[4:4 + 224:2, 7:7 + 224:2])


@pytest.mark.parametrize("dx, dy", [(0, 0), (5, 9), (17, 3)])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_whole_pixel_shift_of_the_template_copies_the_image_exactly(dx, dy, mode):
    """Landmarks = the template + (dx, dy): the crop is image[dy:dy+112, dx:dx+112], every grey level
    (before: Pillow's warp truncated the fitted transform's 1e-15 slips: up to 2 pixels in 5 one level darker)."""
    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 256, (200, 200, 3), dtype=np.uint8)).convert(mode)
    aligned = similarity_align(image, ARCFACE_TEMPLATE + [dx, dy])
    assert aligned.mode == mode
    np.testing.assert_array_equal(np.asarray(aligned), np.asarray(image)[dy:dy + 112, dx:dx + 112])


def test_a_half_pixel_shift_rounds_halves_up_and_blends_the_border_with_black():
    """Landmarks = the template + (0.5, 0): output pixel (i, j) samples the input at (i + 0.5, j), the mean of
    columns i and i + 1. Columns alternating 10 and 11: 10.5 everywhere, rounded to 11 (Pillow: 10).
    Template - (0.5, 0): column 0 samples x = -0.5, half a black pixel outside and half of column 0."""
    pixels = np.tile(np.array([10, 11], dtype=np.uint8), (150, 75))  # 150 x 150, column c = 10 + c % 2
    shifted = np.asarray(similarity_align(Image.fromarray(pixels), ARCFACE_TEMPLATE + [0.5, 0]))
    np.testing.assert_array_equal(shifted, np.full((112, 112), 11, dtype=np.uint8))
    flat = Image.fromarray(np.full((150, 150), 101, dtype=np.uint8))
    edge = np.asarray(similarity_align(flat, ARCFACE_TEMPLATE - [0.5, 0]))
    np.testing.assert_array_equal(edge[:, 0], np.full(112, 51))  # 101 / 2 = 50.5 -> 51
    np.testing.assert_array_equal(edge[:, 1:], np.full((112, 111), 101))  # (101 + 101) / 2


def test_sampling_positions_are_rounded_to_a_32nd_of_a_pixel():
    """OpenCV's warpAffine samples at positions rounded to 1/32 pixel. Columns alternating 0 and 64: a shift of
    0.01 px rounds to 0, an exact copy; a shift of 1/32 gives 31/32 * 0 + 1/32 * 64 = 2 on the even columns and
    31/32 * 64 = 62 on the odd ones."""
    pixels = np.tile(np.array([0, 64], dtype=np.uint8), (150, 75))
    image = Image.fromarray(pixels)
    np.testing.assert_array_equal(np.asarray(similarity_align(image, ARCFACE_TEMPLATE + [0.01, 0])), pixels[:112, :112])
    expected = np.tile(np.array([2, 62], dtype=np.uint8), (112, 56))
    np.testing.assert_array_equal(np.asarray(similarity_align(image, ARCFACE_TEMPLATE + [1 / 32, 0])), expected)


@pytest.mark.parametrize("scale, shift", [(3.0, (100.5, 80.25)), (2.0, (-60.0, -50.0)), (2.0, (390.3, 295.0)),
                                          (0.5, (399.7, 299.6))])
def test_alignment_reads_the_face_region_as_the_whole_image(scale, shift):
    """similarity_align hands warp_bilinear only the region its output can read: the same pixels as the warp of
    the whole array, for a face inside the image, across its top-left or bottom-right border, or off it."""
    pixels = np.random.default_rng(5).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    landmarks = scale * ARCFACE_TEMPLATE + shift
    matrix = similarity_transform(landmarks, ARCFACE_TEMPLATE)
    whole = warp_bilinear(pixels, np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))[:2], 112)
    np.testing.assert_array_equal(np.asarray(similarity_align(Image.fromarray(pixels), landmarks)), whole)


# ----------------------------------------------------------------- box extension (VGG demo_proj.m)


@pytest.mark.parametrize("box, image_size, factor, expected", [
    # demo_proj.m by hand: MATLAB keeps columns round(cx - W/2) .. round(cx + W/2) (1-based, both ends), rows
    # alike, clipped to 1 .. width; 0-based with the end excluded: (round(cx - W/2) - 1, round(cx + W/2)).
    # cx 100, cy 120; W = 1.3*max(100, 0.875*120 = 105) = 136.5: columns round(31.75) = 32 .. round(168.25) = 168;
    # H = 1.3*120 = 156: rows 42 .. 198 (issue 34's example: before, (32, 42, 168, 198), one pixel short)
    ((50, 60, 100, 120), (400, 400), 0.3, (31, 41, 168, 198)),
    # cx 60, cy 80; W = 1.3*max(40, 0.875*60 = 52.5) = 68.25 (the narrow box widened): columns 26 .. 94;
    # H = 78: rows 41 .. 119
    ((40, 50, 40, 60), (200, 200), 0.3, (25, 40, 94, 119)),
    # cx 40, cy 30; W = 78: columns 1 .. 79 (the first column kept); H = 52: rows 4 .. 56
    ((10, 10, 60, 40), (200, 200), 0.3, (0, 3, 79, 56)),
    # top-left border: cx 25, cy 25; W = 65: columns round(-7.5) = -8 -> 1 .. round(57.5) = 58;
    # H = 52: rows -1 -> 1 .. 51 -> 45 (the image's last row)
    ((0, 5, 50, 40), (100, 45), 0.3, (0, 0, 58, 45)),
    # bottom-right border: cx 90, cy 80; W = H = 26: columns 77 .. 103 -> 100, rows 67 .. 93 -> 90
    ((80, 70, 20, 20), (100, 90), 0.3, (76, 66, 100, 90)),
    # halves round up: cx = cy = 15, W = H = 15: columns round(7.5) = 8 .. round(22.5) = 23
    ((10, 10, 10, 10), (100, 100), 0.5, (7, 7, 23, 23)),
    # factor 0 where w >= 0.875 h: the box's own columns 20 .. 36 and rows 10 .. 26, both ends kept (17 x 17)
    ((20, 10, 16, 16), (64, 48), 0.0, (19, 9, 36, 26)),
    # factor 1 (VGGFace2's released loose crops): twice the box, columns and rows 15 .. 35
    ((20, 20, 10, 10), (100, 100), 1.0, (14, 14, 35, 35)),
])
def test_extend_box_by_hand(box, image_size, factor, expected):
    assert extend_box(*box, image_size, factor) == expected


def test_extend_box_without_a_box_is_none():
    assert extend_box(math.nan, 1, 2, 3, (10, 10)) is None
    assert extend_box(1, 1, 0, 3, (10, 10)) is None
    assert extend_box(50, 50, 5, 5, (10, 10)) is None  # outside the image
    # cx 10, cy 0.5, W = H = 1.3: columns round(9.35) = 9 .. round(10.65) = 11 -> 10 (the last two of a
    # 10-wide image), rows round(-0.15) = 0 -> 1 .. round(1.15) = 1
    assert extend_box(9.5, 0, 1, 1, (10, 10)) == (8, 0, 10, 1)


# ----------------------------------------------------------------- ImageDataset with images.face


RED = torch.tensor([255, 0, 0], dtype=torch.uint8)[:, None, None]


def _face_manifest(tmp_path, rows: list[dict]) -> Manifest:
    """Images 64 x 48, grey with a red 16 x 16 square at (20, 10), and the rows' box/landmark columns."""
    for row in rows:
        pixels = np.full((48, 64, 3), 128, dtype=np.uint8)
        pixels[10:26, 20:36] = (255, 0, 0)
        Image.fromarray(pixels).save(tmp_path / row["path"])
    table = pd.DataFrame([{"split": "test", "label": i, **{c: math.nan for c in BOX_COLUMNS + LANDMARK_COLUMNS},
                           **row} for i, row in enumerate(rows)])
    return Manifest(table, {"dataset": "faces", "root": str(tmp_path), "levels": ["identity"]})


def test_image_dataset_crops_each_face_from_its_row(tmp_path):
    # in demo_proj.m's 1-based numbers the red square is columns 21 .. 36, rows 11 .. 26: the box (21, 11, 15, 15)
    square = dict(zip(BOX_COLUMNS, (21.0, 11.0, 15.0, 15.0)))
    manifest = _face_manifest(tmp_path, [{"path": "a.png", **square}, {"path": "b.png"}])
    dataset = ImageDataset(manifest, T.PILToTensor(), face={"name": "extend_box", "factor": 0.0})
    face, _, _ = dataset[0]
    assert face.shape == (3, 16, 16)
    assert (face[0] == 255).all() and (face[1:] == 0).all()  # exactly the red square
    whole, _, _ = dataset[1]  # no box: the whole image
    assert whole.shape == (3, 48, 64)
    assert ImageDataset(manifest, T.PILToTensor())[0][0].shape == (3, 48, 64)  # images.face null: as before


def test_align5_falls_back_to_the_extended_box_without_landmarks(tmp_path):
    square = dict(zip(BOX_COLUMNS, (20.0, 10.0, 16.0, 16.0)))
    # landmarks: the template shrunk into the red square (scale 1/7: 112 -> 16), so the aligned face is all red
    points = dict(zip(LANDMARK_COLUMNS, (ARCFACE_TEMPLATE / 7 + [20, 10]).ravel()))
    manifest = _face_manifest(tmp_path, [{"path": "a.png", **square, **points}, {"path": "b.png", **square},
                                         {"path": "c.png"}])
    dataset = ImageDataset(manifest, T.PILToTensor(), face={"name": "align5", "size": 112})
    aligned = dataset[0][0]
    assert aligned.shape == (3, 112, 112)
    assert (aligned[:, 8:104, 8:104] == RED).all()
    assert dataset[1][0].shape == (3, 21, 21)  # box extended by 0.3: cx 28, W 20.8 -> columns 18 .. 38: (17, 7, 38, 28)
    assert dataset[2][0].shape == (3, 48, 64)


@pytest.mark.parametrize("points,match", [
    ([(28.0, 18.0)] * 5, r"\(nearly\) coincide: their spread is 0 pixels"),
    ([(1e30, 12.0), (33.0, 12.0), (28.0, 18.0), (23.0, 23.0), (33.0, 23.0)], r"point 1 \(1e\+30, 12\) lies outside"),
    ([(x - 500, y - 500) for x, y in [(23.0, 12.0), (33.0, 12.0), (28.0, 18.0), (23.0, 23.0), (33.0, 23.0)]],
     r"point 1 \(-477, -488\) lies outside the face's reach, the face box \(20, 10, 16, 16\) grown"),
])
def test_align5_with_implausible_landmarks_names_the_image(tmp_path, points, match):
    """Coinciding landmarks, or absurd ones, fail naming the image and its row (before: a bare ValueError
    from the transform, or a silently black face)."""
    square = dict(zip(BOX_COLUMNS, (20.0, 10.0, 16.0, 16.0)))
    manifest = _face_manifest(tmp_path, [{"path": "a.png", **square, **dict(zip(LANDMARK_COLUMNS, np.ravel(points)))}])
    dataset = ImageDataset(manifest, T.PILToTensor(), face={"name": "align5", "size": 112})
    with pytest.raises(ImageReadError, match=match) as err:
        dataset[0]
    assert str(err.value).startswith(f"cannot crop the face of image {tmp_path / 'a.png'} (row 0 of the manifest "
                                     "of dataset 'faces' (split 'test', index 0)): ValueError: images.face align5: ")


def test_a_face_crop_needs_the_columns_and_reads_no_cache(tmp_path):
    manifest = _face_manifest(tmp_path, [{"path": "a.png"}])
    bare = Manifest(manifest.table[["path", "split", "label", *BOX_COLUMNS]], manifest.meta)
    with pytest.raises(ValueError, match=r"align5 needs the manifest columns lmk_x1, lmk_y1, .*'faces'"):
        ImageDataset(bare, T.PILToTensor(), face={"name": "align5", "size": 112})
    with pytest.warns(ImageCacheWarning, match="images.face"):
        dataset = ImageDataset(bare, T.PILToTensor(), cache=tmp_path / "cache",
                               face={"name": "extend_box", "factor": 0.3})
    assert dataset.source == "originals"


# ----------------------------------------------------------------- the run key images.face


def test_images_face_null_keeps_every_run_id():
    run = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01})
    assert run["images"]["face"] is None
    before = dict(run, images={k: v for k, v in run["images"].items() if k != "face"})  # planned before the key
    assert run_id(run) == run_id(before)
    assert run_cache_size(run) == run_cache_size(before) == 256
    face = resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01},
                       {"images": {"face": {"name": "extend_box", "factor": 0.3}}})
    assert run_id(face) != run_id(run)
    assert run_cache_size(face) is None  # the boxes are in the originals' pixels


@pytest.mark.parametrize("face", [{"name": "align5", "size": 100}, {"name": "align5", "factor": 0.3},
                                  {"name": "extend_box", "factor": 0.3, "size": 112}, {"name": "tight"}])
def test_a_malformed_face_block_fails_the_plan(face):
    with pytest.raises(PlanError, match="images.face"):
        resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, {"images": {"face": face}})


class _MeanColour(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


def test_evaluation_embeds_the_faces_of_the_run(tmp_path):
    """embed_parts hands the run's images.face to its datasets: the red square's colour, not the grey image's."""
    from rankrepro.engine.evaluate import embed_parts

    square = dict(zip(BOX_COLUMNS, (20.0, 10.0, 16.0, 16.0)))
    manifest = _face_manifest(tmp_path, [{"path": "a.png", **square}])
    images = {"train_resize": None, "train_crop": 16, "rrc_scale": [1.0, 1.0], "rrc_ratio": [1.0, 1.0],
              "test_resize": 16, "test_crop": 16}
    colours = {}
    for face in (None, {"name": "extend_box", "factor": 0.0}):
        run = {"images": {**images, "face": face}, "amp": "none"}
        out, _ = embed_parts(_MeanColour(), {"test": manifest}, True, run, torch.device("cpu"), progress=False)
        colours[bool(face)] = out["test"][0]
    assert colours[True][0] > colours[False][0] and colours[True][1] < colours[False][1]


def test_gpu_decode_refuses_a_face_crop(tmp_path):
    from rankrepro.engine.gpu_decode import EncodedImages

    manifest = _face_manifest(tmp_path, [{"path": "a.png"}])
    with pytest.raises(ValueError, match=r"gpu_decode cannot crop faces \(images.face\)"):
        EncodedImages(ImageDataset(manifest, T.PILToTensor(), face={"name": "extend_box", "factor": 0.3}))
