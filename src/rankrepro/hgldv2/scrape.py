"""Scrape the "instance of" classes of each GLDv2 landmark's Wikimedia Commons category.

SupRank TPAMI §VI-A reads the "Instance of" annotations shown on each landmark's Commons
category page (the {{Wikidata Infobox}}). The same data, as JSON, through the MediaWiki Action
API (hgldv2.md §2.2, "Route A"):

1. **Title.** ``category`` of ``{train,index}_label_to_category.csv`` is a Commons URL
   (``http://commons.wikimedia.org/wiki/Category:Basilica_of_..._(Prague)``): the text after
   ``/wiki/``, percent-decoded, underscores as spaces. Anything else is ``no-category``.
2. **Item.** Commons ``prop=pageprops`` (``wikibase_item``: the sitelinked Wikidata item),
   50 titles per call, hard redirects followed (``redirects=1``). A *soft* redirect (a page
   holding ``{{Category redirect|Target}}``, Commons' usual kind) is followed by reading the
   page text and asking again for the target (at most ``max_redirects`` hops; a loop stops).
   A page without sitelink is ``no-sitelink`` and a missing page ``missing-page`` (the P373
   fallback through SPARQL is not done: those landmarks stay unlabelled, counted).
3. **Topic.** A Commons category is usually sitelinked from a *category item* (P31 =
   Q4167836 "Wikimedia category"); the infobox then shows the item its P301 ("category's main
   topic") points to. So does this step; a category item without P301 keeps its own P31
   ("Wikimedia category", removed later by :mod:`.clean`).
4. **Classes.** The *truthy* P31 values of the item used (preferred statements if any, else
   normal ones, never deprecated; ``somevalue`` / ``novalue`` skipped), as the infobox and
   ``wdt:P31`` show them, in statement order; then their English labels
   (``languages=en&languagefallback=1``; none: ``label`` null).

Etiquette (API:Etiquette, Manual:Maxlag, User-Agent policy): requests are serial with at least
``min_interval`` seconds between them, batched 50 values a call, carry a descriptive
User-Agent and ``maxlag=5``. 429 and 5xx answers and the ``maxlag`` / ``ratelimited`` errors
are retried after ``Retry-After`` when given, else after an exponential back-off
(``backoff * 2**attempt``, capped); a ``maxlag`` error waits its ``lag`` but at least
:data:`MAXLAG_MIN_WAIT` seconds (that much when the lag is missing or not a number); other
errors stop the scrape naming the request. An answer that is not of the shape the scrape reads
(:func:`rankrepro.hgldv2.answers.answer_problem`: a Commons query needs ``query.pages``, an array of
pages with titles; wbgetentities needs ``entities``, an object of entities; ...) is retried like a
5xx and never cached.

Every raw answer is cached in ``cache_dir`` under the sha256 of its request (URL without its
port, and parameters, ``maxlag`` excluded: :meth:`ApiClient.cache_key`), written atomically: a
rerun asks nothing twice, and an interrupted scrape restarts from the cache (batches are formed
from sorted titles / ids, so a rerun asks the same requests in the same order). A cached answer
is checked like a fresh one: a malformed one (an older version cached it) is removed and asked
again. The output, ``landmarks.jsonl`` (format in
:mod:`rankrepro.hgldv2`), and ``scrape.json`` (counts, requests, cache hits, retries) are
written at the end.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlencode, urlsplit

import pandas as pd
import requests
from tqdm import tqdm

from rankrepro import __version__
from rankrepro.io import atomic_path, atomic_write_json, atomic_write_text, text_stream
from rankrepro.hgldv2.answers import answer_problem
from rankrepro.messages import ShortMessage
from rankrepro.retry_after import parse_retry_after

COMMONS_API = "https://commons.wikimedia.org/w/api.php"
WIKIDATA_API = "https://www.wikidata.org/w/api.php"
PROJECT_URL = "https://github.com/rankrepro/rankrepro"
BATCH = 50  # titles / ids per call without apihighlimits
RETRY_STATUS = {429, 500, 502, 503, 504}
RETRY_ERRORS = {"maxlag", "ratelimited"}
MAXLAG_MIN_WAIT = 5.0  # seconds; Manual:Maxlag asks clients to wait at least this long
WIKIMEDIA_CATEGORY = "Q4167836"
SOFT_REDIRECT_TEMPLATE = "Template:Category redirect"
#: {{Category redirect|Target}} and the redirects to that template Commons uses
SOFT_REDIRECT_RE = re.compile(
    r"\{\{\s*(?:category[ _]redirect|categoryredirect|cat[ _-]?redirect|cat-red|seecat|see[ _]cat)\s*\|\s*"
    r"(?:1\s*=\s*)?([^|}\n]+)", re.IGNORECASE)
SPLITS = {"train": "train_label_to_category.csv", "index": "index_label_to_category.csv"}


def default_user_agent(contact: str | None = None) -> str:
    """``<client>/<version> (<url>; <contact>) <library>/<version>``, the User-Agent policy's form."""
    who = f"{PROJECT_URL}; {contact}" if contact else PROJECT_URL
    return f"rankrepro-hgldv2-bot/{__version__} ({who}) python-requests/{requests.__version__}"


