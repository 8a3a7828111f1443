"""Project search on SQLite: build the one statement, run it, hydrate the page."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import apsw

from service import errors
from service.projects.lexical import RELAXED_PREFIX
from service.projects.lexical_fts5 import CONTENT_COLUMN, NGRAMS_COLUMN, render_fts5_all
from service.store.base import (
    FUSION_BONUS,
    MAX_MATCHED_CHUNKS,
    SNIPPET_CHARS,
    Fusion,
    Mode,
    SearchHit,
    SearchPage,
    SearchPlan,
)
from service.store.pages import assemble_page, knn_k, parse_chunks
from service.store.sqlite import search_sql as q
from service.store.sqlite import vector_sql as v
from service.store.sqlite.filters import filter_sql
from service.store.sqlite.lexical_cache import (
    SqliteLexicalCache,
    forget_lexical,
    lexical_refused,
    register_lexical_functions,
)
from service.store.sqlite.lexical_check import Fts5Checker, register_functions
from service.store.sqlite.postings import COLUMN_NUMBERS
from service.store.sqlite.schema import VectorIndex
from service.store.sqlite.values import from_micros, load_metadata, vector_blob
from service.store.sqlite.vector_cache import VectorCache, register_cache_functions

KNN_MAX_K = 4096  # sqlite-vec's limit on k (which applies per project partition)
# SQLite VM instructions between deadline checks (microseconds of work each time).
PROGRESS_STEPS = 10_000
_SCORED = {Mode.FTS: q.SCORED_FTS, Mode.VECTOR: q.SCORED_VECTOR, Mode.HYBRID: q.SCORED_HYBRID}
_HYBRID = {Fusion.SUM: q.SCORED_SUM, Fusion.RRF: q.SCORED_RRF, Fusion.MAX_MIN: q.SCORED_HYBRID}


@dataclass(frozen=True)
class Lexical:
    """The lexical CTEs chosen for a plan and how the page reports relaxation."""

    ctes: tuple[str, ...]
    relaxed: str
    bindings: dict[str, Any]
    cached: bool = False  # ranked in process (lexical_cache), the total read off its answer


def scoring_terms(plan: SearchPlan, checker: Fts5Checker) -> list[tuple[str, bool, str, bool]]:
    """The plan's BM25 terms as `(stem, prefix, column, relaxed)`, each stem once.

    `relaxed` marks the terms of the relaxed form when each of its words is one index term:
    its matches are then exactly the documents holding one of those terms.
    """
    lexical = plan.lexical
    if lexical is None:
        return []
    # A hand-built query without scoring words scores its positive terms as exact words.
    pairs = checker.index_terms(lexical.score_words or [(t, False) for t in lexical.terms])
    # One term per stem, a prefix when any of its occurrences is (as PostgreSQL groups them):
    # a phrase word that is also a relaxed prefix word is scored once, not twice.
    merged: dict[str, bool] = {}
    for stem, prefix in pairs:
        merged[stem] = merged.get(stem, False) or prefix
    words = list(merged.items())
    grams = checker.index_terms([(gram, False) for gram in lexical.score_grams])
    stems = [checker.stems(word, RELAXED_PREFIX) for word in lexical.relaxed_words]
    loose = set()
    if stems and all(len(found) == 1 for found in stems):
        loose = {(found[0], RELAXED_PREFIX) for found in stems}
    if not loose <= set(words):
        loose = set()
    return [(stem, prefix, CONTENT_COLUMN, (stem, prefix) in loose) for stem, prefix in words] + [
        (gram, False, NGRAMS_COLUMN, False) for gram, _ in grams
    ]


def choose_lexical(
    plan: SearchPlan,
    checker: Fts5Checker,
    *,
    disabled: bool = False,
    filtered: bool = False,
    cached: bool = False,
) -> Lexical:
    """Strict + relaxed tiers when both parse; whatever parses otherwise; else nothing.

    Term statistics come from the eligible documents when there are `filtered`, else from
    the scope projects' lexical_stats (the same numbers without reading any document).
    `cached`: the connection answers the lexical cache's functions; an unfiltered FTS search
    whose membership is counted (FTS_TIERED_FROM_HITS over content terms) asks them."""
    strict = plan.lexical.fts5 if plan.lexical else None
    if strict is None and not disabled:
        # Blank text: FTS lists the eligible documents, hybrid has no lexical channel.
        return Lexical((q.FTS_ALL if plan.mode is Mode.FTS else q.FTS_NONE,), q.RELAXED_NEVER, {})
    relaxed = plan.lexical.fts5_relaxed if plan.lexical else None
    strict_ok = strict is not None and not disabled and checker.valid(strict)
    relaxed_ok = relaxed is not None and not disabled and checker.valid(relaxed)
    terms = [] if disabled else scoring_terms(plan, checker)
    if not terms or not (strict_ok or relaxed_ok):
        return Lexical((q.FTS_NONE,), q.RELAXED_NEVER, {})
    bindings: dict[str, Any] = {
        "score_terms": json.dumps(
            [(stem, prefix, COLUMN_NUMBERS[column], loose) for stem, prefix, column, loose in terms]
        ),
        "bm25_k1": float(plan.bm25_k1),
        "bm25_b": float(plan.bm25_b),
    }
    bm25 = q.BM25_FILTERED if filtered else q.BM25
    scored = (q.LEX_SCOPE, bm25)
    if strict_ok and relaxed_ok:
        bindings["fts_query"] = str(strict)
        ctes: tuple[str, ...]
        if all(term[3] for term in terms):
            # Every document holding a term is a strict or a relaxed match.
            ctes = (*scored, q.FTS_STRICT, q.FTS_TIERED_FROM_BM25)
            if plan.lexical and strict == render_fts5_all(
                plan.lexical.relaxed_words, prefix=RELAXED_PREFIX
            ):
                # ... and the strict ones are those holding every term.
                bindings["strict_terms"] = len(terms)
                ctes = (*scored, q.FTS_TIERED_FROM_HITS)
                if cached and _rankable(plan, terms, filtered):
                    return _cached(plan, bindings, terms, any_term=True)
        elif any(term[3] for term in terms):
            # The relaxed matches are read off the term frequencies: no second MATCH.
            ctes = (*scored, q.FTS_STRICT, q.FTS_LOOSE_FROM_TERMS, q.FTS_TIERED)
        else:
            bindings["fts_relaxed"] = str(relaxed)
            ctes = (*scored, q.FTS_STRICT, q.FTS_LOOSE, q.FTS_TIERED)
        return Lexical(ctes, q.RELAXED_WHEN_LOOSE, bindings)
    bindings["fts_query"] = str(strict if strict_ok else relaxed)
    if cached and strict_ok and _rankable(plan, terms, filtered) and _all_terms(plan, checker):
        # One form, the AND of its words: its matches are the documents holding every term.
        bindings["strict_terms"] = len(terms)
        return _cached(plan, bindings, terms, any_term=False)
    flag = q.RELAXED_NEVER if strict_ok else q.RELAXED_ALWAYS
    return Lexical((*scored, q.FTS_STRICT, q.FTS_LOOSE_NONE, q.FTS_TIERED), flag, bindings)


def _rankable(
    plan: SearchPlan, terms: list[tuple[str, bool, str, bool]], filtered: bool
) -> bool:
    """A search whose lexical list the lexical cache ranks: FTS, or HYBRID fused by SUM or
    RRF, without filters, over content-column terms only."""
    fused = plan.mode is Mode.HYBRID and plan.fusion in (Fusion.SUM, Fusion.RRF)
    return (
        (plan.mode is Mode.FTS or fused)
        and not filtered
        and all(term[2] == CONTENT_COLUMN for term in terms)
    )


def _all_terms(plan: SearchPlan, checker: Fts5Checker) -> bool:
    """The strict form is the AND of the scoring words, each one index term (its matches
    are then the documents holding every scoring term)."""
    lexical = plan.lexical
    if lexical is None or lexical.fts5 is None or not lexical.score_words:
        return False
    words = [word for word, _ in lexical.score_words]
    if any(prefix != RELAXED_PREFIX for _, prefix in lexical.score_words):
        return False
    if any(len(checker.stems(word, RELAXED_PREFIX)) != 1 for word in words):
        return False
    return str(lexical.fts5) == render_fts5_all(words, prefix=RELAXED_PREFIX)


def _cached(
    plan: SearchPlan,
    bindings: dict[str, Any],
    terms: list[tuple[str, bool, str, bool]],
    *,
    any_term: bool,
) -> Lexical:
    """The lexical CTEs of an in-process ranking (tier: holding every term; listed: holding
    one, when `any_term`, else every term); HYBRID's come after the vector channel's, whose
    documents they are passed."""
    bindings["cached_terms"] = json.dumps([(t[0], t[1]) for t in terms])
    bindings["any_term"] = int(any_term)
    # SUM reads the first rows by score alone (tiers do not order it), RRF by tier and score.
    bindings["by_score"] = int(plan.mode is Mode.HYBRID and plan.fusion is Fusion.SUM)
    for name in ("score_terms", "fts_query"):
        bindings.pop(name, None)
    also = q.ALSO_VECTOR if plan.mode is Mode.HYBRID else q.ALSO_NONE
    return Lexical((q.LEX_CACHED.format(also=also),), q.RELAXED_CACHED, bindings, cached=True)


def build(
    plan: SearchPlan,
    index: VectorIndex,
    checker: Fts5Checker,
    *,
    lexical_off: bool = False,
    cached: bool = False,
    lexical_cached: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The statement text and its bindings; `cached`: the connection answers the vector
    cache's functions (vector_cache.register_cache_functions), asked before vec0;
    `lexical_cached`: the lexical cache's (lexical_cache.register_lexical_functions)."""
    filters, bindings = filter_sql(plan.filters)
    materialized = "MATERIALIZED" if filters else "NOT MATERIALIZED"
    ctes = [q.ELIGIBLE.format(filters=filters, materialized=materialized)]
    relaxed, exact = q.RELAXED_NEVER, q.EXACT_ALWAYS
    total = q.TOTAL_NONE if plan.mode is not Mode.FTS else q.TOTAL_COUNT
    lexical_ctes: tuple[str, ...] = ()
    if plan.mode is not Mode.VECTOR:
        lexical = choose_lexical(
            plan, checker, disabled=lexical_off, filtered=bool(filters), cached=lexical_cached
        )
        lexical_ctes = lexical.ctes
        if not (lexical.cached and plan.mode is Mode.HYBRID):
            ctes += lexical_ctes
            lexical_ctes = ()
        relaxed = lexical.relaxed
        bindings.update(lexical.bindings)
        if lexical.cached and plan.mode is Mode.FTS:
            total = q.TOTAL_CACHED
    semantic = plan.mode is not Mode.FTS
    if semantic:
        if index.usable and index.identity == plan.identity:
            count = v.VECTOR_COUNT if filters else v.VECTOR_COUNT_SCOPE
            knn, similarity = v.KNN, v.KNN_SIMILARITY
            if cached:
                count = v.VECTOR_COUNT if filters else v.VECTOR_COUNT_CACHED
                knn, similarity = v.KNN_CACHED, v.SIMILARITY
            knn_eligible = v.KNN_ELIGIBLE if filters else v.KNN_OWNED
            sims = v.EXACT_OR_KNN_SIMS.format(knn_eligible=knn_eligible, knn_similarity=similarity)
            ctes += [count, knn, sims]
            exact = v.EXACT_BY_COUNT
        else:
            ctes.append(v.EXACT_SIMS)
        if lexical_ctes:  # read twice: by the lexical ranking and by the fusion
            ctes.append(v.VECTOR_SCORES_MATERIALIZED)
            ctes += lexical_ctes
        else:
            ctes.append(v.VECTOR_SCORES)
    scored = _HYBRID[plan.fusion] if plan.mode is Mode.HYBRID else _SCORED[plan.mode]
    if plan.mode is Mode.HYBRID and "cached_terms" in bindings and plan.fusion is Fusion.RRF:
        scored = q.SCORED_RRF_CACHED
    ctes += [scored, q.PAGE, q.META.format(relaxed=relaxed, exact=exact, total=total)]
    chunks = v.TOP_CHUNKS if semantic and plan.include_chunks else q.CHUNKS_NONE
    bindings.update(_common_bindings(plan, semantic, bool(filters)))
    return q.statement(ctes, chunks), bindings


