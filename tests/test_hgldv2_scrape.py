"""The H-GLDv2 scrape against a real HTTP server on 127.0.0.1 that answers like the Commons and
Wikidata Action APIs (rankrepro.hgldv2.fake_api): every resolution path, the ranks, missing
labels, 429 / 503 / maxlag with their waits, batching, etiquette, the cache and a resumed scrape
that asks nothing twice. Expected values are written by hand from the world below."""

import csv
import json

import pytest
import requests

from rankrepro.hgldv2 import scrape
from rankrepro.hgldv2.fake_api import FakeWikimedia, normalize_title
from rankrepro.hgldv2.scrape import ApiClient, ApiError, category_title, run_scrape

UA = "rankrepro-tests/0.1 (https://example.org; tests@example.org) python-requests/2"

WORLD = {
    "pages": {
        "Category:Notre-Dame de Paris": {"item": "Q2981"},  # topic item sitelinked directly
        "Category:Tower Bridge": {"item": "Q4000001"},  # a category item with P301 -> Q83125
        "Category:Old bridge name": {"soft_redirect": "Category:Tower Bridge"},  # {{Category redirect}}
        "Category:Loop A": {"soft_redirect": "Category:Loop B"},
        "Category:Loop B": {"soft_redirect": "Category:Loop A"},
        "Category:Pont Neuf (Paris)": {"redirect": "Category:Pont Neuf"},  # hard redirect
        "Category:Pont Neuf": {"item": "Q842346"},
        "Category:Some people": {"item": "Q4000002"},  # category item without P301
        "Category:Mercury": {"item": "Q4000003"},  # a disambiguation item
        "Category:Lac Léman": {"item": "Q6403"},  # preferred + normal + deprecated P31
        "Category:Unlabelled thing": {"item": "Q4000004"},  # its class has no English label
        "Category:Unlinked place": {},  # no sitelink
        "Category:Deleted item": {"item": "Q4999999"},  # the item does not exist
        "Category:Unknown value": {"item": "Q4000005"},  # only a somevalue P31
    },
    "entities": {
        "Q2981": {"label": "Notre-Dame de Paris", "P31": [["Q2977", "normal"], ["Q1088552", "normal"]]},
        "Q4000001": {"P31": [["Q4167836", "normal"]], "P301": [["Q83125", "normal"]]},
        "Q83125": {"label": "Tower Bridge", "P31": [["Q158438", "normal"], ["Q537127", "deprecated"]]},
        "Q842346": {"label": "Pont Neuf", "P31": [["Q158438", "normal"]]},
        "Q4000002": {"P31": [["Q4167836", "normal"]]},
        "Q4000003": {"P31": [["Q4167410", "normal"]]},
        "Q6403": {"label": "Lake Geneva", "P31": [["Q23397", "normal"], ["Q9430", "preferred"],
                                                  ["Q188025", "deprecated"]]},
        "Q4000004": {"P31": [["Q4000100", "normal"]]},
        "Q4000005": {"P31": [[None, "normal"]]},
        "Q2977": {"label": "cathedral"}, "Q1088552": {"label": "Catholic church building"},
        "Q158438": {"label": "arch bridge"}, "Q537127": {"label": "road bridge"},
        "Q4167836": {"label": "Wikimedia category"}, "Q4167410": {"label": "Wikimedia disambiguation page"},
        "Q23397": {"label": "lake"}, "Q9430": {"label": "ocean"}, "Q188025": {"label": "salt lake"},
        "Q4000100": {},
    },
}

#: landmark -> category URL as GLDv2 writes them (http, underscores, one percent-encoded, one lower-case)
TRAIN = {
    1: "http://commons.wikimedia.org/wiki/Category:Notre-Dame_de_Paris",
    2: "http://commons.wikimedia.org/wiki/Category:Tower_Bridge",
    3: "http://commons.wikimedia.org/wiki/Category:Old_bridge_name",
    4: "http://commons.wikimedia.org/wiki/Category:Loop_A",
    5: "http://commons.wikimedia.org/wiki/Category:Pont_Neuf_(Paris)",
    6: "http://commons.wikimedia.org/wiki/Category:Some_people",
    7: "http://commons.wikimedia.org/wiki/Category:Mercury",
    8: "http://commons.wikimedia.org/wiki/Category:Lac_L%C3%A9man",
    9: "http://commons.wikimedia.org/wiki/Category:unlabelled_thing",
    10: "http://commons.wikimedia.org/wiki/Category:Unlinked_place",
    11: "http://commons.wikimedia.org/wiki/Category:Deleted_item",
    12: "http://commons.wikimedia.org/wiki/Category:Not_there",
    13: "http://commons.wikimedia.org/wiki/Category:Unknown_value",
    14: "",
}
INDEX = {7: "http://commons.wikimedia.org/wiki/Category:Tower_Bridge"}  # another id space, same category

