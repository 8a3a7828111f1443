"""The one retrieval statement of a project search, assembled from fixed CTE fragments.

Shape (reference section 5): `eligible` (scope + tenant + filters, no text) -> lexical
`fts_strict` / `fts` (relaxation decided over the whole scope) and/or vector `chunk_sims`
(exact scan, or vec0 KNN past `exact_scan_limit`) -> `scored` -> `page` (ORDER BY score,
identity; LIMIT/OFFSET) -> one `meta` row LEFT JOINed to the page rows, so even an empty
page reports relaxation, exactness and the exact FTS total.

KNN choice: vec_chunks (vec0) mirrors the ready vectors of the configured identity with
`project_id` as its PARTITION KEY, so `project_id IN (scope)` makes sqlite-vec search only
the scope's partitions, taking the k nearest chunks of each. Filters other than the scope
are applied after the KNN (vec0 cannot evaluate them), hence the over-fetch of `knn_k`;
a filter that drops most candidates can leave a page short, which `ranking_is_exact =
false` admits. Every KNN candidate is re-checked against the same validity predicate as
the exact scan (ready, model, dimensions, source hash).
"""

from __future__ import annotations

# A parameter the planner would read the bound value of is passed through an expression
# (`:tenant || ''`, `:limit + 0`): SQLite expires a statement whose plan read a bound value
# whenever that parameter is bound again, so every search prepared its whole statement
# again (~1.3 ms for the 4 kB FTS statement, more than a small search's own work). Found
# so far: a bare LIMIT / OFFSET, and equalities of a column with a parameter that the
# planner propagates into other terms (the tenant of a filtered eligible set, the vectors'
# model and dimensions). Checked for every statement shape by
# tests/integration/test_sqlite_statement_cache.py.
TENANT = ":tenant || ''"
# The scope's projects the tenant owns (the service checked already; each statement does too).
OWNED_SCOPE = f"""SELECT p.project_id FROM projects AS p
    WHERE p.tenant = {TENANT} AND p.project_id IN (SELECT value FROM json_each(:scope))"""  # noqa: S608 - constants
# Materialized with filters (several CTEs read it); without, the one reader streams it, so a
# nearest-neighbour search whose exact arm is not taken never builds it (~3 ms at 7.5k).
ELIGIBLE = f"""
eligible AS {{materialized}} (
    SELECT d.id AS doc_id, d.project_id
    FROM projects AS p
    JOIN documents AS d ON d.project_id = p.project_id
    WHERE p.tenant = {TENANT}
      AND p.project_id IN (SELECT value FROM json_each(:scope))
    {{filters}}
)"""  # noqa: S608 - only constant fragments are interpolated

# Lexical channel. The score is Lucene's BM25 computed here over the eligible scope, the
# same formula the PostgreSQL store computes (FTS5's own bm25() clamps idf to ~1e-6 for any
# term in half the table or more, and takes N, df and avgdl from the whole table rather
# than the scope), from the scope's postings (service.store.sqlite.postings).
#
# `:score_terms` lists `[stem, prefix, column number, relaxed]` per query term; each (term,
# project) is one range of term_postings' key, carrying tf and the document's length. A
# prefix term's tf is its exact stem's count, or 1 when only longer terms occur, as on
# PostgreSQL (whose tsvector cannot list the longer lexemes cheaply): the exact stem's
# postings, plus one row per document holding only longer terms. CROSS JOIN keeps the loop
# order: terms, then the scope's projects, then postings. With filters, postings are kept
# to the eligible documents (ELIGIBLE_POSTINGS). df, N and the mean lengths are counted
# over the eligible scope: without filters N and the summed lengths are the projects'
# lexical_stats. `term_tf` is not materialized: each reader streams it from the index
# (~80 ns a posting), where writing it into a temporary table cost ~400 ns a row.
# A posting of a longer term counts for its document only when the exact stem is absent.
ONLY_LONGER = """NOT EXISTS (
          SELECT 1 FROM term_postings AS y
          WHERE y.project_id = x.project_id AND y.col = x.col AND y.term = t.stem
            AND y.doc_id = x.doc_id
      )"""
