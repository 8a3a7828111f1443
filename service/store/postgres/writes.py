"""Document writes: one transaction per batch, set-based statements, COPY for chunks and vectors.

A batch is atomic, so each document in it is too: a reader sees the old or the new version
of a document (row, chunks and vectors together), never a mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np
from pgvector import Vector

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.store.base import ChunkInput, DocKey, DocumentWrite, Outcome, project_not_found
from service.store.lengths import content_length, ngram_length
from service.store.postgres import postings
from service.store.postgres.codecs import clean_text, metadata_json, utc
from service.store.postgres.migrations import FTS_BODY_CHARS, FTS_NGRAM_CHARS
from service.store.postgres.pool import Conn

# Every statement keyed by a project id carries the tenant and checks it itself (issue #8):
# no separate ownership query precedes a write, and a statement that finds the project is
# not the tenant's touches nothing; the caller then raises the same NotFound as for an id
# that exists nowhere.
#
# Writers of the same document queue on this lock (keyed by a hash of the document identity)
# so concurrent replacements never interleave their delete and insert steps. Sorted, so two
# batches never wait for each other in opposite orders. The uncorrelated EXISTS is a one-time
# gate (it keeps the sort order): no row, and no lock taken, unless the tenant owns $4.
LOCK_DOCUMENTS = """
SELECT pg_advisory_xact_lock(7734, s.h)
FROM (
    SELECT DISTINCT hashtext($1::text || '/' || k.kind || '/' || k.row_id) AS h
    FROM unnest($2::text[], $3::text[]) AS k(kind, row_id)
    WHERE EXISTS (SELECT 1 FROM projects AS p WHERE p.project_id = $4 AND p.tenant = $5)
    ORDER BY h
    OFFSET 0
) AS s"""
# Chunks and vectors go with their document (ON DELETE CASCADE), postings in the same
# statement; the lengths and chunk counts say what the documents leave of the project's
# lexical_stats.
DELETE_DOCUMENTS_RETURNING = f"""
WITH deleted AS (
    DELETE FROM documents AS d
    USING unnest($2::text[], $3::text[]) AS k(kind, row_id), projects AS p
    WHERE d.project_id = $1 AND d.kind = k.kind AND d.row_id = k.row_id
      AND p.project_id = d.project_id AND p.tenant = $4
    RETURNING d.project_id, d.kind, d.row_id, d.created_at, d.doc_len, d.ngram_len
), unposted AS ({postings.DELETE_POSTINGS_OF.format(source="deleted")}
)
SELECT kind, row_id, created_at, doc_len, ngram_len,
       {postings.CHUNKS_OF.format(source="deleted")} AS chunk_count
FROM deleted"""  # noqa: S608 - only constant fragments are interpolated
# The documents and their postings, made from the tsvectors just stored.
INSERT_DOCUMENTS = f"""
WITH inserted AS (
INSERT INTO documents (
    project_id, kind, row_id, title, path, body, category, note_type, metadata,
    created_at, updated_at, content_hash, fts, ngram_fts, doc_len, ngram_len)
SELECT p.project_id, t.kind, t.row_id, t.title, t.path, t.body, t.category, t.note_type,
       t.metadata::jsonb,
       COALESCE(t.created_at, now()), COALESCE(t.updated_at, now()), t.content_hash,
       v.fts, v.ngram_fts, t.doc_len, t.ngram_len
FROM projects AS p
CROSS JOIN unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[], $12::text[],
            $13::text[], $14::int[], $15::int[])
     AS t(kind, row_id, title, path, body, category, note_type, metadata, created_at,
          updated_at, content_hash, ngrams, doc_len, ngram_len)
