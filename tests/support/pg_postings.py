"""What the PostgreSQL store's postings must equal, and the lexical statement they replaced.

`OLD_*` is the lexical channel as it was before term_postings (issue 18): candidates found
by the GIN indexes, tf unnested from each candidate's tsvector, N and avgdl over the
eligible documents. Kept here as the reference the postings-driven statement must agree
with (scores, tiers, totals, relaxation).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from service.store.base import Mode, SearchPlan
from service.store.postgres import lexical_sql as lx
from service.store.postgres import search_sql as q
from service.store.postgres.filters import filter_sql
from service.store.postgres.search import build

Posting = tuple[int, int, str, str, str, int, int]  # project, chan, lexeme, kind, row, tf, dl
Stats = tuple[int, int, int, int, int]  # project, documents, sum dl, sum nl, chunks

POSTINGS = "SELECT project_id, chan, lexeme, kind, row_id, tf, dl FROM term_postings"
# The same rows from the documents' own tsvectors.
TSVECTOR_POSTINGS = """
SELECT d.project_id, 0, u.lexeme, d.kind, d.row_id,
       GREATEST(1, COALESCE(array_length(u.positions, 1), 0)), d.doc_len
FROM documents AS d, unnest(d.fts) AS u
UNION ALL
SELECT d.project_id, 1, u.lexeme, d.kind, d.row_id,
       GREATEST(1, COALESCE(array_length(u.positions, 1), 0)), d.ngram_len
FROM documents AS d, unnest(d.ngram_fts) AS u"""
STATS = "SELECT project_id, n, sum_dl, sum_nl, chunks FROM lexical_stats WHERE n > 0"
EMPTY_STATS = """
SELECT count(*) FROM lexical_stats WHERE n = 0 AND (sum_dl <> 0 OR sum_nl <> 0 OR chunks <> 0)"""
DOCUMENT_STATS = """
SELECT d.project_id, count(*), sum(d.doc_len), sum(d.ngram_len),
       (SELECT count(*) FROM chunks AS c WHERE c.project_id = d.project_id)
