"""H-GLDv2 curation by hand: the 78 supercategories as released, the curation file's checks, the rule
precedence, the release-format CSVs of a tiny case, and a curation seeded from a tiny release."""

import json
import re
import textwrap

import pytest
import yaml

from rankrepro.hgldv2 import curate

# hgldv2.md §1.2, transcribed (not read from supercategories.yaml)
HUMAN_MADE = [
    "air transportation", "amusement park", "aqueduct", "archeological site", "artwork", "bath", "boat", "bridge",
    "buddhist temple", "cable transportation", "castle / fort", "cemetery", "church", "city", "cross", "dam",
    "factory", "festival", "fountain", "gate", "government building", "harbor", "hindu temple", "hospital", "hotel",
    "house", "library", "lighthouse", "market", "memorial", "mine", "monastery", "mosque", "museum", "observatory",
    "palace", "power plant", "prison", "pyramid", "rail transportation", "restaurant", "road", "ruins", "school",
    "sculpture", "settlement", "shinto shrine", "shopping", "skyscraper", "sports venue", "square", "stairs",
    "swimming pool", "synagogue", "theatre", "tower", "underground infrastructure", "village", "windmill", "zoo",
]
NATURAL = [
    "agricultural land", "beach", "canal", "cave", "cliff", "garden", "island", "lake", "mountain", "ocean area ",
    "parks", "river", "stone", "trail", "tree", "volcano", "waterfall", "wetland",
]
SC = curate.load_supercategories()


def write(path, text):
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_supercategories_are_the_released_78():
    assert len(HUMAN_MADE) == 60 and len(NATURAL) == 18
    assert SC == {**{n: "human-made" for n in HUMAN_MADE}, **{n: "natural" for n in NATURAL}}
    assert "ocean area " in SC and "ocean area" not in SC and SC["canal"] == "natural"
    assert SC["castle / fort"] == "human-made"


@pytest.mark.parametrize("text, message", [
    ("human-made: [church]\nnatural: [lake, church]\n", "natural[1]: 'church' is already listed under human-made"),
    ("human-made: [church, 3]\nnatural: [lake]\n", "human-made[1]: 3 is not a name"),
    ("human-made: [church]\nnatural: [lake]\nother: [x]\n", "expected exactly the group keys"),
])
def test_supercategories_errors_name_file_and_key(tmp_path, text, message):
    path = write(tmp_path / "sc.yaml", text)
    with pytest.raises(ValueError, match="sc.yaml") as err:
        curate.load_supercategories(path)
    assert message in str(err.value)


def test_the_packaged_curation_loads():
    cur = curate.load_curation(curate.CURATION_FILE, SC)
    assert cur.names["church building"] == "church" and cur.names["Buddhist temple"] == "buddhist temple"
    assert cur.names["bay"] == "ocean area " and cur.names["Wikimedia list article"] is None
    assert set(cur.names.values()) - {None} <= set(SC) and cur.clusters == {} and cur.fingerprint is None
    assert len(cur.names) >= 150
    raw = yaml.safe_load(curate.CURATION_FILE.read_text())
    assert set(raw) == {"cluster_fingerprint", "names", "clusters"}


@pytest.mark.parametrize("text, fingerprint, message", [
    ('names: {"church buildin": chruch}\n', None,
     ("names['church buildin']: 'chruch' is not one of the 78 supercategories (supercategories.yaml); "
      "nearest: church")),
    ("names: {a: 3}\n", None, "names['a']: 3 is not a supercategory name"),
    ("cluster_fingerprint: null\nclusters: {0: lake}\n", None, "but cluster_fingerprint is null"),
    ("cluster_fingerprint: aaa\nclusters: {0: lake}\n", "bbb",
     "cluster_fingerprint 'aaa' but the clustering given has 'bbb'; cluster ids only mean something"),
    ("cluster_fingerprint: aaa\nclusters: {0: lake}\n", None, "for clustering 'aaa' but no clustering was given"),
    ("cluster_fingerprint: aaa\nclusters: {x: lake}\n", "aaa", "clusters['x']: a cluster id must be an integer >= 0"),
    ("cluster_fingerprint: aaa\nclusters: {-1: lake}\n", "aaa", "clusters[-1]: a cluster id must be an integer"),
    ("cluster_fingerprint: aaa\nclusters: {0: laek}\n", "aaa", "clusters[0]: 'laek' is not one of the 78"),
    ("nmaes: {}\n", None, "unknown top-level key(s) ['nmaes']"),
    ("names: [unclosed\n", None, "not valid YAML"),
    ("names:\n  castle: castle / fort\n  castle: palace\n", None, "key 'castle' appears twice"),
    ('names:\n  "church  building": museum\n  church building: church\n', None,
     "names['church  building'] -> 'museum' and names['church building'] -> 'church'"),
    ("cluster_fingerprint: 123\n", None, "cluster_fingerprint: 123 is not a string (quote it)"),
    ("names: {3: lake}\n", None, "names[3]: a scraped name must be a non-empty string"),
])
def test_curation_errors_name_file_and_key(tmp_path, text, fingerprint, message):
    path = write(tmp_path / "curation.yaml", text)
    with pytest.raises(ValueError, match="curation.yaml") as err:
        curate.load_curation(path, SC, fingerprint)
    assert message in str(err.value)


