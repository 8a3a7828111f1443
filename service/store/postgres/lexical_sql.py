"""CTE fragments of the lexical channel: tsquery parsing, postings, BM25, relaxation.

A query that does not parse becomes NULL (`search_try_tsquery`): a bad strict form falls
back to the relaxed one, and with neither the channel is empty. Relaxation is tiered and
decided over the whole scope, never per page: rows matching the strict form (tier 1) rank
before rows matching only the relaxed one (tier 0), each tier by BM25 (as on SQLite).

Everything is read from the scope's postings (service.store.postgres.postings): no GIN scan,
whose matches would be every project's. Only documents holding a query term are looked up,
and only when the query's shape needs their tsvectors to decide membership.
"""

from __future__ import annotations

from service.store.postgres.search_sql import IN_SCOPE

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
# chan 1: script grams over `ngram_fts`. `in_words` / `in_relaxed` say which form holds a
# word, `alike` that it is a prefix everywhere or nowhere (LEX_SHAPE reads them). `k`
# numbers the terms in (chan, lexeme) byte order, the order BM25 adds them in.
TERM_PATTERN = r"'''((?:[^'']|'''')+)''(:\*)?'"
QUERY_TERMS = f"""
qterms AS MATERIALIZED (
    SELECT chan, lexeme COLLATE "C" AS lexeme, prefix, in_words, in_relaxed, alike,
           row_number() OVER (ORDER BY chan, lexeme COLLATE "C") AS k
    FROM (
        SELECT t.chan, replace(m[1], '''''', '''') AS lexeme,
               bool_or(m[2] IS NOT NULL) AS prefix,
               bool_or(t.form = 'w') AS in_words, bool_or(t.form = 'r') AS in_relaxed,
               bool_and(m[2] IS NOT NULL) = bool_or(m[2] IS NOT NULL) AS alike
        FROM lex,
             LATERAL (VALUES (0, 'w', querytree(lex.q_words)), (0, 'r', querytree(lex.q_relaxed)),
                             (1, 's', querytree(lex.q_script))) AS t(chan, form, tree),
             LATERAL regexp_matches(t.tree, {TERM_PATTERN}, 'g') AS m
        GROUP BY t.chan, replace(m[1], '''''', '''')
    ) AS terms
),"""  # noqa: S608 - only constant fragments are interpolated
# Each query term's postings in the scope (`{eligible}`: only the eligible documents when
# there are filters), one row per document holding it, with the term's part of the
# document's BM25: Lucene's (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 and b from the
# plan) with N, avgdl and df over the eligible scope, as the SQLite store computes it. tf is
# the term's position count (at most 256 per lexeme); a prefix term counts its exact lexeme,
# or 1 when the document holds only longer lexemes (as when tf was read from the tsvector,
# which could not list those cheaply). Byte order ("C") makes a prefix's lexemes one index
# range, grouped by document. Each term is its own LATERAL index range: joined as plain
# tables, the planner hashed the terms and read every posting of the scope against them.
# df is a window over the term's own rows: a GROUP BY of every posting, merge-joined back
# to them by (chan, lexeme) after sorting both, cost more (with the row_id-first grouping of
# `scores` and FTS_SUMMARY: FTS p50 -17%, p95 -20% at 100k chunks, same rows). Not
# materialized: `scores` reads it once.
TERM_TF = f"""
term_tf AS (
    SELECT q.k, x.project_id, x.kind, x.row_id,
           ln(1.0 + ((SELECT n FROM stats) - x.df + 0.5) / (x.df + 0.5))
               * x.tf * (:bm25_k1::float8 + 1.0)
               / (x.tf + :bm25_k1::float8 * (1.0 - :bm25_b::float8 + :bm25_b::float8 * x.dl
                   / CASE WHEN q.chan = 0 THEN (SELECT avgdl FROM stats)
                          ELSE (SELECT avgnl FROM stats) END)) AS part
    FROM qterms AS q
    CROSS JOIN LATERAL (
        SELECT y.project_id, y.kind, y.row_id, y.dl, y.tf, count(*) OVER ()::float8 AS df
        FROM (
            SELECT x.project_id, x.kind, x.row_id, x.dl, x.tf::float8 AS tf
            FROM term_postings AS x
            WHERE NOT q.prefix AND {IN_SCOPE.format(alias="x")}
              AND x.chan = q.chan AND x.lexeme = q.lexeme{{eligible}}
            UNION ALL
            SELECT x.project_id, x.kind, x.row_id, max(x.dl) AS dl,
                   COALESCE(max(x.tf) FILTER (WHERE x.lexeme = q.lexeme), 1)::float8 AS tf
            FROM term_postings AS x
            WHERE q.prefix AND {IN_SCOPE.format(alias="x")} AND x.chan = q.chan
              AND x.lexeme >= q.lexeme AND x.lexeme < q.lexeme || chr(1114111){{eligible}}
            GROUP BY x.project_id, x.kind, x.row_id
        ) AS y
    ) AS x{{gate}}
),"""  # noqa: S608 - only constant fragments are interpolated
# `hits` is how many query terms a document holds. The sum adds the terms in one order for
# every document (by `k`; a document has one row per term), so equal parts give equal
# scores (then ordered by identity), never an ulp apart. row_id leads the grouping, so the
# sort's first key nearly always decides (~2% of the statement against project_id first).
# Materialized although FTS_TIERED_BY_COUNT's two arms are one-time alternatives: inlined,
# it is planned twice (+0.6 ms a search where plans are custom, as with partitions).
BM25 = """
scores AS MATERIALIZED (
    SELECT t.project_id, t.kind, t.row_id, count(*) AS hits,
           sum(t.part ORDER BY t.k) AS score
    FROM term_tf AS t
    GROUP BY t.row_id, t.kind, t.project_id
),"""
# Unfiltered, N and the summed lengths are the scope projects' lexical_stats. sum(bigint) is
# numeric, and numeric / numeric is the division avg(integer) ends with: the same doubles as
# avg() over the eligible documents.
SCOPE_STATS = """
stats AS MATERIALIZED (
    SELECT COALESCE(sum(s.n), 0)::float8 AS n,
           COALESCE(NULLIF(sum(s.sum_dl) / NULLIF(sum(s.n), 0), 0), 1)::float8 AS avgdl,
           COALESCE(NULLIF(sum(s.sum_nl) / NULLIF(sum(s.n), 0), 0), 1)::float8 AS avgnl
    FROM lexical_stats AS s
    WHERE s.project_id = ANY((SELECT ids FROM owned)::bigint[])
),"""
ELIGIBLE_STATS = """
stats AS MATERIALIZED (
    SELECT count(*)::float8 AS n,
           COALESCE(NULLIF(avg(e.doc_len), 0), 1)::float8 AS avgdl,
           COALESCE(NULLIF(avg(e.ngram_len), 0), 1)::float8 AS avgnl
    FROM eligible AS e
),"""
# Strict: the word query (neutral when stopwords emptied it beside script phrases) AND every
# script phrase. Relaxed: words only.
STRICT_MATCH = """(lex.q_words IS NOT NULL OR lex.q_script IS NOT NULL)
           AND (lex.q_words IS NULL OR d.fts @@ lex.q_words
                OR (numnode(lex.q_words) = 0 AND lex.q_script IS NOT NULL))
           AND (lex.q_script IS NULL OR d.ngram_fts @@ lex.q_script)"""
