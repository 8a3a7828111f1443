"""The cost budget of one lexical query, checked on its parse before any statement runs.

Each term is one index lookup and each prefix term a scan of every indexed word it begins:
`k* OR k* OR ...` (333 prefixes in 2,000 characters) ran for a minute in SQLite FTS5. So a
query may hold at most `max_terms` words (phrase words and negated words included) and at
most `max_prefixes` of them written as `prefix*`; more is INVALID_ARGUMENT on `text` with
reason QUERY_TOO_COMPLEX naming the limit. Natural-language words match as prefixes of
their stem too, but need two characters, so `max_terms` bounds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from service.errors import FieldViolation, InvalidArgument
from service.projects.lexical_parse import Group, Leaf, Neg, Node, parse_query
from service.projects.lexical_tokens import sanitize, word_tokens


@dataclass(frozen=True)
class QueryBudget:
    """SEARCH_QUERY_MAX_TERMS and SEARCH_QUERY_MAX_PREFIXES."""

    max_terms: int = 64
    max_prefixes: int = 16


def check_query_cost(text: str, budget: QueryBudget) -> None:
    """INVALID_ARGUMENT (QUERY_TOO_COMPLEX) when `text` is over `budget`."""
    leaves = list(_leaves(parse_query(sanitize(text).strip()).node))
    terms = sum(max(1, len(word_tokens(leaf.text.lower()))) for leaf in leaves)
    prefixes = sum(1 for leaf in leaves if leaf.prefix and not leaf.auto)
    if terms > budget.max_terms:
        raise _too_complex(
            f"at most {budget.max_terms} search terms (this query has {terms})",
            "SEARCH_QUERY_MAX_TERMS", budget.max_terms, terms,
        )
    if prefixes > budget.max_prefixes:
        raise _too_complex(
            f"at most {budget.max_prefixes} prefix terms such as `word*` (this query has "
            f"{prefixes})",
            "SEARCH_QUERY_MAX_PREFIXES", budget.max_prefixes, prefixes,
        )


def _leaves(node: Node | None) -> Iterator[Leaf]:
    if isinstance(node, Leaf):
        yield node
    elif isinstance(node, Group):
        for item in node.items:
            yield from _leaves(item)
    elif isinstance(node, Neg):
        yield from _leaves(node.item)


def _too_complex(description: str, setting: str, limit: int, found: int) -> InvalidArgument:
    return InvalidArgument(
        f"text: {description}",
        reason="QUERY_TOO_COMPLEX",
        metadata={"limit": str(limit), "found": str(found), "setting": setting},
        violations=[FieldViolation("text", description, "QUERY_TOO_COMPLEX")],
    )
