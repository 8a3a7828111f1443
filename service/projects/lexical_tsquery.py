"""Rendering a normalised query as PostgreSQL `to_tsquery` text.

Every operand is a single-quoted literal (quotes doubled, backslashes made spaces), so
user text can never be read as tsquery syntax. `to_tsquery` itself splits a literal into
its lexemes, joins several with `<->` (so a quoted phrase keeps its word order and
adjacency, like FTS5), and drops stopwords; `:*` makes the last lexeme a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.projects.lexical_parse import Leaf, Neg, Node

__all__ = [
    "TSQUERY_MATCH_NOTHING",
    "render_script_tsquery",
    "render_tsquery",
    "render_tsquery_any",
]

# A contradiction on an invented lexeme: valid syntax, indexable, never true.
TSQUERY_MATCH_NOTHING = "'bmnomatch' & !'bmnomatch'"


def _literal(text: str, prefix: bool) -> str:
    # A backslash escapes inside tsquery quotes and PostgreSQL text cannot hold NUL; neither
    # is ever part of a lexeme.
    body = text.replace("\\", " ").replace("\x00", " ").replace("'", "''")
    return f"'{body}'" + (":*" if prefix else "")


def render_tsquery(node: Node) -> str:
    """The tsquery text for a word tree (a bare negation is allowed here)."""
    if isinstance(node, Leaf):
        return _literal(node.text, node.prefix)
    if isinstance(node, Neg):
        return "!" + render_tsquery(node.item)
    operator = " | " if node.op == "or" else " & "
    return "(" + operator.join(render_tsquery(item) for item in node.items) + ")"


def render_script_tsquery(phrases: Sequence[tuple[str, ...]]) -> str:
    """AND of gram phrases for `to_tsquery('simple', ...)`: `'g1' <-> 'g2'` per phrase."""
    rendered = [" <-> ".join(_literal(gram, False) for gram in grams) for grams in phrases]
    if len(rendered) == 1:
        return rendered[0]
    grouped = (
        f"({part})" if len(grams) > 1 else part
        for part, grams in zip(rendered, phrases, strict=True)
    )
    return " & ".join(grouped)


def render_tsquery_any(terms: Sequence[str], *, prefix: bool) -> str:
    """OR of plain terms (the relaxed form)."""
    return " | ".join(_literal(term, prefix) for term in terms)
