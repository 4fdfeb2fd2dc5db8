"""The README as an index: its registry list is the registries of ``src/``, every relative link of README.md
and docs/*.md resolves (a file, and a heading for an ``#anchor``), each docs page starts with its summary and
a link back, and the README stays short."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from rankrepro import catalog
from rankrepro.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SRC = ROOT / "src" / "rankrepro"
MAX_README_LINES = 250

#: ``NAME = Registry("<kind>"`` (optionally annotated) at the start of a line of a module
REGISTRY_DEF = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=\n]+)?=\s*Registry\(\s*([\"'])(.+?)\2", re.M)
#: a row of the README's registry table: | `NAME` | `kind` | `module` | ... |
REGISTRY_ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*`([^`]+)`\s*\|\s*`([\w.]+)`\s*\|")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of ``text`` (up to the next heading of level 1 or 2)."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^#{{1,2}} |\Z)", text, re.M | re.S)
    assert match, f"README.md has no section '## {heading}'"
    return match.group(1)


def readme_registries(text: str) -> dict[str, tuple[str, str]]:
    """{kind: (attribute, module)} of the README's registry table (section ``## Registries``)."""
    rows = {}
    for line in section(text, "Registries").splitlines():
        match = REGISTRY_ROW.match(line)
        if match:
            name, kind, module = match.groups()
            assert kind not in rows, f"README lists registry kind {kind!r} twice"
            rows[kind] = (name, module)
    return rows


def source_registries(src: Path = SRC) -> dict[str, tuple[str, Path]]:
    """{kind: (attribute, file)} of every ``Registry("<kind>"`` construction under ``src``."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        for match in REGISTRY_DEF.finditer(path.read_text()):
            name, kind = match.group(1), match.group(3)
            assert kind not in found, f"registry kind {kind!r} built twice: {found.get(kind)}, {path}"
            found[kind] = (name, path)
    return found


def test_the_source_scan_finds_the_catalog_registries():
    found = source_registries()
    assert set(catalog.REGISTRIES) <= set(found)
    for kind, target in catalog.REGISTRIES.items():
        assert found[kind][0] == target.split(":")[1]


def test_the_readme_lists_every_registry_of_src():
    listed, found = readme_registries(README.read_text()), source_registries()
    missing, extra = sorted(set(found) - set(listed)), sorted(set(listed) - set(found))
    assert not missing and not extra, f"README registries: missing {missing}, not in src/ {extra}"
    for kind, (name, module) in listed.items():
        assert name == found[kind][0], f"README names the {kind} registry {name}, src/ {found[kind][0]}"
        registry = getattr(importlib.import_module(module), name, None)
        assert isinstance(registry, Registry) and registry.kind == kind, f"README: {module}.{name} is not the {kind} registry"


def test_a_registry_missing_from_the_readme_fails():
    text = README.read_text()
    row = next(line for line in section(text, "Registries").splitlines() if line.startswith("| `TASKS`"))
    listed = readme_registries(text.replace(row + "\n", ""))
    assert set(source_registries()) - set(listed) == {"task"}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip()).lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def anchors(path: Path) -> set[str]:
    """The anchors of the headings of a Markdown file (fenced code left out; repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that are not URLs (fenced and inline code left out)."""
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    links = relative_links(page)
    assert page != README or links, "README.md links nothing"
    for link in links:
        target, _, anchor = link.partition("#")
        file = (page.parent / target).resolve() if target else page
        assert file.exists(), f"{page.name}: link {link!r}: {file} does not exist"
        if anchor:
            assert file.suffix == ".md", f"{page.name}: link {link!r}: an anchor into a file that is not Markdown"
            assert anchor in anchors(file), f"{page.name}: link {link!r}: no heading #{anchor} in {file.name}"


def test_the_link_check_catches_a_broken_link_and_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A section\n\n[ok](#a-section) [ok](page.md#title) `[code](nowhere.md)`\n"
                    "```\n[fenced](nowhere.md)\n```\n[web](https://example.org/x) [bad](nowhere.md) [bad](#nope)\n")
    assert relative_links(page) == ["#a-section", "page.md#title", "nowhere.md", "#nope"]
    assert anchors(page) == {"title", "a-section"}


def test_the_docs_pages_exist_start_with_a_summary_and_link_back():
    assert DOCS, "no docs/*.md"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    for page in DOCS:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[1] == "", f"{page.name}: a title, then a blank line"
        assert lines[2].strip() and "](../README.md)" in lines[2], f"{page.name}: line 3 is a summary with a link back"
        assert page.resolve() in linked, f"README.md does not link {page.name}"


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
