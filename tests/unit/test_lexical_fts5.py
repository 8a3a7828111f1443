"""Compiled FTS5 expressions against a real FTS5 table shaped like the SQLite store's."""

# Test data is deliberately non-ASCII (Cyrillic, full-width forms, typographic quotes).
# ruff: noqa: RUF001

from __future__ import annotations

from collections.abc import Iterator

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.projects.lexical import (
    FTS5_MATCH_NOTHING,
    compile_query,
    relaxed_terms,
    script_ngrams,
)
from service.projects.lexical_fts5 import render_fts5_any

CREATE_TABLE = (
    "CREATE VIRTUAL TABLE t USING fts5(content, ngrams, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)
INSERT = "INSERT INTO t(rowid, content, ngrams) VALUES (?, ?, ?)"
SEARCH = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid"


class Index:
    """An in-memory FTS5 table filled the way the SQLite store fills it."""

    def __init__(self) -> None:
        self.connection = apsw.Connection(":memory:")
        self.connection.execute(CREATE_TABLE)

    def add(self, rowid: int, title: str, path: str, body: str) -> None:
        content = f"{title}\n{path}\n{body}"
        ngrams = script_ngrams(f"{title} {body}")
        self.connection.execute(INSERT, (rowid, content, ngrams))

    def match(self, expression: str | None) -> list[int]:
        assert expression is not None
        return [int(row[0]) for row in self.connection.execute(SEARCH, (expression,))]

    def strict(self, text: str) -> list[int]:
        return self.match(compile_query(text).fts5)

    def relaxed(self, text: str) -> list[int]:
        return self.match(compile_query(text).fts5_relaxed)

    def search(self, text: str) -> list[int]:
        """What the store does: strict, then relaxed over the whole scope if strict is empty."""
        query = compile_query(text)
        rows = self.match(query.fts5) if query.fts5 else []
        if not rows and query.fts5_relaxed:
            rows = self.match(query.fts5_relaxed)
        return rows


DOCUMENTS = [
    (1, "Coffee brewing", "notes/coffee.md", "Pour over and french press coffee; no decaf."),
    (2, "Decaf coffee", "notes/decaf.md", "Decaf coffee tastes fine with a french press."),
    (3, "C++ tips", "dev/cpp.md", "Use C++ templates, call function() and read array[index]."),
    (4, "Contacts", "people/contacts.md", "Write to email@domain.com about config.json files."),
    (5, "Basic Memory v0.13.0b2 Release", "releases/v0.13.md", "A beta release with features."),
    (6, "Spec A", "docs/specs/a.md", "The first specification."),
    (7, "Spec B", "docs/specs/b.md", "The second specification."),
    (8, "Incident response", "ops/incident-response.md", "Runbook: O'Reilly, auth|admin, bar:baz."),
    (9, "Database recovery", "ops/database-recovery.md", "The database recovery procedure."),
    (10, "進化について", "notes/evolution.md", "OpenAI and 即适者生存的讨论与黑猫"),
    (11, "Measurements", "lab/dielectric.md", "Dielectric measurement of liquids at microwaves."),
    (12, "Access", "security/access.md", "How to revoke an access token."),
    (13, "季度报告", "reports/q.md", "财务数据"),
    (14, "タイ語", "langs/thai.md", "เรียนภาษาไทยทุกวัน"),
    (15, "Runs", "notes/runs.md", "适者 生存"),
]


@pytest.fixture(scope="module")
def index() -> Iterator[Index]:
    built = Index()
    for row in DOCUMENTS:
        built.add(*row)
    yield built
    built.connection.close()


TRICKY_INPUTS = [
    "",
    "*",
    '"',
    '""',
    '"""',
    "(",
    ")",
    "()",
    "AND",
    "OR NOT",
    "a AND",
    "NOT",
    "NEAR(a b)",
    "near/3",
    "a:b",
    "content:foo",
    "-foo",
    "^foo",
    "foo^",
    "{content}: x",
    "+++invalid+++",
    "@#$%^&*()",
    "foo<bar",
    "a > b",
    "it's",
    "'",
    "O'Reilly",
    "don't* OR touch*",
    "\\",
    'a\\"b',
    "`code`",
    "x = y | z",
    "~tilde",
    "hello AND  AND world",
    "((((a))))",
    ")(",
    "a OR (b AND (c NOT d))",
    '"a" "b" OR "c" NOT "d"',
    'NOT "?"',
    "适者生存 OR",
    "适者生存 NOT foo",
    "(适者生存) AND (OpenAI)",
    "\u200b",
    "\u00ad",
    "\ufeff",
    "\U0001f916 robot",
    "ＡＮＤ ｆｏｏ",
    "a\x00b",
    "\x1b[31m",
]


@pytest.mark.parametrize("text", TRICKY_INPUTS)
def test_every_emitted_expression_parses(index: Index, text: str) -> None:
    query = compile_query(text)
    for expression in (query.fts5, query.fts5_relaxed):
        if expression is not None:
            index.match(expression)


_OPERATORISH = st.sampled_from(
    [
        *"abcxyz ABC\"()*:-^+{}[]'\\./?!,;<>@#&|~`_=$%\t\n",
        *("AND", "OR", "NOT", "NEAR", " AND ", " OR ", " NOT "),
        *("适", "者", "猫", "ก", "\u0e48", "\x00", "\u200b", "\u00ad"),
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(_OPERATORISH, max_size=24).map("".join)))
def test_fuzz_compiled_expressions_always_parse(text: str) -> None:
    """No input may produce an FTS5 string that fails with `fts5: syntax error`."""
    connection = apsw.Connection(":memory:")
    connection.execute(CREATE_TABLE)
    query = compile_query(text)
    for expression in (query.fts5, query.fts5_relaxed):
        if expression is not None:
            list(connection.execute(SEARCH, (expression,)))
    connection.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1), min_size=1, max_size=6))
