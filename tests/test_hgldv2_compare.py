"""H-GLDv2 compare by hand: coverage, agreement, per-label precision / recall of a tiny case; the ARI is
sklearn's; file and landmark errors."""

import json

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score as sklearn_ari

from rankrepro.hgldv2 import compare

HEADER = "landmark_id,category,supercategory,hierarchical_label,natural_or_human_made\n"
RELEASE_TRAIN = """\
1,c,castle,castle / fort,human-made
2,c,castle,castle / fort,human-made
3,c,lake,lake,natural
4,c,church building,church,human-made
5,c,pond,lake,natural
6,c,fort,castle / fort,human-made
7,c,x,,
"""
OURS_TRAIN = """\
1,c,castle,castle / fort,human-made
2,c,castle,castle / fort,human-made
3,c,lake,lake,natural
4,c,church  building,church,human-made
5,c,reservoir,castle / fort,human-made
7,c,x,museum,human-made
8,c,y,,
"""
INDEX = "1,c,bay,ocean area ,natural\n2,c,castle,castle / fort,human-made\n"


def folder(path, train, index):
    path.mkdir()
    (path / "train_label_to_hierarchical.csv").write_text(HEADER + train)
    (path / "index_label_to_hierarchical.csv").write_text(HEADER + index)
    return path


def test_compare_by_hand(tmp_path):
    rel = folder(tmp_path / "release", RELEASE_TRAIN, INDEX)
    ours = folder(tmp_path / "ours", OURS_TRAIN, INDEX)
    info = compare.run_compare(ours, rel, str(tmp_path / "out" / "compare"))
    train = info["splits"]["train"]
    # release labels 1-6, ours 1-5 and 7: both 1-5, release only 6, ours only 7; 5 is the one mismatch
    assert {k: train[k] for k in ("release_labelled", "ours_labelled", "both", "release_only", "ours_only")} == \
        {"release_labelled": 6, "ours_labelled": 6, "both": 5, "release_only": 1, "ours_only": 1}
    assert train["coverage"] == pytest.approx(5 / 6)
    assert train["agreement_label"] == pytest.approx(4 / 5) and train["agreement_group"] == pytest.approx(4 / 5)
    assert train["supercategory_agreement"] == pytest.approx(4 / 5)  # "church  building" matches, pond != reservoir
    release_both = ["castle / fort", "castle / fort", "lake", "church", "lake"]
    ours_both = ["castle / fort", "castle / fort", "lake", "church", "castle / fort"]
    assert train["ari_label"] == pytest.approx(sklearn_ari(release_both, ours_both))
    assert train["ari_group"] == pytest.approx(sklearn_ari([0, 0, 1, 0, 1], [0, 0, 1, 0, 0]))
    index = info["splits"]["index"]
    assert index["coverage"] == 1.0 and index["ari_label"] == 1.0 and index["agreement_label"] == 1.0
    overall = info["splits"]["overall"]  # train and index ids are two id spaces: landmark 1 counts twice
    assert (overall["release_labelled"], overall["both"], overall["coverage"]) == (8, 7, pytest.approx(7 / 8))
    assert overall["agreement_label"] == pytest.approx(6 / 7)
    assert overall["ari_label"] == pytest.approx(sklearn_ari(release_both + ["ocean area ", "castle / fort"],
                                                             ours_both + ["ocean area ", "castle / fort"]))
    # per label, splits pooled, release = truth: castle / fort 3 in the release, 4 ours, 3 agree
    rows = {r["hierarchical_label"]: r for r in info["per_label"]}
    assert [r["hierarchical_label"] for r in info["per_label"]] == ["castle / fort", "lake", "church", "ocean area "]
    assert rows["castle / fort"] == {"hierarchical_label": "castle / fort", "group": "human-made", "support": 3,
                                     "ours": 4, "tp": 3, "precision": 0.75, "recall": 1.0,
                                     "f1": pytest.approx(6 / 7)}
    assert rows["lake"] == {"hierarchical_label": "lake", "group": "natural", "support": 2, "ours": 1, "tp": 1,
                            "precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3)}
    assert "museum" not in rows  # landmark 7 is ours only
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json", "compare.md"]
    assert json.loads((out / "compare.json").read_text()) == json.loads(json.dumps(info))
    lines = (out / "compare.csv").read_text().splitlines()
    assert lines[:2] == ["hierarchical_label,group,support,ours,tp,precision,recall,f1",
                         "castle / fort,human-made,3,4,3,0.75,1.0,0.857143"]
    assert lines[-1] == "ocean area ,natural,1,1,1,1.0,1.0,1.0"
    assert "| `castle / fort` | human-made | 3 | 4 | 3 | 0.7500 | 1.0000 | 0.8571 |" in \
        (out / "compare.md").read_text()


def test_ari_is_one_for_equal_partitions_under_other_names(tmp_path):
    rel = folder(tmp_path / "release", "1,c,a,lake,natural\n2,c,b,lake,natural\n3,c,c,church,human-made\n", "")
    ours = folder(tmp_path / "ours", "1,c,a,river,natural\n2,c,b,river,natural\n3,c,c,museum,human-made\n", "")
    info = compare.run_compare(ours, rel, str(tmp_path / "c"))
    train = info["splits"]["train"]
    assert train["ari_label"] == 1.0 and train["agreement_label"] == 0.0 and train["agreement_group"] == 1.0
    assert info["splits"]["index"]["coverage"] is None and info["splits"]["index"]["ari_label"] is None
    lake = next(r for r in info["per_label"] if r["hierarchical_label"] == "lake")
    river = next(r for r in info["per_label"] if r["hierarchical_label"] == "river")
    assert (lake["precision"], lake["recall"], lake["f1"]) == (None, 0.0, None)
    assert (river["support"], river["precision"], river["recall"]) == (0, 0.0, None)


def test_our_ari_is_sklearns():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50):
        for _ in range(20):
            a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
            assert compare.adjusted_rand_score(a, b) == pytest.approx(sklearn_ari(a, b), abs=1e-12)


def test_compare_errors(tmp_path):
    rel = folder(tmp_path / "release", RELEASE_TRAIN + "3,c,lake,river,natural\n", INDEX)
    ours = folder(tmp_path / "ours", OURS_TRAIN + "1,c,castle,castle / fort,human-made\n", INDEX)  # same: fine
    with pytest.raises(ValueError, match=r"release/train_label_to_hierarchical.csv: landmark 3 is listed twice"):
        compare.run_compare(ours, rel, str(tmp_path / "c"))
    (ours / "index_label_to_hierarchical.csv").unlink()
    with pytest.raises(FileNotFoundError, match="ours/index_label_to_hierarchical.csv"):
        compare.run_compare(ours, rel, str(tmp_path / "c"))
    (ours / "index_label_to_hierarchical.csv").write_text("landmark_id,hierarchical_label\n1,lake\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['supercategory', 'natural_or_human_made'\]"):
        compare.run_compare(ours, rel, str(tmp_path / "c"))
    assert not list(tmp_path.glob("c.*"))
