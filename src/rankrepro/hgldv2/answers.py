"""The shapes of the Commons and Wikidata answers :mod:`rankrepro.hgldv2.scrape` reads.

:func:`answer_problem` says why an answer is not of its request's shape (or None): the client
checks every answer, fresh or cached, before it is cached or used, so a broken proxy, a truncated
or hostile answer is retried instead of being cached for good or crashing every rerun. What is
checked is what the scrape reads, no more (every other field may be anything):

- every answer is a JSON object;
- ``action=query`` (Commons, ``formatversion=2``): ``query`` an object; ``query.pages`` an array
  of objects with a string ``title``, whose ``pageprops`` (when present) is an object with a
  string ``wikibase_item`` (when present), ``templates`` an array of objects and ``revisions`` a
  non-empty array of objects whose first has ``slots.main.content``, a string;
  ``query.normalized`` and ``query.redirects`` (when present) arrays of objects with string
  ``from`` and ``to``;
- ``action=wbgetentities`` (Wikidata): ``entities`` an object of objects; an entity's ``claims``
  (when present) an object of arrays of statements, each an object with a string ``rank`` and a
  ``mainsnak`` object (``snaktype`` ``value``: ``datavalue.value.id`` a string); its ``labels`` (when present) an
  object whose ``en`` (when present) is an object with a string ``value``.
"""

from __future__ import annotations

_MISSING = object()


def _json_type(value) -> str:
    if value is _MISSING:
        return "missing"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), f"a {type(value).__name__}")


def _at(value, path: str):
    """``value`` followed down the dotted ``path`` of object keys; _MISSING where a key is absent."""
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _expect(value, where: str, kind: type, optional: bool = False) -> str | None:
    if optional and value is _MISSING:
        return None
    if isinstance(value, kind):
        return None
    wanted = {dict: "an object", list: "an array", str: "a string"}[kind]
    return f"{where} is {_json_type(value)}, not {wanted}"


def _array_of_objects(value, where: str, *, optional: bool = True, nonempty: bool = False) -> str | None:
    problem = _expect(value, where, list, optional)
    if problem or value is _MISSING:
        return problem
    if nonempty and not value:
        return f"{where} is empty"
    bad = next((i for i, item in enumerate(value) if not isinstance(item, dict)), None)
    return None if bad is None else f"{where}[{bad}] is {_json_type(value[bad])}, not an object"


def _page_problem(page: dict, where: str) -> str | None:
    problem = (_expect(page.get("title", _MISSING), f"{where}.title", str)
               or _expect(page.get("pageprops", _MISSING), f"{where}.pageprops", dict, optional=True)
               or _expect(_at(page, "pageprops.wikibase_item"), f"{where}.pageprops.wikibase_item", str,
                          optional=True)
               or _array_of_objects(page.get("templates", _MISSING), f"{where}.templates")
               or _array_of_objects(page.get("revisions", _MISSING), f"{where}.revisions", nonempty=True))
    if problem or "revisions" not in page:
        return problem
    return _expect(_at(page["revisions"][0], "slots.main.content"), f"{where}.revisions[0].slots.main.content", str)


def _query_problem(data: dict) -> str | None:
    query = data.get("query", _MISSING)
    problem = _expect(query, "query", dict) or _array_of_objects(query.get("pages", _MISSING), "query.pages",
                                                                optional=False)
    if problem:
        return problem
    for key in ("normalized", "redirects"):
        problem = _array_of_objects(query.get(key, _MISSING), f"query.{key}")
        if problem:
            return problem
        for i, entry in enumerate(query.get(key, [])):
            problem = (_expect(entry.get("from", _MISSING), f"query.{key}[{i}].from", str)
                       or _expect(entry.get("to", _MISSING), f"query.{key}[{i}].to", str))
            if problem:
                return problem
    return next((p for i, page in enumerate(query["pages"]) if (p := _page_problem(page, f"query.pages[{i}]"))),
                None)


def _entity_problem(entity, where: str) -> str | None:
    problem = (_expect(entity, where, dict)
               or _expect(entity.get("claims", _MISSING), f"{where}.claims", dict, optional=True)
               or _expect(entity.get("labels", _MISSING), f"{where}.labels", dict, optional=True)
               or _expect(_at(entity, "labels.en"), f"{where}.labels.en", dict, optional=True)
               or _expect(_at(entity, "labels.en.value"), f"{where}.labels.en.value", str, optional=True))
    if problem:
        return problem
    for prop, statements in entity.get("claims", {}).items():
        here = f"{where}.claims.{prop}"
        problem = _array_of_objects(statements, here, optional=False)
        for i, statement in enumerate(statements if not problem else []):
            snak = statement.get("mainsnak", _MISSING)
            problem = (_expect(statement.get("rank", _MISSING), f"{here}[{i}].rank", str)
                       or _expect(snak, f"{here}[{i}].mainsnak", dict))
            if not problem and snak.get("snaktype") == "value":
                problem = _expect(_at(snak, "datavalue.value.id"), f"{here}[{i}].mainsnak.datavalue.value.id", str)
            if problem:
                break
        if problem:
            return problem
    return None


def _entities_problem(data: dict) -> str | None:
    entities = data.get("entities", _MISSING)
    problem = _expect(entities, "entities", dict)
    if problem:
        return problem
    return next((p for key, entity in entities.items() if (p := _entity_problem(entity, f"entities.{key}"))), None)


def answer_problem(data, params: dict) -> str | None:
    """Why ``data`` is not an answer of the shape the scrape reads for a request with ``params``
    (module docstring), or None. An ``error`` answer is read before this check."""
    if not isinstance(data, dict):
        return f"the answer is {_json_type(data)}, not an object"
    if params.get("action") == "query":
        return _query_problem(data)
    if params.get("action") == "wbgetentities":
        return _entities_problem(data)
    return None
