"""How the SQLite search statement is assembled for each plan."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.projects.lexical import LexicalQuery, compile_query
from service.store.base import DocumentInput, DocumentWrite, Filters, Mode, SearchPlan
from service.store.sqlite import SqliteStore
from service.store.sqlite import search_sql as q
from service.store.sqlite import vector_sql as v
from service.store.sqlite.lexical_check import Fts5Checker
from service.store.sqlite.schema import VectorIndex
from service.store.sqlite.search import build, choose_lexical

IDENTITY = EmbeddingIdentity("m", 4)


@pytest.fixture
def checker() -> Iterator[Fts5Checker]:
    probe = Fts5Checker()
    yield probe
    probe.close()


def _plan(mode: Mode, lexical: LexicalQuery | None, limit: int = 10, offset: int = 0) -> SearchPlan:
    vector = None if mode is Mode.FTS else (1.0, 0.0, 0.0, 0.0)
    return SearchPlan("t", (1, 2), mode, lexical, vector, IDENTITY, Filters(), limit, offset)


def _lexical(fts5: str | None, relaxed: str | None) -> LexicalQuery:
    words = (("a", False), ("b", False))
    return LexicalQuery(fts5, relaxed, None, None, None, (), False, score_words=words)


# Unfiltered: N and the summed lengths from lexical_stats, postings of the whole scope.
_SCORED = (q.LEX_SCOPE, q.BM25)
_ONE_TIER = (*_SCORED, q.FTS_STRICT, q.FTS_LOOSE_NONE, q.FTS_TIERED)


@pytest.mark.parametrize(
    ("strict", "relaxed", "ctes", "flag"),
    [
        (
            'content : ("a")',
            'content : ("a" OR "b")',
            (*_SCORED, q.FTS_STRICT, q.FTS_LOOSE, q.FTS_TIERED),
            q.RELAXED_WHEN_LOOSE,
        ),
        ('content : ("a")', None, _ONE_TIER, q.RELAXED_NEVER),
        ('content : ("a")', "broken (", _ONE_TIER, q.RELAXED_NEVER),
        ("broken (", 'content : ("a")', _ONE_TIER, q.RELAXED_ALWAYS),
        ("broken (", None, (q.FTS_NONE,), q.RELAXED_NEVER),
    ],
)
def test_lexical_choice(
    checker: Fts5Checker, strict: str, relaxed: str | None, ctes: tuple[str, ...], flag: str
) -> None:
    chosen = choose_lexical(_plan(Mode.FTS, _lexical(strict, relaxed)), checker)
    assert (chosen.ctes, chosen.relaxed) == (ctes, flag)
    if flag == q.RELAXED_ALWAYS:
        assert chosen.bindings["fts_query"] == relaxed
    if ctes != (q.FTS_NONE,):
        # BM25 sums over each distinct index term once, in the order given (column 0 is
        # content, as term_postings numbers the columns).
        terms = [["a", False, 0, False], ["b", False, 0, False]]
        assert json.loads(chosen.bindings["score_terms"]) == terms


def test_relaxed_matches_come_from_the_term_frequencies(checker: Fts5Checker) -> None:
    chosen = choose_lexical(_plan(Mode.FTS, compile_query("deploy freeze friday")), checker)
    # Every scoring term is a relaxed term, and the strict form is their AND: the tiers are
    # read off the BM25 rows (how many terms each holds), without any MATCH.
    assert chosen.ctes[-1] == q.FTS_TIERED_FROM_HITS
    assert q.FTS_STRICT not in chosen.ctes
    assert q.FTS_LOOSE not in chosen.ctes
    assert "fts_relaxed" not in chosen.bindings
    assert chosen.bindings["strict_terms"] == 3
    terms = json.loads(chosen.bindings["score_terms"])
    assert [(stem, prefix, relaxed) for stem, prefix, _, relaxed in terms] == [
        ("deploi", True, True),
        ("freez", True, True),
        ("fridai", True, True),
    ]


def test_a_phrase_keeps_the_strict_match(checker: Fts5Checker) -> None:
    plan = _plan(Mode.FTS, compile_query('deploy "freeze friday" now'))
    chosen = choose_lexical(plan, checker)
    # The strict form holds a phrase: its matches come from FTS5, the relaxed ones from BM25.
    assert chosen.ctes[-2:] == (q.FTS_STRICT, q.FTS_TIERED_FROM_BM25)
    assert "strict_terms" not in chosen.bindings


def test_gram_terms_score_the_ngram_column(checker: Fts5Checker) -> None:
    chosen = choose_lexical(_plan(Mode.FTS, compile_query("即适者生存 fitness")), checker)
    assert json.loads(chosen.bindings["score_terms"])[-1][2] == 1  # the ngrams column


def test_prefix_terms_are_one_term_per_stem(checker: Fts5Checker) -> None:
    chosen = choose_lexical(_plan(Mode.FTS, compile_query("running runs dogs")), checker)
    # "running" and "runs" stem alike: one term, scored by its exact stem's count.
    terms = json.loads(chosen.bindings["score_terms"])
    assert [(stem, prefix) for stem, prefix, _, _ in terms] == [("run", True), ("dog", True)]


def test_hybrid_fusion_picks_its_scoring_fragment(checker: Fts5Checker) -> None:
    from service.store.base import Fusion

    plan = _plan(Mode.HYBRID, compile_query("a b"))
    default, _ = build(plan, VectorIndex(IDENTITY, False), checker)
    assert q.SCORED_SUM in default  # the default fusion
    assert q.SCORED_RRF not in default
    rrf, bindings = build(
        dataclasses.replace(plan, fusion=Fusion.RRF), VectorIndex(IDENTITY, False), checker
    )
    assert q.SCORED_RRF in rrf
    assert bindings["rrf_k"] == 60
    max_min, _ = build(
        dataclasses.replace(plan, fusion=Fusion.MAX_MIN), VectorIndex(IDENTITY, False), checker
    )
    assert q.SCORED_HYBRID in max_min
    assert q.SCORED_RRF not in max_min


def test_blank_text_lists_in_fts_and_is_silent_in_hybrid(checker: Fts5Checker) -> None:
    assert choose_lexical(_plan(Mode.FTS, None), checker).ctes == (q.FTS_ALL,)
    assert choose_lexical(_plan(Mode.HYBRID, None), checker).ctes == (q.FTS_NONE,)
    assert choose_lexical(_plan(Mode.FTS, None), checker, disabled=True).ctes == (q.FTS_NONE,)


def test_knn_arm_only_for_the_indexed_identity(checker: Fts5Checker) -> None:
    plan = _plan(Mode.VECTOR, compile_query("a b"))
    with_knn, bindings = build(plan, VectorIndex(IDENTITY, True), checker)
    assert "vec_chunks" in with_knn
    assert "vcount" in with_knn
    assert bindings["limit"] == 11  # one probe row
    other = VectorIndex(EmbeddingIdentity("other", 4), True)
    for index in (other, VectorIndex(IDENTITY, False)):
        exact_only, _ = build(plan, index, checker)
        assert "vec_chunks" not in exact_only


def test_strategy_count_reads_the_vector_index_unless_filters_need_documents(
    checker: Fts5Checker,
) -> None:
    plan = _plan(Mode.VECTOR, compile_query("a b"))
    plain, _ = build(plan, VectorIndex(IDENTITY, True), checker)
    assert v.VECTOR_COUNT_SCOPE in plain
    filtered = dataclasses.replace(plan, filters=Filters(kinds=("note",)))
    joined, _ = build(filtered, VectorIndex(IDENTITY, True), checker)
    assert v.VECTOR_COUNT in joined
    assert v.VECTOR_COUNT_SCOPE not in joined


def test_fts_statement_counts_in_the_same_statement(checker: Fts5Checker) -> None:
    sql, bindings = build(_plan(Mode.FTS, compile_query("a")), VectorIndex(None, False), checker)
    assert q.TOTAL_COUNT in sql
    assert "vec_distance" not in sql
    assert bindings["limit"] == 10
    assert sql.count("SELECT m.relaxed") == 1


def test_knn_k_is_capped() -> None:
    from service.store.sqlite.search import KNN_MAX_K

    plan = _plan(Mode.VECTOR, None, limit=1000, offset=5000)
    checker = Fts5Checker()
    _, bindings = build(plan, VectorIndex(IDENTITY, True), checker)
    checker.close()
    assert bindings["knn_k"] == KNN_MAX_K


def test_knn_over_fetches_more_when_filters_drop_candidates(checker: Fts5Checker) -> None:
    plan = _plan(Mode.VECTOR, None)
    _, plain = build(plan, VectorIndex(IDENTITY, True), checker)
    filtered = dataclasses.replace(plan, filters=Filters(kinds=("note",)))
    _, joined = build(filtered, VectorIndex(IDENTITY, True), checker)
    assert 11 <= plain["knn_k"] < joined["knn_k"]


async def test_plan_timeout_cancels_the_statement(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.sqlite3", IDENTITY)
    await store.open()
    try:
        project = await store.create_project("t", "p", "p")
        docs = [
            DocumentWrite(
                DocumentInput("note", str(i), "t", "p.md", "body", "", "", {}, None, None, "h", ""),
                [],
            )
            for i in range(500)
        ]
        await store.write_documents("t", project.project_id, docs)
        # Enough rows for the progress handler to run; a deadline already in the past.
        plan = dataclasses.replace(
            _plan(Mode.FTS, None), project_ids=(project.project_id,), tenant="t", timeout=1e-9
        )
        with pytest.raises(errors.DeadlineExceeded):
            await store.search(plan)
        ok = await store.search(dataclasses.replace(plan, timeout=5.0))
        assert ok.total == 500
        assert (await store.search(dataclasses.replace(plan, timeout=None))).total == 500
    finally:
        await store.close()