def test_curation_accepts_stripped_values_normalised_keys_and_matching_fingerprints(tmp_path):
    path = write(tmp_path / "c.yaml", """
        cluster_fingerprint: "abc"
        names:
          bay: ocean area
          " church   building ": church
          church building: church
          gone: null
        clusters: {0: lake, 2: null}
        """)
    cur = curate.load_curation(path, SC, "abc")
    assert cur.names == {"bay": "ocean area ", "church building": "church", "gone": None}
    assert cur.clusters == {0: "lake", 2: None} and cur.fingerprint == "abc"
    # no cluster rules: any clustering (or none) is fine
    assert curate.load_curation(write(tmp_path / "d.yaml", "cluster_fingerprint: zzz\n"), SC, "abc").names == {}


def test_assign_precedence():
    cur = curate.Curation(names={"lake": "lake", "junk": None, "church building": "church"},
                          clusters={0: "canal", 1: None}, fingerprint="f")
    cluster_of = {"lake": 0, "old canal": 0, "junk": 0, "thing": 1, "other": 2, "church  building": 1}
    got = curate.assign(["lake", "old canal", "junk", "thing", "other", "nowhere", "church  building"], cur,
                        cluster_of)
    assert got == {
        "lake": ("lake", "name"),  # a name rule beats its cluster's rule
        "old canal": ("canal", "cluster"),
        "junk": (None, "dropped"),  # a null name rule drops, whatever its cluster says
        "thing": (None, "dropped"),  # a null cluster rule drops
        "other": (None, "unmapped"),  # a cluster without a rule
        "nowhere": (None, "unmapped"),  # no cluster at all
        "church  building": ("church", "name"),  # matched after whitespace normalisation
    }
    assert curate.assign(["old canal"], cur, None) == {"old canal": (None, "unmapped")}


LANDMARKS = """
    split,landmark_id,category,supercategory
    train,10,http://c/A,church building
    train,9,http://c/B,lake
    train,2,http://c/C,Wikimedia list article
    train,3,"http://c/D,_x",mystery thing
    index,12,http://c/H,church  building
    index,7,http://c/G,bay
    index,4,http://c/F,junk thing
    index,1,http://c/E,old canal
    """
CURATION = """
    cluster_fingerprint: "fp1"
    names:
      church building: church
      lake: lake
      Wikimedia list article: null
      bay: ocean area
    clusters:
      0: canal
      1: null
    """
NAMES = """
    name,landmarks,cluster,similarity
    lake,1,0,0.9
    old canal,1,0,0.8
    junk thing,1,1,0.7
    mystery thing,1,2,0.5
    """


def curate_inputs(tmp_path, fingerprint="fp1"):
    write(tmp_path / "landmarks.csv", LANDMARKS)
    (tmp_path / "cluster").mkdir()
    write(tmp_path / "cluster" / "names.csv", NAMES)
    (tmp_path / "cluster" / "cluster.json").write_text(json.dumps({"fingerprint": fingerprint, "k": 3}))
    return tmp_path / "landmarks.csv", tmp_path / "cluster", write(tmp_path / "curation.yaml", CURATION)