# Membership by the query itself: every match holds a query term, so the candidates are the
# scored documents, each looked up by key (OFFSET 0 keeps the lookup a nested loop).
FTS_BY_MATCH = f"""
    SELECT s.project_id, s.kind, s.row_id, s.score AS fts_score,
           CASE WHEN m.strict_hit THEN 1 ELSE 0 END AS tier
    FROM scores AS s
    CROSS JOIN lex
    CROSS JOIN LATERAL (
        SELECT COALESCE({STRICT_MATCH}, false) AS strict_hit,
               COALESCE(lex.q_relaxed IS NOT NULL AND d.fts @@ lex.q_relaxed, false)
                   AS relaxed_hit
        FROM documents AS d
        WHERE d.project_id = s.project_id AND d.kind = s.kind AND d.row_id = s.row_id
          AND d.project_id = ANY(:scope::bigint[])
        OFFSET 0
    ) AS m
    WHERE (m.strict_hit OR m.relaxed_hit)"""  # noqa: S608 - only constant fragments are interpolated
FTS_TIERED = f"""
fts AS MATERIALIZED ({FTS_BY_MATCH}
),"""
# Shapes whose membership is counted, not matched: the word form is an AND or an OR of
# plain terms (no NOT, no phrase, no script phrase), and the relaxed form, if any, an OR of
# the same terms (natural language, or the relaxed form when the strict one did not parse),
# each term a prefix everywhere or nowhere. Holding a term is then matching it: a strict
# match holds `strict_at` terms (all of them for an AND, one for an OR), and with a relaxed
# form every holder of a term is a relaxed match. No tsvector is read. The forms are tested
# as written (`::text`): querytree() would hide a negation.
_PLAIN = f"regexp_replace(lex.{{form}}::text, {TERM_PATTERN}, '', 'g') ~ '^[ {{op}}()]*$'"
LEX_SHAPE = f"""
lex_shape AS MATERIALIZED (
    SELECT lex.q_script IS NULL AND lex.q_words IS NOT NULL AND (words_and OR words_or)
           AND (lex.q_relaxed IS NULL OR {_PLAIN.format(form="q_relaxed", op="|")})
           AND COALESCE((
               SELECT bool_and(in_words AND (lex.q_relaxed IS NULL OR in_relaxed) AND alike)
               FROM qterms), false) AS by_count,
           CASE WHEN words_and THEN (SELECT count(*) FROM qterms) ELSE 1 END AS strict_at,
           lex.q_relaxed IS NOT NULL AS any_term
    FROM lex
    CROSS JOIN LATERAL (
        SELECT {_PLAIN.format(form="q_words", op="&")} AS words_and,
               {_PLAIN.format(form="q_words", op="|")} AS words_or
    ) AS shape
),"""  # noqa: S608 - only constant fragments are interpolated
# Either arm runs, by a one-time condition.
FTS_TIERED_BY_COUNT = f"""
fts AS MATERIALIZED (
    SELECT s.project_id, s.kind, s.row_id, s.score AS fts_score,
           CASE WHEN s.hits >= (SELECT strict_at FROM lex_shape) THEN 1 ELSE 0 END AS tier
    FROM scores AS s
    WHERE (SELECT by_count FROM lex_shape)
      AND ((SELECT any_term FROM lex_shape) OR s.hits >= (SELECT strict_at FROM lex_shape))
    UNION ALL{FTS_BY_MATCH}
      AND NOT (SELECT by_count FROM lex_shape)
),"""  # noqa: S608 - only constant fragments are interpolated
# The in-process ranking (lexical_cache.py) is used only when what it was computed from is
# what this snapshot holds: the query parsed into the forms it predicted (PostgreSQL's own
# rendering of the parsed tsqueries, which fixes the lexemes, prefixes and the counted
# shape), the scope (all the tenant's) at the same generations, the same N and avgdl, and
# each term's idf the same when computed here from the ranking's document counts (with
# TERM_TF's expression). `gens` goes back to the cache with the page, so postings that moved
# on are read again. FTS: `fts` is the ranking's first rows (FTS_FAST), and
# search_sql.FTS_SUMMARY_FAST takes the whole list's top, total and relaxation from the
# ranking. HYBRID (FTS_TIERED_FAST): with `ok`, `term_tf` reads no posting and the SQL arms
# of `fts` are skipped before their shape checks; without, they rank in SQL.
LEX_FAST = """
lex_fast AS MATERIALIZED (
    SELECT COALESCE(
               l.q_words::text = :fast_words::text
               AND l.q_relaxed::text IS NOT DISTINCT FROM :fast_relaxed_words::text
               AND l.q_script IS NULL AND NOT l.relaxed_always
               AND (SELECT ids FROM owned) = :scope::bigint[]
               AND g.gens = :fast_gens::bigint[]
               AND (SELECT n = :fast_n::float8 AND avgdl = :fast_avgdl::float8 FROM stats)
               AND (SELECT array_agg(ln(1.0 + ((SELECT n FROM stats) - u.df + 0.5) / (u.df + 0.5))
                                     ORDER BY u.o)
                    FROM unnest(:fast_df::float8[]) WITH ORDINALITY AS u(df, o))
                   = :fast_idf::float8[]
               AND {vector_ok},
               false) AS ok,
           g.gens, l.q_words::text AS seen
    FROM lex AS l
    CROSS JOIN (
        SELECT array_agg(COALESCE(s.vgen, 0) ORDER BY e.project_id) AS gens
        FROM unnest(:scope::bigint[]) AS e(project_id)
        LEFT JOIN lexical_stats AS s ON s.project_id = e.project_id
    ) AS g
),"""
# HYBRID: the rows passed are the ranking's first ones plus those of the vector candidates,
# each with its place in the whole list, which is all RRF needs when the vector channel is
# exactly those candidates (the cache's, used); otherwise (`:fast_complete`) the whole list.
FAST_FOR_FTS = "true"
FAST_FOR_HYBRID = """(:fast_complete::bool
                    OR ((SELECT ok FROM cache_fresh)
                        AND (SELECT n FROM vcount) > :exact_scan_limit::bigint))"""
