"""``plan``, ``cost`` and ``recipe``: a config's plan, its GPU-hours and its runs' recipe cards (``recipe``:
workflow/rules/tables.smk)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cmd_plan(args) -> None:
    from rankrepro.plan.build import plan_from_config, write_plan
    from rankrepro.plan.schema import PlanError, load_yaml_mapping

    try:
        config = load_yaml_mapping(Path(args.config))  # an error names the file
    except PlanError as err:
        sys.exit(f"invalid plan: {err}")
    try:  # validates the config as the Snakefile does (the same function)
        plan = plan_from_config(config)
    except PlanError as err:
        sys.exit(f"invalid plan: {args.config}: {err}")
    path = write_plan(plan, args.out).plan
    print(f"{len(plan['runs'])} runs, {len(plan['tables'])} tables -> {path}")


def add_plan(sub) -> None:
    p = sub.add_parser("plan", help="validate a config file and write its plan (what the Snakefile does at start)")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--out", default="results/plan")
    p.set_defaults(func=cmd_plan)


def cmd_cost(args) -> None:
    from rankrepro.plan.build import plan_from_config
    from rankrepro.data.manifest import ManifestError
    from rankrepro.plan.cost import ProfileError, plan_cost, to_text
    from rankrepro.plan.schema import PlanError, load_yaml_mapping

    try:
        config = load_yaml_mapping(Path(args.config))
        gpu = args.gpu or (config.get("cluster") or {}).get("gpu", "h100")
        cost = plan_cost(plan_from_config(config), gpu, args.results, profile_file=args.profile)
    except (PlanError, ProfileError, ManifestError) as err:
        sys.exit(f"cost: {err}")
    print(json.dumps(cost, indent=1) if args.json else to_text(cost, per_run=args.runs), end="")


def add_cost(sub) -> None:
    p = sub.add_parser("cost", help="estimate the GPU-hours of every run, table and paper of a config's plan "
                       "(throughput profile profiles/throughput/<gpu>.yaml)")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--gpu", default=None,
                   help="the GPU kind: profiles/throughput/<gpu>.yaml (default: the config's cluster.gpu, h100)")
    p.add_argument("--profile", default=None,
                   help="price with this throughput profile file instead of --gpu's (e.g. the pilot's "
                   "results/pilot/throughput.yaml)")
    p.add_argument("--results", default="results", help="where prepared manifests are (their image counts)")
    p.add_argument("--runs", action="store_true", help="also one line per run")
    p.add_argument("--json", action="store_true", help="the whole estimate as JSON")
    p.set_defaults(func=cmd_cost)


def _recipe_plan(args):
    """The plan ``recipe`` reads, and how messages name it: the ``--plan`` file, else the plan of
    ``--config`` (:func:`~rankrepro.plan.build.plan_from_config`, as ``plan`` and ``cost``)."""
    from rankrepro.io import FileFormatError
    from rankrepro.plan.build import plan_from_config
    from rankrepro.plan.model import Plan
    from rankrepro.plan.schema import PlanError, load_yaml_mapping

    try:
        if args.plan:
            return Plan.load(args.plan), args.plan
        return Plan.from_json(plan_from_config(load_yaml_mapping(Path(args.config)))), f"the plan of {args.config}"
    except (PlanError, FileFormatError) as err:  # each names the file
        sys.exit(f"recipe: {err}")
    except (OSError, ValueError, KeyError) as err:  # a plan file missing, not JSON, or not a plan
        sys.exit(f"recipe: {args.plan}: not a readable plan file ({type(err).__name__}: {err})")


def cmd_recipe(args) -> None:
    """Print (or ``--out``) the recipe card of run ``RUN_ID``, or of every run (``--all``): text, ``--json``
    or ``--markdown`` (with ``--all``: the report's page); ``--html``: that page as HTML too. Exit status 2:
    no RUN_ID and no ``--all``, or a run id the plan does not hold (the message names close ones)."""
    from rankrepro.io import atomic_write_text
    from rankrepro.recipe import card_markdown, card_text, close_run_ids, recipe_card, recipes_page
    from rankrepro.tables.formats import markdown_html

    if bool(args.all) == bool(args.run_id):
        print("recipe: give a RUN_ID or --all (not both)", file=sys.stderr)
        sys.exit(2)
    plan, where = _recipe_plan(args)
    if not args.all and args.run_id not in plan.runs:
        close = close_run_ids(args.run_id, plan.runs)
        print(f"recipe: run {args.run_id!r} is not in {where} ({len(plan.runs)} runs); "
              + (f"close ids: {', '.join(close)}" if close else "`--all` lists them"), file=sys.stderr)
        sys.exit(2)
    ids = sorted(plan.runs) if args.all else [args.run_id]
    cards = {rid: recipe_card(rid, plan.runs[rid], plan.provenance.get(rid), plan.tables) for rid in ids}

    def markdown() -> str:
        return recipes_page(cards, plan.tables) if args.all else card_markdown(cards[args.run_id], plan.tables)

    if args.json:
        text = json.dumps(cards if args.all else cards[args.run_id], indent=1) + "\n"
    elif args.markdown:
        text = markdown()
    else:
        text = "\n".join(card_text(card, plan.tables) for card in cards.values())
    if args.out:
        atomic_write_text(args.out, text)
    else:
        print(text, end="")
    if args.html:
        atomic_write_text(args.html, markdown_html(markdown(), title="recipes"))


def add_recipe(sub) -> None:
    p = sub.add_parser("recipe", help="a run's recipe card: its resolved values and where each came from (setup, "
                       "table row or column, override, default); exit status 2: an unknown run id")
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a run id of the plan (results/runs/<RUN_ID>)")
    p.add_argument("--all", action="store_true", help="every run of the plan (--json: an object keyed by run id; "
                   "--markdown: the report's page, by paper and table)")
    p.add_argument("--config", default="config.yaml", help="plan this config (as `plan` and `cost` do)")
    p.add_argument("--plan", help="read this plan file instead: results/plan/plan.<hash>.json")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the card as JSON (the full origins)")
    form.add_argument("--markdown", action="store_true", help="the card as Markdown")
    p.add_argument("--out", help="write to this file instead of printing")
    p.add_argument("--html", help="also the Markdown as an HTML page (the report's copy)")
    p.set_defaults(func=cmd_recipe)
