"""Recipe cards: a planned run's resolved values by section and where each came from
(``python -m rankrepro recipe RUN_ID``; the report's ``results/recipes.md``).

:mod:`~rankrepro.recipe.card` builds a card (JSON data), :mod:`~rankrepro.recipe.origins` shortens
the origins for reading, :mod:`~rankrepro.recipe.render` writes cards as text and Markdown. No torch:
the plan is all a card reads.
"""

from rankrepro.recipe.card import REQUIRED_KEYS, close_run_ids, plan_cards, recipe_card
from rankrepro.recipe.render import card_markdown, card_text, recipes_page

__all__ = ["REQUIRED_KEYS", "card_markdown", "close_run_ids", "card_text", "plan_cards", "recipe_card", "recipes_page"]