def test_fuzz_relaxed_rendering_parses(words: list[str]) -> None:
    connection = apsw.Connection(":memory:")
    connection.execute(CREATE_TABLE)
    for prefix in (True, False):
        list(connection.execute(SEARCH, (render_fts5_any(words, prefix=prefix),)))
    connection.close()


def test_bare_apostrophe_would_be_a_syntax_error(index: Index) -> None:
    """Pin why every operand is quoted."""
    with pytest.raises(apsw.SQLError, match="fts5: syntax error"):
        index.match("don't* OR touch*")


def test_match_nothing_parses_and_matches_nothing(index: Index) -> None:
    assert index.match(FTS5_MATCH_NOTHING) == []
    assert index.strict("NOT coffee") == []


def test_question_punctuation_still_finds_the_note(index: Index) -> None:
    assert sorted(index.strict("Is there coffee with a french press?")) == [1, 2]


@pytest.mark.parametrize(
    ("text", "rowid"),
    [
        ("C++", 3),
        ("function()", 3),
        ("array[index]", 3),
        ("email@domain.com", 4),
        ("config.json", 4),
        ("Basic Memory v0.13.0b2", 5),
        ("v0.13.0b2", 5),
        ("O'Reilly", 8),
        ("docs/specs/a.md", 6),
    ],
)
def test_special_character_searches_find_their_note(index: Index, text: str, rowid: int) -> None:
    assert index.strict(text) == [rowid]


def test_path_search_is_exact(index: Index) -> None:
    assert index.strict("docs/specs/b.md") == [7]
    assert sorted(index.strict("docs/specs")) == [6, 7]


def test_boolean_searches(index: Index) -> None:
    assert index.strict("coffee NOT decaf") == []  # note 1 mentions "no decaf"
    assert sorted(index.strict("coffee AND french")) == [1, 2]
    assert index.strict("press NOT Decaf") == []
    assert sorted(index.strict("(pour OR templates) AND coffee")) == [1]
    assert sorted(index.strict("templates OR runbook")) == [3, 8]


