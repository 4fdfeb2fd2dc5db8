"""Clean the scraped classes: one supercategory per landmark (SupRank TPAMI §VI-A).

The paper: "A lightweight manual cleaning process was then applied to remove landmarks assigned
to more than one supercategory and those with irrelevant supercategories (e.g., supercategories
named 'Wikimedia category' or 'Wikimedia disambiguation page')." As rules, per landmark of
``scrape/landmarks.jsonl``:

- **scraped**: the landmark has at least one class (the paper's 129.1k of 203k train and 68.1k
  of 101k index landmarks "we were able to scrape supercategories for"). Landmarks without any
  are listed in ``dropped.csv`` with reason ``not-scraped:<how the scrape ended>``.
- **candidates**: its classes minus the irrelevant ones (``irrelevant_classes.yaml``: by id, or
  by English label), counted by *name* (two ids with one English label are one supercategory;
  an unlabelled class counts by its id).
- **kept** when exactly one candidate remains and it has an English name; else dropped with
  reason ``irrelevant`` (no candidate left), ``unnamed`` (the one candidate has no English
  label) or ``several`` (more than one). ``several="first"`` keeps the first candidate in
  Wikidata's statement order instead (not the paper; the count it changes is reported).

Outputs in ``out_dir``: ``landmarks.csv`` (``split,landmark_id,category,supercategory``, the
kept landmarks, file order), ``dropped.csv`` (``split,landmark_id,category,reason,classes``),
``report.md`` and ``report.json`` (written last): the paper's counts beside ours.
"""

from __future__ import annotations

import json
from pathlib import Path

from rankrepro.io import atomic_write_json, atomic_write_text, csv_text, load_yaml

IRRELEVANT_FILE = Path(__file__).with_name("irrelevant_classes.yaml")
SPLITS = ("train", "index")
SEVERAL = ("drop", "first")
#: SupRank TPAMI §VI-A, transcribed
PAPER = {
    "landmarks": {"train": "203k", "index": "101k"},
    "scraped": {"train": "129.1k", "index": "68.1k"},
    "kept": {"train": "128.8k", "index": "67.9k"},
    "unique_names": "5.7k",
    "removed_share": "0.25%",
}


def load_irrelevant(path: str | Path = IRRELEVANT_FILE) -> tuple[set[str], set[str]]:
    """(ids, names) of the irrelevant classes; a malformed entry names the file and its position."""
    path = Path(path)
    entries = load_yaml(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of {{id, name}} entries")
    ids, names = set(), set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"id", "name"} or not str(entry["id"]).startswith("Q"):
            raise ValueError(f"{path}: entry {i} {entry!r} is not {{id: Q..., name: ...}}")
        ids.add(str(entry["id"]))
        names.add(str(entry["name"]))
    return ids, names


def decide(classes: list[dict], irrelevant: tuple[set[str], set[str]], several: str = "drop") -> tuple[str | None, str]:
    """(supercategory, reason): the kept name and ``kept``, or None and why it was dropped."""
    if several not in SEVERAL:
        raise ValueError(f"several: {several!r} is not one of {SEVERAL}")
    ids, names = irrelevant
    candidates: dict[str, dict] = {}
    for c in classes:
        if c["id"] in ids or (c.get("label") is not None and c["label"] in names):
            continue
        candidates.setdefault(c["label"] if c.get("label") is not None else c["id"], c)
    if not candidates:
        return None, "irrelevant"
    if len(candidates) > 1 and several == "drop":
        return None, "several"
    first = next(iter(candidates.values()))
    if first.get("label") is None:
        return None, "unnamed"
    return first["label"], "kept" if len(candidates) == 1 else "kept-first-of-several"


def read_scrape(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (the scrape step writes it)")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if row["split"] not in SPLITS or not isinstance(row["classes"], list):
                raise KeyError("split/classes")
        except (ValueError, KeyError) as err:
            raise ValueError(f"{path}, line {n}: not a scraped landmark ({err})") from None
        rows.append(row)
    return rows


def run_clean(scrape_jsonl: str | Path, out_dir: str | Path, *, irrelevant_file: str | Path = IRRELEVANT_FILE,
              several: str = "drop") -> dict:
    """Write ``landmarks.csv``, ``dropped.csv``, ``report.md`` and ``report.json`` (last); return the report."""
    rows = read_scrape(scrape_jsonl)
    irrelevant = load_irrelevant(irrelevant_file)
    kept, dropped = [], []
    counts = {s: {"landmarks": 0, "scraped": 0, "kept": 0, "irrelevant": 0, "unnamed": 0, "several": 0,
                  "kept-first-of-several": 0} for s in SPLITS}
    for row in rows:
        c = counts[row["split"]]
        c["landmarks"] += 1
        if not row["classes"]:
            dropped.append([row["split"], row["landmark_id"], row["category"],
                            f"not-scraped:{row.get('resolved_via', '')}", ""])
            continue
        c["scraped"] += 1
        name, reason = decide(row["classes"], irrelevant, several)
        if name is None:
            c[reason] += 1
            dropped.append([row["split"], row["landmark_id"], row["category"], reason,
                            "|".join(cl.get("label") or cl["id"] for cl in row["classes"])])
            continue
        c["kept"] += 1
        if reason != "kept":
            c[reason] += 1
        kept.append([row["split"], row["landmark_id"], row["category"], name])
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "landmarks.csv", csv_text(["split", "landmark_id", "category", "supercategory"], kept))
    atomic_write_text(out_dir / "dropped.csv", csv_text(["split", "landmark_id", "category", "reason", "classes"], dropped))
    names = sorted({r[3] for r in kept})
    scraped = sum(c["scraped"] for c in counts.values())
    removed = scraped - sum(c["kept"] for c in counts.values())
    report = {"counts": counts, "unique_names": len(names), "removed_share": removed / scraped if scraped else None,
              "several": several, "irrelevant_file": str(irrelevant_file), "paper": PAPER}
    atomic_write_text(out_dir / "report.md", render(report))
    atomic_write_json(out_dir / "report.json", report)
    return report


def render(report: dict) -> str:
    c, p = report["counts"], PAPER
    share = report["removed_share"]
    lines = ["# H-GLDv2 rebuilt: scraped supercategories after cleaning (SupRank TPAMI §VI-A)", "",
             f"Landmarks with several candidates: {report['several']} (paper: drop).", "",
             "| | paper train | ours train | paper index | ours index |", "|---|---|---|---|---|"]
    for key, label in (("landmarks", "landmarks"), ("scraped", "scraped (≥ 1 class)"), ("kept", "kept after cleaning")):
        lines.append(f"| {label} | {p[key]['train']} | {c['train'][key]:,} | {p[key]['index']} | {c['index'][key]:,} |")
    for reason in ("irrelevant", "several", "unnamed", "kept-first-of-several"):
        lines.append(f"| {reason} | | {c['train'][reason]:,} | | {c['index'][reason]:,} |")
    removed = "n/a" if share is None else f"{100 * share:.2f}%"
    lines += ["", f"Unique scraped names kept: {report['unique_names']:,} (paper: {p['unique_names']}).",
              f"Share of scraped landmarks removed: {removed} (paper: ~{p['removed_share']}).", ""]
    return "\n".join(lines)
