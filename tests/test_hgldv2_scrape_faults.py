"""The H-GLDv2 scrape against answers a broken proxy, a flaky server or an attacker can give, on the
real loopback fake of the APIs (rankrepro.hgldv2.fake_api, its ``body`` fault: a 200 with any JSON):
malformed answers are retried and never cached (nor used when an older version cached them), a
maxlag error without a numeric lag backs off by the default wait, and the cache does not depend on
the fake server's ephemeral port (the demo's resume)."""

import csv
import json

import pytest

from rankrepro.hgldv2.answers import answer_problem
from rankrepro.hgldv2.fake_api import FakeWikimedia
from rankrepro.hgldv2.scrape import ApiClient, ApiError, run_scrape

UA = "rankrepro-tests/0.1 (https://example.org; tests@example.org) python-requests/2"

WORLD = {
    "pages": {"Category:Notre-Dame de Paris": {"item": "Q2981"}, "Category:Pont Neuf": {"item": "Q842346"}},
    "entities": {"Q2981": {"label": "Notre-Dame de Paris", "P31": [["Q2977", "normal"]]},
                 "Q842346": {"label": "Pont Neuf", "P31": [["Q158438", "normal"]]},
                 "Q2977": {"label": "cathedral"}, "Q158438": {"label": "arch bridge"}},
}
TRAIN = {1: "http://commons.wikimedia.org/wiki/Category:Notre-Dame_de_Paris",
         2: "http://commons.wikimedia.org/wiki/Category:Pont_Neuf"}
#: landmark -> the class labels the scrape finds in WORLD (by hand)
EXPECTED = {1: ["cathedral"], 2: ["arch bridge"]}
#: requests of one scrape of TRAIN: the categories, the items, the class labels
REQUESTS = 3
CLAIMS = {"action": "wbgetentities", "ids": "Q2981", "props": "claims"}


@pytest.fixture
def inputs(tmp_path):
    files = {}
    for split, landmarks in (("train", TRAIN), ("index", {})):
        with open(tmp_path / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["landmark_id", "category"])
            writer.writerows(landmarks.items())
        files[split] = str(tmp_path / f"{split}.csv")
    return files


def scrape_with(api, inputs, out, cache, waits=None, **options):
    return run_scrape(inputs, out, cache, commons_url=api.commons_url, wikidata_url=api.wikidata_url,
                      user_agent=UA, min_interval=0, progress=False,
                      sleep=(waits.append if waits is not None else lambda s: None), **options)


def classes_by_landmark(out):
    rows = [json.loads(line) for line in (out / "landmarks.jsonl").read_text().splitlines()]
    return {r["landmark_id"]: [c["label"] for c in r["classes"]] for r in rows}


def client_for(tmp_path, **options):
    return ApiClient(tmp_path / "cache", user_agent=UA, min_interval=0, sleep=lambda s: None, **options)


def cached_bodies(cache):
    return [json.loads(json.loads(f.read_text())["body"]) for f in sorted(cache.rglob("*.json"))]


# -- malformed answers ------------------------------------------------------------------------------

