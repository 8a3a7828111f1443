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

ELIGIBLE = """
eligible AS MATERIALIZED (
    SELECT d.id AS doc_id, d.project_id, d.kind, d.row_id, d.doc_len, d.ngram_len
    FROM projects AS p
    JOIN documents AS d ON d.project_id = p.project_id
    WHERE p.tenant = :tenant
      AND p.project_id IN (SELECT value FROM json_each(:scope))
    {filters}
)"""

# Lexical channel. Membership comes from FTS5 MATCH (strict form, and the relaxed any-word
# form); the score is Lucene's BM25 computed here over the eligible scope, the same formula
# the PostgreSQL store computes: FTS5's own bm25() clamps idf to ~1e-6 for any term in half
# the table or more, and takes N, df and avgdl from the whole table rather than the scope.
# The unary `+` hides the rowid filter from FTS5: offered `rowid IN (...)`, FTS5 re-runs the
# MATCH once per eligible rowid (seconds on a few thousand rows) instead of once in total.
FTS_STRICT = """
fts_strict AS MATERIALIZED (
    SELECT rowid AS doc_id
    FROM docs_fts
    WHERE docs_fts MATCH :fts_query AND +rowid IN (SELECT doc_id FROM eligible)
)"""
FTS_LOOSE = """
fts_loose AS MATERIALIZED (
    SELECT rowid AS doc_id
    FROM docs_fts
    WHERE docs_fts MATCH :fts_relaxed AND +rowid IN (SELECT doc_id FROM eligible)
      AND rowid NOT IN (SELECT doc_id FROM fts_strict)
)"""
FTS_LOOSE_FROM_TERMS = """
fts_loose AS MATERIALIZED (
    SELECT DISTINCT t.doc_id
    FROM term_tf AS t JOIN query_terms AS q ON q.term = t.term
    WHERE q.relaxed AND t.doc_id NOT IN (SELECT doc_id FROM fts_strict)
)"""
FTS_LOOSE_NONE = """
fts_loose AS (SELECT 0 AS doc_id WHERE 0)"""
# Term frequencies from the index itself (`temp.docs_fts_instance`, lexical_check.py: one row
# per occurrence): `:score_terms` lists `[stem, prefix, column, relaxed]` per query term. A prefix
# term's tf is its exact stem's count, or 1 when only longer terms occur, as on PostgreSQL
# (whose tsvector cannot list the longer lexemes cheaply). CROSS JOIN keeps the terms outer,
# so each is a range lookup in the index. df, N and the mean lengths are counted over the
# eligible scope; lengths are the ones both stores store at write time (service.store.lengths).
BM25 = """
query_terms AS MATERIALIZED (
    SELECT CAST(key AS INTEGER) AS term, value ->> 0 AS stem, value ->> 1 AS prefix,
           value ->> 2 AS col, value ->> 3 AS relaxed
    FROM json_each(:score_terms)
),
term_tf AS MATERIALIZED (
    SELECT t.term, i.doc AS doc_id, t.col,
           CASE WHEN t.prefix THEN MAX(1, SUM(i.term = t.stem)) ELSE COUNT(*) END AS tf
    FROM query_terms AS t
    CROSS JOIN docs_fts_instance AS i
    WHERE i.term >= t.stem AND i.term < t.stem || char(1114111) AND i.col = t.col
      AND (t.prefix OR i.term = t.stem)
      AND i.doc IN (SELECT doc_id FROM eligible)
    GROUP BY t.term, i.doc
),
term_df AS MATERIALIZED (SELECT term, COUNT(*) AS df FROM term_tf GROUP BY term),
scope_stats AS MATERIALIZED (
    SELECT COUNT(*) AS n, COALESCE(NULLIF(AVG(doc_len), 0), 1.0) AS avgdl,
           COALESCE(NULLIF(AVG(ngram_len), 0), 1.0) AS avgnl
    FROM eligible
),
bm25 AS MATERIALIZED (
    SELECT t.doc_id,
           SUM(ln(1.0 + (s.n - d.df + 0.5) / (d.df + 0.5)) * t.tf * (:bm25_k1 + 1.0)
               / (t.tf + :bm25_k1 * (1.0 - :bm25_b + :bm25_b
                   * CASE WHEN t.col = 'content' THEN z.doc_len / s.avgdl
                          ELSE z.ngram_len / s.avgnl END)))
               AS fts_score
    FROM term_tf AS t
    JOIN term_df AS d ON d.term = t.term
    JOIN documents AS z ON z.id = t.doc_id
    CROSS JOIN scope_stats AS s
    GROUP BY t.doc_id
)"""
# Relaxation is tiered and decided over the whole scope: rows matching every word (tier 1)
# rank first, then rows matching only some of the words (tier 0), each tier by BM25.
# (IN, not LEFT JOIN: SQLite would scan bm25 once per member.) A member holding no scoring
# term cannot happen with compiled queries; it would keep a zero score.
FTS_TIERED = """
fts AS MATERIALIZED (
    SELECT doc_id, fts_score, 1 AS tier FROM bm25
    WHERE doc_id IN (SELECT doc_id FROM fts_strict)
    UNION ALL
    SELECT doc_id, fts_score, 0 FROM bm25
    WHERE doc_id IN (SELECT doc_id FROM fts_loose)
    UNION ALL
    SELECT doc_id, 0.0, 1 FROM fts_strict WHERE doc_id NOT IN (SELECT doc_id FROM bm25)
    UNION ALL
    SELECT doc_id, 0.0, 0 FROM fts_loose WHERE doc_id NOT IN (SELECT doc_id FROM bm25)
)"""
# When every scoring term is a relaxed-form term, the documents holding one of them are
# exactly the strict and the relaxed matches: the tiers are read off `bm25` in one pass
# (17-25% of a natural-language statement over 20k documents went into the four arms above).
FTS_TIERED_FROM_BM25 = """
fts AS MATERIALIZED (
    SELECT doc_id, fts_score, doc_id IN (SELECT doc_id FROM fts_strict) AS tier FROM bm25
)"""
FTS_ALL = """
fts AS (SELECT doc_id, 0.0 AS fts_score, 1 AS tier FROM eligible)"""
FTS_NONE = """
fts AS (SELECT 0 AS doc_id, 0.0 AS fts_score, 1 AS tier WHERE 0)"""
RELAXED_NEVER = "0"
RELAXED_WHEN_LOOSE = "EXISTS (SELECT 1 FROM fts WHERE tier = 0)"
RELAXED_ALWAYS = "1"

