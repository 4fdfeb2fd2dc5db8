"""Recipe cards (:mod:`rankrepro.recipe.card`) as text for a terminal and as Markdown for the report.

Both show the same sections, in the order a recipe is read: model, images, sampler, loss, the
optimizer and its parameter groups (a small table: which parameters, optimizer, lr, weight decay,
cosine floor, frozen in warm-up), schedule, training, evaluation; each value with its origin
shortened (:func:`rankrepro.recipe.origins.short_origin`; ``tables``: the plan's tables, whose
specs name the rows and columns an origin points to). The text puts one value per line; the
Markdown groups a section's values by origin (what a setup gave, what the table's row changed,
the code's defaults), so a card reads in a few lines. :func:`recipes_page` is the report's page:
every card, grouped by paper and table.
"""

from __future__ import annotations

import json

from rankrepro.plan.complete import leaf_paths
from rankrepro.plan.merge import get_path
from rankrepro.plan.model import TablePlan
from rankrepro.plan.schema import dotted
from rankrepro.recipe.card import BLOCKS, GROUP_KEYS, TRAINING_KEYS
from rankrepro.recipe.origins import short_origin
from rankrepro.tables.formats import md_cell
from rankrepro.tables.index import natural_key

__all__ = ["card_markdown", "card_text", "recipes_page", "section_rows", "value_text"]

SECTION_TITLES = {"model": "Model", "images": "Images", "sampler": "Sampler", "loss": "Loss",
                  "optimizer": "Optimizer", "schedule": "Schedule", "training": "Training", "eval": "Evaluation",
                  "other": "Other"}
GROUP_COLUMNS = ("group", "parameters", "optimizer", "lr", "weight decay", "lr floor", "warm-up")


def value_text(value) -> str:
    """A value as the setups' YAML writes it (null, true, 1e-06, [0.16, 1.0])."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def section_rows(card: dict, tables: dict[str, TablePlan] | None = None) -> list[tuple[str, list[tuple]]]:
    """``[(section, [(key, value, short origin), ...]), ...]`` of a card, the groups' values under
    ``optimizer`` as ``groups.<group>.<key>`` (see the module docstring)."""
    prov = card["provenance"]

    def rows(block: dict, prefix: tuple) -> list[tuple]:
        return [(dotted(path), value_text(get_path(block, path)), short_origin(prov.get(dotted((*prefix, *path)), ""),
                                                                               tables))
                for path in leaf_paths(block)]

    sections = [(name, rows(card[name], (name,))) for name in BLOCKS if name != "schedule"]
    groups = {g: {k: v for k, v in settings.items() if k != "params"} for g, settings in card["groups"].items()}
    sections.append(("optimizer", rows(card["optimizer"], ("optimizer",)) + rows({"groups": groups}, ("optimizer",))))
    sections.append(("schedule", rows(card["schedule"], ("schedule",))))
    sections.append(("training", rows({key: card[key] for key in TRAINING_KEYS}, ())))
    sections.append(("eval", rows(card["eval"], ("eval",))))
    if card.get("other"):
        sections.append(("other", rows(card["other"], ())))
    return sections


def _columns_text(labels: list[str]) -> str:
    """``CUB R@1, R@2, R@4``: each label without the words it shares with the one before."""
    out, previous = [], []
    for label in labels:
        words = label.split(" ")
        shared = 0
        while shared < min(len(words) - 1, len(previous)) and words[shared] == previous[shared]:
            shared += 1
        out.append(" ".join(words[shared:]))
        previous = words
    return ", ".join(out)


def _cells_text(use: dict) -> str:
    """The cells of one table that use the run: per row its method and columns."""
    return "; ".join(("reference of " if c["reference"] else "") + f"{c['method']}: {_columns_text(c['columns'])}"
                     for c in use["cells"])


def _uses(card: dict) -> list[str]:
    """One line per table that uses the run: its key, title, and per row the columns."""
    return [f"{use['table']} ({use['title']})" + (f": {_cells_text(use)}" if use["cells"] else "")
            for use in card["tables"]]


def _group_cells(card: dict) -> list[list[str]]:
    """The groups table's rows (:data:`GROUP_COLUMNS`)."""
    warmup = card["warmup_epochs"]
    out = []
    for name, g in card["groups"].items():
        frozen = (f"frozen {warmup} ep." if warmup else "frozen (no warm-up)") if g["warmup_frozen"] else "trained"
        floor = "—" if g["lr_min"] is None else value_text(g["lr_min"])  # a schedule without a floor
        out.append([name, g["params"], *(value_text(g[k]) for k in GROUP_KEYS[:3]), floor, frozen])
    return out


