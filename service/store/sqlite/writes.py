"""Write path: projects and documents with their chunks and vectors (writer thread only)."""

from __future__ import annotations

import apsw

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.store.base import ChunkInput, DocKey, DocumentWrite, Outcome, ProjectRecord
from service.store.sqlite.schema import VectorIndex
from service.store.sqlite.values import (
    dump_json,
    from_micros,
    immediate,
    now_micros,
    to_micros,
    vector_blob,
)

INSERT_PROJECT = """
INSERT INTO projects (tenant, external_id, name, created_at) VALUES (?, ?, ?, ?)
"""
SELECT_OWNED_PROJECT = "SELECT 1 FROM projects WHERE project_id = ? AND tenant = ?"
SELECT_PROJECT_EXISTS = "SELECT 1 FROM projects WHERE project_id = ?"
PROJECT_DOCUMENTS = "SELECT id FROM documents WHERE project_id = ?"
DELETE_PROJECT_VEC = """
DELETE FROM vec_chunks WHERE chunk_id IN (SELECT id FROM chunks WHERE project_id = ?)
"""
DELETE_PROJECT_FTS = """
DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM documents WHERE project_id = ?)
"""
DELETE_PROJECT_ROWS = (
    "DELETE FROM vectors WHERE project_id = ?",
    "DELETE FROM chunks WHERE project_id = ?",
    "DELETE FROM documents WHERE project_id = ?",
    "DELETE FROM projects WHERE project_id = ?",
)

SELECT_DOCUMENT = """
SELECT id, created_at FROM documents WHERE project_id = ? AND kind = ? AND row_id = ?
"""
INSERT_DOCUMENT = """
INSERT INTO documents (
    project_id, kind, row_id, title, path, body, category, note_type, note_type_key,
    metadata, created_at, updated_at, content_hash
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
UPDATE_DOCUMENT = """
UPDATE documents SET title = ?, path = ?, body = ?, category = ?, note_type = ?,
    note_type_key = ?, metadata = ?, created_at = ?, updated_at = ?, content_hash = ?
WHERE id = ?
"""
DELETE_DOCUMENT = "DELETE FROM documents WHERE id = ?"
DELETE_DOCUMENT_VEC = """
DELETE FROM vec_chunks WHERE chunk_id IN (
    SELECT id FROM chunks WHERE project_id = ? AND document_id = ?
)
"""
DELETE_DOCUMENT_VECTORS = """
DELETE FROM vectors WHERE chunk_id IN (
    SELECT id FROM chunks WHERE project_id = ? AND document_id = ?
)
"""
DELETE_DOCUMENT_CHUNKS = "DELETE FROM chunks WHERE project_id = ? AND document_id = ?"
DELETE_DOCUMENT_FTS = "DELETE FROM docs_fts WHERE rowid = ?"
INSERT_FTS = "INSERT INTO docs_fts (rowid, content, ngrams) VALUES (?, ?, ?)"
INSERT_CHUNK = """
INSERT INTO chunks (project_id, document_id, chunk_index, text, source_hash)
VALUES (?, ?, ?, ?, ?)
"""
INSERT_VECTOR = """
INSERT INTO vectors (chunk_id, project_id, model, dimensions, source_hash, state, embedding)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
INSERT_VEC = "INSERT INTO vec_chunks (chunk_id, project_id, embedding) VALUES (?, ?, ?)"


def create_project(
    conn: apsw.Connection, tenant: str, external_id: str, name: str
) -> ProjectRecord:
    """Insert a project; AlreadyExists when the tenant already uses `external_id`."""
    created = now_micros()
    try:
        with immediate(conn):
            conn.execute(INSERT_PROJECT, (tenant, external_id, name, created))
            project_id = conn.last_insert_rowid()
    except apsw.ConstraintError as exc:
        raise errors.AlreadyExists(
            f"project with external id {external_id!r} already exists",
            reason="PROJECT_ALREADY_EXISTS",
            metadata={"externalId": external_id},
        ) from exc
    return ProjectRecord(project_id, tenant, external_id, name, from_micros(created))


def delete_project(
    conn: apsw.Connection, tenant: str, project_id: int, index: VectorIndex
) -> int | None:
    """Delete a tenant's project and everything in it; None when it is not the tenant's."""
    with immediate(conn):
        if conn.execute(SELECT_OWNED_PROJECT, (project_id, tenant)).fetchone() is None:
            return None
        count = len(conn.execute(PROJECT_DOCUMENTS, (project_id,)).fetchall())
        if index.usable:
            conn.execute(DELETE_PROJECT_VEC, (project_id,))
        conn.execute(DELETE_PROJECT_FTS, (project_id,))
        for statement in DELETE_PROJECT_ROWS:
            conn.execute(statement, (project_id,))
    return count


