"""The FTS5 syntax probe that keeps typed syntax errors away from the real statement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.projects.lexical import compile_query
from service.store.sqlite.lexical_check import Fts5Checker


@pytest.fixture
def checker() -> Iterator[Fts5Checker]:
    probe = Fts5Checker()
    yield probe
    probe.close()


@pytest.mark.parametrize(
    "expression",
    ['content : ("nebula")', 'ngrams : ("适者 者生")', '""', '{content ngrams} : ("x"*)'],
)
def test_valid_expressions(checker: Fts5Checker, expression: str) -> None:
    assert checker.valid(expression)
    assert checker.valid(expression)  # cached answer


@pytest.mark.parametrize("expression", ["foo<bar", "nebula AND", '"open', "", "nope : x"])
def test_invalid_expressions(checker: Fts5Checker, expression: str) -> None:
    assert not checker.valid(expression)


@pytest.mark.parametrize(
    "text",
    [
        "foo<bar",
        "C++ AND config.json",
        '"unbalanced',
        "O'Reilly OR (auth|admin)",
        "a NOT",
        "适者生存",
    ],
)
def test_compiled_queries_always_parse(checker: Fts5Checker, text: str) -> None:
    query = compile_query(text)
    for expression in (query.fts5, query.fts5_relaxed):
        assert expression is None or checker.valid(expression)


def test_index_terms_are_stems_each_once(checker: Fts5Checker) -> None:
    words = [("running", False), ("runs", False), ("run", True), ("el/1", False)]
    assert checker.index_terms(words) == [
        ("run", False),
        ("run", True),
        ("el", False),
        ("1", False),
    ]
