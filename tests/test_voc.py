"""Pascal VOC (voc07, voc0712): the XML parser on hand-written annotations, the replica through the real
download -> prepare path (expected rows written out by hand from the replica's table), 07+12
concatenation, the manifest round trip, errors naming the list file and line, the shared download."""

import io
import json
import shutil
import tarfile
from pathlib import Path
from types import SimpleNamespace as W

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from rankrepro.data import datasets
from rankrepro.metrics.protocols import get as get_protocol
from rankrepro.data.datasets.voc import CLASSES, check_boxes, first_class, parse_annotation
from rankrepro.data.manifest import read_manifest

VOC07, VOC0712 = datasets.load("voc07"), datasets.load("voc0712")
THOR = "https://thor.robots.ox.ac.uk/pascal/VOC/"
TRAINVAL07, TEST07, TRAINVAL12 = "VOCtrainval_06-Nov-2007.tar", "VOCtest_06-Nov-2007.tar", "VOCtrainval_11-May-2012.tar"

#: the replica's rows, by hand from voc.REPLICA_IMAGES: (path, split, label, objects, year, image_id)
#: class indices: aeroplane 0, bicycle 1, bottle 4, car 6, chair 8, diningtable 10, dog 11, horse 12,
#: person 14, sofa 17, train 18
ROWS07_TRAIN = [
    ("VOC2007/JPEGImages/000005.jpg", "train", 8, [[8, 4, 8, 30, 40, 0], [10, 28, 20, 60, 46, 0]], 2007, "000005"),
    ("VOC2007/JPEGImages/000007.jpg", "train", 11, [[14, 2, 2, 20, 46, 1], [11, 24, 18, 62, 46, 0]], 2007, "000007"),
    ("VOC2007/JPEGImages/000009.jpg", "train", 12,
     [[12, 6, 10, 40, 44, 0], [14, 42, 4, 60, 40, 0], [6, 1, 36, 20, 48, 0]], 2007, "000009"),
    ("VOC2007/JPEGImages/000012.jpg", "train", 6, [[6, 10, 12, 54, 40, 0]], 2007, "000012"),
    ("VOC2007/JPEGImages/000016.jpg", "train", 1, [[1, 8, 6, 56, 44, 0]], 2007, "000016"),
    ("VOC2007/JPEGImages/000017.jpg", "train", 14, [[14, 20, 2, 40, 30, 0], [12, 12, 20, 52, 47, 0]], 2007, "000017"),
]
ROWS12_TRAIN = [
    ("VOC2012/JPEGImages/2008_000008.jpg", "train", 12, [[12, 8, 14, 50, 46, 0], [14, 20, 2, 40, 30, 0]], 2012,
     "2008_000008"),
    ("VOC2012/JPEGImages/2008_000015.jpg", "train", 4, [[4, 24, 6, 36, 44, 0]], 2012, "2008_000015"),  # no tag
    ("VOC2012/JPEGImages/2009_000001.jpg", "train", 14, [[14, 10, 4, 38, 46, 0]], 2012, "2009_000001"),  # 38.5
    ("VOC2012/JPEGImages/2010_000002.jpg", "train", 0, [[0, 4, 8, 60, 36, 0]], 2012, "2010_000002"),
]
ROWS07_TEST = [
    ("VOC2007/JPEGImages/000001.jpg", "test", 11, [[11, 10, 14, 50, 46, 0], [14, 2, 2, 22, 44, 0]], 2007, "000001"),
    ("VOC2007/JPEGImages/000002.jpg", "test", 18, [[18, 4, 10, 62, 40, 0]], 2007, "000002"),
    ("VOC2007/JPEGImages/000003.jpg", "test", 17, [[17, 6, 20, 58, 46, 0], [8, 44, 4, 62, 30, 0]], 2007, "000003"),
    ("VOC2007/JPEGImages/000004.jpg", "test", 6, [[6, 2, 30, 14, 40, 1], [6, 20, 16, 60, 44, 0]], 2007, "000004"),
]

