"""Pascal VOC 2007 and 2012 (Everingham et al., IJCV 2010) for object detection: RaMBO §5.2 (Tables 5, 8)
trains Faster R-CNN on VOC07 trainval or VOC07+12 trainval and tests on VOC07 test (detection.md A.1).

Two registrations of one class share their files (``source = "voc"``: one download, one tree):

- ``voc07``: ``train`` = VOC2007 trainval (5,011 images), ``test`` = VOC2007 test (4,952); needs the
  two 2007 archives.
- ``voc0712``: ``train`` = VOC2007 trainval + VOC2012 trainval (5,011 + 11,540 = 16,551), ``test`` =
  VOC2007 test; needs all three archives. When both are planned, the download job runs as ``voc0712``
  (the dataset declaring the most files of a source: :meth:`WorkflowTargets.source_dataset`).

Protocol ``voc07`` (the detection protocol, :mod:`rankrepro.metrics.protocols.voc`): the
VOC07 11-point AP at IoU 0.5, difficult objects ignored (detection.md A.1), the detection task's.

Source files (detection.md A.3): URLs and md5 of torchvision 0.29 ``datasets/voc.py``, sizes of TFDS
``url_checksums/voc.txt`` @333639b3; public, no licence form. The same bytes are published under the
old host ``http://host.robots.ox.ac.uk/pascal/VOC/`` (same paths) and at ``https://pjreddie.com/media/files/<name>``
(TFDS); a download has one url, so these mirrors are for a user who fetches a file by hand and puts it
at ``<data_root>/downloads/voc/<name>`` (its md5 is checked all the same). Every archive extracts into the
tree ``<data_root>/voc/``; the image root is its ``VOCdevkit/`` folder::

    VOC2007/Annotations/<id>.xml   VOC2007/JPEGImages/<id>.jpg       (ids such as 000005)
    VOC2007/ImageSets/Main/trainval.txt  (trainval archive)   VOC2007/ImageSets/Main/test.txt  (test archive)
    VOC2012/Annotations/<id>.xml   VOC2012/JPEGImages/<id>.jpg       (ids such as 2008_000008)
    VOC2012/ImageSets/Main/trainval.txt

Annotation XML, the fields read: ``size/width``, ``size/height`` and per ``object`` (document order) its
``name``, ``difficult`` (0/1; absent in some VOC2012 files: 0) and its own ``bndbox`` ``xmin ymin xmax
ymax`` (not those of its ``part`` children). ``truncated``, ``pose``, parts are not kept. Without
``size``, the image's own size is taken (as mmdetection does). Every box must lie inside that size in
VOC's 1-based inclusive pixels, ``1 <= xmin <= xmax <= width`` and the same for y (:func:`check_boxes`):
an inverted, empty, negative or out-of-image box fails the prepare naming the XML file and the object,
not the training later; the size is the XML's, no image is decoded.

Manifest, one row per image listed in the split files (file order, the train lists first):

- ``path`` = ``VOC<year>/JPEGImages/<id>.jpg`` (unique over both years), ``split``;
- ``label``: the contract's integer only: the class of the image's first non-difficult object, else of
  its first object, -1 when it has none. **Detection reads** ``objects``, not ``label``;
- ``objects``: a JSON list with one ``[class, xmin, ymin, xmax, ymax, difficult]`` per object, ints:
  ``class`` the index in :data:`CLASSES`, the box as written (VOC's 1-based inclusive pixels; float text
  truncated by ``int(float(.))`` as mmdetection does), ``difficult`` 0/1;
- ``width``, ``height`` (the XML's ``size``), ``year`` (2007 / 2012), ``image_id`` (the VOC id, a
  string: ``"000005"``, read back as a string by :func:`~rankrepro.data.manifest.read_manifest`).

Images without objects stay (the detection loader decides). ``meta.json`` adds ``class_names``
(:data:`CLASSES`, ``class_names[i]`` names class ``i``; no background class: the detector adds it).

Choices: the classes in the standard alphabetical order of the devkit, torchvision and mmdetection
(0 aeroplane ... 19 tvmonitor); only ``ImageSets/Main/<set>.txt`` selects images (the archives hold
images of other tasks too); an id that is not ``NNNNNN`` / ``YYYY_NNNNNN`` or an image listed twice is
an error naming the list file and line. The counts check (:meth:`VOC.check_counts`) counts ``class``
as the classes of the split's objects (every split holds all 20), not the distinct ``label`` s.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.image_files import naming_image
from rankrepro.data.replicas import key_rng, write_tar
from rankrepro.io import read_lines

#: the 20 VOC classes, index 0..19 (devkit / torchvision / mmdetection order)
CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
           "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")
CLASS_INDEX = {name: i for i, name in enumerate(CLASSES)}
DEVKIT = "VOCdevkit"
BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")
EXTRA_COLUMNS = ("objects", "width", "height", "year", "image_id")
ID_RE = re.compile(r"\d{6}|\d{4}_\d{6}")
HOST = "https://thor.robots.ox.ac.uk/pascal/VOC/"
TRAINVAL_2007 = SourceFile("VOCtrainval_06-Nov-2007.tar", url=HOST + "voc2007/VOCtrainval_06-Nov-2007.tar",
                           checksum="md5:c52e279531787c972589f7e41ab4ae64", size=460_032_000)
TEST_2007 = SourceFile("VOCtest_06-Nov-2007.tar", url=HOST + "voc2007/VOCtest_06-Nov-2007.tar",
                       checksum="md5:b6e924de25625d8de591ea690078ad9f", size=451_020_800)
TRAINVAL_2012 = SourceFile("VOCtrainval_11-May-2012.tar", url=HOST + "voc2012/VOCtrainval_11-May-2012.tar",
                           checksum="md5:6cd6e144f989b92b3379bac3b3de84fd", size=1_999_639_040)
#: (year, image set) -> the archive holding its list, annotations and images
ARCHIVE_OF = {("2007", "trainval"): TRAINVAL_2007, ("2007", "test"): TEST_2007, ("2012", "trainval"): TRAINVAL_2012}
#: per registration: {split: the (year, image set) lists it concatenates}, the title and the image counts
#: (detection.md A.3: 07 trainval 5,011, 12 trainval 11,540, 07 test 4,952)
VARIANTS = {
    "07": ({"train": (("2007", "trainval"),), "test": (("2007", "test"),)}, "Pascal VOC 2007",
           {"train": 5_011, "test": 4_952}),
    "0712": ({"train": (("2007", "trainval"), ("2012", "trainval")), "test": (("2007", "test"),)},
             "Pascal VOC 2007+2012", {"train": 16_551, "test": 4_952}),
}


class VOC(Dataset):
    """Pascal VOC detection (``years``: ``"07"`` for ``voc07``, ``"0712"`` for ``voc0712``); see the
    module docstring for the layout, the manifest and every choice."""

    source = "voc"
    top = DEVKIT
    marker = "VOC2007/ImageSets/Main/trainval.txt"
    levels = ["class"]
    protocol = "voc07"
    extra_columns = EXTRA_COLUMNS

    def __init__(self, *, years: str) -> None:
        if years not in VARIANTS:
            raise ValueError(f"Pascal VOC: years {years!r}, expected one of {sorted(VARIANTS)}")
        self.split_lists, self.title, images = VARIANTS[years]
        used = {key for lists in self.split_lists.values() for key in lists}
        self.files = tuple(source for key, source in ARCHIVE_OF.items() if key in used)
        self.expected_counts = {split: {"images": n, "class": len(CLASSES)} for split, n in images.items()}

    def read_table(self, root: Path) -> pd.DataFrame:
        """Rows ``path, split, label, origin`` and :data:`EXTRA_COLUMNS` of every listed image (module
        docstring); ``origin`` = ``"VOC2007/ImageSets/Main/trainval.txt, line <n>"``."""
        root = Path(root)
        rows = []
        for split, lists in self.split_lists.items():
            for year, image_set in lists:
                rows += self._read_list(root, split, year, image_set)
        table = pd.DataFrame(rows, columns=["path", "split", "label", "origin", *EXTRA_COLUMNS])
        repeated = table[table["path"].duplicated(keep=False)]
        if len(repeated):
            first = repeated[repeated["path"] == repeated["path"].iat[0]]
            raise ValueError(f"{self.title}: {first['path'].iat[0]} is listed twice, in {first['origin'].iat[0]} "
                             f"and in {first['origin'].iat[1]} (under {root})")
        return table.astype({"label": "int64", "width": "int64", "height": "int64", "year": "int64"})

    def _read_list(self, root: Path, split: str, year: str, image_set: str) -> list[tuple]:
        """The rows of one ``VOC<year>/ImageSets/Main/<image_set>.txt``."""
        listed = f"VOC{year}/ImageSets/Main/{image_set}.txt"
        file = root / listed
        if not file.is_file():
            raise FileNotFoundError(f"{self.title}: {file} is missing (it comes from "
                                    f"{ARCHIVE_OF[year, image_set].name}; {self.title} needs "
                                    f"{', '.join(f.name for f in self.files)})")
        rows = []
        for number, line in enumerate(read_lines(file), 1):
            image_id = line.strip()
            if not image_id:
                continue
            if not ID_RE.fullmatch(image_id):
                raise ValueError(f"{file}, line {number}: {image_id!r} is not a VOC image id "
                                 "(NNNNNN as 000005, or YYYY_NNNNNN as 2008_000008)")
            xml = root / f"VOC{year}/Annotations/{image_id}.xml"
            if not xml.is_file():
                raise FileNotFoundError(f"{self.title}: {xml} is missing (image {image_id} of {file}, line {number})")
            width, height, objects = parse_annotation(xml)
            if width is None:  # no <size>: the image's own (its header only)
                jpeg = root / f"VOC{year}/JPEGImages/{image_id}.jpg"
                with naming_image(jpeg, f"{xml} has no <size>"), Image.open(jpeg) as image:
                    width, height = image.size
            check_boxes(xml, width, height, objects)
            rows.append((f"VOC{year}/JPEGImages/{image_id}.jpg", split, first_class(objects),
                         f"{listed}, line {number}", encode_objects(objects), width, height, int(year), image_id))
        if not rows:
            raise ValueError(f"{file}: no image listed")
        return rows

    def check_counts(self, table: pd.DataFrame) -> None:
        """Images per split, and ``class`` = the number of classes among the split's objects (module
        docstring), must equal ``expected_counts``."""
        for split, expected in self.expected_counts.items():
            rows = table[table.split == split]
            found = {"images": len(rows),
                     "class": len({obj[0] for text in rows["objects"] for obj in json.loads(text)})}
            for key, value in expected.items():
                if found[key] != value:
                    what = "images" if key == "images" else "object classes"
                    raise ValueError(f"{self.title} {split}: expected {value:,} {what}, found {found[key]:,} "
                                     "(pass replica=True for a generated replica)")

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """``class_names``: :data:`CLASSES` (``class_names[i]`` names class index ``i`` of ``objects``)."""
        return {"class_names": list(CLASSES)}

    def make_replica(self, out_dir: str | Path) -> list[str]:
        """Write this registration's archives (:data:`REPLICA_IMAGES`, real names and layout) into
        ``out_dir``; return their names.

        Each archive holds its ``Annotations/``, ``JPEGImages/`` (64x48 JPEGs: noise with each object's
        box filled by its class's colour) and ``ImageSets/Main/`` lists (the trainval archives also
        ``train.txt`` / ``val.txt``, not read); the 2012 archive adds an image in no Main list
        (:data:`REPLICA_UNLISTED`) and a ``head`` part inside each person."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        names = []
        for (year, image_set), source in ARCHIVE_OF.items():
            if source not in self.files:
                continue
            images = REPLICA_IMAGES[year, image_set]
            members = {}
            for image_id, objects in [*images, *(REPLICA_UNLISTED if year == "2012" else [])]:
                folder = f"{DEVKIT}/VOC{year}"
                members[f"{folder}/Annotations/{image_id}.xml"] = annotation_xml(year, image_id, objects)
                members[f"{folder}/JPEGImages/{image_id}.jpg"] = replica_jpeg((year, image_id), objects)
            ids = [image_id for image_id, _ in images]
            lists = {image_set: ids} if image_set == "test" else \
                {"train": ids[:len(ids) // 2], "val": ids[len(ids) // 2:], "trainval": ids}
            for name, listed in lists.items():
                members[f"{DEVKIT}/VOC{year}/ImageSets/Main/{name}.txt"] = ("\n".join(listed) + "\n").encode()
            write_tar(out_dir / source.name, dict(sorted(members.items())))
            names.append(source.name)
        return names


# -- annotations ----------------------------------------------------------------------------------

def parse_annotation(file: Path) -> tuple[int | None, int | None, list[list[int]]]:
    """``(width, height, objects)`` of one VOC annotation XML: ``objects`` in document order, each
    ``[class index, xmin, ymin, xmax, ymax, difficult]`` (module docstring); width and height None
    when there is no ``size`` element. An unreadable file, a missing or non-numeric field, an unknown
    class or a difficult flag other than 0/1 is an error naming the file and the object (1-based)."""
    try:
        document = ET.parse(file).getroot()
    except ET.ParseError as err:
        raise ValueError(f"{file}: not a readable annotation XML ({err})") from None
    size = document.find("size")
    width, height = (None, None) if size is None else \
        (_number(file, size, key, "size") for key in ("width", "height"))
    objects = []
    for n, element in enumerate(document.findall("object"), 1):
        name = (element.findtext("name") or "").strip()
        if name not in CLASS_INDEX:
            raise ValueError(f"{file}: object {n}: class {name!r} is not one of the 20 VOC classes")
        box = [_number(file, element.find("bndbox"), key, f"object {n} ({name}) bndbox") for key in BOX_FIELDS]
        difficult = 0 if element.find("difficult") is None else \
            _number(file, element, "difficult", f"object {n} ({name})")
        if difficult not in (0, 1):
            raise ValueError(f"{file}: object {n} ({name}): difficult is {difficult}, expected 0 or 1")
        objects.append([CLASS_INDEX[name], *box, difficult])
    return width, height, objects


def check_boxes(file: Path, width: int, height: int, objects: list[list[int]]) -> None:
    """Refuse, naming ``file`` and the object, a box that is not inside the image in VOC's 1-based inclusive
    pixels: valid is ``1 <= xmin <= xmax <= width`` and ``1 <= ymin <= ymax <= height`` (``width``, ``height``:
    the XML's ``size``, at least 1). ``xmin == xmax`` is a box one pixel wide (valid); ``xmin > xmax`` is an empty
    or inverted box (torchvision refuses it in training), a coordinate below 1 or past the size lies outside
    the image. The rule is the devkit's (its top-left pixel is (1, 1)); for the real 07+12 trainval boxes,
    py-faster-rcnn's flip of every one (an unsigned ``width - xmax``, then ``assert x2 >= x1``) already needs
    ``xmin <= xmax <= width`` [the real files are not on this machine: not run here]."""
    if width < 1 or height < 1:
        raise ValueError(f"{file}: size width {width}, height {height}: expected at least 1 pixel each "
                         "(fix the <size> of the file)")
    for n, (index, xmin, ymin, xmax, ymax, _) in enumerate(objects, 1):
        for low, high, side, size in ((xmin, xmax, "x", width), (ymin, ymax, "y", height)):
            if low > high:
                problem = f"{side}min {low} > {side}max {high}: an empty or inverted box"
            elif low < 1 or high > size:
                problem = (f"{side}min {low}, {side}max {high} are outside the image "
                           f"(1 to its {'width' if side == 'x' else 'height'} {size})")
            else:
                continue
            raise ValueError(f"{file}: object {n} ({CLASSES[index]}) bndbox: {problem}; VOC's boxes are 1-based "
                             f"inclusive pixels, 1 <= xmin <= xmax <= width, 1 <= ymin <= ymax <= height "
                             f"(the <size> of the file: {width} x {height}): fix the box or remove the object")


def _number(file: Path, element: ET.Element | None, key: str, where: str) -> int:
    """``int(float(text))`` of ``element``'s child ``key``; missing or not a number: an error naming it."""
    text = None if element is None else element.findtext(key)
    try:
        return int(float(text.strip()))
    except (AttributeError, ValueError, OverflowError):
        raise ValueError(f"{file}: {where} {key} is {text!r}, expected a number") from None


def first_class(objects: list[list[int]]) -> int:
    """The manifest ``label``: the class of the first non-difficult object, else of the first object,
    -1 without objects."""
    for obj in objects:
        if not obj[5]:
            return obj[0]
    return objects[0][0] if objects else -1


def encode_objects(objects: list[list[int]]) -> str:
    """The ``objects`` column's JSON (compact: ``[[14,1,2,30,40,0]]``)."""
    return json.dumps(objects, separators=(",", ":"))


# -- replica --------------------------------------------------------------------------------------

REPLICA_SIZE = (64, 48)  # width, height of every replica image
#: per (year, image set): (id, [(class name, xmin, ymin, xmax, ymax, difficult, truncated)]); difficult
#: None: no <difficult> tag; a float coordinate is written as float text (some VOC2012 files)
REPLICA_IMAGES = {
    ("2007", "trainval"): [
        ("000005", [("chair", 4, 8, 30, 40, 0, 0), ("diningtable", 28, 20, 60, 46, 0, 0)]),
        ("000007", [("person", 2, 2, 20, 46, 1, 0), ("dog", 24, 18, 62, 46, 0, 0)]),  # difficult first: label dog
        ("000009", [("horse", 6, 10, 40, 44, 0, 0), ("person", 42, 4, 60, 40, 0, 0),
                    ("car", 1, 36, 20, 48, 0, 1)]),  # several classes; a truncated car on the border
        ("000012", [("car", 10, 12, 54, 40, 0, 0)]),
        ("000016", [("bicycle", 8, 6, 56, 44, 0, 0)]),
        ("000017", [("person", 20, 2, 40, 30, 0, 0), ("horse", 12, 20, 52, 47, 0, 0)]),
    ],
    ("2007", "test"): [
        ("000001", [("dog", 10, 14, 50, 46, 0, 0), ("person", 2, 2, 22, 44, 0, 0)]),
        ("000002", [("train", 4, 10, 62, 40, 0, 0)]),
        ("000003", [("sofa", 6, 20, 58, 46, 0, 0), ("chair", 44, 4, 62, 30, 0, 0)]),
        ("000004", [("car", 2, 30, 14, 40, 1, 0), ("car", 20, 16, 60, 44, 0, 0)]),
    ],
    ("2012", "trainval"): [
        ("2008_000008", [("horse", 8, 14, 50, 46, 0, 0), ("person", 20, 2, 40, 30, 0, 0)]),
        ("2008_000015", [("bottle", 24, 6, 36, 44, None, 0)]),
        ("2009_000001", [("person", 10.0, 4.0, 38.5, 46.0, 0, 0)]),
        ("2010_000002", [("aeroplane", 4, 8, 60, 36, 0, 1)]),
    ],
}
#: a VOC2012 image of another task (in no Main list): in the archive, not in the manifest
REPLICA_UNLISTED = [("2011_003276", [("person", 10, 6, 40, 44, 0, 0)])]


def annotation_xml(year: str, image_id: str, objects: list[tuple]) -> bytes:
    """A replica annotation in the real files' format (tab-indented, the real elements); a VOC2012
    person gets a ``head`` part with its own bndbox, as the real ones."""
    width, height = REPLICA_SIZE

    def box(values, indent):
        return [f"{indent}<bndbox>", *(f"{indent}\t<{k}>{v}</{k}>" for k, v in zip(BOX_FIELDS, values)),
                f"{indent}</bndbox>"]

    lines = ["<annotation>", f"\t<folder>VOC{year}</folder>", f"\t<filename>{image_id}.jpg</filename>",
             "\t<source>", f"\t\t<database>The VOC{year} Database</database>",
             "\t\t<annotation>rankrepro replica</annotation>", "\t\t<image>synthetic</image>", "\t</source>",
             "\t<size>", f"\t\t<width>{width}</width>", f"\t\t<height>{height}</height>", "\t\t<depth>3</depth>",
             "\t</size>", "\t<segmented>0</segmented>"]
    for name, x1, y1, x2, y2, difficult, truncated in objects:
        lines += ["\t<object>", f"\t\t<name>{name}</name>", "\t\t<pose>Unspecified</pose>",
                  f"\t\t<truncated>{truncated}</truncated>"]
        if difficult is not None:
            lines.append(f"\t\t<difficult>{difficult}</difficult>")
        lines += box((x1, y1, x2, y2), "\t\t")
        if year == "2012" and name == "person":
            head = (int(x1), int(y1), int(x1) + (int(x2) - int(x1)) // 2, int(y1) + (int(y2) - int(y1)) // 3)
            lines += ["\t\t<part>", "\t\t\t<name>head</name>", *box(head, "\t\t\t"), "\t\t</part>"]
        lines.append("\t</object>")
    return ("\n".join([*lines, "</annotation>"]) + "\n").encode()


def replica_jpeg(key, objects: list[tuple]) -> bytes:
    """A :data:`REPLICA_SIZE` JPEG: grey noise, each object's box (1-based inclusive) filled with its
    class's colour plus noise (so that a detector can learn the boxes)."""
    width, height = REPLICA_SIZE
    rng = key_rng(("voc replica image", key))
    pixels = rng.normal(120, 25, (height, width, 3))
    for name, *box, _, _ in objects:
        x1, y1, x2, y2 = (int(float(v)) for v in box)
        colour = key_rng(("voc replica class", name)).uniform(20, 235, 3)
        pixels[y1 - 1:y2, x1 - 1:x2] = colour + rng.normal(0, 6, (y2 - y1 + 1, x2 - x1 + 1, 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


DATASETS.register("voc07", years="07")(VOC)
DATASETS.register("voc0712", years="0712")(VOC)
