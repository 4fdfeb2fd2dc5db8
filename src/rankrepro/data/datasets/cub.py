"""Caltech-UCSD Birds-200-2011 (Wah et al., 2011): 11,788 photos of 200 bird species.

One level, ``class`` (the species, the dataset's own 1-based class id, not remapped).
Protocol ``same-set``: every test image queries the rest of the test set.

Source (datasets.md, "CUB-200-2011"): ``CUB_200_2011.tgz`` from the Caltech data
repository, md5 published by powerful-benchmarker's ``cub200.py``, size from TFDS's
``caltech_birds2011.txt``. The same archive is also on Google Drive, id
``1hbzc_P1FuxMkcabkgn9ZKinBwW683j45`` (pytorch-metric-learning ``cub.py``, PB ``cub200.py``);
the DAG downloads the Caltech copy.

Archive layout (the files this module reads, all under ``CUB_200_2011/``, no headers,
space-separated, one row per line)::

    images/<NNN>.<Species_name>/<file>.jpg
    images.txt               <image_id> <path under images/>
    image_class_labels.txt   <image_id> <class_id 1..200>
    classes.txt              <class_id> <NNN>.<Species_name>
    bounding_boxes.txt       <image_id> <x> <y> <width> <height>    (not read: no crops)
    train_test_split.txt     <image_id> <is_training_image 0|1>     (not read, see below)

The real archive holds more (attributes, part locations, a README); they are not read and
the replica leaves them out.

Choices:

- Retrieval split (the deep-metric-learning convention: PML tests, SupRank ``cub200.py``,
  losses.md "CUB"): classes 1-100 are ``train`` (5,864 images), classes 101-200 are
  ``test`` (5,924). ``train_test_split.txt`` is the *classification* split (5,994 / 5,794
  images over all 200 classes) and is deliberately **not** used: changing it changes nothing.
- ``images.txt`` and ``image_class_labels.txt`` are joined by image id (not by line
  position, as PML does); both must list the same ids, each once.
- Manifest ``path`` = ``images/<path from images.txt>``, relative to ``CUB_200_2011/``.
- ``meta.json``'s ``class_names``: the names of ``classes.txt`` verbatim
  (``"001.Black_footed_Albatross"``), ``class_names[i]`` naming class id ``i + 1``.
- Single level: SupRank's 3-level CUB tree (species / 30 / 13, suprank.md §4) is a hard-coded
  ``trees`` dict in its ``cub200.py`` that we do not have, so it is not offered.
- Bounding boxes are not applied (no crops); cropping would be an option for later.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_tar
from rankrepro.io import read_lines

TOP = "CUB_200_2011"
ARCHIVE = "CUB_200_2011.tgz"
IMAGES_DIR = "images"
IMAGES_TXT = "images.txt"
LABELS_TXT = "image_class_labels.txt"
CLASSES_TXT = "classes.txt"
BOXES_TXT = "bounding_boxes.txt"
SPLIT_TXT = "train_test_split.txt"
N_CLASSES = 200
TRAIN_CLASSES = range(1, 101)  # classes 1-100 train, 101-200 test (module docstring)


@DATASETS.register("cub")
class CUB(Dataset):
    """CUB-200-2011; see the module docstring for the layout and every choice."""

    title = "CUB-200-2011"
    files = (SourceFile(ARCHIVE, url="https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",
                        checksum="md5:97eceeb196236b17998738112f37df78",  # PB cub200.py (datasets.md)
                        size=1_150_585_339),)  # TFDS caltech_birds2011.txt (datasets.md)
    top = TOP
    marker = IMAGES_TXT
    levels = ["class"]
    protocol = "same-set"
    # datasets.md "CUB-200-2011" (PML tests): 5,864 + 5,924 = 11,788 images; 100 classes each.
    expected_counts = {
        "train": {"images": 5_864, "class": 100},
        "test": {"images": 5_924, "class": 100},
    }
    disjoint = (("train", "test"),)

    def __init__(self) -> None:
        self._class_names: list[str] | None = None

    def read_table(self, root: Path) -> pd.DataFrame:
        """Manifest rows of every image in ``images.txt``, in its order: ``path``
        (``images/...``), ``split`` (class <= 100: train, else test), ``label`` = class id,
        ``origin`` = ``"images.txt, line <n>"``."""
        root = Path(root)
        for name in (IMAGES_TXT, LABELS_TXT, CLASSES_TXT):
            if not (root / name).is_file():
                raise FileNotFoundError(f"{self.title}: {root / name} is missing (a {TOP} folder holds {name})")
        names = read_classes(root / CLASSES_TXT)
        paths = read_id_file(root / IMAGES_TXT, "path")
        labels = read_id_file(root / LABELS_TXT, "class")
        if set(paths) != set(labels):
            only = sorted(set(paths) ^ set(labels))
            raise ValueError(f"{root / IMAGES_TXT} and {root / LABELS_TXT} list different image ids "
                             f"({len(only)} in one only, e.g. {only[:5]})")
        table = pd.DataFrame({"path": [f"{IMAGES_DIR}/{p}" for p, _ in paths.values()],
                              "label": np.array([int(labels[i][0]) for i in paths], dtype=np.int64),
                              "origin": [f"{IMAGES_TXT}, line {n}" for _, n in paths.values()]})
        unknown = sorted(set(table["label"]) - set(names))
        if unknown:
            raise ValueError(f"{root / LABELS_TXT}: class ids not in {CLASSES_TXT}: {unknown[:5]}")
        table.insert(1, "split", np.where(table["label"].isin(TRAIN_CLASSES), "train", "test"))
        self._class_names = [names[i] for i in sorted(names)]
        return table

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """``class_names``: classes.txt's names by class id (``class_names[i]`` is class ``i + 1``)."""
        return {"class_names": list(self._class_names or [])}

    def make_replica(self, out_dir: str | Path, *, classes_per_split: int = 4,
                     images_per_class: tuple[int, int] = (2, 5), image_size: int = 32, seed: int = 0) -> list[str]:
        """Write a ``CUB_200_2011.tgz`` replica into ``out_dir``; return its name.

        ``classes.txt`` lists all 200 classes (synthetic names ``NNN.Replica_bird_NNN``);
        images exist for the first ``classes_per_split`` classes of each half (1, 2, ... and
        101, 102, ...), between ``images_per_class[0]`` and ``[1]`` each (inclusive). Image ids
        are 1-based in class order. ``train_test_split.txt`` flags are random, so they disagree
        with the retrieval split (which must ignore them); bounding boxes are random.
        """
        if not 1 <= classes_per_split <= len(TRAIN_CLASSES):
            raise ValueError(f"classes_per_split must be in 1..{len(TRAIN_CLASSES)}, got {classes_per_split}")
        rng = np.random.default_rng(seed)
        folders = {c: class_folder(c) for c in range(1, N_CLASSES + 1)}
        used = [*range(1, classes_per_split + 1), *range(101, 101 + classes_per_split)]
        images, lines = {}, {IMAGES_TXT: [], LABELS_TXT: [], BOXES_TXT: [], SPLIT_TXT: []}
        image_id = 0
        for c in used:
            for n in range(int(rng.integers(images_per_class[0], images_per_class[1] + 1))):
                image_id += 1
                path = f"{folders[c]}/Replica_Bird_{c:03d}_{n + 1:04d}_{image_id}.jpg"
                images[f"{TOP}/{IMAGES_DIR}/{path}"] = tiny_jpeg(rng, c, image_size)
                x, y = rng.integers(0, image_size // 2, 2)
                w, h = rng.integers(image_size // 4, image_size // 2, 2)
                lines[IMAGES_TXT].append(f"{image_id} {path}")
                lines[LABELS_TXT].append(f"{image_id} {c}")
                lines[BOXES_TXT].append(f"{image_id} {x:.1f} {y:.1f} {w:.1f} {h:.1f}")
                lines[SPLIT_TXT].append(f"{image_id} {int(rng.integers(0, 2))}")
        lines[CLASSES_TXT] = [f"{c} {folders[c]}" for c in folders]
        members = {f"{TOP}/{name}": ("\n".join(rows) + "\n").encode()
                   for name, rows in sorted(lines.items())}
        write_tar(Path(out_dir) / ARCHIVE, {**members, **images})
        return [ARCHIVE]


def class_folder(class_id: int) -> str:
    """A replica class's folder and classes.txt name: ``NNN.Replica_bird_NNN``."""
    return f"{class_id:03d}.Replica_bird_{class_id:03d}"


def read_id_file(file: Path, what: str) -> dict[int, tuple[str, int]]:
    """``<image_id> <value>`` lines as {id: (value, line number)}, in file order (lines count
    from 1); a bad line or a repeated id is an error naming the file and line."""
    out: dict[int, tuple[str, int]] = {}
    for number, line in enumerate(read_lines(file), 1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=1)
        if len(fields) != 2 or not fields[0].isdigit() or (what == "class" and not fields[1].isdigit()):
            raise ValueError(f"{file} line {number}: expected '<image_id> <{what}>', got {line!r}")
        image_id = int(fields[0])
        if image_id in out:
            raise ValueError(f"{file} line {number}: image id {image_id} listed twice")
        out[image_id] = (fields[1].strip(), number)
    if not out:
        raise ValueError(f"{file}: no rows")
    return out


def read_classes(file: Path) -> dict[int, str]:
    """classes.txt as {class id: name}."""
    names = {}
    for number, line in enumerate(read_lines(file), 1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=1)
        if len(fields) != 2 or not fields[0].isdigit():
            raise ValueError(f"{file} line {number}: expected '<class_id> <name>', got {line!r}")
        if int(fields[0]) in names:
            raise ValueError(f"{file} line {number}: class id {fields[0]} listed twice")
        names[int(fields[0])] = fields[1].strip()
    return names
