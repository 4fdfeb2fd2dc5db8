"""Image transforms of the papers' input pipelines (ImageNet mean/std).

Every backbone receives these tensors (RGB, pixels in [0, 1], then ImageNet mean/std); one whose
weights expect another convention converts them first in its forward
(:class:`rankrepro.models.input_convention.InputConvention`: BN-Inception's BGR, 0-255,
mean [104, 117, 128]).

A run's face crop (``images.face``) comes before them: :class:`rankrepro.data.images.ImageDataset` applies it
to each image from its manifest row (:mod:`rankrepro.data.face_align`), so the resizes and crops below see the face.
"""

from __future__ import annotations

from torchvision import transforms as T

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def train_transform(cfg: dict):
    """[Resize(train_resize)] -> RandomResizedCrop(train_crop, rrc_scale, rrc_ratio) -> horizontal flip -> normalise;
    with ``rrc_scale`` and ``rrc_ratio`` null, a plain RandomCrop(train_crop) instead of the RandomResizedCrop.

    ``cfg`` is a run's complete ``images`` block (no defaults here: the plan pins them and checks that a plain
    random crop fits: :func:`rankrepro.plan.complete.check_random_crop`)."""
    steps = []
    if cfg["train_resize"]:
        steps.append(T.Resize(_size(cfg["train_resize"])))
    steps += [
        T.RandomCrop(cfg["train_crop"]) if cfg["rrc_scale"] is None else
        T.RandomResizedCrop(cfg["train_crop"], scale=tuple(cfg["rrc_scale"]), ratio=tuple(cfg["rrc_ratio"])),
        T.RandomHorizontalFlip(0.5),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]
    return T.Compose(steps)


def test_transform(cfg: dict):
    """Resize(test_resize) (an int keeps the aspect ratio, a pair squashes) -> CenterCrop -> normalise."""
    return T.Compose([
        T.Resize(_size(cfg["test_resize"])),
        T.CenterCrop(cfg["test_crop"]),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