XML = """<annotation>
\t<folder>VOC2012</folder>
\t<filename>2008_000123.jpg</filename>
\t<size><width>500</width><height>375</height><depth>3</depth></size>
\t<object>
\t\t<name>person</name><pose>Left</pose><truncated>1</truncated><difficult>0</difficult>
\t\t<bndbox><xmin>1</xmin><ymin>5</ymin><xmax>120</xmax><ymax>375</ymax></bndbox>
\t\t<part><name>head</name><bndbox><xmin>30</xmin><ymin>6</ymin><xmax>70</xmax><ymax>50</ymax></bndbox></part>
\t</object>
\t<object>
\t\t<name>tvmonitor</name><truncated>0</truncated><difficult>1</difficult>
\t\t<bndbox><xmin>200</xmin><ymin>100</ymin><xmax>260</xmax><ymax>150</ymax></bndbox>
\t</object>
\t<object>
\t\t<name>aeroplane</name>
\t\t<bndbox><xmin>10.7</xmin><ymin>20.2</ymin><xmax>499.0</xmax><ymax>300</ymax></bndbox>
\t</object>
</annotation>
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def prepare(dataset, tmp_path, replica=None):
    """``dataset``'s replica (or the one in ``replica``) downloaded and prepared under ``tmp_path``."""
    if replica is None:
        replica = tmp_path / "replica"
        dataset.write_replica(replica)
    record = dataset.download(tmp_path / "data", replica_dir=replica)
    return dataset.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def as_rows(table):
    return [(r.path, r.split, r.label, json.loads(r.objects), r.year, r.image_id) for r in table.itertuples()]


def test_facts_files_and_counts():
    for dataset, name, files, train in ((VOC07, "voc07", [TRAINVAL07, TEST07], 5_011),
                                        (VOC0712, "voc0712", [TRAINVAL07, TEST07, TRAINVAL12], 16_551)):
        assert datasets.facts()[name] == {"title": dataset.title, "source": "voc", "derived_from": None,
                                          "files": len(files), "protocol": "voc07", "levels": ["class"],
                                          "manual": False, "derive_inputs": []}
        assert [f.name for f in dataset.source_files()] == files
        assert dataset.expected_counts == {"train": {"images": train, "class": 20},
                                           "test": {"images": 4_952, "class": 20}}
        assert dataset.extra_columns == ("objects", "width", "height", "year", "image_id")
    assert get_protocol("voc07").task == "detection"
    by_name = {f.name: f for f in VOC0712.source_files()}
    assert by_name[TRAINVAL07].url == THOR + "voc2007/" + TRAINVAL07
    assert by_name[TRAINVAL07].checksum == "md5:c52e279531787c972589f7e41ab4ae64"
    assert by_name[TRAINVAL07].size == 460_032_000
    assert by_name[TEST07].url == THOR + "voc2007/" + TEST07
    assert by_name[TEST07].checksum == "md5:b6e924de25625d8de591ea690078ad9f" and by_name[TEST07].size == 451_020_800
    assert by_name[TRAINVAL12].url == THOR + "voc2012/" + TRAINVAL12
    assert by_name[TRAINVAL12].checksum == "md5:6cd6e144f989b92b3379bac3b3de84fd"
    assert by_name[TRAINVAL12].size == 1_999_639_040


def test_class_order_is_the_devkit_one():
    assert CLASSES == ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
                       "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
                       "train", "tvmonitor")
    assert VOC07.extra_meta(pd.DataFrame())["class_names"] == list(CLASSES)


def test_parse_a_hand_written_annotation(tmp_path):
    """1-based boxes kept as written (the object's own box, not its part's); float text truncated; the
    difficult flag read, absent -> 0; truncated not kept."""
    width, height, objects = parse_annotation(write(tmp_path / "a.xml", XML))
    assert (width, height) == (500, 375)
    assert objects == [[14, 1, 5, 120, 375, 0], [19, 200, 100, 260, 150, 1], [0, 10, 20, 499, 300, 0]]


def test_an_image_without_objects(tmp_path):
    text = "<annotation><size><width>7</width><height>9</height></size></annotation>"
    assert parse_annotation(write(tmp_path / "a.xml", text)) == (7, 9, [])
    assert first_class([]) == -1
    assert parse_annotation(write(tmp_path / "b.xml", "<annotation></annotation>")) == (None, None, [])


def test_label_is_the_first_non_difficult_object():
    assert first_class([[14, 1, 1, 2, 2, 1], [11, 1, 1, 2, 2, 0], [3, 1, 1, 2, 2, 0]]) == 11
    assert first_class([[14, 1, 1, 2, 2, 1], [11, 1, 1, 2, 2, 1]]) == 14  # all difficult: the first