VALID_VECTOR = """v.state = 'ready' AND v.model = :model AND v.dimensions = :dimensions
      AND v.source_hash = c.source_hash"""
# CROSS JOIN fixes the loop order (SQLite never reorders it): scope first, so the cost
# follows the eligible set, never the size of the whole vectors table.
ELIGIBLE_VECTORS = f"""
    FROM eligible AS e
    CROSS JOIN chunks AS c ON c.project_id = e.project_id AND c.document_id = e.doc_id
    CROSS JOIN vectors AS v ON v.chunk_id = c.id
    WHERE {VALID_VECTOR}"""
# The CASE keeps vec_distance_cosine away from vectors of other dimensions whatever order
# SQLite evaluates the WHERE terms in.
SIMILARITY = (
    "MIN(1.0, 1.0 - CASE WHEN v.dimensions = :dimensions "
    "THEN vec_distance_cosine(v.embedding, :query_vector) END)"
)
EXACT_SIMS = f"""
chunk_sims AS MATERIALIZED (
    SELECT c.document_id AS doc_id, {SIMILARITY} AS sim
    {ELIGIBLE_VECTORS}
)"""
# Both arms are guarded by the same constant condition, which SQLite evaluates once before
# looping: exactly one of the exact scan and the KNN search runs. The count only picks the
# strategy, so it stops past the limit. Without filters it reads the covering index
# vectors_identity alone (stale source hashes are not checked, as on PostgreSQL); joining
# every scope vector to its chunk (and reading each vector row) cost ~4x more.
VECTOR_COUNT = f"""
vcount AS MATERIALIZED (
    SELECT COUNT(*) AS n FROM (
        SELECT 1
        {ELIGIBLE_VECTORS}
        LIMIT :exact_scan_limit + 1
    )
)"""  # noqa: S608 - only constant fragments are interpolated
VECTOR_COUNT_SCOPE = """
vcount AS MATERIALIZED (
    SELECT COUNT(*) AS n FROM (
        SELECT 1 FROM vectors AS v
        WHERE v.project_id IN (
                SELECT p.project_id FROM projects AS p
                WHERE p.tenant = :tenant AND p.project_id IN (SELECT value FROM json_each(:scope))
            )
          AND v.model = :model AND v.dimensions = :dimensions AND v.state = 'ready'
        LIMIT :exact_scan_limit + 1
    )
)"""
KNN = """
knn AS MATERIALIZED (
    SELECT chunk_id, distance
    FROM vec_chunks
    WHERE embedding MATCH :query_vector AND k = :knn_k
      AND project_id IN (SELECT value FROM json_each(:scope))
      AND (SELECT n FROM vcount) > :exact_scan_limit
)"""
EXACT_OR_KNN_SIMS = f"""
chunk_sims AS MATERIALIZED (
    SELECT c.document_id AS doc_id, {SIMILARITY} AS sim
    {ELIGIBLE_VECTORS}
      AND (SELECT n FROM vcount) <= :exact_scan_limit
    UNION ALL
    SELECT c.document_id, MIN(1.0, 1.0 - k.distance)
    FROM knn AS k
    JOIN chunks AS c ON c.id = k.chunk_id
    JOIN eligible AS e ON e.doc_id = c.document_id
    JOIN vectors AS v ON v.chunk_id = c.id
    WHERE {VALID_VECTOR}
)"""  # noqa: S608 - only constant fragments are interpolated
EXACT_ALWAYS = "1"
EXACT_BY_COUNT = "(SELECT n FROM vcount) <= :exact_scan_limit"
VECTOR_SCORES = """
vector_scores AS (
    SELECT doc_id, MAX(sim) AS v FROM chunk_sims
    WHERE sim >= :min_similarity
    GROUP BY doc_id
)"""