#: landmark -> (resolved_via, item, topic, [(class, label, rank)]), by hand from WORLD
EXPECTED = {
    1: ("sitelink", "Q2981", None, [("Q2977", "cathedral", "normal"),
                                    ("Q1088552", "Catholic church building", "normal")]),
    2: ("sitelink+P301", "Q4000001", "Q83125", [("Q158438", "arch bridge", "normal")]),
    3: ("soft-redirect+sitelink+P301", "Q4000001", "Q83125", [("Q158438", "arch bridge", "normal")]),
    4: ("soft-redirect+soft-redirect+redirect-loop", None, None, []),  # A -> B -> A
    5: ("hard-redirect+sitelink", "Q842346", None, [("Q158438", "arch bridge", "normal")]),
    6: ("sitelink", "Q4000002", None, [("Q4167836", "Wikimedia category", "normal")]),
    7: ("sitelink", "Q4000003", None, [("Q4167410", "Wikimedia disambiguation page", "normal")]),
    8: ("sitelink", "Q6403", None, [("Q9430", "ocean", "preferred")]),
    9: ("sitelink", "Q4000004", None, [("Q4000100", None, "normal")]),
    10: ("no-sitelink", None, None, []),
    11: ("sitelink+missing-item", "Q4999999", None, []),
    12: ("missing-page", None, None, []),
    13: ("sitelink+no-P31", "Q4000005", None, []),
    14: ("no-category", None, None, []),
}


def write_categories(path, landmarks: dict) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["landmark_id", "category"])
        writer.writerows(landmarks.items())
    return str(path)


@pytest.fixture
def inputs(tmp_path):
    return {"train": write_categories(tmp_path / "train.csv", TRAIN),
            "index": write_categories(tmp_path / "index.csv", INDEX)}


def scrape_with(api, inputs, out, cache, waits=None, **options):
    return run_scrape(inputs, out, cache, commons_url=api.commons_url, wikidata_url=api.wikidata_url,
                      user_agent=UA, min_interval=0, progress=False,
                      sleep=(waits.append if waits is not None else lambda s: None), **options)


def read_rows(out):
    return [json.loads(line) for line in (out / "landmarks.jsonl").read_text().splitlines()]


def test_every_resolution_path_rank_and_label(tmp_path, inputs):
    with FakeWikimedia(WORLD) as api:
        summary = scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache")
    rows = read_rows(tmp_path / "out")
    train = {r["landmark_id"]: r for r in rows if r["split"] == "train"}
    assert set(train) == set(EXPECTED)
    for landmark, (via, item, topic, classes) in EXPECTED.items():
        row = train[landmark]
        assert (row["resolved_via"], row["item"], row["topic"]) == (via, item, topic), landmark
        assert [(c["id"], c["label"], c["rank"]) for c in row["classes"]] == classes, landmark
    assert train[8]["title"] == "Category:Lac Léman" and train[8]["category"] == TRAIN[8]
    [index] = [r for r in rows if r["split"] == "index"]
    assert (index["landmark_id"], index["resolved_via"], index["topic"]) == (7, "sitelink+P301", "Q83125")
    assert summary["landmarks"] == {"train": 14, "index": 1}
    assert summary["with_classes"] == {"train": 8, "index": 1}


def test_the_answers_have_the_real_apis_shapes(tmp_path):
    """normalized / redirects / missing pages on Commons; missing entities and rank fields on Wikidata."""
    with FakeWikimedia(WORLD) as api:
        headers = {"User-Agent": UA}
        data = requests.get(api.commons_url, headers=headers, timeout=10, params={
            "action": "query", "formatversion": "2", "prop": "pageprops", "ppprop": "wikibase_item",
            "redirects": "1", "titles": "Category:pont_Neuf_(Paris)|Category:Nowhere", "format": "json"}).json()
        assert data["query"]["normalized"] == [{"fromencoded": False, "from": "Category:pont_Neuf_(Paris)",
                                                "to": "Category:Pont Neuf (Paris)"}]
        assert data["query"]["redirects"] == [{"from": "Category:Pont Neuf (Paris)", "to": "Category:Pont Neuf"}]
        pages = {p["title"]: p for p in data["query"]["pages"]}
        assert pages["Category:Pont Neuf"]["pageprops"] == {"wikibase_item": "Q842346"}
        assert pages["Category:Nowhere"]["missing"] is True
        data = requests.get(api.wikidata_url, headers=headers, timeout=10, params={
            "action": "wbgetentities", "ids": "Q6403|Q1", "props": "claims", "format": "json"}).json()
        assert data["entities"]["Q1"] == {"id": "Q1", "missing": ""}
        p31 = data["entities"]["Q6403"]["claims"]["P31"]
        assert [(s["mainsnak"]["datavalue"]["value"]["id"], s["rank"]) for s in p31] == [
            ("Q23397", "normal"), ("Q9430", "preferred"), ("Q188025", "deprecated")]
        assert normalize_title("category:lac_Léman") == "Category:Lac Léman"