def test_run_curate_by_hand(tmp_path):
    landmarks, cluster, curation = curate_inputs(tmp_path)
    info = curate.run_curate(landmarks, cluster, curation, tmp_path / "labels")
    header = "landmark_id,category,supercategory,hierarchical_label,natural_or_human_made\n"
    assert (tmp_path / "labels" / "train_label_to_hierarchical.csv").read_text() == header + (
        "2,http://c/C,Wikimedia list article,,\n"
        '3,"http://c/D,_x",mystery thing,,\n'
        "9,http://c/B,lake,lake,natural\n"
        "10,http://c/A,church building,church,human-made\n")
    assert (tmp_path / "labels" / "index_label_to_hierarchical.csv").read_text() == header + (
        "1,http://c/E,old canal,canal,natural\n"
        "4,http://c/F,junk thing,,\n"
        "7,http://c/G,bay,ocean area ,natural\n"
        "12,http://c/H,church  building,church,human-made\n")
    assert info["splits"] == {"train": {"landmarks": 4, "labelled": 2, "unmapped": 1, "dropped": 1},
                              "index": {"landmarks": 4, "labelled": 3, "unmapped": 0, "dropped": 1}}
    assert info["names"] == {"total": 8, "name": 4, "cluster": 1, "dropped": 2, "unmapped": 1}
    assert info["landmarks_by_rule"] == {"name": 4, "cluster": 1, "dropped": 2, "unmapped": 1}
    assert info["unmapped"] == [{"name": "mystery thing", "landmarks": 1, "train": 1, "index": 0}]
    assert info["groups"] == {"human-made": {"train": 1, "index": 1}, "natural": {"train": 1, "index": 2}}
    assert info["supercategories"]["ocean area "] == {"group": "natural", "train": 0, "index": 1}
    assert info["supercategories"]["church"] == {"group": "human-made", "train": 1, "index": 1}
    assert sum(v["train"] + v["index"] for v in info["supercategories"].values()) == 5
    assert len(info["supercategories"]) == 78
    assert info["rules"] == {"names": 4, "names_unused": 0, "clusters": 2}
    assert json.loads((tmp_path / "labels" / "curate.json").read_text()) == info
    md = (tmp_path / "labels" / "curate.md").read_text()
    assert "| mystery thing | 1 | 1 | 0 |" in md and "| train | 4 | 2 | 1 | 1 |" in md
    assert sorted(p.name for p in (tmp_path / "labels").iterdir()) == [  # atomic: no temporary file left
        "curate.json", "curate.md", "index_label_to_hierarchical.csv", "train_label_to_hierarchical.csv"]


def test_run_curate_refuses_cluster_rules_for_another_clustering(tmp_path):
    landmarks, cluster, curation = curate_inputs(tmp_path, fingerprint="other")
    with pytest.raises(ValueError, match="'fp1' but the clustering given has 'other'"):
        curate.run_curate(landmarks, cluster, curation, tmp_path / "labels")
    with pytest.raises(ValueError, match="no clustering was given"):
        curate.run_curate(landmarks, None, curation, tmp_path / "labels")
    assert not (tmp_path / "labels").exists()


def test_run_curate_without_clusters_uses_the_packaged_file(tmp_path):
    write(tmp_path / "landmarks.csv", LANDMARKS)
    info = curate.run_curate(tmp_path / "landmarks.csv", None, curate.CURATION_FILE, tmp_path / "labels")
    assert info["splits"]["train"] == {"landmarks": 4, "labelled": 2, "unmapped": 1, "dropped": 1}
    assert info["names"]["cluster"] == 0 and info["inputs"]["cluster_fingerprint"] is None


def test_run_curate_input_errors(tmp_path):
    write(tmp_path / "bad.csv", "split,landmark_id,category,supercategory\ntrain,1,c,lake\ntrain,1,d,lake\n")
    with pytest.raises(ValueError, match=r"bad.csv, line 3: train landmark 1 is listed twice"):
        curate.run_curate(tmp_path / "bad.csv", None, curate.CURATION_FILE, tmp_path / "o")
    write(tmp_path / "bad2.csv", "split,landmark_id,category\ntrain,1,c\n")
    with pytest.raises(ValueError, match=r"bad2.csv: missing column\(s\) \['supercategory'\]"):
        curate.run_curate(tmp_path / "bad2.csv", None, curate.CURATION_FILE, tmp_path / "o")
    with pytest.raises(FileNotFoundError, match="cluster.json"):
        curate.run_curate(tmp_path / "bad.csv", tmp_path, curate.CURATION_FILE, tmp_path / "o")


HIER = "landmark_id,category,supercategory,hierarchical_label,natural_or_human_made\n"


