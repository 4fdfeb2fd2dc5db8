"""Extraction writes and deletes only inside its tree: no writing through a symlink that leaves it,
no clean-up of paths an edited marker points outside it."""

import json

import pytest

from rankrepro.data import replicas
from rankrepro.data.archives import EXTRACTED_MARKER, extract


@pytest.mark.parametrize("link", ["folder", "file"])
def test_zip_is_not_extracted_through_a_symlink_leaving_the_tree(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("theirs")
    tree = tmp_path / "tree"
    replicas.write_zip(tmp_path / "first.zip", {"top/keep.txt": b"k"})
    extract(tmp_path / "first.zip", tree)  # the tree is ours
    if link == "folder":
        (tree / "top" / "sub").symlink_to(outside, target_is_directory=True)
    else:
        (tree / "top" / "sub").mkdir()
        (tree / "top" / "sub" / "a.txt").symlink_to(outside / "a.txt")
    replicas.write_zip(tmp_path / "second.zip", {"top/sub/a.txt": b"evil", "top/sub/b.txt": b"evil"})
    with pytest.raises(ValueError) as err:
        extract(tmp_path / "second.zip", tree)
    assert "top/sub" in str(err.value) and "symlink" in str(err.value)
    assert sorted(p.name for p in outside.iterdir()) == ["a.txt"] and (outside / "a.txt").read_text() == "theirs"


def test_a_symlink_inside_the_tree_is_followed(tmp_path):
    tree = tmp_path / "tree"
    replicas.write_zip(tmp_path / "first.zip", {"top/real/keep.txt": b"k"})
    extract(tmp_path / "first.zip", tree)
    (tree / "top" / "alias").symlink_to(tree / "top" / "real", target_is_directory=True)
    replicas.write_zip(tmp_path / "second.zip", {"top/alias/new.txt": b"n"})
    extract(tmp_path / "second.zip", tree)
    assert (tree / "top" / "real" / "new.txt").read_bytes() == b"n"


@pytest.mark.parametrize("member", ["../victim.txt", "/VICTIM", "top/../../victim.txt", "escape/victim.txt"])
def test_an_edited_marker_cannot_delete_outside_the_tree(tmp_path, member):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    tree = tmp_path / "tree"
    replicas.write_zip(tmp_path / "a.zip", {"top/a.txt": b"a"})
    extract(tmp_path / "a.zip", tree, checksum="sha256:" + "1" * 64)
    (tree / "escape").symlink_to(tmp_path, target_is_directory=True)
    marker = tree / EXTRACTED_MARKER / "a.zip"
    record = json.loads(marker.read_text())
    record["members"].append(member.replace("/VICTIM", str(victim)))
    marker.write_text(json.dumps(record))
    with pytest.raises(ValueError) as err:
        extract(tmp_path / "a.zip", tree, checksum="sha256:" + "2" * 64)  # another checksum: clean-up first
    assert str(marker) in str(err.value)
    assert victim.read_text() == "precious" and (tree / "top" / "a.txt").is_file()
