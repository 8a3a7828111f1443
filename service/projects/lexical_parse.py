"""User query text to a small boolean tree, with the repair rules for malformed input.

Rules (documented for callers in `service.projects.lexical`):

- `"..."` is a phrase; `"..."*` a prefix phrase. A quote without its partner is dropped.
- `AND`, `OR`, `NOT` are operators only when written in upper case, between two other
  tokens (`NOT` may also lead: `NOT draft`), and when the query also has a lower-case letter
  somewhere: an all-capitals query ("USE OF DIGITAL COMPUTERS AND ...") is natural language,
  not boolean syntax. A leading AND/OR or a trailing operator word is an ordinary word.
- A negation with nothing positive beside it (`NOT draft`, `(NOT a) OR (NOT b)`) matches
  nothing: FTS5 has no unary NOT, and both stores must return the same rows.
- A text is explicit (strict, never relaxed) when it uses an operator, a `prefix*` word, or
  is nothing but one quoted phrase. Parentheses group only in explicit queries.
- Natural-language text is the AND of its words (each a prefix term, see `auto_prefix`) and of
  its quoted phrases, with stopwords dropped outside phrases unless every word is one; a
  quote without its partner is dropped. Numbers and tokens such as `el/1` are words.
- Malformed explicit syntax (unbalanced parentheses or quotes, an operator without an
  operand, `()`, nesting deeper than `MAX_DEPTH`) falls back to the AND of all words with the
  operator words dropped; it stays explicit, so it is never relaxed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.projects.lexical_tokens import STOPWORDS, has_index_token, strip_edges, word_tokens

__all__ = [
    "IMPLICIT_PREFIX",
    "MAX_DEPTH",
    "Group",
    "Leaf",
    "Neg",
    "Node",
    "ParsedQuery",
    "auto_prefix",
    "is_explicit",
    "operators_active",
    "parse_query",
]

MAX_DEPTH = 32
# Whether natural-language words match as prefixes (`star` -> "starts"); see `_natural_leaf`.
IMPLICIT_PREFIX = True
_OPERATOR_WORDS = frozenset(("AND", "OR", "NOT"))


@dataclass(frozen=True)
class Leaf:
    """One operand: a word or a quoted phrase, matched as a phrase of its tokens."""

    text: str
    prefix: bool
    auto: bool = False  # prefix chosen by `auto_prefix`, so re-decided if the text changes


@dataclass(frozen=True)
class Group:
    """AND or OR of two or more operands."""

    op: Literal["and", "or"]
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Neg:
    """NOT of an operand; only satisfiable next to a positive operand of an AND."""

    item: Node


Node = Leaf | Group | Neg


@dataclass(frozen=True)
class ParsedQuery:
    """The tree (None when nothing is searchable) and whether the syntax was explicit."""

    node: Node | None
    explicit: bool


@dataclass(frozen=True)
class _Token:
    kind: Literal["word", "phrase", "open", "close", "op"]
    text: str
    prefix: bool = False


class _MalformedError(Exception):
    """Explicit syntax that cannot be read as a boolean expression."""


def operators_active(text: str) -> bool:
    """Whether upper-case AND/OR/NOT may be operators: the text has a lower-case letter."""
    return any(char.islower() for char in text)


def auto_prefix(word: str) -> bool:
    """Natural-language prefix rule: not for `*.md` paths nor a one-character last token."""
    if "/" in word and word.lower().endswith(".md"):
        return False
    tokens = word_tokens(word)
    return bool(tokens) and len(tokens[-1]) > 1


def _word_token(text: str, start: int) -> tuple[_Token, int]:
    end = start
    while end < len(text) and not text[end].isspace() and text[end] not in '"()':
        end += 1
    return _Token("word", text[start:end]), end


def _lex(text: str) -> tuple[list[_Token], bool]:
    """Tokens of an explicit query, and whether every quote had its partner."""
    tokens: list[_Token] = []
    balanced = True
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char == '"':
            close = text.find('"', index + 1)
            if close < 0:
                balanced = False
                index += 1
                continue
            prefix = text.startswith("*", close + 1)
            tokens.append(_Token("phrase", text[index + 1 : close], prefix))
            index = close + 1 + prefix
        elif char in "()":
            tokens.append(_Token("open" if char == "(" else "close", char))
            index += 1
        else:
            token, index = _word_token(text, index)
            tokens.append(token)
    return tokens, balanced


def _mark_operators(tokens: list[_Token], active: bool) -> list[_Token]:
    if not active:
        return tokens
    last = len(tokens) - 1
    return [
        _Token("op", token.text)
        if token.kind == "word"
        and token.text in _OPERATOR_WORDS
        and (index > 0 or token.text == "NOT")
        and index < last
        else token
        for index, token in enumerate(tokens)
    ]


def _explicit_leaf(token: _Token) -> Leaf:
    if token.kind == "phrase":
        return Leaf(" ".join(token.text.split()), token.prefix)
    word = strip_edges(token.text)
    prefix = word.endswith("*")
    return Leaf(strip_edges(word.rstrip("*")) if prefix else word, prefix)


class _Parser:
    """Recursive descent over `or := and (OR and)*`, `and := unary ([AND] unary)*`,
    `unary := NOT* primary`, `primary := word | phrase | ( or )`."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._pos = 0
        self._depth = 0

    def parse(self) -> Node:
        node = self._or()
        if self._pos != len(self._tokens):
            raise _MalformedError
        return node

    def _peek(self) -> _Token | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _is(self, kind: str, text: str | None = None) -> bool:
        token = self._peek()
        return token is not None and token.kind == kind and text in (None, token.text)

    def _or(self) -> Node:
        items = [self._and()]
        while self._is("op", "OR"):
            self._pos += 1
            items.append(self._and())
        return items[0] if len(items) == 1 else Group("or", tuple(items))

    def _and(self) -> Node:
        items = [self._unary()]
        while self._peek() is not None and not self._is("op", "OR") and not self._is("close"):
            if self._is("op", "AND"):
                self._pos += 1
            items.append(self._unary())
        return items[0] if len(items) == 1 else Group("and", tuple(items))

    def _unary(self) -> Node:
        negations = 0
        while self._is("op", "NOT"):
            self._pos += 1
            negations += 1
        node = self._primary()
        return Neg(node) if negations % 2 else node

    def _primary(self) -> Node:
        token = self._peek()
        if token is None or token.kind in ("close", "op"):
            raise _MalformedError
        self._pos += 1
        if token.kind != "open":
            return _explicit_leaf(token)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _MalformedError
        node = self._or()
        if not self._is("close"):
            raise _MalformedError
        self._pos += 1
        self._depth -= 1
        return node


