"""IARPA Janus Benchmark-C (Maze et al., ICB 2018) as a face retrieval test set: Smooth-AP §5 (Tables
4, 5) reports mAP on it with a network trained on VGGFace2 (protocol ``ijbc``: the frames of one
video are averaged into one instance, identities with fewer than 5 instances are dropped — both in
the protocol, after averaging; the manifest keeps every row).

Source (manual; faces.md B.3): NIST licence request, no public checksum. One source file,
``IJB-C.tar.gz`` (our name: an archive of either layout below), or ``datasets.ijbc.extracted``
pointing to an extracted copy. Its sha256, and that of the protocol files read, are recorded in
``checksums.lock.json`` the first time the counts check out and verified ever after (the protocol
files also in an extracted copy, keys ``ijbc/protocol:<path under the root>``).

Two layouts are accepted (the image root is the folder named first; :meth:`IJBC.find_root` finds it
in the given folder or under ``IJB/IJB-C/``, ``IJB-C/``, ``IJBC/``):

- **NIST tree** ``IJB/IJB-C/``: ``images/img/<n>.jpg`` (stills), ``images/frames/<n>.png`` (video
  frames), ``protocols/archive/ijbc_metadata.csv`` (or ``protocols/ijbc_metadata.csv``) with the
  columns ``SUBJECT_ID, FILENAME, SIGHTING_ID, FACE_X, FACE_Y, FACE_WIDTH, FACE_HEIGHT, FRAME_NUM,
  ...``; ``FILENAME`` is relative to ``images/`` (``img/1.jpg``, ``frames/20000.png``).
- **insightface IJB release** ``IJBC/``: ``loose_crop/<n>.jpg``, ``meta/ijbc_face_tid_mid.txt``
  (``<n>.jpg <template id> <media id>`` per line), ``meta/ijbc_name_5pts_score.txt`` (``<n>.jpg x1
  y1 ... x5 y5 score``, optional), and the 1:N protocol CSVs ``meta/ijbc_1N_gallery_G1.csv``,
  ``meta/ijbc_1N_gallery_G2.csv``, ``meta/ijbc_1N_probe_mixed.csv`` (``TEMPLATE_ID, SUBJECT_ID,
  ...``), which give each template's subject [where they lie in the release: unverified].

Manifest (split ``test`` only; faces.md B.2 "IJB-C instance key"):

- NIST: one row per distinct ``(SUBJECT_ID, FILENAME, SIGHTING_ID)`` of the metadata CSV with a
  ``SUBJECT_ID``, in file order; ``path`` = ``images/<FILENAME>``; box columns = ``FACE_X, FACE_Y,
  FACE_WIDTH, FACE_HEIGHT``; landmarks NaN.
- insightface: one row per crop of ``ijbc_face_tid_mid.txt``, subject = its template's; a crop
  repeats a face once per template that holds it and the release does not name the original file,
  so for each ``(subject, media id)`` only the crops of the first template listing it are kept [our
  choice]; ``path`` = ``loose_crop/<n>.jpg``; landmarks from ``ijbc_name_5pts_score.txt`` (pixels of
  the crop); boxes NaN. The media id is taken to be NIST's ``SIGHTING_ID`` [unverified]; row counts
  may differ from the NIST tree's (only the identities are checked).
- ``label`` = ``SUBJECT_ID`` (1-based, as released); ``instance`` = ``"<SUBJECT_ID>/<SIGHTING_ID>"``:
  a still image, or all frames of one video sighting (the protocol averages by it);
  :data:`~rankrepro.data.datasets.vggface2.FACE_COLUMNS` as in VGGFace2 (floats, NaN when unknown).
- A face box (NIST) or landmark line (insightface) that is not plausible (:mod:`rankrepro.data.face_geometry`:
  a value not a number, an empty box, landmarks that coincide or lie far from the image) fails the prepare
  naming the file and line; a box whose four cells are all blank is unknown (NaN). No image is opened for it.

Expected counts (faces.md B.1, Smooth-AP §5.1): 3,531 identities (the ≈148.8k image + frame rows
are not a published exact count of this universe: not enforced).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from rankrepro.data import checksums
from rankrepro.data.datasets import DATASETS
from rankrepro.data.datasets.base import Dataset, SourceFile
from rankrepro.data.datasets.vggface2 import BOX_COLUMNS, FACE_COLUMNS, LANDMARK_COLUMNS
from rankrepro.data.face_geometry import box_problem, landmark_problem
from rankrepro.data.replicas import key_rng, tiny_jpeg, write_tar
from rankrepro.io import read_lines, text_stream

ARCHIVE = "IJB-C.tar.gz"
NIST_TOP = "IJB/IJB-C"
NIST_METADATA = ("protocols/archive/ijbc_metadata.csv", "protocols/ijbc_metadata.csv")
NIST_COLUMNS = ["SUBJECT_ID", "FILENAME", "SIGHTING_ID", "FACE_X", "FACE_Y", "FACE_WIDTH", "FACE_HEIGHT"]
INSIGHTFACE_TOP = "IJBC"
TID_MID = "meta/ijbc_face_tid_mid.txt"
FIVE_POINTS = "meta/ijbc_name_5pts_score.txt"
TEMPLATE_CSVS = ("meta/ijbc_1N_gallery_G1.csv", "meta/ijbc_1N_gallery_G2.csv", "meta/ijbc_1N_probe_mixed.csv")
ROOT_CANDIDATES = ("", NIST_TOP, "IJB-C", INSIGHTFACE_TOP)


@DATASETS.register("ijbc")
class IJBC(Dataset):
    """IJB-C, every face of the benchmark as a test row; see the module docstring."""

    title = "IJB-C"
    files = (SourceFile(ARCHIVE, checksum=None),)  # none published: recorded on first verified use
    manual = True
    how_to_get = (
        "request IJB-C from NIST (IARPA Janus Benchmark-C, https://www.nist.gov/programs-projects/face-challenges; "
        "licence agreement). Put an archive of its IJB/IJB-C/ tree (images/img, images/frames, protocols/) at the "
        f"path below, named {ARCHIVE}, or set datasets.ijbc.extracted to the extracted tree. The insightface IJB "
        "release (IJBC/loose_crop, IJBC/meta: apply for IJB-C yourself and follow its licence) is accepted the same "
        "way. No checksum is published: the archive's and the protocol files' sha256 are recorded the first time "
        "the counts check out.")
    top = NIST_TOP
    marker = NIST_METADATA[0]
    levels = ["subject"]
    protocol = "ijbc"
    extra_columns = ("instance", *FACE_COLUMNS)
    expected_counts = {"test": {"subject": 3_531}}  # faces.md B.1 (Smooth-AP §5.1; IJB-C has 3,531 subjects)

    def find_root(self, directory: Path) -> Path | None:
        """The first of ``directory``, its ``IJB/IJB-C``, ``IJB-C``, ``IJBC`` holding a NIST metadata CSV
        or the insightface ``meta/ijbc_face_tid_mid.txt``; None if none does."""
        for folder in (directory / c for c in ROOT_CANDIDATES):
            if layout_of(folder):
                return folder
        return None

    def locate_root(self, source, data_root, replica: bool = False):
        """:meth:`Dataset.locate_root`, then the protocol files read: verified against
        ``checksums.lock.json`` when recorded there, else returned to be recorded."""
        root, unverified = super().locate_root(source, data_root, replica)
        lock = checksums.ChecksumLock(data_root)
        for name in protocol_files(root):
            key, path = f"{self.source_name}/protocol:{name}", root / name
            recorded = lock.get(key)
            if recorded is None:
                unverified[key] = path
                continue
            algo, expected = checksums.parse_checksum(recorded)
            if checksums.file_digest(path, algo) != expected:
                with lock.explain(key):
                    raise checksums.ChecksumError(f"{path}: checksum mismatch, expected {recorded}")
        return root, unverified

    def read_table(self, root: Path) -> pd.DataFrame:
        """The rows of either layout (module docstring)."""
        root = Path(root)
        layout = layout_of(root)
        if layout is None:
            raise FileNotFoundError(f"{self.title}: {root} holds neither {' nor '.join(NIST_METADATA)} (NIST tree) "
                                    f"nor {TID_MID} (insightface release)")
        table = read_nist(root) if layout == "nist" else read_insightface(root)
        table.insert(1, "split", "test")
        return table

    def make_replica(self, out_dir: str | Path, *, layout: str = "nist", image_size: int = 32,
                     seed: int = 0) -> list[str]:
        """Write ``IJB-C.tar.gz`` in ``layout`` (``"nist"`` or ``"insightface"``) into ``out_dir``;
        return its name. Both layouts hold the same faces (:data:`REPLICA_SUBJECTS`): 5 subjects,
        stills and one 3-frame video (subject 1), subject 5 with only 4 instances."""
        if layout not in ("nist", "insightface"):
            raise ValueError(f"IJB-C replica: layout {layout!r}, expected 'nist' or 'insightface'")
        rng = np.random.default_rng(seed)
        faces = replica_faces()
        images = {face["file"]: encode(tiny_jpeg(rng, face["subject"], image_size), face["file"]) for face in faces}
        members = nist_members(faces, images) if layout == "nist" else insightface_members(faces, images)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        write_tar(Path(out_dir) / ARCHIVE, members)
        return [ARCHIVE]


# -- layouts --------------------------------------------------------------------------------------

def layout_of(root: Path) -> str | None:
    """``"nist"``, ``"insightface"`` or None: which layout ``root`` is the root of."""
    if any((root / name).is_file() for name in NIST_METADATA):
        return "nist"
    return "insightface" if (root / TID_MID).is_file() else None


def protocol_files(root: Path) -> list[str]:
    """The protocol files :meth:`IJBC.read_table` reads under ``root`` (relative names)."""
    if layout_of(root) == "nist":
        return [next(name for name in NIST_METADATA if (root / name).is_file())]
    return [name for name in (TID_MID, FIVE_POINTS, *TEMPLATE_CSVS) if (root / name).is_file()]


def instance_keys(subjects, sightings) -> list[str]:
    """``"<SUBJECT_ID>/<SIGHTING_ID>"`` per row: the instance (a still, or one video sighting's frames)."""
    return [f"{int(s)}/{int(v)}" for s, v in zip(subjects, sightings)]


def read_nist(root: Path) -> pd.DataFrame:
    """The NIST metadata CSV as rows (module docstring); a missing column, or a face box that is not plausible,
    is an error naming the file (and line)."""
    name = next(name for name in NIST_METADATA if (root / name).is_file())
    meta = pd.read_csv(text_stream(root / name), skipinitialspace=True)
    meta.columns = [str(c).strip() for c in meta.columns]
    missing = [c for c in NIST_COLUMNS if c not in meta.columns]
    if missing:
        raise ValueError(f"{root / name}: no column {missing} (expected {', '.join(NIST_COLUMNS)}, ...)")
    meta["origin"] = [f"{name}, line {i + 2}" for i in range(len(meta))]
    meta = meta[meta["SUBJECT_ID"].notna()]
    meta = meta[~meta.duplicated(["SUBJECT_ID", "FILENAME", "SIGHTING_ID"])]
    for column in ("SUBJECT_ID", "SIGHTING_ID"):
        bad = meta[column].isna() | (pd.to_numeric(meta[column], errors="coerce") % 1 != 0)
        if bad.any():
            raise ValueError(f"{root / meta['origin'][bad].iloc[0]}: {column} {meta[column][bad].iloc[0]!r} "
                             "is not an integer")
    table = pd.DataFrame({"path": "images/" + meta["FILENAME"].astype(str).str.strip(),
                          "label": meta["SUBJECT_ID"].astype(np.int64),
                          "instance": instance_keys(meta["SUBJECT_ID"], meta["SIGHTING_ID"]),
                          "origin": meta["origin"]})
    for column, source in zip(BOX_COLUMNS, NIST_COLUMNS[3:]):  # a cell that is not a number: NaN, refused below
        table[column] = pd.to_numeric(meta[source], errors="coerce").astype(np.float64).to_numpy()
    found = box_problem(table[list(BOX_COLUMNS)].to_numpy())
    if found is not None:
        row = found[0]
        raise ValueError(f"{root / table['origin'].iat[row]}: {found[1]} (FACE_X, FACE_Y, FACE_WIDTH, FACE_HEIGHT "
                         f"{', '.join(str(meta[c].iat[row]) for c in NIST_COLUMNS[3:])}); fix the line, or blank all "
                         "four cells for a face without a box")
    for column in LANDMARK_COLUMNS:
        table[column] = np.nan
    return table.reset_index(drop=True)


def read_insightface(root: Path) -> pd.DataFrame:
    """The insightface release as rows (module docstring): an error names a missing file, a malformed
    line, a template with two subjects or none."""
    crops = read_columns(root, TID_MID, ["name", "template", "media"], np.int64)
    subjects = template_subjects(root)
    subject = crops["template"].map(subjects)
    if subject.isna().any():
        row = crops[subject.isna()].iloc[0]
        raise ValueError(f"{root / TID_MID}, {row['origin']}: template {row['template']} is in none of "
                         f"{', '.join(TEMPLATE_CSVS)} (no subject)")
    crops["subject"] = subject.astype(np.int64)
    first = crops.groupby(["subject", "media"])["template"].transform("first")
    crops = crops[crops["template"] == first].reset_index(drop=True)
    table = pd.DataFrame({"path": "loose_crop/" + crops["name"], "label": crops["subject"],
                          "instance": instance_keys(crops["subject"], crops["media"]),
                          "origin": [f"{TID_MID}, {o}" for o in crops["origin"]]})
    for column in BOX_COLUMNS:
        table[column] = np.nan
    points = read_columns(root, FIVE_POINTS, ["name", *LANDMARK_COLUMNS, "score"], np.float64) \
        if (root / FIVE_POINTS).is_file() else pd.DataFrame(columns=["name", *LANDMARK_COLUMNS, "origin"])
    points = points.drop_duplicates("name").set_index("name")
    found = landmark_problem(points[list(LANDMARK_COLUMNS)].to_numpy(dtype=np.float64))
    if found is not None:
        raise ValueError(f"{root / FIVE_POINTS}, {points['origin'].iat[found[0]]}: {found[1]}; fix or remove the "
                         "line (without landmarks, align5 crops the whole image)")
    for column in LANDMARK_COLUMNS:
        table[column] = crops["name"].map(points[column]).astype(np.float64).to_numpy()
    return table


def read_columns(root: Path, name: str, columns: list[str], dtype) -> pd.DataFrame:
    """A space-separated file of ``columns`` (the first a name, the rest numbers of ``dtype``) plus
    ``origin`` (``"line <n>"``); a missing file or a malformed line is an error naming it."""
    file = root / name
    if not file.is_file():
        raise FileNotFoundError(f"IJB-C: {file} is missing (the insightface release holds {name})")
    rows, origins = [], []
    for number, line in enumerate(read_lines(file), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != len(columns):
                raise ValueError
            rows.append([fields[0], *(dtype(float(v)) if dtype is np.int64 else float(v) for v in fields[1:])])
        except ValueError:
            raise ValueError(f"{file}, line {number}: {line!r} is not {' '.join(columns)}") from None
        origins.append(f"line {number}")
    table = pd.DataFrame(rows, columns=columns)
    table["origin"] = origins
    return table


def template_subjects(root: Path) -> pd.Series:
    """Subject by template id over the 1:N protocol CSVs present (at least one must be)."""
    parts = []
    for name in TEMPLATE_CSVS:
        if (root / name).is_file():
            part = pd.read_csv(text_stream(root / name), skipinitialspace=True)
            part.columns = [str(c).strip() for c in part.columns]
            if not {"TEMPLATE_ID", "SUBJECT_ID"} <= set(part.columns):
                raise ValueError(f"{root / name}: no TEMPLATE_ID / SUBJECT_ID column")
            parts.append(part[["TEMPLATE_ID", "SUBJECT_ID"]].assign(file=name))
    if not parts:
        raise FileNotFoundError(f"IJB-C: none of {', '.join(str(root / n) for n in TEMPLATE_CSVS)} is there "
                                "(they give each template's subject)")
    pairs = pd.concat(parts, ignore_index=True).drop_duplicates(["TEMPLATE_ID", "SUBJECT_ID"])
    twice = pairs[pairs["TEMPLATE_ID"].duplicated(keep=False)]
    if len(twice):
        raise ValueError(f"IJB-C: template {twice['TEMPLATE_ID'].iloc[0]} has several subjects in "
                         f"{', '.join(sorted(set(twice['file'])))}")
    return pd.Series(pairs["SUBJECT_ID"].astype(np.int64).to_numpy(), index=pairs["TEMPLATE_ID"].astype(np.int64))


# -- replica --------------------------------------------------------------------------------------

#: per subject (1-based, as IJB-C's), its instances: ("still", sighting id) or ("video", sighting id,
#: frames); subject 5 has 4 instances (the protocol's >= 5 filter drops it)
REPLICA_SUBJECTS = {
    1: [("still", 101), ("still", 102), ("video", 103, 3), ("still", 104), ("still", 105)],
    2: [("still", 201), ("still", 202), ("still", 203), ("still", 204), ("still", 205), ("still", 206)],
    3: [("still", 301), ("still", 302), ("still", 303), ("still", 304), ("still", 305)],
    4: [("still", 401), ("still", 402), ("still", 403), ("still", 404), ("still", 405)],
    5: [("still", 501), ("still", 502), ("still", 503), ("still", 504)],
}


def replica_faces() -> list[dict]:
    """Every face of the replica: ``subject, sighting, file`` (NIST ``FILENAME``), ``frame``, ``slot``
    (the instance's position in its subject's list)."""
    faces, still, frame = [], 1, 20_000
    for subject, instances in REPLICA_SUBJECTS.items():
        for slot, (kind, sighting, *n) in enumerate(instances):
            if kind == "still":
                faces.append({"subject": subject, "sighting": sighting, "file": f"img/{still}.jpg", "frame": "",
                              "slot": slot})
                still += 1
            for k in range(n[0] if n else 0):
                faces.append({"subject": subject, "sighting": sighting, "file": f"frames/{frame}.png", "frame": k,
                              "slot": slot})
                frame += 1
    return faces


def encode(jpeg: bytes, name: str) -> bytes:
    """``jpeg`` as is, or re-encoded as PNG for a ``.png`` name (IJB-C's frames)."""
    if not name.endswith(".png"):
        return jpeg
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, format="PNG")
    return out.getvalue()


def face_box(face: dict) -> list[int]:
    """A deterministic box (x, y, w, h) of a replica face."""
    g = key_rng(("ijbc box", face["file"])).integers(1, 10, 4)
    return [int(g[0]), int(g[1]), 12 + int(g[2]), 12 + int(g[3])]


def nist_members(faces: list[dict], images: dict[str, bytes]) -> dict[str, bytes]:
    """The NIST tree: images and ``protocols/archive/ijbc_metadata.csv`` (full header)."""
    header = ["SUBJECT_ID", "FILENAME", "SIGHTING_ID", "FACE_X", "FACE_Y", "FACE_WIDTH", "FACE_HEIGHT", "FRAME_NUM",
              "FACIAL_HAIR", "AGE", "INDOOR_OUTDOOR", "SKINTONE", "GENDER", "YAW", "ROLL",
              *[f"OCC{i}" for i in range(1, 19)]]
    lines = [",".join(header)]
    for face in faces:
        lines.append(",".join(str(v) for v in [face["subject"], face["file"], face["sighting"], *face_box(face),
                                               face["frame"], 0, 3, 1, 2, face["subject"] % 2, 5.5, -1.5,
                                               *[0] * 18]))
    members = {f"{NIST_TOP}/images/{name}": data for name, data in images.items()}
    members[f"{NIST_TOP}/{NIST_METADATA[0]}"] = ("\n".join(lines) + "\n").encode()
    return members


def insightface_members(faces: list[dict], images: dict[str, bytes]) -> dict[str, bytes]:
    """The insightface release: per subject a gallery template (G1 odd, G2 even subjects) with its
    first two instances, a probe template with the others, and a second probe template repeating
    the first instance (crops the reader drops); crops numbered in ``ijbc_face_tid_mid.txt`` order."""
    templates = []  # (template id, subject, file, faces)
    for subject in REPLICA_SUBJECTS:
        mine = [f for f in faces if f["subject"] == subject]
        gallery = "meta/ijbc_1N_gallery_G1.csv" if subject % 2 else "meta/ijbc_1N_gallery_G2.csv"
        templates.append((subject, subject, gallery, [f for f in mine if f["slot"] < 2]))
        templates.append((1000 + subject, subject, TEMPLATE_CSVS[2], [f for f in mine if f["slot"] >= 2]))
        templates.append((2000 + subject, subject, TEMPLATE_CSVS[2], [f for f in mine if f["slot"] == 0]))
    members, tid_mid, points = {}, [], []
    csvs = {name: ["TEMPLATE_ID,SUBJECT_ID,FILENAME,SIGHTING_ID"] for name in TEMPLATE_CSVS}
    for template, subject, csv_name, chosen in templates:
        for face in chosen:
            n = len(tid_mid) + 1
            members[f"{INSIGHTFACE_TOP}/loose_crop/{n}.jpg"] = images[face["file"]] if face["file"].endswith(".jpg") \
                else tiny_jpeg(key_rng(("crop", n)), subject)
            tid_mid.append(f"{n}.jpg {template} {face['sighting']}")
            g = key_rng(("ijbc landmarks", n)).uniform(4, 28, 10)
            points.append(f"{n}.jpg " + " ".join(f"{v:.2f}" for v in g) + " 0.99")
            csvs[csv_name].append(f"{template},{subject},{face['file']},{face['sighting']}")
    members[f"{INSIGHTFACE_TOP}/{TID_MID}"] = ("\n".join(tid_mid) + "\n").encode()
    members[f"{INSIGHTFACE_TOP}/{FIVE_POINTS}"] = ("\n".join(points) + "\n").encode()
    for name, lines in csvs.items():
        members[f"{INSIGHTFACE_TOP}/{name}"] = ("\n".join(lines) + "\n").encode()
    return members