def _common_bindings(plan: SearchPlan, semantic: bool, filtered: bool) -> dict[str, Any]:
    identity = plan.identity
    return {
        "tenant": plan.tenant,
        "scope": json.dumps(sorted({int(p) for p in plan.project_ids})),
        # Semantic modes read one extra row: it tells whether another page exists.
        "limit": plan.limit + 1 if semantic else plan.limit,
        "offset": plan.offset,
        "snippet_chars": SNIPPET_CHARS,
        "fusion_bonus": FUSION_BONUS,
        "rrf_k": int(plan.rrf_k),
        "min_similarity": plan.min_similarity,
        "model": identity.model if identity else None,
        "dimensions": identity.dimensions if identity else None,
        "query_vector": vector_blob(plan.query_vector) if plan.query_vector else None,
        "exact_scan_limit": plan.exact_scan_limit,
        "knn_k": _knn_k(plan, filtered),
        "max_chunks": MAX_MATCHED_CHUNKS,
    }


def _knn_k(plan: SearchPlan, filtered: bool) -> int:
    """KNN candidates (vec0: of each project partition; the vector cache: of the scope):
    the rows the page can reach and one more, over-fetched when filters come after."""
    return knn_k(plan.offset + plan.limit + 1, filtered, KNN_MAX_K)


