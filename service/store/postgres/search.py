"""Project search on PostgreSQL: build the one statement, run it, hydrate the page."""

from __future__ import annotations

import enum
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from pgvector import Vector

from service import errors
from service.projects.lexical import LexicalQuery
from service.store.base import (
    FUSION_BONUS,
    MAX_MATCHED_CHUNKS,
    SNIPPET_CHARS,
    Filters,
    Fusion,
    Mode,
    SearchHit,
    SearchPage,
    SearchPlan,
)
from service.store.pages import assemble_page, knn_k, parse_chunks
from service.store.postgres import lexical_sql as lx
from service.store.postgres import search_sql as q
from service.store.postgres.filters import filter_sql
from service.store.postgres.lexical_cache import PgLexicalCache, Proposal, Shape, predict_shape
from service.store.postgres.pool import Conn
from service.store.postgres.vector_cache import Candidates, PgVectorCache

log = logging.getLogger("search.store.postgres")
KNN_MAX_K = 20_000  # hnsw.max_scan_tuples bounds the iterative scan at the same size
# HYBRID without the vector cache's candidates passes the whole lexical list, up to this long.
MAX_COMPLETE_ROWS = 5_000
_SCORED = {Mode.FTS: q.SCORED_FTS, Mode.VECTOR: q.SCORED_VECTOR, Mode.HYBRID: q.SCORED_HYBRID}
_HYBRID = {Fusion.SUM: q.SCORED_SUM, Fusion.RRF: q.SCORED_RRF, Fusion.MAX_MIN: q.SCORED_HYBRID}
_HYBRID_FAST = {Fusion.SUM: q.SCORED_SUM_FAST, Fusion.RRF: q.SCORED_RRF_FAST}


def _lexical_ctes(shape: _Shape) -> tuple[list[str], str]:
    """The lexical CTEs and the page's relaxation flag expression.

    Term statistics come from the eligible documents when there are filters, else from the
    scope projects' lexical_stats (the same numbers without reading any document). With
    `fast`, the statement checks the lexical cache's ranking before using it."""
    filters, fast = shape.filters, shape.fast
    if shape.lexical is _Lexical.BLANK:
        # Blank text: FTS lists the eligible documents, hybrid has no lexical channel.
        return [lx.FTS_ALL if shape.mode is Mode.FTS else lx.FTS_NONE], lx.RELAXED_NEVER
    gate = lx.FAST_GATE if fast else ""
    vector_ok = lx.FAST_FOR_FTS if shape.mode is Mode.FTS else lx.FAST_FOR_HYBRID
    passes = q.DOCUMENT_PASSES.format(alias="x", filters=filters) if filters else ""
    postings = lx.TERM_TF.format(eligible=passes, gate=gate)
    stats = lx.ELIGIBLE_STATS if filters else lx.SCOPE_STATS
    # Each posting's BM25 part is computed with it (TERM_TF), so N and avgdl come first.
    ctes = [lx.LEXICAL_INPUT, lx.QUERY_TERMS, stats]
    if fast and shape.mode is Mode.FTS:
        # Only the check and the ranking's rows (SCOPE_STATS; ELIGIBLE_STATS for kinds).
        ctes = [lx.LEXICAL_INPUT, stats, lx.LEX_FAST.format(vector_ok=vector_ok), lx.FTS_FAST]
    elif fast:
        ctes += [
            lx.LEX_SHAPE, lx.LEX_FAST.format(vector_ok=vector_ok), postings, lx.BM25,
            lx.FTS_TIERED_FAST,
        ]
    elif shape.lexical is _Lexical.WORDS:
        # Words only: the tiers may be counted (LEX_SHAPE checks the parsed forms).
        ctes += [postings, lx.BM25, lx.LEX_SHAPE, lx.FTS_TIERED_BY_COUNT]
    else:
        ctes += [postings, lx.BM25, lx.FTS_TIERED]
    if shape.mode is Mode.FTS:
        relaxed = lx.RELAXED_SUMMARY
    else:
        relaxed = lx.RELAXED_FLAG_FAST if fast else lx.RELAXED_FLAG
    return ctes, relaxed


def _lexical_form(lexical: LexicalQuery | None) -> _Lexical:
    if lexical is None or (lexical.tsquery is None and lexical.script_tsquery is None):
        return _Lexical.BLANK
    return _Lexical.WORDS if lexical.script_tsquery is None else _Lexical.SCRIPT


def _lexical_bindings(
    plan: SearchPlan, lexical: LexicalQuery, fast: Proposal | None
) -> dict[str, Any]:
    bindings = {
        "tsq": lexical.tsquery,
        "script_tsq": lexical.script_tsquery,
        "tsq_relaxed": lexical.tsquery_relaxed,
        "bm25_k1": float(plan.bm25_k1),
        "bm25_b": float(plan.bm25_b),
    }
    if fast is not None:
        bindings.update(_fast_bindings(fast))
    return bindings