LEX_SCOPE = f"""
lex_scope AS MATERIALIZED (
    {OWNED_SCOPE}
)"""
QUERY_TERMS = """
query_terms AS MATERIALIZED (
    SELECT CAST(key AS INTEGER) AS term, value ->> 0 AS stem, value ->> 1 AS prefix,
           value ->> 2 AS col, value ->> 3 AS relaxed
    FROM json_each(:score_terms)
)"""
# Document frequencies. Unfiltered: counted straight from the postings (an index range count
# per term, ~80 ns a posting), one row per term (`term_weights`). Filtered: a
# window over `term_tf`, which is then read once (each reference of a CTE is expanded again,
# and the eligible set's with it; SQLite refuses past 1,000 expansions).
TERM_DF = f"""
term_df AS MATERIALIZED (
    SELECT t.term,
           (SELECT COUNT(*) FROM lex_scope AS s CROSS JOIN term_postings AS x
            WHERE x.project_id = s.project_id AND x.col = t.col AND x.term = t.stem)
           + CASE WHEN t.prefix THEN (
               SELECT COUNT(DISTINCT x.doc_id) FROM lex_scope AS s CROSS JOIN term_postings AS x
               WHERE x.project_id = s.project_id AND x.col = t.col
                 AND x.term > t.stem AND x.term < t.stem || char(1114111) AND {ONLY_LONGER}
             ) ELSE 0 END AS df
    FROM query_terms AS t
),"""  # noqa: S608 - only constant fragments are interpolated
WEIGHTED_WINDOW = "(SELECT f.*, COUNT(*) OVER (PARTITION BY f.term) AS df FROM term_tf AS f)"
# A filter on each posting of the term's range, not a key: offered `doc_id IN (eligible)`
# as the last key column, SQLite probed every eligible document under every term and
# project (3 terms x 10 projects x 3,777 documents of a kind filter: 42 ms at 100k chunks,
# against 3.3 ms reading the terms' postings and checking each).
ELIGIBLE_POSTINGS = "\n      AND +x.doc_id IN (SELECT doc_id FROM eligible)"

# avg() of integers is their exact sum over the count, so both forms give the same doubles.
SCOPE_STATS = """
scope_stats AS MATERIALIZED (
    SELECT COALESCE(SUM(n), 0) AS n,
           CASE WHEN SUM(sum_dl) THEN SUM(sum_dl) * 1.0 / SUM(n) ELSE 1.0 END AS avgdl,
           CASE WHEN SUM(sum_nl) THEN SUM(sum_nl) * 1.0 / SUM(n) ELSE 1.0 END AS avgnl
    FROM lexical_stats
    WHERE project_id IN (SELECT project_id FROM lex_scope)
)"""
# The lengths sit behind each document's body (its overflow pages): read only here, for a
# filtered lexical search. `eligible` itself carries ids only (selecting the lengths there
# made every VECTOR search read every scope document's body: 11.5 against 4 ms at 7.5k).
ELIGIBLE_STATS = """
scope_stats AS MATERIALIZED (
    SELECT COUNT(*) AS n, COALESCE(NULLIF(AVG(d.doc_len), 0), 1.0) AS avgdl,
           COALESCE(NULLIF(AVG(d.ngram_len), 0), 1.0) AS avgnl
    FROM eligible AS e CROSS JOIN documents AS d ON d.id = e.doc_id
)"""