FROM documents AS d GROUP BY d.project_id"""


async def postings_and_stats(
    conn: asyncpg.Connection,
) -> tuple[set[Posting], set[Posting], set[Stats], set[Stats]]:
    """(term_postings, postings from the tsvectors, lexical_stats, stats of the documents)."""
    assert await conn.fetchval(EMPTY_STATS) == 0
    return (
        {tuple(r) for r in await conn.fetch(POSTINGS)},
        {tuple(r) for r in await conn.fetch(TSVECTOR_POSTINGS)},
        {tuple(r) for r in await conn.fetch(STATS)},
        {tuple(r) for r in await conn.fetch(DOCUMENT_STATS)},
    )


_OLD_IN_SCOPE_D = q.IN_SCOPE.format(alias="d")
OLD_QUERY_TERMS = r"""
qterms AS MATERIALIZED (
    SELECT chan, lexeme, prefix,
           ('''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || ''''
            || CASE WHEN prefix THEN ':*' ELSE '' END)::tsquery AS tq
    FROM (
        SELECT t.chan, replace(m[1], '''''', '''') AS lexeme,
               bool_or(m[2] IS NOT NULL) AS prefix
        FROM lex,
             LATERAL (VALUES (0, querytree(lex.q_words)), (0, querytree(lex.q_relaxed)),
                             (1, querytree(lex.q_script))) AS t(chan, tree),
             LATERAL regexp_matches(t.tree, '''((?:[^'']|'''')+)''(:\*)?', 'g') AS m
        GROUP BY t.chan, replace(m[1], '''''', '''')
    ) AS terms
),
qany AS MATERIALIZED (
    SELECT (SELECT string_agg(tq::text, ' | ') FROM qterms WHERE chan = 0)::tsquery AS words_any,
           (SELECT string_agg(tq::text, ' | ') FROM qterms WHERE chan = 1)::tsquery AS grams_any,
           COALESCE((SELECT array_agg(lexeme) FROM qterms WHERE chan = 0), '{}') AS words,
           COALESCE((SELECT array_agg(lexeme) FROM qterms WHERE chan = 1), '{}') AS grams
),"""
OLD_CANDIDATES = f"""
tf AS MATERIALIZED (
    SELECT c.project_id, c.kind, c.row_id, c.strict_hit, c.relaxed_hit, t.chan, t.lexeme,
           t.dl, t.tf
    FROM (
        SELECT d.project_id, d.kind, d.row_id, d.doc_len, d.ngram_len, d.fts, d.ngram_fts,
               ts_filter(setweight(d.fts, 'A', (SELECT words FROM qany)), ARRAY['a']::"char"[])
                   AS fts_terms,
               ts_filter(setweight(d.ngram_fts, 'A', (SELECT grams FROM qany)),
                         ARRAY['a']::"char"[]) AS ngram_terms,
               COALESCE({lx.STRICT_MATCH}, false) AS strict_hit,
               COALESCE(lex.q_relaxed IS NOT NULL AND d.fts @@ lex.q_relaxed, false)
                   AS relaxed_hit
        FROM documents AS d
        CROSS JOIN lex
        WHERE {_OLD_IN_SCOPE_D}
          AND (d.fts @@ (SELECT words_any FROM qany)
               OR d.ngram_fts @@ (SELECT grams_any FROM qany))
          {{filters}}
        OFFSET 0
    ) AS c
    CROSS JOIN LATERAL (
        SELECT q.chan, q.lexeme,
               CASE WHEN q.chan = 0 THEN c.doc_len ELSE c.ngram_len END AS dl,
               GREATEST(1, COALESCE((
                   SELECT array_length(u.positions, 1)
                   FROM unnest(CASE WHEN q.chan = 0 THEN c.fts_terms ELSE c.ngram_terms END) AS u
                   WHERE u.lexeme = q.lexeme), 0))::float8 AS tf
        FROM qterms AS q
        WHERE (q.chan = 0 AND c.fts @@ q.tq) OR (q.chan = 1 AND c.ngram_fts @@ q.tq)
        OFFSET 0
    ) AS t
),"""  # noqa: S608 - only constant fragments are interpolated
OLD_BM25 = f"""
df AS MATERIALIZED (SELECT chan, lexeme, count(*)::float8 AS df FROM tf GROUP BY chan, lexeme),
stats AS MATERIALIZED (
    SELECT count(*)::float8 AS n,
           COALESCE(NULLIF(avg(d.doc_len), 0), 1)::float8 AS avgdl,
           COALESCE(NULLIF(avg(d.ngram_len), 0), 1)::float8 AS avgnl
    FROM documents AS d
    WHERE {_OLD_IN_SCOPE_D}
      {{filters}}
),
scores AS MATERIALIZED (
    SELECT tf.project_id, tf.kind, tf.row_id,
           bool_or(tf.strict_hit) AS strict_hit, bool_or(tf.relaxed_hit) AS relaxed_hit,
           sum(ln(1.0 + (s.n - df.df + 0.5) / (df.df + 0.5))
               * tf.tf * (:bm25_k1::float8 + 1.0)
               / (tf.tf + :bm25_k1::float8 * (1.0 - :bm25_b::float8 + :bm25_b::float8 * tf.dl
                   / CASE WHEN tf.chan = 0 THEN s.avgdl ELSE s.avgnl END))) AS score
    FROM tf
    JOIN df ON df.chan = tf.chan AND df.lexeme = tf.lexeme
    CROSS JOIN stats AS s
    GROUP BY tf.project_id, tf.kind, tf.row_id
),"""  # noqa: S608 - only constant fragments are interpolated
OLD_FTS_TIERED = """
fts AS MATERIALIZED (
    SELECT project_id, kind, row_id, score AS fts_score,
           CASE WHEN strict_hit THEN 1 ELSE 0 END AS tier
    FROM scores
    WHERE strict_hit OR relaxed_hit
),"""

# The page's normalisation and totals as the store read them then: a window max over
# `fts`, a count and an EXISTS (the store now reads one summary row, search_sql.FTS_SUMMARY).
OLD_SCORED_FTS = """
scored AS (
    SELECT project_id, kind, row_id, fts_score AS score, 0.0::float8 AS v, fts_score,
           COALESCE(fts_score / NULLIF(max(fts_score) OVER (), 0.0), 0.0) AS f, tier
    FROM fts
),"""
OLD_TOTAL = "(SELECT count(*) FROM fts)"


def old_fts_statement(plan: SearchPlan) -> tuple[str, dict[str, Any]]:
    """The FTS statement as the store built it before term_postings (lexical plans only)."""
    lexical = plan.lexical
    assert plan.mode is Mode.FTS
    assert lexical is not None
    filters, _ = filter_sql(plan.filters)
    _, bindings = build(plan)  # the same parameters, the filters' included
    ctes = [
        q.OWNED,
        q.ELIGIBLE.format(filters=filters),
        lx.LEXICAL_INPUT,
        OLD_QUERY_TERMS,
        OLD_CANDIDATES.format(filters=filters),
        OLD_BM25.format(filters=filters),
        OLD_FTS_TIERED,
        OLD_SCORED_FTS,
        q.PAGE,
        q.META.format(relaxed=lx.RELAXED_FLAG, exact=q.EXACT_ALWAYS, total=OLD_TOTAL,
                      cache=q.CACHE_NONE, lex=q.CACHE_NONE,
                      lex_used=q.CACHE_NONE, lex_seen=q.CACHE_NONE),
    ]
    return q.statement(ctes, q.CHUNKS_NONE), bindings
