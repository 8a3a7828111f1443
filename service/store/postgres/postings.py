"""The lexical channel's postings, written with the documents they come from.

A project search scores BM25 over its scope: each query term's frequency in each scope
document, the document's length and the scope's statistics. Read from the documents, that
cost followed every project's matches of the terms (the GIN indexes span the table) plus a
detoast and unnest of each candidate's tsvector. `term_postings` (migration 3) holds one
row per document and lexeme, keyed by project first, so a search reads only its scope's
postings of its terms, in index order; `lexical_stats` keeps each project's document count,
summed lengths and chunk count, so an unfiltered scope's N and avgdl (and the vector
channel's choice between the exact scan and the HNSW index) are a few rows.

Rows are made in SQL from the row's own tsvectors (`unnest`), in the statement that writes
or deletes the document, so the postings are exactly PostgreSQL's lexemes and never disagree
with `fts` / `ngram_fts` (tests/integration/test_postgres_postings.py compares them).
"""

from __future__ import annotations

# Postings of the documents in `{source}` (a relation with project_id, kind, row_id, fts,
# ngram_fts, doc_len, ngram_len). tf is the lexeme's position count, as BM25 read it from
# the tsvector (at most 256; a lexeme without positions counts 1).
POSTINGS_OF = """
INSERT INTO term_postings (project_id, chan, lexeme, kind, row_id, tf, dl)
SELECT i.project_id, 0, u.lexeme, i.kind, i.row_id, COALESCE(array_length(u.positions, 1), 1),
       i.doc_len
FROM {source} AS i CROSS JOIN LATERAL unnest(i.fts) AS u
UNION ALL
SELECT i.project_id, 1, u.lexeme, i.kind, i.row_id, COALESCE(array_length(u.positions, 1), 1),
       i.ngram_len
FROM {source} AS i CROSS JOIN LATERAL unnest(i.ngram_fts) AS u"""
# The postings of the documents in `{source}` (project_id, kind, row_id) of project $1.
DELETE_POSTINGS_OF = """
DELETE FROM term_postings AS t
USING {source} AS x
WHERE t.project_id = $1 AND t.project_id = x.project_id AND t.kind = x.kind
  AND t.row_id = x.row_id"""
# n, sum_dl, sum_nl and chunks move by the difference a batch makes to the project ($1, the
# tenant's: $6), and the vector generation by one (a first row starts at 1: an absent row
# reads as 0). Taken last in a write's transaction: concurrent batches of one project
# queue on this row until they commit, and holding it while waiting for anything else
# could close a lock cycle.
ADD_STATS = """
INSERT INTO lexical_stats AS s (project_id, n, sum_dl, sum_nl, chunks, vgen)
SELECT p.project_id, $2, $3, $4, $5, 1 FROM projects AS p WHERE p.project_id = $1 AND p.tenant = $6
ON CONFLICT (project_id) DO UPDATE SET
    n = s.n + excluded.n, sum_dl = s.sum_dl + excluded.sum_dl,
    sum_nl = s.sum_nl + excluded.sum_nl, chunks = s.chunks + excluded.chunks,
    vgen = s.vgen + 1"""
# The chunks of the documents in `{source}` (project_id, kind, row_id), read in the statement
# that deletes those documents: its snapshot still holds the rows the cascade removes.
CHUNKS_OF = """(
    SELECT count(*) FROM chunks AS c
    WHERE c.project_id = {source}.project_id AND c.kind = {source}.kind
      AND c.row_id = {source}.row_id)"""
# In DELETE_DOCUMENTS: the deleted documents (`deleted`) out of their project's statistics.
SUBTRACT_STATS = f"""
UPDATE lexical_stats AS s
SET n = s.n - t.n, sum_dl = s.sum_dl - t.dl, sum_nl = s.sum_nl - t.nl, chunks = s.chunks - t.c,
    vgen = s.vgen + 1
FROM (SELECT count(*) AS n, COALESCE(sum(doc_len), 0) AS dl, COALESCE(sum(ngram_len), 0) AS nl,
             COALESCE(sum({CHUNKS_OF.format(source="deleted")}), 0) AS c
      FROM deleted) AS t
WHERE s.project_id = $1 AND t.n > 0"""  # noqa: S608 - only constant fragments are interpolated
# In DELETE_PROJECT (lexical_stats goes with the project, ON DELETE CASCADE).
DELETE_PROJECT_POSTINGS = """
DELETE FROM term_postings
WHERE project_id = $2 AND project_id IN (SELECT project_id FROM deleted)"""