def check_plan(plan: SearchPlan, vector_search: bool, reason: str) -> None:
    """Reject plans this store cannot run, before touching the database."""
    if plan.limit < 1 or plan.offset < 0:
        raise errors.InvalidArgument.field("page_size", "limit must be >= 1 and offset >= 0")
    if plan.mode is Mode.FTS:
        return
    if not vector_search:
        raise errors.SemanticUnavailable(
            f"vector and hybrid search are unavailable on this SQLite store: {reason}",
            metadata={"backend": "sqlite"},
        )
    if plan.identity is None or plan.query_vector is None:
        raise errors.SemanticUnavailable(
            "semantic search needs an embedding model; configure one or request FTS"
        )
    if len(plan.query_vector) != plan.identity.dimensions:
        raise errors.FailedPrecondition(
            f"query embedding has {len(plan.query_vector)} dimensions, the configured model "
            f"{plan.identity.model!r} has {plan.identity.dimensions}"
        )


def run_search(
    conn: apsw.Connection,
    plan: SearchPlan,
    index: VectorIndex,
    checker: Fts5Checker,
    cancelled: threading.Event | None = None,
    cache: VectorCache | None = None,
    lexical: SqliteLexicalCache | None = None,
) -> SearchPage:
    """Execute the statement (once; again without lexical channel if FTS5 still objects).

    The statement stops at the plan's timeout, and as soon as `cancelled` is set (the call
    went away): the reader thread is free again within PROGRESS_STEPS virtual machine steps.
    """
    deadline = None if plan.timeout is None else time.monotonic() + plan.timeout
    stop = cancelled or threading.Event()

    def interrupt() -> bool:
        return stop.is_set() or (deadline is not None and time.monotonic() > deadline)

    conn.set_progress_handler(interrupt, PROGRESS_STEPS)
    try:
        return page_from_rows(plan, fetch_rows(conn, plan, index, checker, cache, lexical))
    except apsw.InterruptError as exc:
        if stop.is_set():
            raise errors.Cancelled("the search was cancelled by its caller") from exc
        raise errors.DeadlineExceeded(
            f"the search statement was stopped after {plan.timeout:.3g} s"
        ) from exc
    finally:
        conn.set_progress_handler(None)