SCORED_FTS = """
scored AS (
    SELECT doc_id, fts_score AS score, 0.0 AS v, fts_score,
           COALESCE(fts_score / NULLIF(MAX(fts_score) OVER (), 0.0), 0.0) AS f, tier
    FROM fts
)"""
SCORED_VECTOR = """
scored AS (
    SELECT doc_id, v AS score, v, 0.0 AS fts_score, 0.0 AS f, 1 AS tier FROM vector_scores
)"""
SCORED_HYBRID = """
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
scored AS (
    SELECT doc_id, MAX(v, f) + :fusion_bonus * MIN(v, f) AS score, v, fts_score, f, 1 AS tier
    FROM fused
)"""
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
    FROM fts AS f JOIN eligible AS e ON e.doc_id = f.doc_id
),
vector_ranked AS (
    SELECT s.doc_id, s.v,
           ROW_NUMBER() OVER (ORDER BY s.v DESC, e.project_id, e.kind, e.row_id) AS r
    FROM vector_scores AS s JOIN eligible AS e ON e.doc_id = s.doc_id
),
channels AS (
    SELECT doc_id, v, 0.0 AS fts_score, 0.0 AS f, 1.0 / (:rrf_k + r) AS part FROM vector_ranked
    UNION ALL
    SELECT doc_id, 0.0, fts_score, f, 1.0 / (:rrf_k + r) FROM fts_ranked
),
scored AS (
    SELECT doc_id, SUM(part) AS score, MAX(v) AS v, MAX(fts_score) AS fts_score, MAX(f) AS f,
           1 AS tier
    FROM channels GROUP BY doc_id
)"""

PAGE = """
page AS MATERIALIZED (
    SELECT s.doc_id, s.score, s.v, s.fts_score, s.f, s.tier, e.project_id, e.kind, e.row_id
    FROM scored AS s JOIN eligible AS e ON e.doc_id = s.doc_id
    ORDER BY s.tier DESC, s.score DESC, e.project_id, e.kind, e.row_id
    LIMIT :limit OFFSET :offset
)"""
META = """
meta AS (SELECT {relaxed} AS relaxed, {exact} AS exact, {total} AS total)"""
TOTAL_COUNT = "(SELECT COUNT(*) FROM fts)"
TOTAL_NONE = "NULL"

CHUNKS_NONE = "NULL"
TOP_CHUNKS = f"""(
    SELECT json_group_array(json_array(x.chunk_index, x.text, x.sim)) FROM (
        SELECT c.chunk_index, c.text, {SIMILARITY} AS sim
        FROM chunks AS c JOIN vectors AS v ON v.chunk_id = c.id
        WHERE c.project_id = pg.project_id AND c.document_id = pg.doc_id
          AND {VALID_VECTOR}
          AND sim >= :min_similarity
        ORDER BY sim DESC, c.chunk_index
        LIMIT :max_chunks
    ) AS x
)"""  # noqa: S608 - only constant fragments are interpolated
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