# Without filters every term's df is an index count, so its weight and length constants are
# worked out once per term (`term_weights`) and each posting costs one multiply-add and a
# division: Lucene BM25 regrouped, idf * (k1 + 1) * tf / (tf + k1 * (1 - b) + k1 * b * dl /
# avgdl) (~1.5x faster per match than the formula per posting joined to its df).
BM25 = f"""{QUERY_TERMS},
{TERM_DF}
{SCOPE_STATS},
term_weights AS MATERIALIZED (
    SELECT t.term, t.stem, t.prefix, t.col,
           ln(1.0 + (s.n - d.df + 0.5) / (d.df + 0.5)) * (:bm25_k1 + 1.0) AS w,
           :bm25_k1 * (1.0 - :bm25_b) AS c0,
           :bm25_k1 * :bm25_b / CASE WHEN t.col = 0 THEN s.avgdl ELSE s.avgnl END AS c1
    FROM query_terms AS t
    CROSS JOIN term_df AS d ON d.term = t.term
    CROSS JOIN scope_stats AS s
),
term_tf AS (
    SELECT t.term, x.doc_id, t.w * x.tf / (x.tf + t.c0 + t.c1 * x.dl) AS part
    FROM term_weights AS t
    CROSS JOIN lex_scope AS s
    CROSS JOIN term_postings AS x
    WHERE x.project_id = s.project_id AND x.col = t.col AND x.term = t.stem
    UNION ALL
    SELECT t.term, x.doc_id, t.w / (1.0 + t.c0 + t.c1 * MAX(x.dl))
    FROM term_weights AS t
    CROSS JOIN lex_scope AS s
    CROSS JOIN term_postings AS x
    WHERE t.prefix AND x.project_id = s.project_id AND x.col = t.col
      AND x.term > t.stem AND x.term < t.stem || char(1114111)
      AND {ONLY_LONGER}
    GROUP BY t.term, x.doc_id
),
bm25 AS MATERIALIZED (
    SELECT doc_id, SUM(part) AS fts_score, COUNT(*) AS hits FROM term_tf GROUP BY doc_id
)"""  # noqa: S608 - only constant fragments are interpolated
# With filters the postings are those of eligible documents, df is a window over them and
# the formula is applied per posting (df is only known once the postings are read).
BM25_FILTERED = f"""{QUERY_TERMS},
term_tf AS (
    SELECT t.term, x.doc_id, t.col, x.dl, x.tf
    FROM query_terms AS t
    CROSS JOIN lex_scope AS s
    CROSS JOIN term_postings AS x
    WHERE x.project_id = s.project_id AND x.col = t.col AND x.term = t.stem{ELIGIBLE_POSTINGS}
    UNION ALL
    SELECT t.term, x.doc_id, t.col, MAX(x.dl), 1
    FROM query_terms AS t
    CROSS JOIN lex_scope AS s
    CROSS JOIN term_postings AS x
    WHERE t.prefix AND x.project_id = s.project_id AND x.col = t.col
      AND x.term > t.stem AND x.term < t.stem || char(1114111){ELIGIBLE_POSTINGS}
      AND {ONLY_LONGER}
    GROUP BY t.term, x.doc_id
),
{ELIGIBLE_STATS},
bm25 AS MATERIALIZED (
    SELECT t.doc_id,
           SUM(ln(1.0 + (s.n - t.df + 0.5) / (t.df + 0.5)) * t.tf * (:bm25_k1 + 1.0)
               / (t.tf + :bm25_k1 * (1.0 - :bm25_b + :bm25_b
                   * CASE WHEN t.col = 0 THEN t.dl / s.avgdl ELSE t.dl / s.avgnl END)))
               AS fts_score,
           COUNT(*) AS hits
    FROM {WEIGHTED_WINDOW} AS t
    CROSS JOIN scope_stats AS s
    GROUP BY t.doc_id
)"""  # noqa: S608 - only constant fragments are interpolated
# Membership: the strict form, and the relaxed any-word form. Every match holds one of the
# query's positive terms, so the candidates are the scored documents (`bm25`). The unary `+`
# hides the rowid filter from FTS5: offered `rowid IN (...)`, FTS5 re-runs the MATCH once
# per rowid instead of once.
FTS_STRICT = """
fts_strict AS MATERIALIZED (
    SELECT rowid AS doc_id
    FROM docs_fts
    WHERE docs_fts MATCH :fts_query AND +rowid IN (SELECT doc_id FROM bm25)
)"""
# Relaxed matches (strict ones may be among them: the strict tier is decided first).
FTS_LOOSE = """
fts_loose AS MATERIALIZED (
    SELECT rowid AS doc_id
    FROM docs_fts
    WHERE docs_fts MATCH :fts_relaxed AND +rowid IN (SELECT doc_id FROM bm25)
)"""
FTS_LOOSE_FROM_TERMS = """
fts_loose AS MATERIALIZED (
    SELECT DISTINCT t.doc_id
    FROM term_tf AS t JOIN query_terms AS q ON q.term = t.term
    WHERE q.relaxed
)"""
FTS_LOOSE_NONE = """
fts_loose AS (SELECT 0 AS doc_id WHERE 0)"""
# Relaxation is tiered and decided over the whole scope: rows matching every word (tier 1)
# rank first, then rows matching only some of the words (tier 0), each tier by BM25. Both
# forms' matches are candidates of `bm25`, so every member has its score. Each CTE is
# referenced as few times as possible: SQLite expands a CTE's tree once per reference (even
# a materialized one), and references of references multiply up to its nesting limit.
FTS_TIERED = """
fts AS MATERIALIZED (
    SELECT doc_id, fts_score, tier FROM (
        SELECT doc_id, fts_score, doc_id IN (SELECT doc_id FROM fts_strict) AS tier,
               doc_id IN (SELECT doc_id FROM fts_loose) AS loose
        FROM bm25
    )
    WHERE tier OR loose
)"""
# When every scoring term is a relaxed-form term, the documents holding one of them are
# exactly the strict and the relaxed matches: the tiers are read off `bm25` in one pass.
FTS_TIERED_FROM_BM25 = """
fts AS MATERIALIZED (
    SELECT doc_id, fts_score, doc_id IN (SELECT doc_id FROM fts_strict) AS tier FROM bm25
)"""
# ... and when the strict form is only the AND of those terms (each one index term), the
# strict matches are the documents holding all of them: no MATCH at all (FTS5 would
# intersect the terms' doclists over the whole table, every project's).
FTS_TIERED_FROM_HITS = """
fts AS (SELECT doc_id, fts_score, hits = :strict_terms AS tier FROM bm25)"""
# The in-process ranking (service.store.sqlite.lexical_cache), asked by the statement itself
# in its own snapshot: the first `limit + offset` rows of the whole list with their tiers,
# the list's length and whether it holds relaxed matches (JSON, integers only), and each
# row's score as a REAL from `search_lexical_score`. NULL when the scope cannot be held:
# the list is then empty and the total NULL, and the store ranks in SQL instead.
OWNED_SCOPE_JSON = f"(SELECT json_group_array(project_id) FROM ({OWNED_SCOPE}))"  # noqa: S608
# HYBRID passes the documents of the vector channel (`{also}`): their rows and places in the
# whole list come after the first ones, which is every row the fusion can lift onto the page
# (a document below the first `limit + offset` of both lists fuses lower than each of those).
# `by_score`: the first rows by score alone, as SUM fuses (RRF's by tier, then score).
LEX_CACHED = f"""
lex_rank AS MATERIALIZED (
    SELECT search_lexical_rank({OWNED_SCOPE_JSON}, :cached_terms, :bm25_k1, :bm25_b,
                               :strict_terms, :any_term, :limit + :offset, {{also}},
                               :by_score) AS r
),
fts AS MATERIALIZED (
    SELECT j.value ->> 0 AS doc_id, search_lexical_score(l.r ->> '$.token', j.key) AS fts_score,
           j.value ->> 1 AS tier, j.value ->> 2 AS r
    FROM lex_rank AS l, json_each(l.r, '$.rows') AS j
)"""  # noqa: S608 - only constant fragments are interpolated
ALSO_NONE = "NULL"
ALSO_VECTOR = "(SELECT json_group_array(doc_id) FROM vector_scores)"
RELAXED_CACHED = "(SELECT r ->> '$.relaxed' FROM lex_rank)"
TOTAL_CACHED = "(SELECT r ->> '$.total' FROM lex_rank)"
FTS_ALL = """
fts AS (SELECT doc_id, 0.0 AS fts_score, 1 AS tier FROM eligible)"""
FTS_NONE = """
fts AS (SELECT 0 AS doc_id, 0.0 AS fts_score, 1 AS tier WHERE 0)"""
RELAXED_NEVER = "0"
RELAXED_WHEN_LOOSE = "EXISTS (SELECT 1 FROM fts WHERE tier = 0)"
RELAXED_ALWAYS = "1"
EXACT_ALWAYS = "1"