@pytest.mark.parametrize("edit,match", [
    (("<name>tvmonitor</name>", "<name>television</name>"), r"object 2: class 'television' is not one of"),
    (("<xmax>120</xmax>", ""), r"object 1 \(person\) bndbox xmax is None, expected a number"),
    (("<ymin>100</ymin>", "<ymin>abc</ymin>"), r"object 2 \(tvmonitor\) bndbox ymin is 'abc'"),
    (("<difficult>1</difficult>", "<difficult>2</difficult>"), r"object 2 \(tvmonitor\): difficult is 2"),
    (("<width>500</width>", ""), r"size width is None"),
    (("</annotation>", ""), r"not a readable annotation XML"),
])
def test_bad_annotations_name_the_file_and_object(tmp_path, edit, match):
    file = write(tmp_path / "2008_000123.xml", XML.replace(*edit))
    with pytest.raises(ValueError, match=match) as err:
        parse_annotation(file)
    assert str(file) in str(err.value)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """voc0712's replica folder (all three archives)."""
    out = tmp_path_factory.mktemp("replica")
    VOC0712.write_replica(out)
    return out


def members(archive):
    with tarfile.open(archive) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def test_replica_archives_in_the_real_layout(replica):
    """The archives' members in the real layout; 64x48 JPEGs; the replica's special objects."""
    trainval07, test07, trainval12 = (members(replica / name) for name in (TRAINVAL07, TEST07, TRAINVAL12))
    main07 = "VOCdevkit/VOC2007/ImageSets/Main/"
    assert trainval07[main07 + "trainval.txt"].decode().split() == [r[5] for r in ROWS07_TRAIN]
    assert trainval07[main07 + "train.txt"].decode().split() == ["000005", "000007", "000009"]
    assert test07[main07 + "test.txt"].decode().split() == [r[5] for r in ROWS07_TEST]
    for rows, files, year in ((ROWS07_TRAIN, trainval07, 2007), (ROWS07_TEST, test07, 2007),
                              (ROWS12_TRAIN, trainval12, 2012)):
        for row in rows:
            assert f"VOCdevkit/VOC{year}/Annotations/{row[5]}.xml" in files
            image = Image.open(io.BytesIO(files[f"VOCdevkit/{row[0]}"]))
            assert image.format == "JPEG" and image.size == (64, 48)
    assert all(name.startswith("VOCdevkit/VOC2012/") for name in trainval12)
    assert "VOCdevkit/VOC2012/JPEGImages/2011_003276.jpg" in trainval12  # in no Main list
    assert b"<difficult>" not in trainval12["VOCdevkit/VOC2012/Annotations/2008_000015.xml"]
    assert b"<truncated>1</truncated>" in trainval07["VOCdevkit/VOC2007/Annotations/000009.xml"]
    # the object's box is one flat colour (little noise), the background noisy
    pixels = np.asarray(Image.open(io.BytesIO(trainval07["VOCdevkit/VOC2007/JPEGImages/000016.jpg"])), float)
    box = pixels[6 - 1:44, 8 - 1:56]  # bicycle 8, 6, 56, 44 (1-based inclusive)
    assert box[2:-2, 2:-2].std(axis=(0, 1)).max() < 12 < pixels[:5, :5].std(axis=(0, 1)).min()


def test_voc07_through_download_and_prepare(tmp_path):
    manifest = prepare(VOC07, tmp_path)
    assert sorted(p.name for p in (tmp_path / "replica").glob("*.tar")) == sorted([TEST07, TRAINVAL07])
    assert manifest.root == (tmp_path / "data" / "voc" / "VOCdevkit").resolve()
    assert manifest.meta["protocol"] == "voc07" and manifest.meta["class_names"] == list(CLASSES)
    assert manifest.meta["extra_columns"] == ["objects", "width", "height", "year", "image_id"]
    assert as_rows(manifest.table) == ROWS07_TRAIN + ROWS07_TEST
    assert (manifest.table["width"] == 64).all() and (manifest.table["height"] == 48).all()
    assert all(p.is_file() for p in manifest.paths())


def test_voc0712_concatenates_07_and_12_trainval(replica, tmp_path):
    manifest = prepare(VOC0712, tmp_path, replica)
    assert as_rows(manifest.table) == ROWS07_TRAIN + ROWS12_TRAIN + ROWS07_TEST
    assert manifest.meta["counts"]["train"]["images"] == 6 + 4 and manifest.meta["counts"]["test"]["images"] == 4
    assert manifest.table["path"].is_unique and manifest.root.name == "VOCdevkit"


def test_manifest_round_trip_keeps_ids_as_strings(replica, tmp_path):
    written = prepare(VOC0712, tmp_path, replica)
    again = read_manifest(tmp_path / "m")
    pd.testing.assert_frame_equal(again.table, written.table)
    assert again.table["image_id"].tolist()[:2] == ["000005", "000007"]
    assert [json.loads(text) for text in again.table["objects"]] == [r[3] for r in as_rows(written.table)]
    assert "000005" in (tmp_path / "m" / "manifest.csv").read_text().splitlines()[1].split(",")