CROSS JOIN LATERAL (
    SELECT to_tsvector('english', t.title || ' ' || t.path || ' '
                       || translate(t.path, '/._-', '    ') || ' '
                       || left(t.body, {FTS_BODY_CHARS})) AS fts,
           to_tsvector('simple', left(t.ngrams, {FTS_NGRAM_CHARS})) AS ngram_fts
) AS v
WHERE p.project_id = $1 AND p.tenant = $16
RETURNING project_id, kind, row_id, fts, ngram_fts, doc_len, ngram_len
), posted AS ({postings.POSTINGS_OF.format(source="inserted")}
)
SELECT count(*) FROM inserted"""  # noqa: S608 - only constant fragments are interpolated
CHUNK_COLUMNS = ("project_id", "kind", "row_id", "chunk_index", "text", "source_hash")
VECTOR_COLUMNS = (
    "project_id",
    "kind",
    "row_id",
    "chunk_index",
    "model",
    "dimensions",
    "source_hash",
    "state",
    "embedding",
)
# `owned` tells a project of another tenant (0) from documents that are not there. Postings
# and statistics move in the same statement (only for documents the tenant's delete found).
DELETE_DOCUMENTS = f"""
WITH owner AS (
    SELECT project_id FROM projects WHERE project_id = $1 AND tenant = $2
), deleted AS (
    DELETE FROM documents AS d
    USING unnest($3::text[], $4::text[]) AS k(kind, row_id), owner AS o
    WHERE d.project_id = o.project_id AND d.kind = k.kind AND d.row_id = k.row_id
    RETURNING d.project_id, d.kind, d.row_id, d.doc_len, d.ngram_len
), unposted AS ({postings.DELETE_POSTINGS_OF.format(source="deleted")}
), moved AS ({postings.SUBTRACT_STATS}
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM deleted) AS deleted"""  # noqa: S608 - only constant fragments are interpolated
# One row per found document, or one all-NULL row when the tenant's project has none of
# them; no row at all when the project is not the tenant's.
DOCUMENT_HASHES = """
SELECT h.kind, h.row_id, h.content_hash
FROM projects AS p
LEFT JOIN LATERAL (
    SELECT d.kind, d.row_id, d.content_hash
    FROM documents AS d
    JOIN unnest($3::text[], $4::text[]) AS k(kind, row_id)
      ON d.kind = k.kind AND d.row_id = k.row_id
    WHERE d.project_id = $1
) AS h ON true
WHERE p.project_id = $1 AND p.tenant = $2"""
READY_VECTORS = """
SELECT r.source_hash, r.embedding
FROM projects AS p
LEFT JOIN LATERAL (
    SELECT DISTINCT ON (v.source_hash) v.source_hash, v.embedding
    FROM vectors AS v
    JOIN chunks AS c
      ON c.project_id = v.project_id AND c.kind = v.kind AND c.row_id = v.row_id
     AND c.chunk_index = v.chunk_index AND c.source_hash = v.source_hash
    WHERE v.project_id = $1 AND v.model = $3 AND v.dimensions = $4 AND v.state = 'ready'
      AND v.source_hash = ANY($5::text[])
    ORDER BY v.source_hash
) AS r ON true
WHERE p.project_id = $1 AND p.tenant = $2"""


@dataclass
class _Batch:
    """Column arrays of the documents to insert, in first-seen key order."""

    keys: list[DocKey] = field(default_factory=list)
    columns: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(14)])
    chunks: list[tuple[Any, ...]] = field(default_factory=list)
    vectors: list[tuple[Any, ...]] = field(default_factory=list)


def _vector_value(chunk: ChunkInput, identity: EmbeddingIdentity, where: str) -> Vector:
    values = np.asarray(chunk.vector, dtype=np.float32)
    if values.ndim != 1 or values.shape[0] != identity.dimensions:
        raise errors.InvalidArgument.field(
            where,
            f"has {values.size} values, its model {identity.key()} has {identity.dimensions}"
            " dimensions",
        )
    if not np.isfinite(values).all():
        raise errors.InvalidArgument.field(where, "contains NaN or infinite values")
    return Vector(values)


def _chunk_rows(project_id: int, write: DocumentWrite, batch: _Batch) -> None:
    kind, row_id = write.document.key
    for chunk in write.chunks:
        batch.chunks.append(
            (project_id, kind, row_id, chunk.index, clean_text(chunk.text), chunk.source_hash)
        )
        if chunk.identity is None:
            if chunk.vector is not None:
                raise errors.InvalidArgument.field(
                    f"documents[{kind}/{row_id}].chunks[{chunk.index}].vector",
                    "a vector needs its embedding model identity",
                )
            continue
        identity = chunk.identity
        where = f"documents[{kind}/{row_id}].chunks[{chunk.index}].vector"
        vector = None if chunk.vector is None else _vector_value(chunk, identity, where)
        state = "pending" if vector is None else "ready"
        batch.vectors.append(
            (
                project_id,
                kind,
                row_id,
                chunk.index,
                identity.model,
                identity.dimensions,
                chunk.source_hash,
                state,
                vector,
            )
        )


def _batch(project_id: int, writes: Sequence[DocumentWrite]) -> _Batch:
    """The last write of each key, as column arrays plus chunk and vector records."""
    last: dict[DocKey, DocumentWrite] = {}
    for write in writes:
        last[write.document.key] = write
    batch = _Batch()
    for key, write in last.items():
        doc = write.document
        batch.keys.append(key)
        title, path, body, ngrams = (
            clean_text(x) for x in (doc.title, doc.path, doc.body, doc.ngrams)
        )
        values = (
            doc.kind,
            doc.row_id,
            title,
            path,
            body,
            clean_text(doc.category),
            clean_text(doc.note_type),
            metadata_json(doc.metadata),
            utc(doc.created_at),
            utc(doc.updated_at),
            doc.content_hash,
            ngrams,
            content_length(title, path, body),
            ngram_length(ngrams),
        )
        for column, value in zip(batch.columns, values, strict=True):
            column.append(value)
        _chunk_rows(project_id, write, batch)
    return batch


def _outcomes(writes: Sequence[DocumentWrite], existed: set[DocKey]) -> list[Outcome]:
    seen = set(existed)
    outcomes: list[Outcome] = []
    for write in writes:
        key = write.document.key
        outcomes.append(Outcome.UPDATED if key in seen else Outcome.CREATED)
        seen.add(key)
    return outcomes


async def write_documents(
    conn: Conn, tenant: str, project_id: int, writes: Sequence[DocumentWrite]
) -> list[Outcome]:
    """Replace each document (row, chunks, vectors); call inside a transaction.

    The lock, delete and insert statements each check the tenant; chunks and vectors are
    copied only under documents the tenant-checked insert has just written (their foreign
    keys point at those rows, in this transaction).
    """
    if not writes:
        return []
    batch = _batch(project_id, writes)
    kinds = [key[0] for key in batch.keys]
    row_ids = [key[1] for key in batch.keys]
    locked = await conn.fetch(LOCK_DOCUMENTS, str(project_id), kinds, row_ids, project_id, tenant)
    if not locked:
        raise project_not_found(project_id)
    old = await conn.fetch(DELETE_DOCUMENTS_RETURNING, project_id, kinds, row_ids, tenant)
    created_before: dict[DocKey, datetime] = {
        (r["kind"], r["row_id"]): r["created_at"] for r in old
    }
    created_column = batch.columns[8]
    for position, key in enumerate(batch.keys):
        if created_column[position] is None and key in created_before:
            created_column[position] = created_before[key]
    try:
        inserted = await conn.fetchval(INSERT_DOCUMENTS, project_id, *batch.columns, tenant)
    except asyncpg.ForeignKeyViolationError as exc:
        raise project_not_found(project_id) from exc
    if inserted != len(batch.keys):  # the project changed hands or went away meanwhile
        raise project_not_found(project_id)
    if batch.chunks:
        await conn.copy_records("chunks", CHUNK_COLUMNS, batch.chunks)
    if batch.vectors:
        await conn.copy_records("vectors", VECTOR_COLUMNS, batch.vectors)
    await _move_stats(conn, (tenant, project_id), batch, old)
    return _outcomes(writes, set(created_before))


async def _move_stats(
    conn: Conn, project: tuple[str, int], batch: _Batch, old: Sequence[Any]
) -> None:
    """lexical_stats by what the batch changed, and the project's generation, which every
    batch moves: besides vectors, the in-process postings (lexical_cache.py) are checked
    against it, and a rewritten document changes its postings even when no statistic
    moves."""
    change = (
        len(batch.keys) - len(old),
        sum(batch.columns[12]) - sum(r["doc_len"] for r in old),
        sum(batch.columns[13]) - sum(r["ngram_len"] for r in old),
        len(batch.chunks) - sum(r["chunk_count"] for r in old),
    )
    tenant, project_id = project
    await conn.execute(postings.ADD_STATS, project_id, *change, tenant)


async def delete_documents(conn: Conn, tenant: str, project_id: int, keys: Sequence[DocKey]) -> int:
    """Delete documents with their chunks and vectors; returns how many existed.

    NotFound when the project is not the tenant's (the same statement decides).
    """
    unique = list(dict.fromkeys(keys))
    row = await conn.fetchrow(
        DELETE_DOCUMENTS, project_id, tenant, [k[0] for k in unique], [k[1] for k in unique]
    )
    if not row["owned"]:
        raise project_not_found(project_id)
    return int(row["deleted"])


async def document_hashes(
    conn: Conn, tenant: str, project_id: int, keys: Sequence[DocKey]
) -> dict[DocKey, str]:
    """Stored content hashes of the given documents; NotFound for another tenant's project."""
    rows = await conn.fetch(
        DOCUMENT_HASHES, project_id, tenant, [k[0] for k in keys], [k[1] for k in keys]
    )
    if not rows:
        raise project_not_found(project_id)
    return {(r["kind"], r["row_id"]): r["content_hash"] for r in rows if r["kind"] is not None}


async def ready_vectors(
    conn: Conn,
    tenant: str,
    project_id: int,
    source_hashes: Sequence[str],
    identity: EmbeddingIdentity,
) -> dict[str, list[float]]:
    """Ready, current vectors of `identity` in the project, by chunk source hash."""
    rows = await conn.fetch(
        READY_VECTORS,
        project_id,
        tenant,
        identity.model,
        identity.dimensions,
        list(set(source_hashes)),
    )
    if not rows:
        raise project_not_found(project_id)
    return {
        r["source_hash"]: r["embedding"].to_list() for r in rows if r["source_hash"] is not None
    }