def test_quoted_phrases_are_adjacent_and_ordered(index: Index) -> None:
    assert sorted(index.strict('"incident response" OR "database recovery"')) == [8, 9]
    assert index.strict('"response incident"') == []
    assert index.strict('incident"response runbook"') == []
    assert index.strict('"incident"(response)') == [8]
    assert index.strict('"incident" AND O\'Reilly') == [8]
    assert index.strict('"incident" AND auth|admin') == [8]
    assert index.strict('"incident" AND bar:baz') == [8]
    assert index.strict('"incident response OR database') == []


def test_porter_stems_match_with_prefix_terms(index: Index) -> None:
    assert index.strict("measurements") == [11]
    assert index.strict("liquid microwave") == [11]
    assert index.relaxed("measurements of dielectric liquids") == [11]


def test_relaxation_finds_what_strict_misses(index: Index) -> None:
    text = "how to revoke granted access to the coffee"
    assert index.strict(text) == []
    assert index.search(text)[0] == 12
    assert set(index.search(text)) >= {1, 2, 12}


def test_all_capitals_question_is_searched_as_words(index: Index) -> None:
    assert index.search("DECAF COFFEE WITH A FRENCH PRESS")[0] == 2


class TestScripts:
    def test_substring_of_a_run_is_found(self, index: Index) -> None:
        assert index.strict("适者生存") == [10]
        assert index.strict("者生") == [10]

    def test_reordered_characters_are_not_found(self, index: Index) -> None:
        assert index.strict("适生者存") == []

    def test_single_character_is_found(self, index: Index) -> None:
        assert index.strict("猫") == [10]

    def test_mixed_word_and_script_query(self, index: Index) -> None:
        assert index.strict("OpenAI 适者生存") == [10]
        assert index.strict("OpenAI and 适者生存") == [10]
        assert index.strict("Coffee 适者生存") == []

    def test_runs_do_not_match_across_a_boundary(self, index: Index) -> None:
        assert index.strict("者生") == [10]  # not note 15, where 者 and 生 are two runs
        assert sorted(index.strict("适者 生存")) == [10, 15]

    def test_title_runs_are_indexed(self, index: Index) -> None:
        assert index.strict("進化") == [10]

    def test_thai_substring(self, index: Index) -> None:
        assert index.strict("ภาษาไทย") == [14]

    def test_cjk_words_relax_to_prefixes_of_whole_runs(self, index: Index) -> None:
        assert index.strict("季度 数据") == [13]
        assert index.strict("季度 营收") == []
        assert index.relaxed("季度 营收") == [13]

    def test_negation_next_to_script(self, index: Index) -> None:
        assert index.strict("适者生存 NOT OpenAI") == []
        assert index.strict("适者生存 NOT coffee") == [10]


@pytest.mark.parametrize(
    "text",
    [
        "don't touch this",
        "скасувати об'єкт виданий доступ",
        "п’ять виданих різних об’єктів",
        "как отозвать выданный доступ",
        "पहुंच कैसे रद्द करें",
    ],
)
def test_relaxed_text_with_apostrophes_parses_and_matches(text: str) -> None:
    built = Index()
    built.add(
        1,
        "",
        "",
        "don't touch this п’ять проектів об'єкт доступу как отозвать выданный доступ पहुंच कैसे रद्द करें",
    )
    assert built.relaxed(text) == [1]


@pytest.mark.parametrize(
    ("document", "query"),
    [
        ("перевод права доступа", "пере\u00adвод права доступа"),  # soft hyphen only in query
        ("слово права доступа", "сло\u2060во права доступа"),  # word joiner only in query
        ("نمی\u200cخواهم دسترسی را لغو", "نمی\u200cخواهم دسترسی را لغو"),  # ZWNJ in both
    ],
)
def test_relaxed_terms_match_the_stored_note(document: str, query: str) -> None:
    terms = relaxed_terms(query)
    assert terms is not None
    built = Index()
    built.add(1, "", "", document)
    # The forms of the first word alone (with and without its format character) must match.
    others = set(document.split()[1:])
    first_word_forms = [term for term in terms if term not in others]
    assert len(first_word_forms) == 2
    assert built.match(render_fts5_any(first_word_forms, prefix=True)) == [1]