def _fast_bindings(fast: Proposal) -> dict[str, Any]:
    ranking, projects = fast.ranking, fast.keys[0]
    return {
        "fast_words": fast.shape.words,
        "fast_relaxed_words": fast.shape.relaxed_words,
        "fast_gens": fast.generations,
        "fast_n": ranking.n,
        "fast_avgdl": ranking.avgdl,
        "fast_df": ranking.dfs,
        "fast_idf": ranking.idfs,
        "fast_projects": projects,
        "fast_kinds": fast.keys[1],
        "fast_rows": fast.keys[2],
        "fast_scores": ranking.scores.tolist(),
        "fast_tiers": ranking.tiers.tolist(),
        "fast_places": ranking.ranks.tolist(),
        "fast_complete": fast.complete,
        "fast_top": ranking.top,
        "fast_total": ranking.total,
        "fast_relaxed": ranking.relaxed,
    }


def offers_fast(plan: SearchPlan, lexical: PgLexicalCache | None = None) -> Shape | None:
    """The predicted lexical shape when the lexical cache may rank this search: FTS (no
    filter but kinds), or HYBRID fused by SUM or RRF (no filters), a counted query of plain
    words (predicted with what the `lexical` cache learned)."""
    if plan.mode is Mode.VECTOR or plan.filters != Filters(kinds=plan.filters.kinds):
        return None  # of the filters, only kinds are ranked in process
    if plan.mode is Mode.HYBRID and (plan.fusion not in _HYBRID_FAST or plan.filters.kinds):
        return None
    return predict_shape(plan.lexical) if lexical is None else lexical.shape(plan.lexical)


class _Lexical(enum.Enum):
    BLANK = "blank"  # no lexical text: FTS lists the eligible documents
    WORDS = "words"  # words only
    SCRIPT = "script"  # with script phrases


@dataclass(frozen=True)
class _Shape:
    """What the statement text depends on (everything else is a binding)."""

    mode: Mode
    fusion: Fusion
    filters: str
    identity: tuple[str, int] | None  # (model, dimensions) of a semantic search
    lexical: _Lexical
    fast: bool
    chunks: bool


def build(
    plan: SearchPlan, candidates: Candidates | None = None, fast: Proposal | None = None
) -> tuple[str, dict[str, Any]]:
    """The statement text (with `:name` parameters) and its bindings; `candidates` are the
    vector cache's and `fast` the lexical cache's, which the statement checks before using
    them."""
    filters, bindings = filter_sql(plan.filters)
    semantic = plan.mode is not Mode.FTS
    identity = plan.identity
    shape = _Shape(
        plan.mode, plan.fusion, filters,
        (identity.model, int(identity.dimensions)) if semantic and identity else None,
        _lexical_form(plan.lexical), fast is not None, semantic and plan.include_chunks,
    )
    if shape.identity is not None:
        bindings.update(_candidate_bindings(candidates))
    lexical = plan.lexical
    if plan.mode is not Mode.VECTOR and lexical is not None and shape.lexical is not _Lexical.BLANK:
        bindings.update(_lexical_bindings(plan, lexical, fast))
    bindings.update(_common_bindings(plan, semantic, bool(filters)))
    return _text(shape), bindings


