"""The H-GLDv2 cleaning rules, by hand: one candidate kept, irrelevant / several / unnamed dropped,
the counts and the paper's numbers in the report."""

import csv
import io
import json

import pytest

from rankrepro.hgldv2 import clean

IRRELEVANT = clean.load_irrelevant()


def cls(qid, label, rank="normal"):
    return {"id": qid, "label": label, "rank": rank}


@pytest.mark.parametrize("classes, several, expected", [
    ([cls("Q16970", "church building")], "drop", ("church building", "kept")),
    # an irrelevant class beside a real one is ignored
    ([cls("Q4167836", "Wikimedia category"), cls("Q23397", "lake")], "drop", ("lake", "kept")),
    ([cls("Q4167836", "Wikimedia category")], "drop", (None, "irrelevant")),
    ([cls("Q4167410", "Wikimedia disambiguation page")], "drop", (None, "irrelevant")),
    # matched by label when the id differs
    ([cls("Q1", "Wikimedia category")], "drop", (None, "irrelevant")),
    ([cls("Q2977", "cathedral"), cls("Q16970", "church building")], "drop", (None, "several")),
    ([cls("Q2977", "cathedral"), cls("Q16970", "church building")], "first", ("cathedral", "kept-first-of-several")),
    # two ids with one English label are one supercategory
    ([cls("Q2977", "cathedral"), cls("Q99", "cathedral")], "drop", ("cathedral", "kept")),
    ([cls("Q7", None)], "drop", (None, "unnamed")),
    ([cls("Q7", None), cls("Q8", None)], "drop", (None, "several")),
])
def test_decide(classes, several, expected):
    assert clean.decide(classes, IRRELEVANT, several) == expected


def test_the_irrelevant_list_holds_the_papers_two_examples():
    ids, names = IRRELEVANT
    assert {"Q4167836", "Q4167410"} <= ids
    assert {"Wikimedia category", "Wikimedia disambiguation page"} <= names


def test_a_malformed_irrelevant_file_names_itself(tmp_path):
    bad = tmp_path / "irrelevant.yaml"
    bad.write_text("- {id: 4167836}\n")
    with pytest.raises(ValueError, match="irrelevant.yaml: entry 0"):
        clean.load_irrelevant(bad)
    bad.write_text("- [unclosed\n")
    with pytest.raises(ValueError, match="irrelevant.yaml: not valid YAML"):
        clean.load_irrelevant(bad)
    with pytest.raises(ValueError, match="several"):
        clean.decide([], IRRELEVANT, "all")


def scraped(split, landmark, classes, via="sitelink"):
    return {"split": split, "landmark_id": landmark, "category": f"http://x/wiki/Category:L{landmark}",
            "title": f"Category:L{landmark}", "resolved_via": via, "item": None, "topic": None, "classes": classes}


def test_run_clean_writes_the_kept_the_dropped_and_the_counts(tmp_path):
    rows = [
        scraped("train", 1, [cls("Q16970", "church building", "preferred")]),
        scraped("train", 2, [cls("Q4167836", "Wikimedia category")]),
        scraped("train", 3, [cls("Q2977", "cathedral"), cls("Q23413", "castle")]),
        scraped("train", 4, [], via="no-sitelink"),
        scraped("train", 5, [cls("Q7", None)]),
        scraped("index", 1, [cls("Q23397", "lake")]),
        scraped("index", 2, [cls("Q16970", "church building")]),
    ]
    jsonl = tmp_path / "landmarks.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = clean.run_clean(jsonl, tmp_path / "clean")
    assert (tmp_path / "clean" / "landmarks.csv").read_text() == (
        "split,landmark_id,category,supercategory\n"
        "train,1,http://x/wiki/Category:L1,church building\n"
        "index,1,http://x/wiki/Category:L1,lake\n"
        "index,2,http://x/wiki/Category:L2,church building\n")
    dropped = list(csv.reader(io.StringIO((tmp_path / "clean" / "dropped.csv").read_text())))
    assert [(r[1], r[3], r[4]) for r in dropped[1:]] == [
        ("2", "irrelevant", "Wikimedia category"), ("3", "several", "cathedral|castle"),
        ("4", "not-scraped:no-sitelink", ""), ("5", "unnamed", "Q7")]
    train, index = report["counts"]["train"], report["counts"]["index"]
    assert (train["landmarks"], train["scraped"], train["kept"]) == (5, 4, 1)
    assert (train["irrelevant"], train["several"], train["unnamed"]) == (1, 1, 1)
    assert (index["landmarks"], index["scraped"], index["kept"]) == (2, 2, 2)
    assert report["unique_names"] == 2 and report["removed_share"] == pytest.approx(3 / 6)
    md = (tmp_path / "clean" / "report.md").read_text()
    for paper in ("203k", "129.1k", "128.8k", "101k", "68.1k", "67.9k", "5.7k", "0.25%"):
        assert paper in md
    assert json.loads((tmp_path / "clean" / "report.json").read_text())["counts"]["train"]["kept"] == 1
    first = clean.run_clean(jsonl, tmp_path / "first", several="first")
    assert first["counts"]["train"]["kept"] == 2 and first["counts"]["train"]["kept-first-of-several"] == 1


def test_a_damaged_scrape_file_names_its_line(tmp_path):
    jsonl = tmp_path / "landmarks.jsonl"
    jsonl.write_text(json.dumps(scraped("train", 1, [])) + "\n{not json\n")
    with pytest.raises(ValueError, match="landmarks.jsonl, line 2"):
        clean.run_clean(jsonl, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        clean.run_clean(tmp_path / "absent.jsonl", tmp_path / "out")
    assert not (tmp_path / "out").exists()