class ApiError(ShortMessage, RuntimeError):
    """A request the API refused for good (or kept failing after every retry)."""


def maxlag_wait(error: dict) -> float:
    """Seconds to wait after a ``maxlag`` error: its ``lag``, at least :data:`MAXLAG_MIN_WAIT`; that
    minimum when the lag is missing or not a finite number (a broken proxy, an attacker)."""
    try:
        lag = float(error.get("lag"))
    except (TypeError, ValueError):
        return MAXLAG_MIN_WAIT
    return max(MAXLAG_MIN_WAIT, lag) if math.isfinite(lag) else MAXLAG_MIN_WAIT


@dataclass
class Stats:
    requests: int = 0  # answers fetched from the network (successful)
    cached: int = 0  # answers read from the cache
    retries: int = 0
    waited_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        return self.requests / max(time.monotonic() - self.started, 1e-9)

    def postfix(self) -> str:
        return (f"requests={self.requests} cached={self.cached} retries={self.retries} "
                f"rate={self.rate():.2f}/s")


class ApiClient:
    """Serial, throttled, cached GETs to MediaWiki Action APIs (see the module docstring).

    ``sleep`` is how the client waits (``time.sleep``; a test may record the waits instead).
    """

    def __init__(self, cache_dir: str | Path, *, user_agent: str, maxlag: int = 5, min_interval: float = 0.5,
                 max_retries: int = 8, backoff: float = 2.0, backoff_cap: float = 300.0, timeout: float = 60.0,
                 sleep=time.sleep) -> None:
        if not user_agent.strip() or user_agent.startswith("python-requests/"):
            raise ValueError("user_agent: Wikimedia blocks empty and library-default User-Agents "
                             "(meta.wikimedia.org/wiki/User-Agent_policy); give a client name and a contact")
        self.cache_dir = Path(cache_dir)
        self.maxlag, self.min_interval, self.max_retries = maxlag, min_interval, max_retries
        self.backoff, self.backoff_cap, self.timeout, self.sleep = backoff, backoff_cap, timeout, sleep
        self.session = requests.Session()
        self.session.headers.update({"User-Agent": user_agent, "Accept-Encoding": "gzip"})
        self.stats = Stats()
        self._last = 0.0

    @staticmethod
    def cache_key(url: str, params: dict) -> str:
        """sha256 of ``<url without its port>?<sorted params without maxlag>``.

        The port is dropped so that a loopback fake on an ephemeral port (the demo, tests) finds
        its answers again on its next port; scheme, host and path still tell the APIs apart. A URL
        without an explicit port (the live APIs) keys exactly as before the port was dropped."""
        parts = urlsplit(url)
        if parts.port is not None:
            url = parts._replace(netloc=parts.netloc.rsplit(":", 1)[0]).geturl()
        query = urlencode(sorted((k, str(v)) for k, v in params.items() if k != "maxlag"))
        return hashlib.sha256(f"{url}?{query}".encode()).hexdigest()

    def cache_file(self, url: str, params: dict) -> Path:
        key = self.cache_key(url, params)
        return self.cache_dir / key[:2] / f"{key}.json"

    def get(self, url: str, params: dict) -> dict:
        """The JSON answer to ``url?params`` (``format=json`` and ``maxlag`` added), of the shape
        :func:`answer_problem` checks, from the cache when this request was answered before."""
        params = {**params, "format": "json"}
        cached = self.cache_file(url, params)
        if cached.is_file():
            data = self._read_cached(cached, params)
            if data is not None:
                self.stats.cached += 1
                return data
            cached.unlink()  # not ours, damaged or malformed: ask again
        params["maxlag"] = str(self.maxlag)
        last = ""
        for attempt in range(self.max_retries + 1):
            self._throttle()
            try:
                response = self.session.get(url, params=params, timeout=self.timeout)
            except requests.RequestException as err:
                last = f"{type(err).__name__}: {err}"
                self._wait(None, attempt)
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}"
                self._wait(response.headers.get("Retry-After"), attempt)
                continue
            if response.status_code != 200:
                hint = " (the User-Agent policy: give a client name and contact)" if response.status_code == 403 else ""
                raise ApiError(f"{response.url}: HTTP {response.status_code}{hint}: {response.text[:300]}")
            try:
                data = response.json()
            except ValueError:
                last = "an answer that is not JSON"
                self._wait(None, attempt)
                continue
            error = data.get("error") if isinstance(data, dict) else None
            if error:
                if not isinstance(error, dict):
                    raise ApiError(f"{response.url}: API error: {str(error)[:300]}")
                code = str(error.get("code", ""))
                if code in RETRY_ERRORS:
                    last = f"error {code}: {error.get('info', '')}"
                    lag_wait = maxlag_wait(error) if code == "maxlag" else None
                    self._wait(response.headers.get("Retry-After"), attempt, fallback=lag_wait)
                    continue
                raise ApiError(f"{response.url}: API error {code}: {error.get('info', '')}")
            problem = answer_problem(data, params)
            if problem:
                last = f"a malformed answer: {problem}"
                self._wait(None, attempt)
                continue
            with atomic_path(cached) as tmp:
                tmp.write_text(json.dumps({"url": url, "params": {k: v for k, v in params.items() if k != "maxlag"},
                                           "body": response.text}))
            self.stats.requests += 1
            return data
        raise ApiError(f"{url} {params}: gave up after {self.max_retries + 1} attempts (last: {last})")

    @staticmethod
    def _read_cached(cached: Path, params: dict):
        """The answer cached in ``cached``, or None when the file is not an envelope of a
        well-formed answer (see :func:`answer_problem`)."""
        try:
            envelope = json.loads(cached.read_text())
            data = json.loads(envelope["body"])
        except (ValueError, KeyError, TypeError):
            return None
        return None if answer_problem(data, params) or (isinstance(data, dict) and "error" in data) else data

    def _throttle(self) -> None:
        gap = self.min_interval - (time.monotonic() - self._last)
        if gap > 0:
            self.sleep(gap)
        self._last = time.monotonic()

    def _wait(self, retry_after: str | None, attempt: int, fallback: float | None = None) -> None:
        """Honour ``Retry-After`` (seconds or an HTTP date); else ``fallback``; else exponential."""
        seconds = parse_retry_after(retry_after)
        if seconds is None:
            seconds = fallback if fallback is not None else self.backoff * 2 ** attempt
        seconds = min(seconds, self.backoff_cap)
        self.stats.retries += 1
        self.stats.waited_s += seconds
        if attempt < self.max_retries:
            self.sleep(seconds)


