"""PKU VehicleID (Liu et al., CVPR 2016): surveillance photos of vehicles, by licence plate.

Two levels, finest first: ``vehicle`` (the vehicle id of the split lists) and ``model`` (the
vehicle's model id from ``attribute/model_attr.txt``; -1 for a vehicle that file does not
list: the release README says only the manually labelled vehicles are in it). Protocol
``vehicleid``: all-vs-all retrieval *within* each test list (small / medium / large = 800 /
1,600 / 2,400 vehicles), the DML convention of Smooth-AP and FastAP (losses.md §1.4, §5.4).

Source (manual): by e-mail request to the authors (https://pkuml.org/resources/pku-vehicleid.html;
Smooth_AP README; research use only), so nothing is downloaded; nobody publishes a checksum.
The release is a folder, usually ``VehicleID_V1.0/`` [unverified], laid out as its README.md
describes (a copy of it was seen in a public GitHub repository) and as Smooth-AP's code reads it
(losses.md §1.3)::

    image/<7-digit image id>.jpg
    train_test_split/train_list.txt, test_list_800.txt, test_list_1600.txt, test_list_2400.txt
        (also test_list_3200 / 6000 / 13164, unused): "<image id> <vehicle id>" per line
    attribute/model_attr.txt "<vehicle id> <model id>", color_attr.txt "<vehicle id> <color id>",
        img2vid.txt, model_names.txt, color_names.txt (only model_attr.txt is read)
    README.md

The one declared source file is an archive ``VehicleID_V1.0.zip`` [unverified name] holding that
folder, extracted into ``<data_root>/vehicleid/``; its sha256 is recorded on first verified use.
A user who got the folder sets ``datasets.vehicleid.extracted`` to it (or its parent). The image
root is the folder holding ``train_test_split/train_list.txt``: itself, its ``VehicleID_V1.0/``,
or its only sub-folder holding it (the top folder's name is not verified).

Splits: ``train``, ``test_800``, ``test_1600``, ``test_2400``: one manifest row per line of each
list, so an image in several lists has several rows (the lists are not assumed nested or
disjoint). ``path`` = ``image/<image id>.jpg``; ``label`` = the vehicle id as listed (not
remapped: the test lists share one id space); ``level_1`` = the model id. A vehicle with two
model ids in ``model_attr.txt`` is an error naming it. Train is disjoint from each test list.

Counts (``expected_counts``): the Smooth-AP paper (§5, Table 1; the numbers of the 2016 paper)
states train 110,178 images / 13,134 vehicles and test 7,332 / 800, 12,995 / 1,600,
20,038 / 2,400. The release README says its split files were updated after the paper (fake
plates) and that its train list holds 13,164 vehicles, and fast-reid's VehicleID loader
(JDAI-CV/fast-reid ``fastreid/data/datasets/vehicleid.py``) states 113,346 / 13,164 for train and
6,493, 13,377, 19,777 images for the three test lists. Only the vehicle counts of the test
lists, on which all three agree, are enforced; the rest is :data:`PAPER_COUNTS`, for reference.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.replicas import tiny_jpeg, write_zip
from rankrepro.io import read_lines

TOP = "VehicleID_V1.0"
ARCHIVE = f"{TOP}.zip"
SPLIT_DIR = "train_test_split"
SPLIT_FILES = {"train": "train_list.txt", "test_800": "test_list_800.txt",
               "test_1600": "test_list_1600.txt", "test_2400": "test_list_2400.txt"}
MODEL_ATTR = "attribute/model_attr.txt"
COLOR_ATTR = "attribute/color_attr.txt"
IMG2VID = "attribute/img2vid.txt"
IMAGE_DIR = "image"
ID_RE = re.compile(r"\d+")  # image, vehicle and model ids: non-negative integers

#: The Smooth-AP paper's counts (§5, Table 1), not enforced (see the module docstring).
PAPER_COUNTS = {
    "train": {"images": 110_178, "vehicle": 13_134},
    "test_800": {"images": 7_332, "vehicle": 800},
    "test_1600": {"images": 12_995, "vehicle": 1_600},
    "test_2400": {"images": 20_038, "vehicle": 2_400},
}


@DATASETS.register("vehicleid")
class VehicleID(Dataset):
    """PKU VehicleID; see the module docstring for the layout and the choices."""

    title = "VehicleID"
    files = (SourceFile(ARCHIVE, checksum=None),)
    manual = True
    how_to_get = ("request the PKU VehicleID dataset from its authors by e-mail "
                  "(https://pkuml.org/resources/pku-vehicleid.html; research use only). Put the archive of "
                  f"its {TOP}/ folder (image/, train_test_split/, attribute/) at the path below, named {ARCHIVE}; "
                  "if you received the folder itself, set datasets.vehicleid.extracted to it instead "
                  "(no checksum is published: the archive's sha256 is recorded the first time its counts check out).")
    top = TOP
    marker = f"{SPLIT_DIR}/{SPLIT_FILES['train']}"
    root_in_only_subfolder = True  # the root: the tree, its VehicleID_V1.0/, or its only sub-folder with the marker
    levels = ["vehicle", "model"]
    protocol = "vehicleid"
    # Vehicle counts of the test lists: Smooth-AP paper §5, the release README and fast-reid agree.
    # Image counts and train vehicles differ between the paper and the release: see PAPER_COUNTS.
    expected_counts = {
        "test_800": {"vehicle": 800},
        "test_1600": {"vehicle": 1_600},
        "test_2400": {"vehicle": 2_400},
    }
    disjoint = (("train", "test_800"), ("train", "test_1600"), ("train", "test_2400"))

    def read_table(self, root: Path) -> pd.DataFrame:
        """Each split list as rows: ``path`` = ``image/<id>.jpg``, ``split``, ``label`` = vehicle
        id, ``level_1`` = model id (-1 when unknown). A missing list or attribute file is an
        error naming it. No ``origin`` column: a path is built from an image id that is refused
        while reading, naming its file and line, unless it is digits, so no path can leave the root."""
        for name in [f"{SPLIT_DIR}/{f}" for f in SPLIT_FILES.values()] + [MODEL_ATTR]:
            if not (root / name).is_file():
                raise FileNotFoundError(f"{self.title}: {root / name} is missing (a {TOP} folder holds {name})")
        models = read_model_attr(root / MODEL_ATTR)
        parts = []
        for split, name in SPLIT_FILES.items():
            rows = read_pairs(root / SPLIT_DIR / name, "image id", "vehicle id")
            parts.append(pd.DataFrame({
                "path": [f"{IMAGE_DIR}/{image}.jpg" for image, _ in rows],
                "split": split,
                "label": np.array([int(v) for _, v in rows], dtype=np.int64),
                "level_1": np.array([models.get(int(v), -1) for _, v in rows], dtype=np.int64),
            }))
        return pd.concat(parts, ignore_index=True)

    def extra_meta(self, table: pd.DataFrame) -> dict:
        """Per split, how many vehicles have no model id (``level_1`` = -1)."""
        unknown = table[table["level_1"] < 0].groupby("split")["label"].nunique()
        return {"vehicles_without_model": {s: int(unknown.get(s, 0)) for s in SPLIT_FILES}}

    def make_replica(self, out_dir: str | Path, *, train_vehicles: int = 12, test_vehicles: int = 12,
                     per_list: tuple[int, int, int] = (4, 6, 8), images_per_vehicle: tuple[int, int] = (2, 4),
                     n_models: int = 5, image_size: int = 32, seed: int = 0) -> list[str]:
        """Write ``VehicleID_V1.0.zip`` into ``out_dir``; return its name.

        ``train_vehicles`` vehicles form the train list; the three test lists draw
        ``per_list`` vehicles each from a separate pool of ``test_vehicles`` (so they
        overlap, and an image may be in several lists). Every fourth vehicle has no model
        attribute; the others get one of ``n_models`` models. Image ids are distinct 7-digit
        numbers; vehicle ids distinct integers, shuffled.
        """
        rng = np.random.default_rng(seed)
        n = train_vehicles + test_vehicles
        vehicles = [int(v) for v in rng.permutation(np.arange(1, 3 * n + 1))[:n]]
        model = {v: int(rng.integers(n_models)) if i % 4 else -1 for i, v in enumerate(vehicles)}
        images: dict[int, list[str]] = {}
        members, next_image = {}, int(rng.integers(1_000, 50_000))
        for v in vehicles:
            images[v] = []
            for _ in range(int(rng.integers(images_per_vehicle[0], images_per_vehicle[1] + 1))):
                next_image += int(rng.integers(1, 40))
                image = f"{next_image:07d}"
                images[v].append(image)
                members[f"{TOP}/{IMAGE_DIR}/{image}.jpg"] = tiny_jpeg(rng, v, image_size, group_key=("model", model[v]))
        train, pool = vehicles[:train_vehicles], vehicles[train_vehicles:]
        lists = {"train": train}
        for split, k in zip(list(SPLIT_FILES)[1:], per_list):
            lists[split] = [pool[i] for i in sorted(rng.choice(len(pool), size=k, replace=False))]
        text = {f"{TOP}/{SPLIT_DIR}/{SPLIT_FILES[s]}": pair_lines((i, v) for v in vs for i in images[v])
                for s, vs in lists.items()}
        labelled = [v for v in sorted(vehicles) if model[v] >= 0]
        note = b"Generated replica of PKU VehicleID for rankrepro; synthetic images, no real data.\n"
        members = {
            f"{TOP}/README.md": note,
            f"{TOP}/{IMG2VID}": pair_lines((i, v) for v in sorted(vehicles) for i in images[v]),
            f"{TOP}/{MODEL_ATTR}": pair_lines((v, model[v]) for v in labelled),
            f"{TOP}/{COLOR_ATTR}": pair_lines((v, int(rng.integers(7))) for v in labelled),
            **text,
            **members,
        }
        write_zip(Path(out_dir) / ARCHIVE, members)
        return [ARCHIVE]


def read_pairs(file: Path, first: str, second: str) -> list[tuple[str, str]]:
    """The ``<first> <second>`` lines of ``file`` (blank lines skipped), as strings; both fields
    must be non-negative integers (an error names the file and line)."""
    out = []
    for number, line in enumerate(read_lines(file), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not all(ID_RE.fullmatch(f) for f in fields):
            raise ValueError(f"{file} line {number}: expected '<{first}> <{second}>' "
                             f"(two non-negative integers), got {line!r}")
        out.append((fields[0], fields[1]))
    return out


def read_model_attr(file: Path) -> dict[int, int]:
    """``{vehicle id: model id}`` from ``model_attr.txt``; a vehicle listed with two models is an error."""
    models: dict[int, int] = {}
    for vehicle, model in read_pairs(file, "vehicle id", "model id"):
        v, m = int(vehicle), int(model)
        if models.setdefault(v, m) != m:
            raise ValueError(f"{file}: vehicle {v} is listed with models {models[v]} and {m}")
    return models


def pair_lines(pairs) -> bytes:
    """``"<a> <b>"`` lines."""
    return "".join(f"{a} {b}\n" for a, b in pairs).encode()