def fetch_rows(
    conn: apsw.Connection,
    plan: SearchPlan,
    index: VectorIndex,
    checker: Fts5Checker,
    cache: VectorCache | None,
    lexical: SqliteLexicalCache | None = None,
) -> list[tuple[Any, ...]]:
    """The statement's rows (one statement: with `cache`, it asks the cache for the KNN
    candidates itself, in its own snapshot; with `lexical`, an FTS search asks it for the
    ranking, and only when the scope cannot be held is a second, SQL-ranked statement run)."""
    register_functions(conn)
    cached = lexical_cached = False
    if cache is not None and cache.enabled and plan.mode is not Mode.FTS:
        register_cache_functions(conn, cache)
        cached = True
    if lexical is not None and lexical.enabled and plan.mode is not Mode.VECTOR:
        register_lexical_functions(conn, lexical)
        lexical_cached = True
    sql, bindings = build(plan, index, checker, cached=cached, lexical_cached=lexical_cached)
    try:
        forget_lexical(conn)
        rows = conn.execute(sql, bindings).fetchall()
    except apsw.SQLError as exc:
        if "fts5" not in str(exc).lower():
            raise
    else:
        if "cached_terms" not in bindings or not lexical_refused(conn):
            return rows
        # The scope did not fit the lexical cache: ranked in SQL.
        sql, bindings = build(plan, index, checker, cached=cached)
        return conn.execute(sql, bindings).fetchall()
    sql, bindings = build(plan, index, checker, lexical_off=True, cached=cached)
    return conn.execute(sql, bindings).fetchall()


def page_from_rows(plan: SearchPlan, rows: list[tuple[Any, ...]]) -> SearchPage:
    """Hits of the page rows; the first row always carries the meta columns."""
    relaxed, exact, total = rows[0][0], rows[0][1], rows[0][2]
    hits = [_hit(row) for row in rows if row[3] is not None]
    return assemble_page(plan, hits, relaxed=bool(relaxed), exact=bool(exact), total=total)


def _hit(row: tuple[Any, ...]) -> SearchHit:
    return SearchHit(
        project_id=row[3],
        project_external_id=row[4],
        kind=row[5],
        row_id=row[6],
        title=row[7],
        path=row[8],
        category=row[9],
        note_type=row[10],
        metadata=load_metadata(row[11]),
        created_at=from_micros(row[12]),
        updated_at=from_micros(row[13]),
        score=float(row[14]),
        vector_score=float(row[15]),
        fts_score=float(row[16]),
        fts_normalized=float(row[17]),
        snippet=row[18],
        chunks=parse_chunks(row[19]),
    )