def test_voc07_prepares_from_the_download_of_voc0712(replica, tmp_path):
    """One download per source: voc07 reads the VOC2007 part of voc0712's download.json (all three archives)."""
    record = VOC0712.download(tmp_path / "data", replica_dir=replica)
    manifest = VOC07.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert as_rows(manifest.table) == ROWS07_TRAIN + ROWS07_TEST


def test_the_download_runs_as_the_dataset_declaring_the_most_files():
    from rankrepro.plan.build import PlanFiles, plan_from_config
    from rankrepro.plan.model import Plan
    from rankrepro.plan.targets import WorkflowTargets

    config = {"data_root": "data", "tracking": {"tracking_uri": "sqlite:///x.db", "experiment": "x"}, "tables": {},
              "datasets": {"voc07": {"replica": True}, "voc0712": {"replica": True}}}
    runtime = {"device": "cpu", "num_workers": 0, "eval_batch_size": 8, "image_cache": False,
               "evaluate_in_train_job": False, "runs_per_job": 1, "keep_model": True, "curves": True}
    targets = WorkflowTargets(Plan.from_json(plan_from_config(config)), {"data_root": "data", "runtime": runtime},
                              PlanFiles(Path("plan.json"), {}, Path("runs")))
    assert targets.source_dataset(W(source="voc")) == "voc0712"
    assert targets.prepare_source(W(dataset="voc07")) == targets.prepare_source(W(dataset="voc0712")) \
        == "data/downloads/voc/download.json"


def test_voc0712_without_the_2012_archive_names_it(tmp_path):
    VOC07.write_replica(tmp_path / "replica")
    record = VOC07.download(tmp_path / "data", replica_dir=tmp_path / "replica")
    with pytest.raises(FileNotFoundError, match=r"VOC2012/ImageSets/Main/trainval.txt is missing .*"
                                                r"VOCtrainval_11-May-2012.tar"):
        VOC0712.prepare(record, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert not (tmp_path / "m" / "meta.json").exists()


@pytest.fixture
def tree(replica, tmp_path):
    """An extracted copy of voc0712's replica (the VOCdevkit folder) to edit."""
    record = VOC0712.download(tmp_path / "data", replica_dir=replica)
    root = VOC0712.prepare(record, tmp_path / "first", data_root=tmp_path / "data", replica=True).root
    return Path(shutil.copytree(root, tmp_path / "copy" / "VOCdevkit"))


def test_an_image_listed_twice_names_both_lines(tree, tmp_path):
    test_list = tree / "VOC2007/ImageSets/Main/test.txt"
    test_list.write_text(test_list.read_text() + "000012\n")  # a trainval image in test
    with pytest.raises(ValueError, match=r"VOC2007/JPEGImages/000012.jpg is listed twice, in "
                                         r"VOC2007/ImageSets/Main/trainval.txt, line 4 and in "
                                         r"VOC2007/ImageSets/Main/test.txt, line 5"):
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def test_a_missing_annotation_names_the_list_line(tree, tmp_path):
    (tree / "VOC2012/Annotations/2009_000001.xml").unlink()
    with pytest.raises(FileNotFoundError, match=r"2009_000001.xml is missing \(image 2009_000001 of .*"
                                                r"VOC2012/ImageSets/Main/trainval.txt, line 3\)"):
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def test_without_size_the_image_size_is_taken(tree, tmp_path):
    xml = tree / "VOC2007/Annotations/000016.xml"
    text = xml.read_text()
    xml.write_text(text[:text.index("<size>")] + text[text.index("</size>") + len("</size>"):])
    table = VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True).table
    assert table.loc[table.image_id == "000016", ["width", "height"]].values.tolist() == [[64, 48]]


