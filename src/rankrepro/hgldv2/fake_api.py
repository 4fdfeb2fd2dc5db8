"""A loopback stand-in for the Wikimedia Commons and Wikidata Action APIs (tests and the demo).

:class:`FakeWikimedia` serves, from a :class:`rankrepro.loopback.LoopbackServer` (a real HTTP
server on 127.0.0.1, ephemeral port), the four requests :mod:`rankrepro.hgldv2.scrape` makes, in
the APIs' own JSON shapes (recorded from the live APIs; formatversion=2 on Commons, wbgetentities
on Wikidata):

- ``<commons_url>?action=query&prop=pageprops|templates&ppprop=wikibase_item&redirects=1
  &tltemplates=Template:Category redirect&titles=...``: ``normalized`` (underscores, lower-case
  first letter), hard ``redirects``, ``pages`` with ``pageprops.wikibase_item``, the soft-redirect
  template, or ``missing``.
- ``<commons_url>?action=query&prop=revisions&rvprop=content&rvslots=main&titles=...``: the page
  text of soft redirects (``{{Category redirect|Target}}``).
- ``<wikidata_url>?action=wbgetentities&ids=...&props=claims`` / ``props=labels&languages=en``:
  entities with P31 / P301 statements and their ranks (and ``somevalue`` snaks), ``missing`` ids,
  English labels (or none).

The *world* (what the wikis hold) is a dict, loadable from JSON::

    {"pages": {"Category:Eiffel Tower": {"item": "Q243"},            # sitelinked
               "Category:Tour Eiffel": {"soft_redirect": "Category:Eiffel Tower"},
               "Category:Eiffel tower (Paris)": {"redirect": "Category:Eiffel Tower"},  # hard
               "Category:Unlinked": {}},
     "entities": {"Q243": {"label": "Eiffel Tower",
                           "P31": [["Q1440476", "preferred"], ["Q570116", "normal"]],
                           "P301": [["Q9", "normal"]]},
                  "Q1440476": {"label": "lattice tower"}, "Q77": {}},     # Q77: no English label
     "faults": [{"at": 3, "status": 429, "retry_after": "1"},            # 3rd request overall
                {"at": 5, "status": 503},
                {"at": 7, "maxlag": 6, "retry_after": "1"},
                {"at": 9, "body": [1, 2]},                                # a 200 with this JSON body
                {"abort_after": 40}]}                                     # then HTTP 400 forever

A title absent from ``pages`` is missing; an id absent from ``entities`` is missing. Faults count
every request from the server's start (``at`` is 1-based). Etiquette is enforced as the live
APIs do: no or a library-default User-Agent is 403; more than 50 titles/ids is the
``toomanyvalues`` error. Every request is logged (:attr:`log`), and :attr:`served` counts the
successful answers per request (path + parameters except ``maxlag``): a client that never asks
twice has every count at 1.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rankrepro.loopback import LoopbackServer, Request, Response

COMMONS_PATH = "/commons/w/api.php"
WIKIDATA_PATH = "/wikidata/w/api.php"
SOFT_REDIRECT_TEMPLATE = "Template:Category redirect"
MAX_VALUES = 50
LIBRARY_AGENTS = ("python-requests/", "python-urllib/", "curl/", "Wget/")


@dataclass
class LoggedRequest:
    path: str
    params: dict[str, str]
    user_agent: str
    status: int
    fault: str | None


def request_key(path: str, params: dict[str, str]) -> str:
    """The request without ``maxlag`` (a retry after a maxlag answer is the same request)."""
    return path + "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "maxlag")


def normalize_title(title: str) -> str:
    """MediaWiki's title normalisation: underscores to spaces, collapsed spaces, first letter of
    the namespace and of the page name upper-case."""
    title = " ".join(title.replace("_", " ").split())
    if ":" in title:
        ns, name = title.split(":", 1)
        name = name.strip()
        return f"{ns[:1].upper()}{ns[1:]}:{name[:1].upper()}{name[1:]}"
    return title[:1].upper() + title[1:]


class FakeWikimedia(LoopbackServer):
    """The fake APIs on a loopback server; a context manager (``with FakeWikimedia(world) as api:
    api.commons_url``)."""

    def __init__(self, world: dict | str | Path) -> None:
        if not isinstance(world, dict):
            world = json.loads(Path(world).read_text())
        self.pages: dict = world.get("pages", {})
        self.entities: dict = world.get("entities", {})
        self.faults: list[dict] = list(world.get("faults", []))
        self.log: list[LoggedRequest] = []
        self.served: Counter = Counter()
        self._lock = threading.Lock()
        super().__init__(self._respond)

    @property
    def commons_url(self) -> str:
        return self.base_url + COMMONS_PATH

    @property
    def wikidata_url(self) -> str:
        return self.base_url + WIKIDATA_PATH

    def repeated(self) -> dict[str, int]:
        """Requests answered successfully more than once (empty for a client that never asks twice)."""
        return {key: n for key, n in self.served.items() if n > 1}

    # -- answers ------------------------------------------------------------------------------

    def _respond(self, request: Request) -> Response:
        """Answer one request of the loopback server and record it (:attr:`log`, :attr:`served`)."""
        user_agent = request.header("User-Agent")
        status, headers, body, fault = self.answer(request.path, request.params, user_agent)
        with self._lock:
            self.log.append(LoggedRequest(request.path, request.params, user_agent, status, fault))
            if status == 200 and fault is None and not (isinstance(body, dict) and "error" in body):
                self.served[request_key(request.path, request.params)] += 1
        if isinstance(body, dict):
            return Response(status, json.dumps(body).encode(), "application/json; charset=utf-8", headers)
        return Response(status, body.encode(), "text/plain; charset=utf-8", headers)

    def answer(self, path: str, params: dict[str, str], user_agent: str) -> tuple[int, dict, object, str | None]:
        """(status, headers, body (dict = JSON, str = text), fault name) for one request."""
        with self._lock:
            ordinal = len(self.log) + 1
        fault = self._fault(ordinal)
        if fault is not None:
            return fault
        if not user_agent.strip() or user_agent.startswith(LIBRARY_AGENTS):
            return 403, {}, "Please set a user-agent and respect our robot policy https://w.wiki/4wJS.", None
        for name in ("titles", "ids"):
            if len(params.get(name, "").split("|")) > MAX_VALUES:
                return 200, {}, _error("toomanyvalues", f'Too many values supplied for parameter "{name}". '
                                                         f"The limit is {MAX_VALUES}."), None
        if path == COMMONS_PATH and params.get("action") == "query":
            if params.get("prop") == "revisions":
                return 200, {}, self._revisions(params["titles"].split("|")), None
            return 200, {}, self._pageprops(params["titles"].split("|")), None
        if path == WIKIDATA_PATH and params.get("action") == "wbgetentities":
            return 200, {}, self._entities(params["ids"].split("|"), params.get("props", "")), None
        return 200, {}, _error("badvalue", f"fake API: unsupported request {path} {params}"), None

    def _fault(self, ordinal: int):
        for fault in self.faults:
            if "abort_after" in fault and ordinal > fault["abort_after"]:
                return 400, {}, "fake API: aborted (the server went away)", "abort"
            if fault.get("at") != ordinal:
                continue
            headers = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            if "body" in fault:  # a malformed answer: any JSON, sent as given
                return 200, headers, json.dumps(fault["body"]), "body"
            if "maxlag" in fault:
                lag = fault["maxlag"]
                return 200, {**headers, "X-Database-Lag": str(lag)}, {
                    "error": {"code": "maxlag", "info": f"Waiting for a database server: {lag} seconds lagged.",
                              "host": "db1", "lag": lag, "type": "db"}}, "maxlag"
            return fault["status"], headers, f"HTTP {fault['status']}", str(fault["status"])
        return None

    def _resolve(self, title: str, normalized: list, redirects: list) -> str:
        norm = normalize_title(title)
        if norm != title:
            normalized.append({"fromencoded": False, "from": title, "to": norm})
        page = self.pages.get(norm)
        if page is not None and "redirect" in page:
            redirects.append({"from": norm, "to": page["redirect"]})
            return page["redirect"]
        return norm

    def _pageprops(self, titles: list[str]) -> dict:
        normalized, redirects, pages, seen = [], [], [], set()
        for title in titles:
            final = self._resolve(title, normalized, redirects)
            if final in seen:
                continue
            seen.add(final)
            page = self.pages.get(final)
            if page is None:
                pages.append({"ns": 14, "title": final, "missing": True})
                continue
            entry = {"pageid": 1000 + sorted(self.pages).index(final), "ns": 14, "title": final}
            if page.get("item"):
                entry["pageprops"] = {"wikibase_item": page["item"]}
            if page.get("soft_redirect"):
                entry["templates"] = [{"ns": 10, "title": SOFT_REDIRECT_TEMPLATE}]
            pages.append(entry)
        query = {"pages": pages}
        if normalized:
            query["normalized"] = normalized
        if redirects:
            query["redirects"] = redirects
        return {"batchcomplete": True, "query": query}

    def _revisions(self, titles: list[str]) -> dict:
        pages = []
        for title in titles:
            norm = normalize_title(title)
            page = self.pages.get(norm)
            if page is None:
                pages.append({"ns": 14, "title": norm, "missing": True})
                continue
            target = page.get("soft_redirect")
            text = f"{{{{Category redirect|{target}}}}}\n" if target else "[[Category:Somewhere]]\n"
            pages.append({"pageid": 1000 + sorted(self.pages).index(norm), "ns": 14, "title": norm,
                          "revisions": [{"slots": {"main": {"contentmodel": "wikitext",
                                                            "contentformat": "text/x-wiki", "content": text}}}]})
        return {"batchcomplete": True, "query": {"pages": pages}}

    def _entities(self, ids: list[str], props: str) -> dict:
        out = {}
        for qid in ids:
            entity = self.entities.get(qid)
            if entity is None:
                out[qid] = {"id": qid, "missing": ""}
                continue
            record = {"type": "item", "id": qid}
            if "labels" in props:
                record["labels"] = {"en": {"language": "en", "value": entity["label"]}} if entity.get("label") else {}
            if "claims" in props:
                record["claims"] = {prop: [_statement(qid, prop, value, rank) for value, rank in entity[prop]]
                                    for prop in ("P31", "P301") if entity.get(prop)}
            out[qid] = record
        return {"entities": out, "success": 1}


def _statement(subject: str, prop: str, value: str | None, rank: str) -> dict:
    """A wbgetentities statement; ``value`` None is an unknown value (``somevalue``, no datavalue)."""
    if value is None:
        snak = {"snaktype": "somevalue", "property": prop}
    else:
        snak = {"snaktype": "value", "property": prop, "datavalue": {
            "value": {"entity-type": "item", "numeric-id": int(value[1:]), "id": value},
            "type": "wikibase-entityid"}, "datatype": "wikibase-item"}
    return {"mainsnak": snak, "type": "statement", "id": f"{subject}${prop}-{value}", "rank": rank}


def _error(code: str, info: str) -> dict:
    return {"error": {"code": code, "info": info}, "servedby": "fake-api"}


# -- the demo's world: the Commons categories of the GLDv2 replica ---------------------------------

#: class items of the replica world: id -> English label (None: Wikidata has no English label)
REPLICA_CLASSES = {
    "Q16970": "church building", "Q2977": "cathedral", "Q12280": "bridge", "Q158438": "arch bridge",
    "Q8502": "mountain", "Q39816": "bay", "Q23397": "lake", "Q207694": "art museum",
    "Q33506": "museum", "Q23413": "castle", "Q169358": "stratovolcano", "Q44613": "monastery",
    "Q4167836": "Wikimedia category", "Q4167410": "Wikimedia disambiguation page",
    "Q12518": "tower", "Q839954": "archaeological site", "Q98765432": None,
}
#: the class of each scraped name used by the replica (its ``supercategory`` column)
CLASS_OF_NAME = {label: qid for qid, label in REPLICA_CLASSES.items() if label}


def replica_world(categories: dict[str, str | dict], *, faults: list[dict] | None = None) -> dict:
    """A world for the replica's categories. ``categories``: title -> the scraped class name the
    landmark should get (a sitelinked topic item with that class, preferred rank, plus a
    deprecated one), or a dict naming an edge case: ``{"case": "category_item", "name": n}`` (a
    category item whose P301 topic has class ``n``), ``"category_item_no_topic"``,
    ``"disambiguation"``, ``{"case": "soft_redirect", "name": n}``, ``{"case": "hard_redirect",
    "name": n}``, ``{"case": "several", "names": [...]}``, ``"no_label"``, ``"unlinked"``,
    ``"missing"``, ``"no_class"``."""
    pages: dict = {}
    entities: dict = {qid: ({"label": label} if label else {}) for qid, label in REPLICA_CLASSES.items()}
    next_id = iter(range(900_001, 10_000_000))

    def topic(classes: list[tuple[str, str]]) -> str:
        qid = f"Q{next(next_id)}"
        entities[qid] = {"label": f"replica landmark {qid}", "P31": [list(c) for c in classes]}
        return qid

    def typed(name: str) -> list[tuple[str, str]]:
        # the class at preferred rank, a deprecated one that must be ignored
        return [(CLASS_OF_NAME[name], "preferred"), (CLASS_OF_NAME["tower"], "deprecated")]

    for title, spec in sorted(categories.items()):
        spec = {"case": "plain", "name": spec} if isinstance(spec, str) else dict(spec)
        case = spec["case"]
        if case == "plain":
            pages[title] = {"item": topic(typed(spec["name"]))}
        elif case == "category_item":
            cat = f"Q{next(next_id)}"
            entities[cat] = {"P31": [["Q4167836", "normal"]], "P301": [[topic(typed(spec["name"])), "normal"]]}
            pages[title] = {"item": cat}
        elif case == "category_item_no_topic":
            cat = f"Q{next(next_id)}"
            entities[cat] = {"P31": [["Q4167836", "normal"]]}
            pages[title] = {"item": cat}
        elif case == "disambiguation":
            pages[title] = {"item": topic([("Q4167410", "normal")])}
        elif case in ("soft_redirect", "hard_redirect"):
            target = f"{title} (target)"
            pages[target] = {"item": topic(typed(spec["name"]))}
            pages[title] = {"soft_redirect": target} if case == "soft_redirect" else {"redirect": target}
        elif case == "several":
            pages[title] = {"item": topic([(CLASS_OF_NAME[n], "normal") for n in spec["names"]])}
        elif case == "no_label":
            pages[title] = {"item": topic([("Q98765432", "normal")])}
        elif case == "no_class":
            pages[title] = {"item": topic([])}
        elif case == "unlinked":
            pages[title] = {}
        elif case != "missing":
            raise ValueError(f"replica_world: unknown case {case!r} for {title!r}")
    return {"pages": pages, "entities": entities, "faults": list(faults or [])}


#: the demo world's answer for each landmark of the GLDv2 replica's category files, by
#: (split, landmark): a scraped name or an edge case (see :func:`replica_world`); the names agree
#: with the replica's released hierarchy (gldv2.REPLICA_SUPERCATEGORY) where it has one
DEMO_CASES = {
    ("train", 1234): {"case": "category_item", "name": "church building"},
    ("train", 20517): {"case": "soft_redirect", "name": "arch bridge"},
    ("train", 77001): "mountain",
    ("train", 138002): "bay",
    ("train", 153): {"case": "several", "names": ["museum", "art museum"]},
    ("train", 9001): {"case": "category_item_no_topic"},
    ("train", 200000): {"case": "hard_redirect", "name": "castle"},
    ("train", 300001): "cathedral",
    ("train", 300002): {"case": "disambiguation"},
    ("train", 300003): {"case": "no_label"},
    ("train", 300004): "monastery",
    ("train", 300005): {"case": "missing"},
    ("train", 300006): "archaeological site",
    ("train", 300007): "tower",
    ("train", 300008): {"case": "unlinked"},
    ("index", 1234): "lake",
    ("index", 501): "church building",
    ("index", 7002): "art museum",
    ("index", 88): "stratovolcano",
    ("index", 3030): "castle",
    ("index", 99999): "stratovolcano",
    ("index", 400001): "cathedral",
    ("index", 400002): "bridge",
    ("index", 400003): {"case": "no_class"},
}
#: the demo's faults: one 429 with Retry-After, one 503 (exponential back-off), one maxlag answer
DEMO_FAULTS = [{"at": 2, "status": 429, "retry_after": "1"}, {"at": 4, "status": 503},
               {"at": 6, "maxlag": 6, "retry_after": "1"}]


def demo_world() -> dict:
    """The world of the GLDv2 replica's categories (:data:`DEMO_CASES`, :data:`DEMO_FAULTS`); a
    landmark of the category files without a case is unlinked."""
    from rankrepro.data.datasets import gldv2
    from rankrepro.hgldv2.scrape import category_title

    categories = {}
    for split in ("train", "index"):
        for landmark in gldv2.replica_landmarks(split):
            spec = DEMO_CASES.get((split, landmark), {"case": "unlinked"})
            categories[category_title(gldv2.replica_category(split, landmark))] = spec
    return replica_world(categories, faults=DEMO_FAULTS)
