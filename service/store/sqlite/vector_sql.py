"""The vector channel's fragments of the SQLite search statement (search_sql assembles the
rest): valid vectors, the exact scan, the exact-vs-KNN count, the KNN candidates (vec0, or
the in-process matrices of vector_cache), each document's best chunk, the page's chunks."""

from __future__ import annotations

from service.store.sqlite.search_sql import OWNED_SCOPE

# The identity is compared through expressions, as the tenant is (see TENANT).
MODEL, DIMENSIONS = ":model || ''", ":dimensions + 0"
VALID_VECTOR = f"""v.state = 'ready' AND v.model = {MODEL} AND v.dimensions = {DIMENSIONS}
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
    f"MIN(1.0, 1.0 - CASE WHEN v.dimensions = {DIMENSIONS} "
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
VECTOR_COUNT_SCOPE = f"""
vcount AS MATERIALIZED (
    SELECT COUNT(*) AS n FROM (
        SELECT 1 FROM vectors AS v
        WHERE v.project_id IN ({OWNED_SCOPE})
          AND v.model = {MODEL} AND v.dimensions = {DIMENSIONS} AND v.state = 'ready'
        LIMIT :exact_scan_limit + 1
    )
)"""  # noqa: S608 - only constant fragments are interpolated
# vec0 evaluates the rest of a WHERE clause per row, after its search: a guard beside `k`
# never stopped the search (every exact-path VECTOR/HYBRID search also ran a full vec0 scan,
# ~16 ms at 20k scope vectors, and threw it away). The guard goes into `k`: 0 when unneeded.
KNN = """
knn AS MATERIALIZED (
    SELECT chunk_id, distance
    FROM vec_chunks
    WHERE embedding MATCH :query_vector
      AND k = CASE WHEN (SELECT n FROM vcount) > :exact_scan_limit THEN :knn_k ELSE 0 END
      AND project_id IN (SELECT value FROM json_each(:scope))
)"""
# With the vector cache (service.store.sqlite.vector_cache) the statement asks it through
# two functions, inside its own snapshot: the count (without filters; NULL when the cache
# cannot hold the scope, and then the index count) and the k nearest chunks of the owned
# scope, as PostgreSQL's HNSW answers (vec0 gave k per project partition). vec0 answers only
# when the cache cannot. Either way the candidates' similarity is computed from the stored
# vector, as on the exact path.
OWNED_SCOPE_JSON = f"(SELECT json_group_array(project_id) FROM ({OWNED_SCOPE}))"  # noqa: S608
VECTOR_COUNT_CACHED = f"""
vcount AS MATERIALIZED (
    SELECT COALESCE(
        search_cached_vector_count({OWNED_SCOPE_JSON}, {MODEL}, {DIMENSIONS}),
        (SELECT COUNT(*) FROM (
            SELECT 1 FROM vectors AS v
            WHERE v.project_id IN ({OWNED_SCOPE})
              AND v.model = {MODEL} AND v.dimensions = {DIMENSIONS} AND v.state = 'ready'
            LIMIT :exact_scan_limit + 1
        ))
    ) AS n
)"""  # noqa: S608 - only constant fragments are interpolated
KNN_CACHED = f"""
knn_cached AS MATERIALIZED (
    SELECT search_cached_knn(:query_vector, {OWNED_SCOPE_JSON}, {MODEL}, {DIMENSIONS}, :knn_k)
           AS ids
    WHERE (SELECT n FROM vcount) > :exact_scan_limit
),
knn AS MATERIALIZED (
    SELECT j.value AS chunk_id FROM knn_cached AS c, json_each(c.ids) AS j
    UNION ALL
    SELECT chunk_id
    FROM vec_chunks
    WHERE embedding MATCH :query_vector
      AND k = CASE WHEN (SELECT n FROM vcount) > :exact_scan_limit
                    AND EXISTS (SELECT 1 FROM knn_cached WHERE ids IS NULL)
               THEN :knn_k ELSE 0 END
      AND project_id IN (SELECT value FROM json_each(:scope))
)"""  # noqa: S608 - only constant fragments are interpolated
# vec0 alone reports its cosine distance, which is the stored vector's.
KNN_SIMILARITY = "MIN(1.0, 1.0 - k.distance)"
EXACT_OR_KNN_SIMS = f"""
chunk_sims AS MATERIALIZED (
    SELECT c.document_id AS doc_id, {SIMILARITY} AS sim
    {ELIGIBLE_VECTORS}
      AND (SELECT n FROM vcount) <= :exact_scan_limit
    UNION ALL
    SELECT c.document_id, {{knn_similarity}}
    FROM knn AS k
    JOIN chunks AS c ON c.id = k.chunk_id
    JOIN vectors AS v ON v.chunk_id = c.id
    WHERE {{knn_eligible}} AND {VALID_VECTOR}
)"""  # noqa: S608 - only constant fragments are interpolated
# What a KNN candidate must pass besides its vector: with filters, the eligible documents;
# without, the tenant's own scope projects (vec0 searched the scope's partitions, unchecked),
# which spares joining every candidate to the materialized eligible set (~4 ms at 20k
# scope chunks: SQLite indexes that set again for each search).
KNN_ELIGIBLE = "c.document_id IN (SELECT doc_id FROM eligible)"
KNN_OWNED = f"c.project_id IN ({OWNED_SCOPE})"
EXACT_BY_COUNT = "(SELECT n FROM vcount) <= :exact_scan_limit"
VECTOR_SCORES = """
vector_scores AS (
    SELECT doc_id, MAX(sim) AS v FROM chunk_sims
    WHERE sim >= :min_similarity
    GROUP BY doc_id
)"""

# Read twice when the lexical cache ranks a HYBRID search's lexical list (search_sql
# LEX_CACHED is passed its documents).
VECTOR_SCORES_MATERIALIZED = VECTOR_SCORES.replace(
    "vector_scores AS (", "vector_scores AS MATERIALIZED ("
)

TOP_CHUNKS = f"""(
    SELECT json_group_array(json_array(x.chunk_index, x.text, x.sim)) FROM (
        SELECT c.chunk_index, c.text, {SIMILARITY} AS sim
        FROM chunks AS c JOIN vectors AS v ON v.chunk_id = c.id
        WHERE c.project_id = pg.project_id AND c.document_id = pg.doc_id
          AND {VALID_VECTOR}
          AND sim >= :min_similarity
        ORDER BY sim DESC, c.chunk_index
        LIMIT :max_chunks + 0
    ) AS x
)"""  # noqa: S608 - only constant fragments are interpolated
