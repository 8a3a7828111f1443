"""The FTS5 syntax probe that keeps typed syntax errors away from the real statement."""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import pytest

from service.projects.lexical import compile_query
from service.store.sqlite import search_sql as q
from service.store.sqlite.lexical_check import Fts5Checker, register_functions


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


def test_scope_statistics_decode_every_varint_length() -> None:
    """The SQL decode of FTS5's docsize varints agrees with the tokenizer's counts."""
    conn = apsw.Connection(":memory:")
    register_functions(conn)
    conn.execute(
        "CREATE VIRTUAL TABLE docs_fts USING fts5(content, ngrams, content = '',"
        " contentless_delete = 1, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE TABLE eligible (doc_id INTEGER PRIMARY KEY)")
    sizes = [1, 127, 128, 16_383, 16_384, 40_000]
    for rowid, size in enumerate(sizes, start=1):
        conn.execute(
            "INSERT INTO docs_fts (rowid, content, ngrams) VALUES (?, ?, ?)",
            (rowid, " ".join(["w"] * size), "g " * (size % 7)),
        )
        conn.execute("INSERT INTO eligible VALUES (?)", (rowid,))
    for fragment, ngrams in ((q.SCOPE_STATS_WORDS, None), (q.SCOPE_STATS_GRAMS, 3.0)):
        n, avgdl, avgnl = conn.execute(
            "WITH" + fragment + " SELECT n, avgdl, avgnl FROM scope_stats"  # noqa: S608 - constants
        ).fetchall()[0]
        assert (n, avgdl) == (len(sizes), sum(sizes) / len(sizes))
        expected = sum(size % 7 for size in sizes) / len(sizes) if ngrams else 1.0
        assert avgnl == pytest.approx(expected)


def test_index_terms_are_stems_each_once(checker: Fts5Checker) -> None:
    words = [("running", False), ("runs", False), ("run", True), ("el/1", False)]
    assert checker.index_terms(words) == [
        ("run", False),
        ("run", True),
        ("el", False),
        ("1", False),
    ]
