"""Image transforms of the papers' input pipelines (ImageNet mean/std)."""

from __future__ import annotations

from torchvision import transforms as T

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


def train_transform(cfg: dict):
    """[Resize(resize)] -> RandomResizedCrop(crop, scale, ratio) -> horizontal flip -> normalise."""
    steps = []
    if cfg.get("train_resize"):
        steps.append(T.Resize(_size(cfg["train_resize"])))
    steps += [
        T.RandomResizedCrop(cfg["train_crop"], scale=tuple(cfg.get("rrc_scale", (0.08, 1.0))),
                            ratio=tuple(cfg.get("rrc_ratio", (3 / 4, 4 / 3)))),
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