FAST_GATE = """
    WHERE NOT (SELECT ok FROM lex_fast)"""
# HYBRID: FTS_TIERED_BY_COUNT with the fast rows as a third arm; `NOT ok` comes first in each SQL
# arm's one-time condition, so with `ok` the shape checks (LEX_SHAPE) never run.
_BY_MATCH_PLACED = FTS_BY_MATCH.replace(" END AS tier\n", " END AS tier, NULL::bigint AS place\n")
FTS_TIERED_FAST = f"""
fts AS MATERIALIZED (
    SELECT s.project_id, s.kind, s.row_id, s.score AS fts_score,
           CASE WHEN s.hits >= (SELECT strict_at FROM lex_shape) THEN 1 ELSE 0 END AS tier,
           NULL::bigint AS place
    FROM scores AS s
    WHERE NOT (SELECT ok FROM lex_fast) AND (SELECT by_count FROM lex_shape)
      AND ((SELECT any_term FROM lex_shape) OR s.hits >= (SELECT strict_at FROM lex_shape))
    UNION ALL{_BY_MATCH_PLACED}
      AND NOT (SELECT ok FROM lex_fast) AND NOT (SELECT by_count FROM lex_shape)
    UNION ALL
    SELECT f.project_id, f.kind, f.row_id, f.score, f.tier, f.place
    FROM unnest(:fast_projects::bigint[], :fast_kinds::text[], :fast_rows::text[],
                :fast_scores::float8[], :fast_tiers::int[], :fast_places::bigint[])
         AS f(project_id, kind, row_id, score, tier, place)
    WHERE (SELECT ok FROM lex_fast)
),"""  # noqa: S608 - only constant fragments are interpolated
# FTS ranked in process: the statement checks the ranking (LEX_FAST) and hydrates its rows,
# nothing else. The SQL ranking is not in it: its CTEs, never run, cost ~0.12 ms a search to
# set up (a fifth of the statement at 100k chunks). Refused, `fts` is empty and the store
# runs the SQL-ranked statement instead (search.run_search).
FTS_FAST = """
fts AS MATERIALIZED (
    SELECT f.project_id, f.kind, f.row_id, f.score AS fts_score, f.tier
    FROM unnest(:fast_projects::bigint[], :fast_kinds::text[], :fast_rows::text[],
                :fast_scores::float8[], :fast_tiers::int[])
         AS f(project_id, kind, row_id, score, tier)
    WHERE (SELECT ok FROM lex_fast)
),"""
LEX_GENS = "(SELECT gens FROM lex_fast)"
LEX_USED = "(SELECT ok FROM lex_fast)"
LEX_SEEN = "(SELECT seen FROM lex_fast)"
RELAXED_FLAG_FAST = """((SELECT relaxed_always FROM lex)
    OR CASE WHEN (SELECT ok FROM lex_fast) THEN :fast_relaxed::bool
            ELSE EXISTS (SELECT 1 FROM fts WHERE tier = 0) END)"""
RELAXED_FLAG = "((SELECT relaxed_always FROM lex) OR EXISTS (SELECT 1 FROM fts WHERE tier = 0))"
# FTS mode reads it from search_sql.FTS_SUMMARY instead, with the other totals of `fts`.
RELAXED_SUMMARY = "((SELECT relaxed_always FROM lex) OR (SELECT relaxed FROM fts_summary))"
FTS_ALL = """
fts AS (SELECT project_id, kind, row_id, 0.0::float8 AS fts_score, 1 AS tier FROM eligible),"""
FTS_NONE = """
fts AS (
    SELECT NULL::bigint AS project_id, NULL::text AS kind, NULL::text AS row_id,
           0.0::float8 AS fts_score, 1 AS tier
    WHERE false
),"""
RELAXED_NEVER = "false"