@pytest.mark.parametrize("box,match", [
    ((30, 8, 4, 40), r"xmin 30 > xmax 4: an empty or inverted box"),
    ((4, 8, 3, 40), r"xmin 4 > xmax 3: an empty or inverted box"),  # inclusive pixels: zero wide
    ((4, 41, 30, 40), r"ymin 41 > ymax 40: an empty or inverted box"),
    ((-5, 8, 30, 40), r"xmin -5, xmax 30 are outside the image \(1 to its width 64\)"),
    ((0, 8, 30, 40), r"xmin 0, xmax 30 are outside the image"),  # 0-based text: outside VOC's pixels
    ((4, 8, "1e30", 40), r"xmin 4, xmax 1000000000000000019884624838656 are outside the image"),
    ((4, 8, 65, 40), r"xmin 4, xmax 65 are outside the image \(1 to its width 64\)"),
    ((4, 8, 30, 49), r"ymin 8, ymax 49 are outside the image \(1 to its height 48\)"),
])
def test_a_box_outside_the_image_fails_the_prepare_naming_the_xml(tree, tmp_path, box, match):
    """000005's first object, a chair (4, 8, 30, 40) in a 64 x 48 image, edited."""
    xml = tree / "VOC2007/Annotations/000005.xml"
    text = xml.read_text()
    for key, old, value in zip(("xmin", "ymin", "xmax", "ymax"), (4, 8, 30, 40), box):
        text = text.replace(f"<{key}>{old}</{key}>", f"<{key}>{value}</{key}>", 1)
    xml.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True)
    assert str(err.value).startswith(f"{xml}: object 1 (chair) bndbox: ")
    assert not (tmp_path / "m" / "meta.json").exists()


def test_boxes_on_the_image_border_and_one_pixel_wide_pass(tmp_path):
    """VOC's 1-based inclusive pixels: 1..width is inside, xmin == xmax is one pixel wide."""
    check_boxes(Path("a.xml"), 64, 48, [[8, 1, 1, 64, 48, 0], [8, 7, 9, 7, 9, 1]])
    with pytest.raises(ValueError, match=r"a.xml: size width 0, height 48: expected at least 1 pixel each"):
        check_boxes(Path("a.xml"), 0, 48, [])


def test_without_size_the_boxes_are_checked_against_the_image(tree, tmp_path):
    xml = tree / "VOC2007/Annotations/000016.xml"  # a 64 x 48 image, bicycle (8, 6, 56, 44)
    text = xml.read_text().replace("<xmax>56</xmax>", "<xmax>70</xmax>")
    xml.write_text(text[:text.index("<size>")] + text[text.index("</size>") + len("</size>"):])
    with pytest.raises(ValueError, match=r"000016.xml: object 1 \(bicycle\) bndbox: xmin 8, xmax 70 are outside"):
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def test_without_size_an_unreadable_image_is_named(tree, tmp_path):
    from rankrepro.data.image_files import ImageReadError

    xml = tree / "VOC2007/Annotations/000016.xml"
    text = xml.read_text()
    xml.write_text(text[:text.index("<size>")] + text[text.index("</size>") + len("</size>"):])
    (tree / "VOC2007/JPEGImages/000016.jpg").write_bytes(b"not a JPEG")
    with pytest.raises(ImageReadError, match=r"cannot read image .*000016.jpg \(.*000016.xml has no <size>\)"):
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True)


def test_images_of_other_tasks_are_not_listed(tree, tmp_path):
    """The 2012 archive holds an image in no Main list; listing it in Main adds exactly that row."""
    assert (tree / "VOC2012/JPEGImages/2011_003276.jpg").is_file()
    lists = tree / "VOC2012/ImageSets/Main/trainval.txt"
    lists.write_text(lists.read_text() + "2011_003276\n")
    table = VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data", replica=True).table
    assert as_rows(table)[10] == ("VOC2012/JPEGImages/2011_003276.jpg", "train", 14, [[14, 10, 6, 40, 44, 0]], 2012,
                                  "2011_003276")


def test_real_counts_are_enforced(tree, tmp_path):
    with pytest.raises(ValueError, match=r"Pascal VOC 2007\+2012 train: expected 16,551 images, found 10"):
        VOC0712.prepare(tree, tmp_path / "m", data_root=tmp_path / "data")
    assert not (tmp_path / "m" / "meta.json").exists()


def test_the_class_count_is_over_objects_not_labels():
    """The real image counts with all 20 classes among the objects pass, whatever the labels; 19 fail."""
    def split(n, classes, name):
        objects = [json.dumps([[c, 1, 1, 2, 2, 0], [classes[-1], 1, 1, 2, 2, 0]]) for c in classes]
        objects += [objects[0]] * (n - len(classes))
        return pd.DataFrame({"split": name, "label": 0, "objects": objects})

    table = pd.concat([split(5_011, list(range(20)), "train"), split(4_952, list(range(20)), "test")])
    VOC07.check_counts(table)
    table = pd.concat([split(5_011, list(range(20)), "train"), split(4_952, list(range(19)), "test")])
    with pytest.raises(ValueError, match=r"Pascal VOC 2007 test: expected 20 object classes, found 19"):
        VOC07.check_counts(table)
