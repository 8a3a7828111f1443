"""SQLite lexical postings: always what FTS5 holds, and BM25 from them is full BM25.

The store scores from `term_postings` / `lexical_stats` (service.store.sqlite.postings). Two
promises are checked here against independent computations: after any sequence of writes,
updates, deletes and project deletions the postings are exactly FTS5's own index of the same
documents (token instances counted per document) and the statistics are the documents'; and
the scores and order a search returns are Lucene BM25 computed in Python from FTS5's index
over the eligible scope (`reference_scores`), for natural-language and explicit queries,
with and without filters.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import apsw
import pytest

from service.store.base import Filters, Mode, SearchPlan
from service.store.sqlite.lexical_check import Fts5Checker
from service.store.sqlite.search import scoring_terms
from tests.integration.conftest import Corpus, Doc
from tests.support.postings_corpus import QUERIES, random_writes, scored_projects
from tests.support.sqlite_postings import (
    documents_stats,
    fts5_postings,
    postings_table,
    stats_table,
)


async def _check_postings(path: Path) -> None:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        assert postings_table(conn) == fts5_postings(conn)
        assert stats_table(conn) == documents_stats(conn)
    finally:
        conn.close()


async def test_postings_follow_every_write(sqlite_corpus: tuple[Corpus, Path]) -> None:
    """A seeded random sequence of creates, updates, deletes and project deletions."""
    corpus, path = sqlite_corpus
    await random_writes(corpus, random.Random(18), lambda: _check_postings(path))


def reference_scores(path: Path, plan: SearchPlan, checker: Fts5Checker) -> dict[int, float]:
    """Lucene BM25 of every eligible document holding a query term, from FTS5's index."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.ref_instance"
            " USING fts5vocab(main, docs_fts, instance)"
        )
        kinds = list(plan.filters.kinds)
        eligible = {
            doc_id: (doc_len, ngram_len)
            for doc_id, project_id, kind, doc_len, ngram_len in conn.execute(
                "SELECT d.id, d.project_id, d.kind, d.doc_len, d.ngram_len FROM documents AS d"
                " JOIN projects AS p ON p.project_id = d.project_id WHERE p.tenant = ?",
                (plan.tenant,),
            )
            if project_id in plan.project_ids and (not kinds or kind in kinds)
        }
        instances: dict[tuple[str, str], dict[int, int]] = {}
        for term, doc, col in conn.execute("SELECT term, doc, col FROM temp.ref_instance"):
            if doc in eligible:
                by_doc = instances.setdefault((col, term), {})
                by_doc[doc] = by_doc.get(doc, 0) + 1
    finally:
        conn.close()
    n = len(eligible)
    avg = [
        (sum(lengths[i] for lengths in eligible.values()) / n if n else 0.0) or 1.0 for i in (0, 1)
    ]
    scores: dict[int, float] = {}
    for stem, prefix, column, _ in scoring_terms(plan, checker):
        tf: dict[int, float] = {}
        for (col, term), by_doc in instances.items():
            if col != column or not (term == stem or (prefix and term.startswith(stem))):
                continue
            for doc, count in by_doc.items():
                exact = count if term == stem else 0
                tf[doc] = max(tf.get(doc, 0), exact) if prefix else exact
        if prefix:
            tf = {doc: max(1, value) for doc, value in tf.items()}
        idf = math.log(1 + (n - len(tf) + 0.5) / (len(tf) + 0.5))
        which = 0 if column == "content" else 1
        for doc, value in tf.items():
            dl = eligible[doc][which]
            k1, b = plan.bm25_k1, plan.bm25_b
            part = idf * value * (k1 + 1) / (value + k1 * (1 - b + b * (dl / avg[which])))
            scores[doc] = scores.get(doc, 0.0) + part
    return scores


@pytest.mark.parametrize("filtered", [False, True])
async def test_scores_are_full_bm25_over_the_scope(
    sqlite_corpus: tuple[Corpus, Path], filtered: bool
) -> None:
    corpus, path = sqlite_corpus
    projects = await scored_projects(corpus, random.Random(7))
    checker = Fts5Checker()
    ids: dict[tuple[int, str, str], int] = {}
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    for doc_id, project_id, kind, row_id in conn.execute(
        "SELECT id, project_id, kind, row_id FROM documents"
    ):
        ids[(project_id, kind, row_id)] = doc_id
    conn.close()
    filters = Filters(kinds=("note",)) if filtered else Filters()
    try:
        for text in QUERIES:
            plan = await corpus.plan(projects[:2], Mode.FTS, text, filters=filters, limit=200)
            page = await corpus.store.search(plan)
            expected = reference_scores(path, plan, checker)
            assert page.total == len(page.hits), text
            for hit in page.hits:
                doc = ids[(hit.project_id, hit.kind, hit.row_id)]
                assert doc in expected, text
                assert hit.fts_score == pytest.approx(expected[doc], rel=1e-12), text
            # Within a tier, by score then identity (tiers: the strict form's matches first).
            order = [(-h.fts_score, h.project_id, h.kind, h.row_id) for h in page.hits]
            tiers = _tier_runs(order)
            assert all(run == sorted(run) for run in tiers), text
    finally:
        checker.close()


def _tier_runs(order: list[tuple[float, int, str, str]]) -> list[list[tuple[float, int, str, str]]]:
    """The ordered list cut where it stops descending by score: at most two tiers."""
    runs: list[list[tuple[float, int, str, str]]] = [[]]
    for item in order:
        if runs[-1] and item < runs[-1][-1]:
            runs.append([])
        runs[-1].append(item)
    assert len(runs) <= 2
    return runs


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.HYBRID])
@pytest.mark.parametrize("filtered", [False, True])
async def test_knn_path_keeps_to_owned_projects(
    sqlite_corpus: tuple[Corpus, Path], mode: Mode, filtered: bool
) -> None:
    """vec0 searches the scope's partitions unchecked; the tenant check on its candidates
    (the owned scope projects, or the eligible set with filters) keeps a stranger's out."""
    corpus, _ = sqlite_corpus
    mine = [p.project_id for p in await corpus.projects(2)]
    for project in mine:
        await corpus.write(project, [Doc("note", "1", "galaxy redshift"), Doc("issue", "2", "x")])
    stranger = await corpus.project("elsewhere", tenant="other-tenant")
    await corpus.write(stranger.project_id, [Doc("note", "1", "galaxy redshift redshift")])
    filters = Filters(kinds=("note",)) if filtered else Filters()
    plan = await corpus.plan(
        [*mine, stranger.project_id],
        mode,
        "galaxy redshift",
        filters=filters,
        exact_scan_limit=0,
    )
    page = await corpus.store.search(plan)
    assert not page.ranking_is_exact
    assert {h.project_id for h in page.hits} == set(mine)
    if filtered:
        assert {h.kind for h in page.hits} == {"note"}