# -- inputs -----------------------------------------------------------------------------------------

def category_title(url: str) -> str | None:
    """``Category:Name With Spaces`` from a Commons category URL (or title); None if it is not one."""
    text = url.strip()
    if "/wiki/" in text:
        text = text.split("/wiki/", 1)[1]
    text = " ".join(unquote(text).replace("_", " ").split())
    if not text.lower().startswith("category:") or len(text) <= len("category:"):
        return None
    return "Category:" + text[len("category:"):].strip()


def read_categories(files: dict[str, str | Path]) -> pd.DataFrame:
    """``split, landmark_id, category, title`` from ``{split: *_label_to_category.csv}``."""
    parts = []
    for split, file in files.items():
        file = Path(file)
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing (the GLDv2 {split} landmark -> Commons category map)")
        table = pd.read_csv(text_stream(file), dtype=str, keep_default_na=False)
        missing = [c for c in ("landmark_id", "category") if c not in table.columns]
        if missing:
            raise ValueError(f"{file}: header {list(table.columns)} lacks {missing}")
        ids = pd.to_numeric(table["landmark_id"].str.strip(), errors="coerce")
        if ids.isna().any():
            row = int(ids.isna().to_numpy().nonzero()[0][0])
            raise ValueError(f"{file}, line {row + 2}: landmark_id {table['landmark_id'].iat[row]!r} is not an integer")
        dup = ids.duplicated()
        if dup.any():
            row = int(dup.to_numpy().nonzero()[0][0])
            raise ValueError(f"{file}, line {row + 2}: landmark {int(ids.iat[row])} listed twice")
        parts.append(pd.DataFrame({"split": split, "landmark_id": ids.astype("int64"), "category": table["category"],
                                   "title": table["category"].map(category_title)}))
    return pd.concat(parts, ignore_index=True)


# -- the scrape -------------------------------------------------------------------------------------

def batches(values, size: int = BATCH):
    values = sorted(values)
    return [values[i:i + size] for i in range(0, len(values), size)]