def write_documents(
    conn: apsw.Connection, project_id: int, writes: list[DocumentWrite], index: VectorIndex
) -> list[Outcome]:
    """Replace each document with its chunks and vectors, all in one transaction."""
    for write in writes:
        _check_vectors(write)
    now = now_micros()
    with immediate(conn):
        if conn.execute(SELECT_PROJECT_EXISTS, (project_id,)).fetchone() is None:
            raise errors.NotFound(f"project {project_id} not found", reason="PROJECT_NOT_FOUND")
        return [_write_one(conn, project_id, write, index, now) for write in writes]


def delete_documents(
    conn: apsw.Connection, project_id: int, keys: list[DocKey], index: VectorIndex
) -> int:
    """Delete documents with their chunks and vectors; returns how many existed."""
    deleted = 0
    with immediate(conn):
        for kind, row_id in dict.fromkeys(keys):
            row = conn.execute(SELECT_DOCUMENT, (project_id, kind, row_id)).fetchone()
            if row is None:
                continue
            _delete_parts(conn, project_id, row[0], index)
            conn.execute(DELETE_DOCUMENT, (row[0],))
            deleted += 1
    return deleted


def _check_vectors(write: DocumentWrite) -> None:
    for chunk in write.chunks:
        if chunk.vector is None:
            continue
        if chunk.identity is None:
            raise errors.InvalidArgument.field(
                "supplied_vectors.identity", "a vector needs its embedding identity"
            )
        if len(chunk.vector) != chunk.identity.dimensions:
            raise errors.InvalidArgument.field(
                "supplied_vectors.chunks.vector",
                f"length must be {chunk.identity.dimensions}, got {len(chunk.vector)}",
            )


def _delete_parts(conn: apsw.Connection, project_id: int, doc_id: int, index: VectorIndex) -> None:
    if index.usable:
        conn.execute(DELETE_DOCUMENT_VEC, (project_id, doc_id))
    conn.execute(DELETE_DOCUMENT_VECTORS, (project_id, doc_id))
    conn.execute(DELETE_DOCUMENT_CHUNKS, (project_id, doc_id))
    conn.execute(DELETE_DOCUMENT_FTS, (doc_id,))


def _write_one(
    conn: apsw.Connection, project_id: int, write: DocumentWrite, index: VectorIndex, now: int
) -> Outcome:
    doc = write.document
    row = conn.execute(SELECT_DOCUMENT, (project_id, doc.kind, doc.row_id)).fetchone()
    updated = to_micros(doc.updated_at) if doc.updated_at else now
    fields = (
        doc.title,
        doc.path,
        doc.body,
        doc.category,
        doc.note_type,
        doc.note_type.lower(),
        dump_json(dict(doc.metadata)),
    )
    if row is None:
        created = to_micros(doc.created_at) if doc.created_at else now
        conn.execute(
            INSERT_DOCUMENT,
            (project_id, doc.kind, doc.row_id, *fields, created, updated, doc.content_hash),
        )
        doc_id, outcome = conn.last_insert_rowid(), Outcome.CREATED
    else:
        doc_id, outcome = row[0], Outcome.UPDATED
        # A re-sent document without a creation time keeps the one it was created with.
        created = to_micros(doc.created_at) if doc.created_at else row[1]
        _delete_parts(conn, project_id, doc_id, index)
        conn.execute(UPDATE_DOCUMENT, (*fields, created, updated, doc.content_hash, doc_id))
    conn.execute(INSERT_FTS, (doc_id, f"{doc.title}\n{doc.path}\n{doc.body}", doc.ngrams))
    for chunk in write.chunks:
        conn.execute(INSERT_CHUNK, (project_id, doc_id, chunk.index, chunk.text, chunk.source_hash))
        _write_vector(conn, project_id, conn.last_insert_rowid(), chunk, index)
    return outcome


def _write_vector(
    conn: apsw.Connection, project_id: int, chunk_id: int, chunk: ChunkInput, index: VectorIndex
) -> None:
    identity: EmbeddingIdentity | None = chunk.identity
    if identity is None:
        return  # no vector and no identity: the chunk simply needs embedding
    blob = vector_blob(chunk.vector) if chunk.vector is not None else None
    state = "ready" if blob is not None else "pending"
    conn.execute(
        INSERT_VECTOR,
        (chunk_id, project_id, identity.model, identity.dimensions, chunk.source_hash, state, blob),
    )
    if blob is not None and index.usable and identity == index.identity:
        conn.execute(INSERT_VEC, (chunk_id, project_id, blob))