def _title(card: dict) -> str:
    return f"loss {card['loss']['name']} on {card['dataset']} (task {card['task']}, select {card['select']})"


def _aligned(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]


def card_text(card: dict, tables: dict[str, TablePlan] | None = None) -> str:
    """The card as text: a section per block, one value per line with its origin; the groups as a table."""
    lines = [f"Recipe of {card['run_id']}: {_title(card)}"]
    lines += [f"Used by {use}" for use in _uses(card)] or ["Used by no table"]
    for section, rows in section_rows(card, tables):
        lines += ["", SECTION_TITLES[section]]
        if section == "optimizer":
            lines += _aligned([list(GROUP_COLUMNS), *_group_cells(card)])
            lines.append("  values and origins:")
        lines += _aligned([[key, value.ljust(min(len(value), 24)), origin] for key, value, origin in rows],
                          "    " if section == "optimizer" else "  ")
    return "\n".join(lines) + "\n"


def _by_origin(rows: list[tuple]) -> list[tuple[str, str]]:
    """``[(values, origin)]``: a section's values grouped by their origin, in order of first appearance."""
    grouped: dict[str, list[str]] = {}
    for key, value, origin in rows:
        grouped.setdefault(origin, []).append(f"{key} `{value}`")
    return [(" · ".join(values), origin) for origin, values in grouped.items()]


def card_markdown(card: dict, tables: dict[str, TablePlan] | None = None, level: int = 3) -> str:
    """The card as Markdown: a heading at ``level``, the tables using it, the groups table, then per
    section its values grouped by origin."""
    lines = [f"{'#' * level} `{card['run_id']}`: {_title(card)}", ""]
    lines += [f"- Used by {use}" for use in _uses(card)] or ["Used by no table."]
    lines += ["", "| " + " | ".join(GROUP_COLUMNS) + " |", "|" + "---|" * len(GROUP_COLUMNS)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in _group_cells(card)]
    lines += ["", "| section | values | from |", "|---|---|---|"]
    for section, rows in section_rows(card, tables):
        for i, (values, origin) in enumerate(_by_origin(rows)):
            name = f"**{SECTION_TITLES[section].lower()}**" if i == 0 else ""
            lines.append(f"| {name} | {md_cell(values)} | {md_cell(origin)} |")
    return "\n".join(lines) + "\n"


PAGE_INTRO = (
    "Every planned run's recipe as training will use it, each value with where it came from: a setup "
    "(`src/rankrepro/plan/setups/<paper>.yaml: <setup>`, its `per_loss` entries), a table spec's row, column or "
    "panel (`<paper>/<table>.yaml rows[i] (method) ...`), the config's `run_overrides`, a table's seeds, or a "
    "default (the run schema's, a component's in code). Generated by the `recipes` rule "
    "(`python -m rankrepro recipe --all --markdown`) from the plan; do not edit. One card on a terminal: "
    "`python -m rankrepro recipe RUN_ID` (`--json`: the values and the full origins). A run used by several "
    "tables is shown under the first.")


def recipes_page(cards: dict[str, dict], tables: dict[str, TablePlan]) -> str:
    """The report's page: per paper, per table (table2 before table10), the runs its cells use and the card
    of each run not shown above; the runs of no table last."""
    lines = ["# Recipes", "", PAGE_INTRO, "", f"**{len(cards)} runs, {len(tables)} tables.**"]
    shown: dict[str, str] = {}
    tables = dict(sorted(tables.items(), key=lambda item: natural_key(item[0])))
    for paper in dict.fromkeys(t.paper for t in tables.values()):
        lines += ["", f"## {paper}"]
        for key, table in tables.items():
            runs = [rid for rid in table.runs if rid in cards]
            if table.paper != paper or not runs:
                continue
            lines += ["", f"### {key}: {table.title}", ""]
            for rid in runs:
                cells = [_cells_text(use) for use in cards[rid]["tables"] if use["table"] == key]
                seed = f" (seed {cards[rid]['seed']})" if cards[rid]["provenance"].get("seed") == "spec seeds" else ""
                lines.append(f"- `{rid}`: " + (cells[0] if cells and cells[0] else _title(cards[rid])) + seed
                             + (f", card under {shown[rid]}" if rid in shown else ""))
            for rid in runs:
                if rid not in shown:
                    shown[rid] = key
                    lines += ["", card_markdown(cards[rid], tables, level=4).rstrip()]
    rest = [rid for rid in cards if rid not in shown]
    if rest:
        lines += ["", "## Runs of no table"]
        lines += ["\n" + card_markdown(cards[rid], tables, level=4).rstrip() for rid in rest]
    return "\n".join(lines) + "\n"
