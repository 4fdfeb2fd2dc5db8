"""Reading a manifest's images: an unreadable image names its file and its manifest row."""

import pytest
import torch
from torch.utils.data import DataLoader

from rankrepro.data import datasets
from rankrepro.data.image_files import ImageReadError
from rankrepro.data.images import ImageDataset
from rankrepro.data.manifest import read_manifest
from rankrepro.data import transforms
from datautil import replica_archive

SOP = datasets.load("sop")
TRANSFORM = transforms.test_transform({"test_resize": [8, 8], "test_crop": 8})


@pytest.fixture
def manifest_dir(tmp_path):
    archive = tmp_path / "replica.zip"
    replica_archive("sop", archive, classes_per_super=1, images_per_class=(2, 2), image_size=16)
    SOP.prepare(archive, tmp_path / "manifest", data_root=tmp_path / "data", replica=True)
    return tmp_path / "manifest"


def test_images_read(manifest_dir):
    test = read_manifest(manifest_dir).split("test")
    image, labels, index = ImageDataset(test, TRANSFORM)[3]
    assert image.shape == (3, 8, 8) and labels.tolist() == test.labels()[3].tolist() and index == 3


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing"])
def test_unreadable_image_names_file_and_manifest_row(manifest_dir, damage):
    manifest = read_manifest(manifest_dir)
    test = manifest.split("test")
    index = 5
    path = test.paths()[index]
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])  # a real JPEG cut in the middle of its scan data
    elif damage == "garbage":
        path.write_bytes(b"not an image at all")
    else:
        path.unlink()
    dataset = ImageDataset(test, TRANSFORM)
    with pytest.raises(ImageReadError) as err:
        dataset[index]
    message = str(err.value)
    line = int(manifest.table.index[manifest.table["path"] == test.table["path"][index]][0]) + 2
    assert str(path) in message
    assert f"line {line} of {manifest_dir / 'manifest.csv'}" in message and "split 'test'" in message
    assert (manifest_dir / "manifest.csv").read_text().splitlines()[line - 1].startswith(test.table["path"][index])
    assert isinstance(err.value, OSError) and err.value.__cause__ is not None
    dataset[index - 1]  # the other images still read


def test_error_crosses_a_dataloader_worker(manifest_dir):
    test = read_manifest(manifest_dir).split("train")
    path = test.paths()[0]
    path.write_bytes(path.read_bytes()[:200])
    loader = DataLoader(ImageDataset(test, TRANSFORM), batch_size=4, num_workers=1)
    with pytest.raises(ImageReadError, match=f"cannot read image {path}.*manifest.csv"):
        next(iter(loader))


def test_manifest_without_a_file_names_the_dataset(manifest_dir):
    manifest = read_manifest(manifest_dir)
    manifest.directory = None
    assert manifest.split("test").describe_row(2).startswith("row ")
    assert "dataset 'sop'" in manifest.split("test").describe_row(2)
    assert torch.equal(torch.as_tensor(manifest.split("test").labels()),
                       ImageDataset(manifest.split("test"), TRANSFORM).labels)