def test_429_503_and_maxlag_are_retried_after_their_waits(tmp_path, inputs):
    world = {**WORLD, "faults": [{"at": 1, "status": 429, "retry_after": "7"}, {"at": 3, "status": 503},
                                 {"at": 4, "status": 503}, {"at": 6, "maxlag": 9, "retry_after": "3"},
                                 {"at": 8, "maxlag": 12}]}
    waits = []
    with FakeWikimedia(world) as api:
        summary = scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache", waits=waits, backoff=2.0)
        statuses = [(r.status, r.fault) for r in api.log]
    # 429: its Retry-After; two 503s in a row: back-off 2 * 2**0 then 2 * 2**1; maxlag: Retry-After,
    # then without Retry-After the lag (>= 5 s)
    assert waits == [7.0, 2.0, 4.0, 3.0, 12.0]
    assert statuses[:8] == [(429, "429"), (200, None), (503, "503"), (503, "503"), (200, None),
                            (200, "maxlag"), (200, None), (200, "maxlag")]
    assert summary["retries"] == 5
    # the same result as without faults
    with FakeWikimedia(WORLD) as api:
        scrape_with(api, inputs, tmp_path / "clean-out", tmp_path / "clean-cache")
    assert read_rows(tmp_path / "out") == read_rows(tmp_path / "clean-out")


def test_a_request_that_keeps_failing_gives_up_naming_it(tmp_path):
    world = {**WORLD, "faults": [{"at": n, "status": 503} for n in range(1, 10)]}
    with FakeWikimedia(world) as api:
        client = ApiClient(tmp_path / "cache", user_agent=UA, min_interval=0, max_retries=2, sleep=lambda s: None)
        with pytest.raises(ApiError, match=r"gave up after 3 attempts \(last: HTTP 503\)"):
            client.get(api.wikidata_url, {"action": "wbgetentities", "ids": "Q6403", "props": "claims"})
        assert len(api.log) == 3
    assert not list((tmp_path / "cache").rglob("*.json"))  # nothing cached from a failure


def test_etiquette_user_agent_maxlag_and_batches_of_50(tmp_path):
    many = {n: f"http://commons.wikimedia.org/wiki/Category:Place_{n:03d}" for n in range(120)}
    world = {"pages": {f"Category:Place {n:03d}": {"item": f"Q{5000 + n}"} for n in range(120)},
             "entities": {**{f"Q{5000 + n}": {"P31": [[f"Q{9000 + n % 60}", "normal"]]} for n in range(120)},
                          **{f"Q{9000 + c}": {"label": f"kind {c}"} for c in range(60)}}}
    inputs = {"train": write_categories(tmp_path / "train.csv", many),
              "index": write_categories(tmp_path / "index.csv", {})}
    with FakeWikimedia(world) as api:
        scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache")
        log = list(api.log)
    assert all(r.status == 200 and r.fault is None for r in log)
    assert all(r.user_agent == UA and r.params["maxlag"] == "5" and r.params["format"] == "json" for r in log)
    sizes = [len((r.params.get("titles") or r.params["ids"]).split("|")) for r in log]
    # 120 titles, 120 items, 60 classes: 50 per call
    assert sizes == [50, 50, 20, 50, 50, 20, 50, 10]
    rows = read_rows(tmp_path / "out")
    assert [r["classes"][0]["label"] for r in rows[:3]] == ["kind 0", "kind 1", "kind 2"]


def test_the_server_refuses_library_user_agents_and_too_many_values(tmp_path):
    with FakeWikimedia(WORLD) as api:
        answer = requests.get(api.commons_url, params={"action": "query", "titles": "Category:X"}, timeout=10)
        assert answer.status_code == 403  # python-requests' own User-Agent
        with pytest.raises(ValueError, match="User-Agent"):
            ApiClient(tmp_path, user_agent=f"python-requests/{requests.__version__}")
        client = ApiClient(tmp_path / "cache", user_agent=UA, min_interval=0, sleep=lambda s: None)
        ids = "|".join(f"Q{n}" for n in range(1, 52))
        with pytest.raises(ApiError, match="toomanyvalues"):
            client.get(api.wikidata_url, {"action": "wbgetentities", "ids": ids, "props": "claims"})