# The normalised score divides by the list's top, one uncorrelated subquery computed once
# (a window over every match cost ~1 us a row). Materialized: each reference of a CTE is
# expanded again, and the tiered shapes' trees would pass SQLite's limit.
SCORED_FTS = """
scored AS MATERIALIZED (
    SELECT doc_id, fts_score AS score, 0.0 AS v, fts_score,
           COALESCE(fts_score / NULLIF((SELECT MAX(fts_score) FROM fts), 0.0), 0.0) AS f, tier
    FROM fts
)"""
SCORED_VECTOR = """
scored AS MATERIALIZED (
    SELECT doc_id, v AS score, v, 0.0 AS fts_score, 0.0 AS f, 1 AS tier FROM vector_scores
)"""
# Both linear fusions: f is BM25 over the largest of the whole matching set, whatever its
# tier; v the vector similarity, 0 for a document the vector channel did not find (v is at
# least min_similarity >= 0, so the largest v of the fused rows is the vector channel's).
_LINEAR = """
fts_norm AS (
    SELECT doc_id, fts_score,
           COALESCE(fts_score / NULLIF(MAX(fts_score) OVER (), 0.0), 0.0) AS f
    FROM fts
),
channels AS (
    SELECT doc_id, v, 0.0 AS fts_score, 0.0 AS f FROM vector_scores
    UNION ALL
    SELECT doc_id, 0.0, fts_score, f FROM fts_norm
),
fused AS (
    SELECT doc_id, MAX(v) AS v, MAX(fts_score) AS fts_score, MAX(f) AS f
    FROM channels GROUP BY doc_id
),
scored AS MATERIALIZED (
    SELECT doc_id, {score} AS score, v, fts_score, f, 1 AS tier
    FROM fused
)"""
SCORED_HYBRID = _LINEAR.format(score="MAX(v, f) + :fusion_bonus * MIN(v, f)")
# SUM: each channel's score relative to its best, summed. With the lexical cache, `fts`
# holds the first rows by score and the vector channel's documents: the largest score is
# among them, and a document outside both cannot reach the page (each of those first rows
# has at least its score).
SCORED_SUM = _LINEAR.format(score="f + COALESCE(v / NULLIF(MAX(v) OVER (), 0.0), 0.0)")
# Reciprocal rank fusion of the two channels' whole lists: 1 / (k + rank) summed over the
# channels a document is in, ranks 1-based in each channel's own order (the FTS list's tiers
# included), ties in a channel broken by identity so that ranks never depend on paging.
SCORED_RRF = """
fts_ranked AS (
    SELECT f.doc_id, f.fts_score,
           COALESCE(f.fts_score / NULLIF(MAX(f.fts_score) OVER (), 0.0), 0.0) AS f,
           ROW_NUMBER() OVER (
               ORDER BY f.tier DESC, f.fts_score DESC, e.project_id, e.kind, e.row_id
           ) AS r
    FROM fts AS f CROSS JOIN documents AS e ON e.id = f.doc_id
),
vector_ranked AS (
    SELECT s.doc_id, s.v,
           ROW_NUMBER() OVER (ORDER BY s.v DESC, e.project_id, e.kind, e.row_id) AS r
    FROM vector_scores AS s CROSS JOIN documents AS e ON e.id = s.doc_id
),
channels AS (
    SELECT doc_id, v, 0.0 AS fts_score, 0.0 AS f, 1.0 / (:rrf_k + r) AS part FROM vector_ranked
    UNION ALL
    SELECT doc_id, 0.0, fts_score, f, 1.0 / (:rrf_k + r) FROM fts_ranked
),
scored AS MATERIALIZED (
    SELECT doc_id, SUM(part) AS score, MAX(v) AS v, MAX(fts_score) AS fts_score, MAX(f) AS f,
           1 AS tier
    FROM channels GROUP BY doc_id
)"""