def truthy(statements: list[dict]) -> list[dict]:
    """The best-rank statements with a value: preferred ones if any, else normal; never deprecated."""
    valued = [s for s in statements if s.get("mainsnak", {}).get("snaktype") == "value" and s.get("rank") != "deprecated"]
    preferred = [s for s in valued if s.get("rank") == "preferred"]
    return preferred or valued


def values_of(entity: dict, prop: str) -> list[tuple[str, str]]:
    """(item id, rank) of the truthy ``prop`` statements, statement order."""
    return [(s["mainsnak"]["datavalue"]["value"]["id"], s["rank"])
            for s in truthy(entity.get("claims", {}).get(prop, []))]


class Scraper:
    """One scrape: ``titles`` -> items -> topics -> classes -> labels (module docstring)."""

    def __init__(self, client: ApiClient, commons_url: str = COMMONS_API, wikidata_url: str = WIKIDATA_API,
                 max_redirects: int = 3, progress: bool = True) -> None:
        self.client, self.commons, self.wikidata = client, commons_url, wikidata_url
        self.max_redirects, self.progress = max_redirects, progress

    def _calls(self, what: str, groups: list[list[str]], call) -> None:
        with tqdm(total=len(groups), desc=what, unit="call", file=sys.stderr, disable=not self.progress,
                  mininterval=2.0) as bar:
            for group in groups:
                call(group)
                bar.set_postfix_str(self.client.stats.postfix(), refresh=False)
                bar.update()

    def resolve_titles(self, titles: set[str]) -> dict[str, tuple[str | None, str]]:
        """title -> (sitelinked item or None, how: ``sitelink`` after the redirects followed, or why not)."""
        # every title asked -> ("item", item, path) | ("soft", target, path) | ("none", reason, path)
        answer: dict[str, tuple[str, str | None, str]] = {}
        pending = set(titles)
        for hop in range(self.max_redirects + 1):
            soft: list[str] = []

            def ask(group, soft=soft):
                data = self.client.get(self.commons, {
                    "action": "query", "formatversion": "2", "prop": "pageprops|templates",
                    "ppprop": "wikibase_item", "tltemplates": SOFT_REDIRECT_TEMPLATE, "tllimit": "max",
                    "redirects": "1", "titles": "|".join(group)})
                query = data.get("query", {})
                renamed = {n["from"]: n["to"] for n in query.get("normalized", [])}
                redirected = {r["from"]: r["to"] for r in query.get("redirects", [])}
                pages = {p["title"]: p for p in query.get("pages", [])}
                for title in group:
                    name, path = renamed.get(title, title), ""
                    if name in redirected:
                        name, path = redirected[name], "hard-redirect+"
                    page = pages.get(name)
                    if page is None or page.get("missing"):
                        answer[title] = ("none", "missing-page", path)
                    elif page.get("pageprops", {}).get("wikibase_item"):
                        answer[title] = ("item", page["pageprops"]["wikibase_item"], path)
                    elif any(t.get("title") == SOFT_REDIRECT_TEMPLATE for t in page.get("templates", [])):
                        answer[title] = ("soft", name, path)  # target read below
                        soft.append(title)
                    else:
                        answer[title] = ("none", "no-sitelink", path)

            self._calls(f"categories (hop {hop})" if hop else "categories", batches(pending), ask)
            pending = set()

            def follow(group, pending=pending):
                pages_of = {answer[t][1]: t for t in group}
                data = self.client.get(self.commons, {
                    "action": "query", "formatversion": "2", "prop": "revisions", "rvprop": "content",
                    "rvslots": "main", "titles": "|".join(sorted(pages_of))})
                texts = {p["title"]: p.get("revisions", [{}])[0].get("slots", {}).get("main", {}).get("content", "")
                         for p in data.get("query", {}).get("pages", [])}
                for page, title in pages_of.items():
                    match = SOFT_REDIRECT_RE.search(texts.get(page, ""))
                    target = (category_title(match.group(1)) or category_title("Category:" + match.group(1))) \
                        if match else None
                    if target is None:
                        answer[title] = ("none", "soft-redirect-unreadable", answer[title][2])
                    else:
                        answer[title] = ("soft", target, answer[title][2])
                        if target not in answer:
                            pending.add(target)

            if soft:
                self._calls("soft redirects", batches(soft), follow)
            if not pending:
                break
        result = {}
        for title in titles:
            current, path, visited = title, "", {title}
            while True:
                kind, value, hard = answer.get(current, ("none", "too-many-redirects", ""))
                path += hard
                if kind != "soft":
                    result[title] = (value, path + "sitelink") if kind == "item" else (None, path + value)
                    break
                path += "soft-redirect+"
                if value in visited:
                    result[title] = (None, path + "redirect-loop")
                    break
                if len(visited) > self.max_redirects:
                    result[title] = (None, path + "too-many-redirects")
                    break
                visited.add(value)
                current = value
        return result

    def entities(self, ids: set[str], props: str, what: str) -> dict[str, dict]:
        out: dict[str, dict] = {}

        def ask(group):
            params = {"action": "wbgetentities", "ids": "|".join(group), "props": props}
            if props == "labels":
                params.update(languages="en", languagefallback="1")
            out.update(self.client.get(self.wikidata, params).get("entities", {}))

        self._calls(what, batches(ids), ask)
        return out

    def run(self, landmarks: pd.DataFrame) -> list[dict]:
        titles = set(landmarks["title"].dropna())
        resolved = self.resolve_titles(titles)
        items = self.entities({i for i, _ in resolved.values() if i}, "claims", "items")
        topics_of = {}
        for qid, entity in items.items():
            p31 = [v for v, _ in values_of(entity, "P31")]
            p301 = values_of(entity, "P301")
            if WIKIMEDIA_CATEGORY in p31 and p301:
                topics_of[qid] = p301[0][0]
        topics = self.entities(set(topics_of.values()) - set(items), "claims", "topics")
        known = {**topics, **items}
        class_ids = set()
        chosen: dict[str, tuple[str, list]] = {}
        for qid in items:
            used = topics_of.get(qid, qid)
            classes = values_of(known.get(used, {}), "P31") if "missing" not in known.get(used, {}) else None
            chosen[qid] = (used, classes)
            class_ids.update(c for c, _ in classes or [])
        labels = self.entities(class_ids, "labels", "class labels")
        rows = []
        for row in landmarks.itertuples(index=False):
            record = {"split": row.split, "landmark_id": int(row.landmark_id), "category": row.category,
                      "title": row.title, "item": None, "topic": None, "classes": []}
            if not isinstance(row.title, str):
                record["title"] = None
                record["resolved_via"] = "no-category"
            else:
                item, via = resolved[row.title]
                record["item"] = item
                if item is None:
                    record["resolved_via"] = via
                elif "missing" in items.get(item, {"missing": ""}):
                    record["resolved_via"] = via + "+missing-item"
                else:
                    used, classes = chosen[item]
                    if used != item:
                        record["topic"] = used
                        via += "+P301"
                    if classes is None:
                        via += "+missing-item"
                    elif not classes:
                        via += "+no-P31"
                    record["resolved_via"] = via
                    record["classes"] = [
                        {"id": c, "rank": rank,
                         "label": labels.get(c, {}).get("labels", {}).get("en", {}).get("value")}
                        for c, rank in classes or []]
            rows.append(record)
        return rows


