"""Image paths stay inside the image root: prepare refuses list files whose paths leave it, naming
the list file and line (or entry), and the image cache refuses to write outside its folder."""

import re
import shutil
from dataclasses import dataclass

import numpy as np
import pytest

from datautil import replica_archive
from rankrepro.data import cache, datasets
from rankrepro.data.manifest import META_JSON, read_manifest, write_manifest

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


@dataclass(frozen=True)
class Listed:
    """Where a replica lists its first image path: ``file`` (relative to the image root), its
    1-based ``line`` and the field holding the path (fields separated by the regex ``sep``; None:
    the whole line); or, for cars_annos.mat, the 1-based ``entry`` of its ``annotations``.
    ``joined``: the reader joins the listed name under a folder, so an absolute name stays
    inside the root (only a missing image): the absolute case is skipped. ``others``: (field,
    value) also set on that line."""

    file: str
    line: int = 0
    field: int = 0
    sep: str | None = None
    entry: int = 0
    joined: str = ""
    others: tuple[tuple[int, str], ...] = ()

    @property
    def where(self) -> str:
        return f"annotations({self.entry})" if self.entry else f"line {self.line}"


DYML = Listed("train/label.csv", 2, 0, ", ", joined="train/imgs/")
GLDV2 = Listed("metadata/train_clean.csv", 2, 1, "[, ]")
INAT = Listed("Inat_dataset_splits/Inaturalist_train_set1.txt", 1)
VOC = Listed("VOC2007/ImageSets/Main/trainval.txt", 1)
#: every registered file-based dataset (a new one without an entry fails below), and Cars' Kaggle layout
LISTED = {
    "sop": Listed("Ebay_train.txt", 2, 3, " "),
    "cub": Listed("images.txt", 1, 1, " ", joined="images/"),
    "cars": Listed("cars_annos.mat", entry=1),
    "cars[folders]": Listed("anno_train.csv", 1, 0, ",", joined="car_data/car_data/<split>/<class>/"),
    # a new item: one under the '..' type and gender folders of the climbing path, not two (a listed error)
    "inshop": Listed("Eval/list_eval_partition.txt", 3, 0, r"\s+", others=((1, "id_99999999"),)),
    "vehicleid": Listed("train_test_split/train_list.txt", 1, 0, " "),
    "inat": INAT, "inat_base": INAT, "inat_full": INAT,
    "dyml_vehicle": DYML, "dyml_animal": DYML, "dyml_product": DYML,
    "gldv2": GLDV2, "gldv2_hier": GLDV2,
    "vggface2": Listed("train_list.txt", 1, 0, None, joined="train/"),
    "ijbc": Listed("protocols/archive/ijbc_metadata.csv", 2, 1, ",", joined="images/"),
    # VOC lists image ids, joined into VOC2007/JPEGImages/<id>.jpg; an id must be NNNNNN or YYYY_NNNNNN
    "voc07": VOC, "voc0712": VOC,
}
REPLICA_OPTIONS = {"cars[folders]": {"layout": "folders"}}
#: the listed path: climbing out at once, from inside (In-shop's parser takes only img/<4 parts>), absolute
ESCAPES = {"dotdot": "../escape.jpg", "climbs": "img/../../../escape.jpg", "absolute": None}
FILE_BASED = [n for n in datasets.names() if not datasets.load(n).derived_from] + ["cars[folders]"]


def escape_cases():
    for case in FILE_BASED:
        for kind in ESCAPES:
            joined = LISTED[case].joined if case in LISTED else ""
            if kind == "absolute" and joined:
                yield pytest.param(case, kind, id=f"{case}-{kind}-skipped-name-joined-under-a-folder",
                                   marks=pytest.mark.skip(reason=f"{case} joins the listed name under {joined}: "
                                                                 "an absolute name stays inside the image root"))
            else:
                yield pytest.param(case, kind, id=f"{case}-{kind}")


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    """The image root of a case's replica, downloaded and prepared (one per case)."""
    roots = {}

    def get(case):
        if case not in roots:
            tmp = tmp_path_factory.mktemp(re.sub(r"\W", "_", case))
            dataset = datasets.load(case.split("[")[0])
            dataset.write_replica(tmp / "replica", **REPLICA_OPTIONS.get(case, {}))
            record = dataset.download(tmp / "data", replica_dir=tmp / "replica")
            roots[case] = dataset.prepare(record, tmp / "manifest", data_root=tmp / "data", replica=True).root
        return roots[case]

    return get


def corrupt(file, listed: Listed, bad: str) -> None:
    """Replace the path ``listed`` in ``file`` by ``bad`` (and set ``listed.others``)."""
    if listed.entry:
        import scipy.io

        mat = scipy.io.loadmat(file)
        mat["annotations"]["relative_im_path"][0, listed.entry - 1] = np.array([bad])
        scipy.io.savemat(file, {k: mat[k] for k in ("annotations", "class_names")}, format="5")
        return
    lines = file.read_text().split("\n")
    pieces = re.split(f"({listed.sep})", lines[listed.line - 1]) if listed.sep else [lines[listed.line - 1]]
    assert pieces[2 * listed.field] != bad
    for field, value in ((listed.field, bad), *listed.others):
        pieces[2 * field] = value
    lines[listed.line - 1] = "".join(pieces)
    file.write_text("\n".join(lines))


@pytest.mark.parametrize("case,kind", list(escape_cases()))
def test_every_dataset_names_the_list_file_and_line_of_a_path_that_leaves_the_root(case, kind, image_root, tmp_path):
    """Every file-based dataset: one listed path made to leave the root (:data:`ESCAPES`) in a copy of its
    prepared replica tree; prepare fails naming the path, the list file and its line (or entry),
    and writes nothing. (The reader may refuse it itself, e.g. an id that must be digits, or
    :meth:`Dataset.check_paths` with the row's ``origin``.)"""
    listed = LISTED[case]
    root = shutil.copytree(image_root(case), tmp_path / "tree" / image_root(case).name)
    bad = ESCAPES[kind] or str(tmp_path / "outside" / "escape.jpg")
    corrupt(root / listed.file, listed, bad)
    with pytest.raises(ValueError) as err:
        datasets.load(case.split("[")[0]).prepare(root, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    message = str(err.value)
    assert bad in message and listed.file in message, message
    assert re.search(rf"{re.escape(listed.where)}(?!\d)", message), message
    assert not (tmp_path / "m" / META_JSON).exists()


def test_cache_refuses_a_folder_of_it_that_is_a_symlink_leaving_it(extracted, tmp_path):
    """A path that stays inside the cache folder as text but crosses a symlink to elsewhere is refused."""
    root, manifest_dir = extracted
    rel = read_manifest(manifest_dir).table["path"].iat[0]
    out = tmp_path / "results" / "cache" / "s8"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    first = rel.split("/")[0]
    out.mkdir(parents=True)
    (out / first).symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="would be cached outside"):
        cache.build_cache(manifest_dir, 8, out)
    assert not any(outside.iterdir())
