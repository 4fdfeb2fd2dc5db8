"""Which face boxes and landmarks are plausible (rankrepro.data.face_geometry), by hand."""

import math

import numpy as np
import pytest

from rankrepro.data.face_geometry import box_problem, landmark_problem

NAN = math.nan
#: a face of scale 5: the points' median is (15, 15), their distances to it 7.07, 7.07, 0, 5.83, 5.83
FACE = [10, 10, 20, 10, 15, 15, 12, 20, 18, 20]


@pytest.mark.parametrize("box,image_size,problem", [
    ((NAN, NAN, NAN, NAN), None, None),  # absent
    ((-3, -3, 50, 50), None, None),  # partly outside: a face on the border
    ((-40, 0, 45, 5), (40, 40), None),  # as far left as the image is wide
    ((39, 39, 41, 41), (40, 40), None),  # its right edge 80 = 2 W
    ((1, 2, 0, 4), None, "has a width or height <= 0"),
    ((1, 2, 3, -4), None, "has a width or height <= 0"),
    ((1, 2, 3, math.inf), None, "has a value that is not a finite number"),
    ((1, 2, NAN, 4), None, "has a value that is not a finite number"),  # partly given
    ((-10, -10, 5, 5), None, "lies outside the image (65535 x 65535 at most)"),  # right edge -5
    ((1, 2, 1e30, 3), None, "lies outside the image"),
    ((40, 0, 5, 5), (40, 40), "lies outside the image (its size 40 x 40)"),  # x = W
    ((-41, 0, 45, 5), (40, 40), "lies outside the image"),  # x < -W
    ((39, 39, 42, 41), (40, 40), "lies outside the image"),  # right edge 81 > 2 W
])
def test_boxes(box, image_size, problem):
    found = box_problem([box], image_size)
    if problem is None:
        assert found is None
    else:
        assert found[0] == 0 and found[1].startswith("face box x, y, w, h (") and problem in found[1]


def test_the_first_bad_row_is_named():
    assert box_problem([(1, 1, 5, 5), (NAN,) * 4, (1, 1, 0, 5), (1, 1, -1, 5)])[0] == 2
    assert landmark_problem([FACE, [NAN] * 10, [3] * 10, [NAN] + FACE[1:]])[0] == 2


@pytest.mark.parametrize("points,box,image_size,problem", [
    ([NAN] * 10, None, None, None),  # absent
    (FACE, None, None, None),
    ([3] * 10, None, None, "(nearly) coincide: their spread is 0 pixels, under 1"),
    # (0, 0), (2, 0) and three at (0, 0): mean (0.4, 0), mean squared distance (4 * 0.16 + 2.56) / 5 = 0.64
    ([0, 0, 2, 0, 0, 0, 0, 0, 0, 0], None, None, "spread is 0.8 pixels, under 1"),
    ([0, 0, 3, 0, 0, 0, 0, 0, 0, 0], None, None, None),  # spread sqrt(1.44) = 1.2
    (FACE[:9] + [NAN], None, None, "have a value that is not a finite number"),
    ([math.inf] + FACE[1:], None, None, "have a value that is not a finite number"),
    # no box, image unknown: x, y in [-G, 65535 + G], G = 4 face scales (point 1 moved: scale 5.83 -> 23.3)
    ([-23] + FACE[1:], None, None, None),
    ([-24] + FACE[1:], None, None, "point 1 (-24, 10) lies outside the face's reach, the image grown by 23.3 "
                                   "on each side (4 face scales, at most the image's side): x in [-23.3, 65558.3]"),
    ([1e30] + FACE[1:], None, None, "point 1 (1e+30, 10) lies outside"),
    ([v - 500 for v in FACE], None, None, "point 1 (-490, -490) lies outside"),
    # image 20 x 16 known, point 5 moved down: scale 7.07, 4 scales 28.3 capped at max(W, H) = 20: y <= 16 + 20
    (FACE[:9] + [36], None, (20, 16), None),
    (FACE[:9] + [37], None, (20, 16), "point 5 (18, 37) lies outside the face's reach, the image (20 x 16) grown "
                                      "by 20 on each side (4 face scales, at most the image's side): x in [-20.0, "
                                      "40.0], y in [-20.0, 36.0]"),
    # box (10, 10, 10, 10): x, y in [0, 30]
    (FACE, (10, 10, 10, 10), None, None),
    ([0, 0, 30, 30] + FACE[4:], (10, 10, 10, 10), None, None),
    (FACE[:8] + [31, 20], (10, 10, 10, 10), None,
     "point 5 (31, 20) lies outside the face's reach, the face box (10, 10, 10, 10) grown by its width and "
     "height on each side: x in [0.0, 30.0], y in [0.0, 30.0]"),
    (FACE, (100, 100, 10, 10), None, "point 1 (10, 10) lies outside"),
    (FACE, (100, 100, 0, 10), None, None),  # an unusable box: the image's reach
])
def test_landmarks(points, box, image_size, problem):
    found = landmark_problem([points], None if box is None else [box], image_size)
    if problem is None:
        assert found is None
    else:
        assert found[0] == 0 and found[1].startswith("5 landmarks (") and problem in found[1]


def test_many_rows_at_once():
    """VGGFace2 has 3.3 million rows: the checks are vectorised (one row as fast as a million)."""
    marks = np.tile(np.asarray(FACE, dtype=float), (200_000, 1))
    boxes = np.tile([5.0, 5.0, 20.0, 20.0], (200_000, 1))
    assert box_problem(boxes) is None and landmark_problem(marks, boxes) is None
    marks[123_456, 4] = 1e6
    assert landmark_problem(marks, boxes)[0] == 123_456