@functools.lru_cache(maxsize=256)
def _text(shape: _Shape) -> str:
    """The statement text of a shape: assembled once (~10 kB from ~20 fragments), and the
    same string object each time, whose hash `numbered` then never computes again."""
    filters = shape.filters
    ctes = [q.OWNED, q.ELIGIBLE.format(filters=filters)]
    relaxed, exact, cache = lx.RELAXED_NEVER, q.EXACT_ALWAYS, q.CACHE_NONE
    semantic = shape.mode is not Mode.FTS
    if shape.identity is not None:
        model, dims = shape.identity
        # Filters restrict the vector scans to eligible documents; without, the scope is enough.
        vectors, passes, knn_eligible = "vectors", "", q.KNN_OWNED
        if filters:
            passes = q.DOCUMENT_PASSES.format(alias="v", filters=filters)
            vectors = q.ELIGIBLE_VECTORS.format(passes=passes)
            knn_eligible += q.DOCUMENT_PASSES.format(alias="k", filters=filters)
        ctes += [
            q.VECTOR_COUNT.format(eligible=passes) if filters else q.VECTOR_COUNT_SCOPE,
            q.CACHE_FRESH,
            q.KNN.format(dims=dims, model=q.sql_literal(model)),
            q.EXACT_OR_KNN_SIMS.format(vectors=vectors, knn_eligible=knn_eligible),
            q.VECTOR_SCORES,
        ]
        exact, cache = q.EXACT_BY_COUNT, q.CACHE_GENS
    if shape.mode is not Mode.VECTOR:
        # After the vector channel's CTEs: with the lexical cache, LEX_FAST reads their
        # freshness (a CTE's place in WITH does not change the plan).
        lexical_ctes, relaxed = _lexical_ctes(shape)
        ctes += lexical_ctes
    total = q.TOTAL_NONE
    if not semantic:
        # FTS: the top score, the total and the relaxation flag are one summary row.
        ctes.append(q.FTS_SUMMARY_FAST if shape.fast else q.FTS_SUMMARY)
        total = q.TOTAL_SUMMARY
    scored = _HYBRID[shape.fusion] if shape.mode is Mode.HYBRID else _SCORED[shape.mode]
    if shape.mode is Mode.HYBRID and shape.fast:
        scored = _HYBRID_FAST[shape.fusion]
    lex, used, seen = (
        (lx.LEX_GENS, lx.LEX_USED, lx.LEX_SEEN) if shape.fast else (q.CACHE_NONE,) * 3
    )
    meta = q.META.format(
        relaxed=relaxed, exact=exact, total=total, cache=cache, lex=lex, lex_used=used,
        lex_seen=seen,
    )
    ctes += [scored, q.PAGE, meta]
    chunks = q.TOP_CHUNKS if shape.chunks else q.CHUNKS_NONE
    return q.statement(ctes, chunks)


def _candidate_bindings(candidates: Candidates | None) -> dict[str, Any]:
    if candidates is None:
        names = ("cache_projects", "cache_gens", "cand_projects", "cand_kinds", "cand_rows",
                 "cand_chunks")
        return dict.fromkeys(names)
    projects, kinds, rows, chunks = candidates.keys
    return {
        "cache_projects": candidates.project_ids,
        "cache_gens": candidates.generations,
        "cand_projects": projects,
        "cand_kinds": kinds,
        "cand_rows": rows,
        "cand_chunks": chunks,
    }


def _common_bindings(plan: SearchPlan, semantic: bool, filtered: bool) -> dict[str, Any]:
    wanted = plan.offset + plan.limit + 1
    identity = plan.identity
    return {
        "tenant": plan.tenant,
        "scope": sorted({int(p) for p in plan.project_ids}),
        # Semantic modes read one extra row: it tells whether another page exists.
        "limit": plan.limit + 1 if semantic else plan.limit,
        "offset": plan.offset,
        "snippet_chars": SNIPPET_CHARS,
        "fusion_bonus": FUSION_BONUS,
        "rrf_k": int(plan.rrf_k),
        "min_similarity": float(plan.min_similarity),
        "model": identity.model if identity else None,
        "dimensions": identity.dimensions if identity else None,
        "query_vector": Vector(list(plan.query_vector)) if plan.query_vector else None,
        "exact_scan_limit": plan.exact_scan_limit,
        "knn_k": knn_k(wanted, filtered, KNN_MAX_K),
        "max_chunks": MAX_MATCHED_CHUNKS,
    }


def check_plan(plan: SearchPlan) -> None:
    """Reject plans this store cannot run, before touching the database."""
    if plan.limit < 1 or plan.offset < 0:
        raise errors.InvalidArgument.field("page_size", "limit must be >= 1 and offset >= 0")
    if plan.mode is Mode.FTS:
        return
    if plan.identity is None or plan.query_vector is None:
        raise errors.SemanticUnavailable(
            "semantic search needs an embedding model; configure one or request FTS"
        )
    if len(plan.query_vector) != plan.identity.dimensions:
        raise errors.FailedPrecondition(
            f"query embedding has {len(plan.query_vector)} dimensions, the configured model "
            f"{plan.identity.model!r} has {plan.identity.dimensions}"
        )