# The same fusion when the lexical rows carry their places in the whole list (LEX_CACHED).
SCORED_RRF_CACHED = SCORED_RRF.replace(
    """           ROW_NUMBER() OVER (
               ORDER BY f.tier DESC, f.fts_score DESC, e.project_id, e.kind, e.row_id
           ) AS r
    FROM fts AS f CROSS JOIN documents AS e ON e.id = f.doc_id""",
    """           f.r
    FROM fts AS f""",
)

# LIMIT and OFFSET are expressions (see TENANT). Ties are broken by identity, which lives in
# `documents`: `page_cut` is the (tier, score) of the last row the page can reach, so only
# rows at or above it read their identity (by rowid; CROSS JOIN keeps `scored` outer, else
# SQLite scans every document and probes).
PAGE = """
page_cut AS MATERIALIZED (
    SELECT tier, score FROM scored ORDER BY tier DESC, score DESC
    LIMIT 1 OFFSET :limit + :offset - 1
),
page AS MATERIALIZED (
    SELECT s.doc_id, s.score, s.v, s.fts_score, s.f, s.tier, e.project_id, e.kind, e.row_id
    FROM scored AS s
    LEFT JOIN page_cut AS c ON 1
    CROSS JOIN documents AS e ON e.id = s.doc_id
    WHERE c.tier IS NULL OR (s.tier, s.score) >= (c.tier, c.score)
    ORDER BY s.tier DESC, s.score DESC, e.project_id, e.kind, e.row_id
    LIMIT :limit + 0 OFFSET :offset + 0
)"""
META = """
meta AS (SELECT {relaxed} AS relaxed, {exact} AS exact, {total} AS total)"""
TOTAL_COUNT = "(SELECT COUNT(*) FROM fts)"
TOTAL_NONE = "NULL"

CHUNKS_NONE = "NULL"
FINAL = """
SELECT m.relaxed, m.exact, m.total,
       pg.project_id, p.external_id, pg.kind, pg.row_id, d.title, d.path, d.category,
       d.note_type, d.metadata, d.created_at, d.updated_at,
       pg.score, pg.v, pg.fts_score, pg.f, substr(d.body, 1, :snippet_chars),
       {chunks}
FROM meta AS m
LEFT JOIN page AS pg ON 1
LEFT JOIN documents AS d ON d.id = pg.doc_id
LEFT JOIN projects AS p ON p.project_id = pg.project_id
ORDER BY pg.tier DESC, pg.score DESC, pg.project_id, pg.kind, pg.row_id"""


def statement(ctes: list[str], chunks: str) -> str:
    """`WITH <ctes> <final select>`."""
    return "WITH" + ",".join(ctes) + FINAL.format(chunks=chunks)
