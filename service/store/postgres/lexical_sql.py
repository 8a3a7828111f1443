"""CTE fragments of the lexical channel: tsquery parsing, candidates, BM25, relaxation.

A query that does not parse becomes NULL (`search_try_tsquery`): a bad strict form falls
back to the relaxed one, and with neither the channel is empty. Relaxation is tiered and
decided over the whole scope, never per page: rows matching the strict form (tier 1) rank
before rows matching only the relaxed one (tier 0), each tier by BM25 (as on SQLite).
"""

from __future__ import annotations

from service.store.postgres.search_sql import IN_SCOPE

_IN_SCOPE_D = IN_SCOPE.format(alias="d")

LEXICAL_INPUT = """
lex_parsed AS (
    SELECT search_try_tsquery('english', :tsq::text) AS words, :tsq::text AS words_text,
           search_try_tsquery('simple', :script_tsq::text) AS script,
           :script_tsq::text AS script_text,
           search_try_tsquery('english', :tsq_relaxed::text) AS relaxed
),
lex AS MATERIALIZED (
    SELECT CASE WHEN ok THEN words ELSE relaxed END AS q_words,
           CASE WHEN ok THEN script END AS q_script,
           CASE WHEN ok THEN relaxed END AS q_relaxed,
           NOT ok AND relaxed IS NOT NULL AS relaxed_always
    FROM (
        SELECT *, (words IS NOT NULL OR words_text IS NULL)
                  AND (script IS NOT NULL OR script_text IS NULL) AS ok
        FROM lex_parsed
    ) AS parsed
),"""
# The query's positive terms (querytree drops negated ones), read back from tsquery text:
# 'lexeme' with quotes doubled, then :* for a prefix. chan 0: english words over `fts`,
# chan 1: script grams over `ngram_fts`. `tq` matches one term; `qany` ORs them (the
# candidate test the GIN indexes answer) and lists the lexemes for setweight().
QUERY_TERMS = r"""
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
# Strict: the word query (neutral when stopwords emptied it beside script phrases) AND every
# script phrase. Relaxed: words only.
STRICT_MATCH = """(lex.q_words IS NOT NULL OR lex.q_script IS NOT NULL)
           AND (lex.q_words IS NULL OR d.fts @@ lex.q_words
                OR (numnode(lex.q_words) = 0 AND lex.q_script IS NOT NULL))
           AND (lex.q_script IS NULL OR d.ngram_fts @@ lex.q_script)"""
# Every eligible document holding any query term, once per term it holds: strict and
# relaxed matches are subsets, and document frequencies over the scope are counted among
# them. The eligibility predicates are repeated (not joined to `eligible`) so a GIN bitmap
# scan drives this. The candidates stream from the heap into the per-term LATERAL (OFFSET 0
# keeps both from being flattened, which would let the planner rescan the candidates once
# per term): materializing whole tsvectors first made a common-word query's candidates
# (thousands of ~2 kB rows) spill to disk and be read back once per query term.
# BM25 tf is the term's position count (at most 256 per lexeme); for a prefix term it
# counts the exact lexeme, or 1 when only longer lexemes match (listing those would mean
# unnesting every candidate's whole tsvector, ~20x slower). `*_terms` keep only the query's
# exact lexemes with their positions (the documents' tsvectors carry no weights).
CANDIDATES = f"""
tf AS MATERIALIZED (
    SELECT c.project_id, c.kind, c.row_id, c.strict_hit, c.relaxed_hit, t.chan, t.lexeme,
           t.dl, t.tf
    FROM (
        SELECT d.project_id, d.kind, d.row_id, d.doc_len, d.ngram_len, d.fts, d.ngram_fts,
               ts_filter(setweight(d.fts, 'A', (SELECT words FROM qany)), ARRAY['a']::"char"[])
                   AS fts_terms,
               ts_filter(setweight(d.ngram_fts, 'A', (SELECT grams FROM qany)),
                         ARRAY['a']::"char"[]) AS ngram_terms,
               COALESCE({STRICT_MATCH}, false) AS strict_hit,
               COALESCE(lex.q_relaxed IS NOT NULL AND d.fts @@ lex.q_relaxed, false)
                   AS relaxed_hit
        FROM documents AS d
        CROSS JOIN lex
        WHERE {_IN_SCOPE_D}
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
# Lucene's BM25 (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 and b from the plan) with N,
# avgdl and df over the eligible scope; the SQLite store computes the same sum.
BM25 = f"""
df AS MATERIALIZED (SELECT chan, lexeme, count(*)::float8 AS df FROM tf GROUP BY chan, lexeme),
stats AS MATERIALIZED (
    SELECT count(*)::float8 AS n,
           COALESCE(NULLIF(avg(d.doc_len), 0), 1)::float8 AS avgdl,
           COALESCE(NULLIF(avg(d.ngram_len), 0), 1)::float8 AS avgnl
    FROM documents AS d
    WHERE {_IN_SCOPE_D}
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
FTS_TIERED = """
fts AS MATERIALIZED (
    SELECT project_id, kind, row_id, score AS fts_score,
           CASE WHEN strict_hit THEN 1 ELSE 0 END AS tier
    FROM scores
    WHERE strict_hit OR relaxed_hit
),"""
RELAXED_FLAG = "((SELECT relaxed_always FROM lex) OR EXISTS (SELECT 1 FROM fts WHERE tier = 0))"
FTS_ALL = """
fts AS (SELECT project_id, kind, row_id, 0.0::float8 AS fts_score, 1 AS tier FROM eligible),"""
FTS_NONE = """
fts AS (
    SELECT NULL::bigint AS project_id, NULL::text AS kind, NULL::text AS row_id,
           0.0::float8 AS fts_score, 1 AS tier
    WHERE false
),"""
RELAXED_NEVER = "false"