@pytest.mark.parametrize("at, body", [
    (1, [1, 2]),  # a JSON list instead of the Commons query answer
    (1, {"batchcomplete": True}),  # a Commons answer without "query"
    (1, {"query": {"pages": {"1": {}}}}),  # pages as an object (formatversion 1), not the list asked for
    (1, {"query": {"pages": [{"ns": 14}]}}),  # a page without title
    (2, {"success": 1}),  # a Wikidata answer without "entities"
    (2, {"entities": [1]}),  # entities as a list
    (1, {"query": {"pages": [{"title": "Category:Pont Neuf", "pageprops": ["Q1"]}]}}),
    (1, {"query": {"pages": [], "redirects": [["Category:A", "Category:B"]]}}),
    (2, {"entities": {"Q2981": {"claims": {"P31": [{"rank": "normal"}]}}}}),  # a statement without mainsnak
    (2, {"entities": {"Q2981": {"claims": {"P31": [{"rank": "normal", "mainsnak": {"snaktype": "value"}}]}}}}),
    (3, {"entities": {"Q2977": {"labels": {"en": "cathedral"}}}}),
    (3, "just text"),  # a JSON string
])
def test_a_malformed_answer_is_retried_never_cached(tmp_path, inputs, at, body):
    world = {**WORLD, "faults": [{"at": at, "body": body}]}
    waits = []
    with FakeWikimedia(world) as api:
        summary = scrape_with(api, inputs, tmp_path / "out", tmp_path / "cache", waits=waits, backoff=2.0)
        assert [r.fault for r in api.log] == [None] * (at - 1) + ["body"] + [None] * (REQUESTS - at + 1)
    assert waits == [2.0] and summary["retries"] == 1  # the exponential back-off's first wait
    assert classes_by_landmark(tmp_path / "out") == EXPECTED  # not "missing-page" for every landmark
    assert body not in cached_bodies(tmp_path / "cache") and len(cached_bodies(tmp_path / "cache")) == REQUESTS
    with FakeWikimedia(WORLD) as api:  # a rerun asks nothing and reads the good answers
        again = scrape_with(api, inputs, tmp_path / "again", tmp_path / "cache")
        assert api.log == [] and again["cached"] == REQUESTS
    assert classes_by_landmark(tmp_path / "again") == EXPECTED


def test_the_problem_names_where_the_answer_is_malformed():
    query, entities = {"action": "query"}, {"action": "wbgetentities"}
    assert answer_problem([1], query) == "the answer is an array, not an object"
    assert answer_problem({"batchcomplete": True}, query) == "query is missing, not an object"
    assert answer_problem({"query": {"pages": [{"title": "X", "pageprops": []}]}}, query) == \
        "query.pages[0].pageprops is an array, not an object"
    assert answer_problem({"query": {"pages": [{"title": "X", "revisions": []}]}}, query) == \
        "query.pages[0].revisions is empty"
    assert answer_problem({"query": {"pages": [], "normalized": [{"from": "a"}]}}, query) == \
        "query.normalized[0].to is missing, not a string"
    assert answer_problem({"entities": {"Q1": {"labels": {"en": {"value": None}}}}}, entities) == \
        "entities.Q1.labels.en.value is null, not a string"
    assert answer_problem({"entities": {"Q1": {"claims": {"P31": [{"rank": "normal", "mainsnak": {
        "snaktype": "value", "datavalue": {"value": {}}}}]}}}}, entities) == \
        "entities.Q1.claims.P31[0].mainsnak.datavalue.value.id is missing, not a string"
    assert answer_problem({"entities": {"Q1": {"id": "Q1", "missing": ""}}}, entities) is None
    assert answer_problem({"query": {"pages": [{"title": "X", "missing": True}]}}, query) is None


def test_an_answer_that_stays_malformed_fails_naming_the_request(tmp_path):
    world = {**WORLD, "faults": [{"at": n, "body": {"success": 1}} for n in range(1, 4)]}
    with FakeWikimedia(world) as api:
        client = client_for(tmp_path, max_retries=2)
        with pytest.raises(ApiError, match=r"/wikidata/w/api\.php .*'ids': 'Q2981'.*gave up after 3 attempts "
                                           r"\(last: a malformed answer: .*entities"):
            client.get(api.wikidata_url, CLAIMS)
        assert len(api.log) == 3
    assert not list((tmp_path / "cache").rglob("*.json"))


@pytest.mark.parametrize("body", [[1, 2], {"success": 1}, {"error": {"code": "x"}}])
def test_a_malformed_answer_cached_by_an_older_version_is_asked_again(tmp_path, body):
    with FakeWikimedia(WORLD) as api:
        client = client_for(tmp_path)
        cached = client.cache_file(api.wikidata_url, {**CLAIMS, "format": "json"})
        cached.parent.mkdir(parents=True)
        cached.write_text(json.dumps({"url": api.wikidata_url, "params": {**CLAIMS, "format": "json"},
                                      "body": json.dumps(body)}))
        answer = client.get(api.wikidata_url, CLAIMS)
        assert set(answer["entities"]) == {"Q2981"} and len(api.log) == 1
        assert client.stats.requests == 1 and client.stats.cached == 0
        assert json.loads(json.loads(cached.read_text())["body"]) == answer  # replaced by the good one


