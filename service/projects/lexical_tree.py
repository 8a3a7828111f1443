"""Normalising a parsed query so both stores can express it the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from service.projects.lexical_parse import Group, Leaf, Neg, Node, auto_prefix
from service.projects.lexical_script import split_script
from service.projects.lexical_tokens import has_index_token

__all__ = [
    "NOTHING",
    "Nothing",
    "Scripted",
    "normalise",
    "positive_leaves",
    "simplify",
    "split_scripts",
]


@dataclass(frozen=True)
class Nothing:
    """A query no row can match (pure negation: FTS5 has no unary NOT)."""


NOTHING: Final = Nothing()
Simple = Node | Nothing | None  # None: no constraint at all (nothing searchable)


def _simplify_group(op: Literal["and", "or"], items: tuple[Node, ...]) -> Simple:
    parts: list[Node] = []
    saw_nothing = False
    for item in items:
        part = simplify(item)
        if part is None:
            continue
        if isinstance(part, Nothing) or (op == "or" and isinstance(part, Neg)):
            saw_nothing = True
            continue
        if isinstance(part, Group) and part.op == op:
            parts.extend(part.items)
        else:
            parts.append(part)
    if op == "and" and saw_nothing:
        return NOTHING
    if not parts:
        return NOTHING if saw_nothing else None
    if op == "and" and all(isinstance(part, Neg) for part in parts):
        return NOTHING
    return parts[0] if len(parts) == 1 else Group(op, tuple(parts))


def simplify(node: Node | None) -> Simple:
    """Drop unsearchable leaves, flatten groups, and turn unsatisfiable parts into NOTHING.

    An OR branch that is a bare negation cannot be expressed in FTS5 and is dropped in
    both stores, so they keep returning the same rows.
    """
    if node is None or isinstance(node, Leaf):
        return node if node is not None and has_index_token(node.text) else None
    if isinstance(node, Neg):
        inner = simplify(node.item)
        if inner is None or isinstance(inner, Nothing):
            return None  # NOT of nothing excludes nothing
        return inner.item if isinstance(inner, Neg) else Neg(inner)
    return _simplify_group(node.op, node.items)


def normalise(node: Node | None) -> Simple:
    """`simplify` for a whole query: a lone negation there can match nothing either."""
    simple = simplify(node)
    return NOTHING if isinstance(simple, Neg) else simple


@dataclass(frozen=True)
class Scripted:
    """A query split into its word tree and the gram phrases every match must contain."""

    words: Node | None
    phrases: tuple[tuple[str, ...], ...]


def _split_leaf(leaf: Leaf) -> tuple[Leaf | None, tuple[tuple[str, ...], ...]]:
    remainder, phrases = split_script(leaf.text)
    if not phrases:
        return leaf, ()
    remainder = " ".join(remainder.split())
    if not has_index_token(remainder):
        return None, phrases
    prefix = auto_prefix(remainder) if leaf.auto else leaf.prefix
    return Leaf(remainder, prefix, leaf.auto), phrases


def split_scripts(node: Node) -> Scripted:
    """Move script text of top-level AND operands into gram phrases.

    Only operands every match must contain are split, so boolean meaning is unchanged;
    script text under OR or NOT stays a literal word, matched the same way in both stores.
    The word tree left over may be negations only (`适者生存 NOT foo`); renderers then
    subtract them from the phrases.
    """
    items = node.items if isinstance(node, Group) and node.op == "and" else (node,)
    kept: list[Node] = []
    phrases: list[tuple[str, ...]] = []
    for item in items:
        if isinstance(item, Leaf):
            leaf, found = _split_leaf(item)
            phrases.extend(found)
            if leaf is not None:
                kept.append(leaf)
        else:
            kept.append(item)
    words: Node | None
    if not kept:
        words = None
    elif len(kept) == 1:
        words = kept[0]
    else:
        words = Group("and", tuple(kept))
    return Scripted(words, tuple(dict.fromkeys(phrases)))


def positive_leaves(node: Node | None) -> list[Leaf]:
    """Leaves a match may contain (everything not under NOT), in query order."""
    if node is None or isinstance(node, Neg):
        return []
    if isinstance(node, Leaf):
        return [node]
    return [leaf for item in node.items for leaf in positive_leaves(item)]