def test_an_interrupted_scrape_resumes_from_its_cache_and_asks_nothing_twice(tmp_path, inputs):
    world = {**WORLD, "faults": [{"abort_after": 4}]}
    with FakeWikimedia(world) as api:
        with pytest.raises(ApiError, match="HTTP 400"):
            scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache")
        assert not (tmp_path / "out" / "landmarks.jsonl").exists()  # nothing half-written
        answered_before = sum(api.served.values())
        assert answered_before == 4
        api.faults = []  # the server is back
        summary = scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache")
        assert api.repeated() == {}  # every request answered once over both runs
        assert summary["cached"] == 4 and summary["requests"] == sum(api.served.values()) - 4
        again = scrape_with(api, inputs, tmp_path / "again", tmp_path / "cache")
        assert again["requests"] == 0 and api.repeated() == {}
    with FakeWikimedia(WORLD) as fresh:
        scrape_with(fresh, inputs, tmp_path / "uninterrupted", tmp_path / "other-cache")
    assert read_rows(tmp_path / "out") == read_rows(tmp_path / "uninterrupted") == read_rows(tmp_path / "again")


def test_a_damaged_cache_file_is_asked_again(tmp_path):
    with FakeWikimedia(WORLD) as api:
        client = ApiClient(tmp_path / "cache", user_agent=UA, min_interval=0, sleep=lambda s: None)
        params = {"action": "wbgetentities", "ids": "Q6403", "props": "claims"}
        first = client.get(api.wikidata_url, params)
        cached = client.cache_file(api.wikidata_url, {**params, "format": "json"})
        assert json.loads(json.loads(cached.read_text())["body"]) == first
        cached.write_text("{truncated")
        assert client.get(api.wikidata_url, params) == first
        assert client.stats.requests == 2 and client.stats.cached == 0


@pytest.mark.parametrize("url, title", [
    ("http://commons.wikimedia.org/wiki/Category:Basilica_of_the_Assumption_(Prague)",
     "Category:Basilica of the Assumption (Prague)"),
    ("https://commons.wikimedia.org/wiki/Category:Lac_L%C3%A9man", "Category:Lac Léman"),
    ("Category:Already a title", "Category:Already a title"),
    ("http://commons.wikimedia.org/wiki/category:lower__case ", "Category:lower case"),
    ("http://commons.wikimedia.org/wiki/File:Photo.jpg", None),
    ("", None),
    ("http://commons.wikimedia.org/wiki/Category:", None),
])
def test_category_titles(url, title):
    assert category_title(url) == title


def test_category_file_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        scrape.read_categories({"train": tmp_path / "absent.csv"})
    bad = tmp_path / "bad.csv"
    bad.write_text("landmark_id,category\n1,x\nseven,y\n")
    with pytest.raises(ValueError, match=r"bad.csv, line 3: landmark_id 'seven'"):
        scrape.read_categories({"train": bad})
    bad.write_text("landmark_id,category\n1,x\n1,y\n")
    with pytest.raises(ValueError, match=r"bad.csv, line 3: landmark 1 listed twice"):
        scrape.read_categories({"train": bad})
    bad.write_text("id,url\n1,x\n")
    with pytest.raises(ValueError, match=r"bad.csv: header .* lacks \['landmark_id', 'category'\]"):
        scrape.read_categories({"train": bad})


def test_truthy_ranks():
    def st(value, rank, snaktype="value"):
        snak = {"snaktype": snaktype}
        if snaktype == "value":
            snak["datavalue"] = {"value": {"id": value}}
        return {"mainsnak": snak, "rank": rank}

    entity = {"claims": {"P31": [st("Q1", "normal"), st("Q2", "preferred"), st("Q3", "deprecated"),
                                 st(None, "preferred", "somevalue")]}}
    assert scrape.values_of(entity, "P31") == [("Q2", "preferred")]
    entity = {"claims": {"P31": [st("Q1", "normal"), st("Q3", "deprecated"), st("Q4", "normal")]}}
    assert scrape.values_of(entity, "P31") == [("Q1", "normal"), ("Q4", "normal")]
    assert scrape.values_of({"claims": {"P31": [st("Q3", "deprecated")]}}, "P31") == []
    assert scrape.values_of({}, "P31") == []


def test_retry_after_http_date_and_default_user_agent():
    assert scrape.parse_retry_after("120") == 120.0
    assert scrape.parse_retry_after(None) is None and scrape.parse_retry_after("soon") is None
    assert 0 <= scrape.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0  # a past date: no wait
    agent = scrape.default_user_agent("me@example.org")
    assert agent.startswith("rankrepro-hgldv2-bot/") and "me@example.org" in agent and "python-requests/" in agent