@pytest.mark.parametrize("envelope", [[1], "text", {"body": 3}])
def test_a_cache_file_that_is_not_an_envelope_is_asked_again(tmp_path, envelope):
    with FakeWikimedia(WORLD) as api:
        client = client_for(tmp_path)
        cached = client.cache_file(api.wikidata_url, {**CLAIMS, "format": "json"})
        cached.parent.mkdir(parents=True)
        cached.write_text(json.dumps(envelope))
        assert set(client.get(api.wikidata_url, CLAIMS)["entities"]) == {"Q2981"}
        assert client.stats.requests == 1 and client.stats.cached == 0


def test_an_error_that_is_not_an_object_is_an_api_error_naming_the_request(tmp_path):
    with FakeWikimedia({**WORLD, "faults": [{"at": 1, "body": {"error": "boom"}}]}) as api:
        with pytest.raises(ApiError, match=r"/wikidata/w/api\.php.*API error: boom"):
            client_for(tmp_path).get(api.wikidata_url, CLAIMS)


# -- maxlag without a numeric lag -------------------------------------------------------------------

@pytest.mark.parametrize("fault", [
    {"maxlag": "abc"},  # "lag": "abc"
    {"maxlag": None},  # "lag": null
    {"maxlag": "nan"},
    {"maxlag": -3},
    {"body": {"error": {"code": "maxlag", "info": "Waiting for a database server"}}},  # no "lag"
])
def test_a_maxlag_answer_without_a_numeric_lag_waits_the_default(tmp_path, fault):
    waits = []
    with FakeWikimedia({**WORLD, "faults": [{"at": 1, **fault}]}) as api:
        client = ApiClient(tmp_path / "cache", user_agent=UA, min_interval=0, sleep=waits.append, backoff=2.0)
        assert set(client.get(api.wikidata_url, CLAIMS)["entities"]) == {"Q2981"}
        assert [r.fault for r in api.log] == [fault.get("body") and "body" or "maxlag", None]
    assert waits == [5.0] and client.stats.retries == 1  # Manual:Maxlag: at least 5 s


# -- the cache does not depend on the server's port -------------------------------------------------

def test_a_second_scrape_on_another_port_asks_nothing(tmp_path, inputs):
    with FakeWikimedia(WORLD) as first:
        scrape_with(first, inputs, tmp_path / "first", tmp_path / "cache")
        port = first.base_url
        assert len(first.log) == REQUESTS
    with FakeWikimedia(WORLD) as second:
        assert second.base_url != port
        summary = scrape_with(second, inputs, tmp_path / "second", tmp_path / "cache")
        assert second.log == [] and summary["requests"] == 0 and summary["cached"] == REQUESTS
    assert classes_by_landmark(tmp_path / "second") == classes_by_landmark(tmp_path / "first") == EXPECTED


def test_the_cache_key_keeps_host_path_and_parameters_apart():
    key = ApiClient.cache_key
    params = {"action": "query", "titles": "Category:X", "format": "json"}
    assert key("http://127.0.0.1:4001/commons/w/api.php", params) == \
        key("http://127.0.0.1:4002/commons/w/api.php", {**params, "maxlag": "5"})
    assert key("http://127.0.0.1:4001/commons/w/api.php", params) != \
        key("http://127.0.0.1:4001/wikidata/w/api.php", params)
    assert key("https://commons.wikimedia.org/w/api.php", params) != \
        key("https://test.wikidata.org/w/api.php", params)
    assert key("http://127.0.0.1:4001/commons/w/api.php", params) != \
        key("http://127.0.0.1:4001/commons/w/api.php", {**params, "titles": "Category:Y"})
    # a URL without port keys as before this change (an existing cache of the live APIs stays valid)
    assert key("https://commons.wikimedia.org/w/api.php", params) == \
        "a02a410e257cc00b3649b9bfacce80b1a6cffdf861d2027397f92aa0a9b14e6d"
