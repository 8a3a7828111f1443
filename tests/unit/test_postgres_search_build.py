"""How the PostgreSQL search statement is assembled for each plan (no database needed)."""

from __future__ import annotations

import dataclasses

import pytest

from service.embeddings.base import EmbeddingIdentity
from service.projects.lexical import compile_query
from service.store.base import Filters, Mode, SearchPlan
from service.store.pages import knn_k
from service.store.postgres import lexical_sql as lx
from service.store.postgres import search_sql as q
from service.store.postgres.filters import filter_sql
from service.store.postgres.search import KNN_MAX_K, build

IDENTITY = EmbeddingIdentity("m", 4)
NO_FILTERS = Filters()


def _plan(mode: Mode, filters: Filters = NO_FILTERS, limit: int = 10) -> SearchPlan:
    vector = None if mode is Mode.FTS else (1.0, 0.0, 0.0, 0.0)
    identity = None if mode is Mode.FTS else IDENTITY
    return SearchPlan(
        "t", (1, 2), mode, compile_query("galaxy survey"), vector, identity, filters, limit, 0
    )


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.HYBRID])
def test_unfiltered_index_path_checks_ownership_without_the_eligible_set(mode: Mode) -> None:
    sql, bindings = build(_plan(mode))
    assert q.KNN_OWNED in sql
    assert "FROM eligible" not in sql  # never read, so the CTE is never computed
    assert bindings["knn_k"] == knn_k(11, False, KNN_MAX_K)


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.HYBRID])
def test_filters_are_checked_on_document_rows_never_by_rescanning_the_eligible_set(
    mode: Mode,
) -> None:
    # A semi-join on the `eligible` CTE was planned as a rescan of the CTE per scope vector
    # (1.5-2.7 s at 100k chunks): every channel checks a row's document by its key instead.
    filters = Filters(kinds=("note",), directory_prefix="ops")
    sql, bindings = build(_plan(mode, filters))
    where, _ = filter_sql(filters)
    passes = q.DOCUMENT_PASSES.format(alias="v", filters=where)
    assert sql.count(q.ELIGIBLE_VECTORS.format(passes=passes)) == 2  # exact and backlog scans
    assert q.KNN_OWNED + q.DOCUMENT_PASSES.format(alias="k", filters=where) in sql
    if mode is Mode.HYBRID:
        assert q.DOCUMENT_PASSES.format(alias="x", filters=where) in sql  # lexical postings
    assert "IN (SELECT project_id, kind, row_id FROM eligible)" not in sql.replace("\n", " ")
    assert bindings["knn_k"] == knn_k(11, True, KNN_MAX_K)


def test_knn_k_over_fetches_more_when_filters_drop_candidates() -> None:
    assert knn_k(11, False, KNN_MAX_K) < knn_k(11, True, KNN_MAX_K)
    assert knn_k(1, False, KNN_MAX_K) >= 11  # a floor, whatever the page size
    assert knn_k(10**6, False, KNN_MAX_K) == knn_k(10**6, True, KNN_MAX_K) == KNN_MAX_K


def test_hnsw_arm_has_a_single_scope_predicate() -> None:
    # A second `= ANY(owned)` would shrink the planner's estimate and steer it off the index.
    sql, _ = build(_plan(Mode.VECTOR))
    knn = sql[sql.index("knn AS MATERIALIZED") : sql.index("chunk_sims AS MATERIALIZED")]
    assert knn.count("project_id = ANY(") == 1


@pytest.mark.parametrize("filtered", [False, True])
def test_lexical_statistics_come_from_lexical_stats_unless_filtered(filtered: bool) -> None:
    filters = Filters(kinds=("note",)) if filtered else NO_FILTERS
    sql, _ = build(_plan(Mode.FTS, filters))
    assert (lx.ELIGIBLE_STATS in sql) is filtered
    assert (lx.SCOPE_STATS in sql) is not filtered
    passes = q.DOCUMENT_PASSES.format(alias="x", filters=filter_sql(filters)[0])
    assert (passes in sql) is filtered


def test_word_queries_may_count_tiers_and_script_queries_match() -> None:
    words, _ = build(_plan(Mode.FTS))
    assert lx.LEX_SHAPE in words
    assert lx.FTS_TIERED_BY_COUNT in words
    plan = dataclasses.replace(_plan(Mode.FTS), lexical=compile_query("会議室 release"))
    script, _ = build(plan)
    assert lx.LEX_SHAPE not in script
    assert lx.FTS_TIERED in script
    # The postings drive both: no GIN candidate test over the whole table.
    for sql in (words, script):
        assert "words_any" not in sql
        assert "term_postings" in sql