def release(tmp_path, train=True):
    rel = tmp_path / "release"
    rel.mkdir()
    if train:
        write(rel / "train_label_to_hierarchical.csv", HIER + textwrap.dedent("""
            1,c,castle,castle / fort,human-made
            2,c,castle,castle / fort,human-made
            3,c,castle,palace,human-made
            4,c,lake,lake,natural
            5,c,unlabelled thing,,
            """).lstrip())
    write(rel / "index_label_to_hierarchical.csv", HIER + textwrap.dedent("""
        0,c,bay,ocean area ,natural
        1,c,manor,palace,human-made
        2,c,manor,house,human-made
        3,c,fortified  church,church,human-made
        """).lstrip())
    return rel


def test_seed_curation_majority_ties_comments_and_base(tmp_path):
    base = write(tmp_path / "base.yaml", """
        cluster_fingerprint: "zz"
        names: {castle: palace, tree: tree, junk: null}
        clusters: {3: lake}
        """)
    out = tmp_path / "seeded.yaml"
    info = curate.seed_curation(release(tmp_path), out, base_curation=base)
    assert info == {"names": 7, "from_release": 5, "from_base": 2, "unanimous": 3, "ties": 1, "out": str(out)}
    text = out.read_text()
    assert '"castle": "castle / fort"  # 2 of 3 landmarks; also: palace 1' in text
    assert '"manor": "house"  # 1 of 2 landmarks, tie; also: palace 1' in text
    assert '"lake": "lake"\n' in text and '"junk": null' in text
    cur = curate.load_curation(out, SC)
    assert cur.names == {"bay": "ocean area ", "castle": "castle / fort", "fortified church": "church",
                         "lake": "lake", "manor": "house", "tree": "tree", "junk": None}
    assert list(cur.names)[:5] == sorted(list(cur.names)[:5]) and cur.clusters == {} and cur.fingerprint is None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_seed_curation_one_file_missing_errors_and_odd_names(tmp_path):
    rel = release(tmp_path, train=False)
    assert curate.seed_curation(rel, tmp_path / "s.yaml")["names"] == 3
    with open(rel / "index_label_to_hierarchical.csv", "a") as f:
        f.write('9,c,"we\x80ird ""name"":  \\\\ x",lake,natural\n')
    curate.seed_curation(rel, tmp_path / "s.yaml")
    assert curate.load_curation(tmp_path / "s.yaml", SC).names['we\x80ird "name": \\\\ x'] == "lake"
    with open(rel / "index_label_to_hierarchical.csv", "a") as f:
        f.write("8,c,x,chruch,human-made\n")
    with pytest.raises(ValueError, match=r"index_label_to_hierarchical.csv: hierarchical_label: 'chruch' is not one"):
        curate.seed_curation(rel, tmp_path / "s.yaml")
    with pytest.raises(FileNotFoundError, match="train_label_to_hierarchical.csv"):
        curate.seed_curation(tmp_path / "nowhere", tmp_path / "s.yaml")


HOSTILE = "Bad|name <img src=x onerror=alert(1)> & [link](http://e) `code`\nnext row\r\nend"
HOSTILE_MD = r"Bad\|name &lt;img src=x onerror=alert(1)&gt; &amp; \[link\](http://e) \`code\` next row end"


def test_curate_md_escapes_scraped_names_in_its_table_cells():
    info = {"names": {"total": 1, "name": 0, "cluster": 0, "dropped": 0, "unmapped": 1},
            "inputs": {"curation": "c.yaml", "landmarks": "l.csv", "cluster_fingerprint": None},
            "splits": {"train": {"landmarks": 1, "labelled": 0, "unmapped": 1, "dropped": 0}},
            "rules": {"names": 0, "names_unused": 0},
            "supercategories": {"a|b": {"group": "<g>", "train": 0, "index": 0}}, "groups": {"<g>": {"train": 0, "index": 0}},
            "unmapped": [{"name": HOSTILE, "landmarks": 1, "train": 1, "index": 0}]}
    md = curate.render(info)
    assert f"| {HOSTILE_MD} | 1 | 1 | 0 |\n" in md
    assert "| a\\|b | &lt;g&gt; | 0 | 0 |\n" in md and "| **&lt;g&gt;** | | 0 | 0 |\n" in md
    assert "<" not in md
    for line in md.splitlines():  # every table row keeps its 4 or 5 cells: unescaped pipes only between cells
        if line.startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", line)) in (5, 6), line