def _natural_leaf(word: str) -> Leaf | None:
    word = strip_edges(word)
    if word.endswith("*"):
        word = strip_edges(word.rstrip("*"))
    if not has_index_token(word):
        return None
    # Plain words are prefixes of their stem (`star` matches "starts", `fri` "Friday"):
    # measured on NPL with the scope's BM25, MAP 0.2946 with prefixes, 0.2906 without.
    return Leaf(word, IMPLICIT_PREFIX and auto_prefix(word), auto=IMPLICIT_PREFIX)


def _natural(words: list[str], quoted: frozenset[int] = frozenset()) -> Node | None:
    """AND of the words (those at `quoted` positions are phrases), in query order."""
    first: dict[str, tuple[Leaf, bool]] = {}
    for index, word in enumerate(words):
        phrase = index in quoted
        if phrase:
            text = " ".join(word.split())
            leaf = Leaf(text, False) if has_index_token(text) else None
        else:
            leaf = _natural_leaf(word)
        if leaf is not None:
            first.setdefault(leaf.text.lower(), (leaf, phrase))
    # Stopwords outside quotes are dropped, unless nothing else is left.
    content = [leaf for key, (leaf, phrase) in first.items() if phrase or key not in STOPWORDS]
    kept = content or [leaf for leaf, _ in first.values()]
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else Group("and", tuple(kept))


def _sentence(tokens: list[_Token]) -> tuple[list[str], frozenset[int]]:
    """Words and quoted phrases of natural-language text (parentheses are text)."""
    kept = [token for token in tokens if token.kind in ("word", "op", "phrase")]
    quoted = frozenset(i for i, token in enumerate(kept) if token.kind == "phrase")
    return [token.text for token in kept], quoted


def _fallback_words(tokens: list[_Token]) -> list[str]:
    words: list[str] = []
    for token in tokens:
        if token.kind == "phrase":
            words.extend(token.text.split())
        elif token.kind == "word" and token.text not in _OPERATOR_WORDS:
            words.append(token.text)
    return words


def _is_prefix_word(token: _Token) -> bool:
    word = strip_edges(token.text)
    return token.kind == "word" and word.endswith("*") and has_index_token(word)


def _explicit(tokens: list[_Token], balanced: bool) -> bool:
    """Operators, a `prefix*` word, or one quoted phrase alone (a prefix phrase included)."""
    if any(token.kind == "op" or _is_prefix_word(token) for token in tokens):
        return True
    return balanced and len(tokens) == 1 and tokens[0].kind == "phrase"


def is_explicit(text: str) -> bool:
    """Whether the text is strict syntax (so is never relaxed); see the module rules."""
    tokens, balanced = _lex(text)
    return _explicit(_mark_operators(tokens, operators_active(text)), balanced)


def parse_query(text: str) -> ParsedQuery:
    """Parse sanitised query text; never raises."""
    tokens, balanced = _lex(text)
    tokens = _mark_operators(tokens, operators_active(text))
    explicit = _explicit(tokens, balanced)
    if not explicit:
        if '"' not in text:
            return ParsedQuery(_natural(text.split()), explicit=False)
        return ParsedQuery(_natural(*_sentence(tokens)), explicit=False)
    if balanced and tokens:
        try:
            return ParsedQuery(_Parser(tokens).parse(), explicit=True)
        except _MalformedError:
            pass
    return ParsedQuery(_natural(_fallback_words(tokens)), explicit=True)
