"""The CLIP prompt of the H-GLDv2 clustering (config ``hgldv2.clip.prompt``), checked without numpy or
torch: the planner checks it when the plan is made (``snakemake -n``), the cluster rule before it
loads a model."""

from __future__ import annotations

import string

__all__ = ["PROMPT_KEY", "check_prompt"]

PROMPT_KEY = "hgldv2.clip.prompt"  # the config key the rule passes as --prompt


def check_prompt(prompt: str) -> None:
    """ValueError naming :data:`PROMPT_KEY` unless ``prompt`` is a format string with exactly one
    placeholder, ``{}`` (the name: no field name, conversion or format spec); ``{{`` and ``}}`` are
    literal braces."""
    try:
        fields = [(name, conversion, spec) for _, name, spec, conversion in string.Formatter().parse(prompt)
                  if name is not None]
    except ValueError as err:  # a single { or }
        problem = f"is not a format string ({err})"
    else:
        others = ["{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
                  for name, conversion, spec in fields if (name, conversion, spec) != ("", None, "")]
        if not others and len(fields) == 1:
            return
        problem = (f"has the placeholder(s) {', '.join(others)}" if others
                   else f"has {len(fields)} {{}} placeholders")
    raise ValueError(f"{PROMPT_KEY}: {prompt!r} {problem}; the allowed placeholder is {{}} (the name), exactly "
                     f"once; write {{{{ and }}}} for literal braces")
