"""Image paths stay inside the image root: prepare refuses list files whose paths leave it, and
the image cache refuses to write outside its folder."""

import shutil

import pytest

from datautil import replica_archive
from rankrepro.data import cache, datasets
from rankrepro.data.manifest import read_manifest, write_manifest

SOP = datasets.load("sop")


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """An extracted SOP replica tree (its ``Stanford_Online_Products`` folder) and its manifest."""
    tmp = tmp_path_factory.mktemp("paths")
    archive = tmp / "replica.zip"
    replica_archive("sop", archive, classes_per_super=1, images_per_class=(2, 2), image_size=8)
    manifest = SOP.prepare(archive, tmp / "manifest", data_root=tmp / "data", replica=True)
    return manifest.root, tmp / "manifest"


def tampered_copy(extracted, tmp_path, listed):
    """A copy of the tree whose Ebay_train.txt lists ``listed(root)`` as its first image (which exists)."""
    root = shutil.copytree(extracted[0], tmp_path / "tree" / "Stanford_Online_Products")
    outside = tmp_path / "outside.JPG"
    outside.write_bytes((root / "LICENSE").read_bytes() if (root / "LICENSE").is_file() else b"x")
    split_file = root / "Ebay_train.txt"
    lines = split_file.read_text().splitlines()
    fields = lines[1].split(" ")
    fields[3] = listed(root, outside)
    lines[1] = " ".join(fields)
    split_file.write_text("\n".join(lines) + "\n")
    return root, fields[3]


@pytest.mark.parametrize("listed", [
    lambda root, outside: str(outside),  # absolute
    lambda root, outside: "bicycle_final/../../../outside.JPG",  # climbs out with ..
], ids=["absolute", "dotdot"])
def test_prepare_refuses_paths_that_leave_the_image_root(extracted, tmp_path, listed):
    root, path = tampered_copy(extracted, tmp_path, listed)
    assert (root / path).resolve() == (tmp_path / "outside.JPG").resolve()  # the file is there to read
    with pytest.raises(ValueError) as err:
        SOP.prepare(root, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    message = str(err.value)
    assert repr(path) in message and "Ebay_train.txt" in message and "line 2" in message
    assert not (tmp_path / "m").exists()


def test_cache_refuses_to_write_outside_its_folder(extracted, tmp_path):
    root, manifest_dir = extracted
    manifest = read_manifest(manifest_dir)
    table = manifest.table.copy()
    escape = f"../{root.name}/{table['path'].iat[0]}"  # the original image, read through ..
    table.loc[0, "path"] = escape
    meta = {k: v for k, v in manifest.meta.items() if k != "counts"}
    write_manifest(tmp_path / "manifest", table, meta)
    out = tmp_path / "results" / "cache" / "s8"
    with pytest.raises(ValueError) as err:
        cache.build_cache(tmp_path / "manifest", 8, out)
    assert "line 2 of" in str(err.value) and str(tmp_path / "manifest" / "manifest.csv") in str(err.value)
    assert not (out.parent / root.name).exists()
