"""PostgreSQL tsquery text: exact shapes and well-formedness (a server test runs them later)."""

# Test data is deliberately non-ASCII (Cyrillic, full-width forms, typographic quotes).
# ruff: noqa: RUF001

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.projects.lexical import TSQUERY_MATCH_NOTHING, compile_query
from service.projects.lexical_tsquery import render_script_tsquery, render_tsquery_any

_TOKEN = re.compile(r"\s*(?:(?P<lit>'(?:[^'\\\x00]|'')*'(?::\*)?)|(?P<op><->|[&|!()]))")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip():
                raise AssertionError(f"unexpected text at {position}: {text[position:]!r}")
            break
        tokens.append(match.group("lit") or match.group("op"))
        position = match.end()
    return tokens


class _Checker:
    """Recursive descent over tsquery grammar: or := and (| and)*; and := phr (& phr)*; ..."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def check(self) -> None:
        self._or()
        assert self.pos == len(self.tokens), f"trailing tokens {self.tokens[self.pos :]}"

    def _take(self, *allowed: str) -> bool:
        if self.pos < len(self.tokens) and self.tokens[self.pos] in allowed:
            self.pos += 1
            return True
        return False

    def _or(self) -> None:
        self._and()
        while self._take("|"):
            self._and()

    def _and(self) -> None:
        self._phrase()
        while self._take("&"):
            self._phrase()

    def _phrase(self) -> None:
        self._unary()
        while self._take("<->"):
            self._unary()

    def _unary(self) -> None:
        while self._take("!"):
            pass
        assert self.pos < len(self.tokens), "missing operand"
        token = self.tokens[self.pos]
        self.pos += 1
        if token == "(":
            self._or()
            assert self._take(")"), "unclosed group"
        else:
            assert token.startswith("'"), f"operand expected, got {token!r}"


def assert_well_formed(text: str) -> None:
    _Checker(text).check()


def test_checker_rejects_broken_text() -> None:
    for broken in ["'a' &", "& 'a'", "('a'", "'a''", "a", "'a' 'b'", "!", "'a\\b'"]:
        with pytest.raises(AssertionError):
            assert_well_formed(broken)


@pytest.mark.parametrize(
    ("text", "tsquery"),
    [
        ("coffee", "'coffee':*"),
        ("hello world", "('hello':* & 'world':*)"),
        ("coffee NOT decaf", "('coffee' & !'decaf')"),
        ("(pour OR french) AND press", "(('pour' | 'french') & 'press')"),
        (
            '"incident response" OR "database recovery"',
            "('incident response' | 'database recovery')",
        ),
        ("O'Reilly", "'O''Reilly':*"),
        ('"incident" AND O\'Reilly', "('incident' & 'O''Reilly')"),
        ('"incident" AND auth|admin', "('incident' & 'auth|admin')"),
        ('"incident" AND bar:baz', "('incident' & 'bar:baz')"),
        ("foo<bar", "'foo<bar':*"),
        ("back\\slash", "'back slash':*"),
        ("docs/specs/a.md", "'docs/specs/a.md'"),
        ('"incident response OR database', "('incident':* & 'response':* & 'database':*)"),
        ("NOT draft", TSQUERY_MATCH_NOTHING),
    ],
)
def test_strict_tsquery_shapes(text: str, tsquery: str) -> None:
    assert compile_query(text).tsquery == tsquery
    assert_well_formed(tsquery)


@pytest.mark.parametrize(
    ("text", "relaxed"),
    [
        ("don't touch this", "'don''t':* | 'touch':*"),
        (
            "скасувати об'єкт виданий доступ",
            "'скасувати':* | 'об''єкт':* | 'виданий':* | 'доступ':*",
        ),
        ("how to revoke granted access", "'revoke':* | 'granted':* | 'access':*"),
    ],
)
def test_relaxed_tsquery_quotes_apostrophe_lexemes(text: str, relaxed: str) -> None:
    assert compile_query(text).tsquery_relaxed == relaxed
    assert_well_formed(relaxed)


def test_script_tsquery_is_and_of_gram_phrases() -> None:
    assert render_script_tsquery([("适者", "者生", "生存")]) == "'适者' <-> '者生' <-> '生存'"
    assert render_script_tsquery([("猫",), ("适者", "者生")]) == "'猫' & ('适者' <-> '者生')"


def test_relaxed_rendering_without_prefix() -> None:
    assert render_tsquery_any(["a'b", "c"], prefix=False) == "'a''b' | 'c'"


_OPERATORISH = st.sampled_from(
    [
        *"abcxyz ABC\"()*:-!&|<>'\\./?,;",
        *("AND", "OR", "NOT", " AND ", " OR ", " NOT ", "适", "者", "\x00", "\u200b", "<->"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.lists(_OPERATORISH, max_size=24).map("".join)))
def test_fuzz_every_tsquery_is_well_formed(text: str) -> None:
    query = compile_query(text)
    for tsquery in (query.tsquery, query.tsquery_relaxed, query.script_tsquery):
        if tsquery is not None:
            assert_well_formed(tsquery)
