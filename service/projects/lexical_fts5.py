"""Rendering a normalised query as an SQLite FTS5 MATCH expression.

Every operand is a double-quoted string (quotes doubled), so no user character is ever
read as FTS5 syntax: `C++`, `config.json`, `O'Reilly`, `foo<bar` and a bare `AND` are
all plain text. Words search the `content` column, gram phrases the `ngrams` column.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.projects.lexical_parse import Group, Leaf, Neg, Node
from service.projects.lexical_tree import Scripted

__all__ = [
    "CONTENT_COLUMN",
    "FTS5_MATCH_NOTHING",
    "NGRAMS_COLUMN",
    "render_fts5",
    "render_fts5_any",
]

CONTENT_COLUMN = "content"
NGRAMS_COLUMN = "ngrams"
# An empty phrase parses and matches no row: the "empty lexical channel".
FTS5_MATCH_NOTHING = '""'


def _quote(text: str) -> str:
    # FTS5 reads a NUL as the end of the expression, leaving the string unterminated.
    return '"' + text.replace("\x00", " ").replace('"', '""') + '"'


def _leaf(leaf: Leaf) -> str:
    return _quote(leaf.text) + ("*" if leaf.prefix else "")


def _conjunction(items: Sequence[Node]) -> str:
    positives = [item for item in items if not isinstance(item, Neg)]
    negatives = [item.item for item in items if isinstance(item, Neg)]
    if len(positives) == 1 and not negatives:
        return _inner(positives[0])
    body = " AND ".join(_expr(item) for item in positives)
    if negatives:
        # FTS5 NOT is binary and binds tighter than AND, hence the explicit grouping.
        body = f"({body}) NOT ({' OR '.join(_expr(item) for item in negatives)})"
    return body


def _inner(node: Node) -> str:
    """The node without the parentheses a group gets as an operand."""
    if isinstance(node, Leaf):
        return _leaf(node)
    if isinstance(node, Neg):  # pragma: no cover - simplify() keeps NOT inside AND
        raise ValueError("a negation needs a positive operand")
    if node.op == "or":
        return " OR ".join(_expr(item) for item in node.items)
    return _conjunction(node.items)


def _expr(node: Node) -> str:
    return _inner(node) if isinstance(node, Leaf) else f"({_inner(node)})"


def render_fts5(query: Scripted) -> str:
    """The strict MATCH expression: word tree on `content` AND every gram phrase on `ngrams`."""
    words = query.words
    items: tuple[Node, ...] = ()
    if words is not None:
        items = words.items if isinstance(words, Group) and words.op == "and" else (words,)
    positives = [item for item in items if not isinstance(item, Neg)]
    negatives = [item.item for item in items if isinstance(item, Neg)]
    parts: list[str] = []
    if positives:
        parts.append(f"{CONTENT_COLUMN} : ({_conjunction(positives)})")
    parts.extend(f"{NGRAMS_COLUMN} : ({_quote(' '.join(grams))})" for grams in query.phrases)
    expression = " AND ".join(parts)
    if negatives:
        excluded = " OR ".join(_expr(item) for item in negatives)
        expression = f"({expression}) NOT {CONTENT_COLUMN} : ({excluded})"
    return expression


def render_fts5_all(terms: Sequence[str], *, prefix: bool) -> str:
    """AND of plain terms on `content`: the strict form of a plain natural-language text."""
    rendered = [_quote(term) + ("*" if prefix else "") for term in terms]
    return f"{CONTENT_COLUMN} : ({' AND '.join(rendered)})"


def render_fts5_any(terms: Sequence[str], *, prefix: bool) -> str:
    """OR of plain terms on `content` (the relaxed form)."""
    rendered = (_quote(term) + ("*" if prefix else "") for term in terms)
    return f"{CONTENT_COLUMN} : ({' OR '.join(rendered)})"