async def run_search(
    conn: Conn,
    plan: SearchPlan,
    statement_timeout: float | None,
    cache: PgVectorCache | None = None,
    lexical: PgLexicalCache | None = None,
) -> SearchPage:
    """Execute the statement once and turn its rows into a page. With a `cache`, a semantic
    search past `exact_scan_limit` offers the statement the cache's candidates (read on the
    same connection when a project's matrix must be loaded first); with a `lexical` cache,
    an FTS search offers its in-process ranking: its statement only checks and hydrates it,
    and when it refuses the ranking (the scope moved on since it was read, or PostgreSQL
    parsed the query otherwise) the SQL-ranked statement runs after it."""
    candidates = None
    semantic = plan.mode is not Mode.FTS and plan.identity is not None
    if cache is not None and cache.enabled and semantic and plan.query_vector:
        assert plan.identity is not None
        filtered = bool(filter_sql(plan.filters)[0])
        wanted = plan.offset + plan.limit + 1
        try:
            candidates = await cache.candidates(
                conn, plan.project_ids, plan.identity, plan.query_vector,
                knn_k(wanted, filtered, KNN_MAX_K), plan.exact_scan_limit,
            )
        except asyncpg.LockNotAvailableError:
            # A matrix read met a lock (it does not wait): the index answers this search.
            log.warning("postgres vector cache read met a lock", exc_info=True)
    fast = None
    if lexical is not None and lexical.enabled:
        shape = offers_fast(plan, lexical)
        if shape is not None:
            try:
                fast = await _proposal(conn, plan, shape, lexical, candidates, statement_timeout)
            except TimeoutError:
                raise  # the read met the search's own time limit, as the statement would
            except (asyncpg.PostgresError, OSError, ValueError):
                # A cache that cannot read is only slower: the statement ranks in SQL.
                log.warning("postgres lexical cache read failed", exc_info=True)
    started = time.monotonic()
    rows = await _fetch(conn, plan, candidates, fast, statement_timeout)
    if fast is not None and lexical is not None:
        used = bool(rows[0]["lex_used"])
        if rows[0]["lex_gens"] is not None:
            lexical.observed(fast.project_ids, list(rows[0]["lex_gens"]), used)
            if not used:
                lexical.learn(fast.shape, rows[0]["lex_seen"])
        if not used and plan.mode is Mode.FTS:
            # The FTS statement holds no SQL ranking: refused, the SQL-ranked one runs,
            # within what is left of the search's time.
            left = _left(statement_timeout, started)
            rows = await _fetch(conn, plan, candidates, None, left)
    if candidates is not None and cache is not None and rows[0]["cache_gens"] is not None:
        cache.observed(candidates.project_ids, list(rows[0]["cache_gens"]))
    return page_from_rows(plan, rows)


def _left(timeout: float | None, started: float) -> float | None:
    if timeout is None:
        return None
    return max(timeout - (time.monotonic() - started), 0.001)


async def _fetch(
    conn: Conn,
    plan: SearchPlan,
    candidates: Candidates | None,
    fast: Proposal | None,
    statement_timeout: float | None,
) -> list[Any]:
    sql, bindings = build(plan, candidates, fast)
    text, args = q.numbered(sql, bindings)
    return await conn.fetch(text, *args, statement_timeout=statement_timeout)


async def _proposal(
    conn: Conn,
    plan: SearchPlan,
    shape: Shape,
    lexical: PgLexicalCache,
    candidates: Candidates | None,
    statement_timeout: float | None,
) -> Proposal | None:
    """The lexical cache's ranking for the statement: FTS, the page's rows; HYBRID, the
    rows the fusion can reach (the first page's worth plus the vector candidates'
    documents) when the vector cache proposes candidates, else the whole list (if not too
    long)."""
    k1, b = float(plan.bm25_k1), float(plan.bm25_b)
    if plan.mode is Mode.FTS:
        return await lexical.propose(
            conn, plan.project_ids, shape, k1, b, plan.offset + plan.limit,
            kinds=frozenset(plan.filters.kinds), statement_timeout=statement_timeout,
        )
    wanted = plan.offset + plan.limit + 1
    by_score = plan.fusion is Fusion.SUM  # SUM reads the list by score alone, RRF by tier
    if candidates is None:
        return await lexical.propose(
            conn, plan.project_ids, shape, k1, b, MAX_COMPLETE_ROWS, complete=True,
            statement_timeout=statement_timeout, by_score=by_score,
        )
    projects, kinds, rows, _ = candidates.keys
    also = list(dict.fromkeys(zip(projects, kinds, rows, strict=True)))
    return await lexical.propose(
        conn, plan.project_ids, shape, k1, b, wanted, also,
        statement_timeout=statement_timeout, by_score=by_score,
    )


def page_from_rows(plan: SearchPlan, rows: list[Mapping[str, Any]]) -> SearchPage:
    """Hits of the page rows; the first row always carries the meta columns."""
    meta = rows[0]
    hits = [_hit(row) for row in rows if row["project_id"] is not None]
    return assemble_page(
        plan, hits, relaxed=bool(meta["relaxed"]), exact=bool(meta["exact"]), total=meta["total"]
    )


def _hit(row: Mapping[str, Any]) -> SearchHit:
    return SearchHit(
        project_id=int(row["project_id"]),
        project_external_id=row["external_id"],
        kind=row["kind"],
        row_id=row["row_id"],
        title=row["title"],
        path=row["path"],
        category=row["category"],
        note_type=row["note_type"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=float(row["score"]),
        vector_score=float(row["v"]),
        fts_score=float(row["fts_score"]),
        fts_normalized=float(row["f"]),
        snippet=row["snippet"],
        chunks=parse_chunks(row["chunks"]),
    )