def run_scrape(category_files: dict[str, str | Path], out_dir: str | Path, cache_dir: str | Path, *,
               commons_url: str = COMMONS_API, wikidata_url: str = WIKIDATA_API, user_agent: str | None = None,
               maxlag: int = 5, min_interval: float = 0.5, max_retries: int = 8, backoff: float = 2.0,
               max_redirects: int = 3, progress: bool = True, sleep=time.sleep) -> dict:
    """Scrape every landmark of ``category_files`` into ``out_dir/landmarks.jsonl`` and
    ``out_dir/scrape.json`` (written last); returns the latter."""
    landmarks = read_categories(category_files)
    client = ApiClient(cache_dir, user_agent=user_agent or default_user_agent(), maxlag=maxlag,
                       min_interval=min_interval, max_retries=max_retries, backoff=backoff, sleep=sleep)
    rows = Scraper(client, commons_url, wikidata_url, max_redirects, progress).run(landmarks)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "landmarks.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    vias: dict[str, int] = {}
    for r in rows:
        vias[r["resolved_via"]] = vias.get(r["resolved_via"], 0) + 1
    summary = {
        "landmarks": {s: int((landmarks["split"] == s).sum()) for s in category_files},
        "with_classes": {s: sum(1 for r in rows if r["split"] == s and r["classes"]) for s in category_files},
        "resolved_via": dict(sorted(vias.items())),
        "requests": client.stats.requests, "cached": client.stats.cached, "retries": client.stats.retries,
        "waited_s": round(client.stats.waited_s, 3), "seconds": round(time.monotonic() - client.stats.started, 3),
        "user_agent": client.session.headers["User-Agent"], "commons_url": commons_url, "wikidata_url": wikidata_url,
    }
    atomic_write_json(out_dir / "scrape.json", summary)
    return summary
