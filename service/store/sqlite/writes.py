"""Write path: projects and documents with their chunks and vectors (writer thread only)."""

from __future__ import annotations

from typing import Any

import apsw

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.store.base import (
    ChunkInput,
    DocKey,
    DocumentWrite,
    Outcome,
    ProjectRecord,
    project_not_found,
)
from service.store.lengths import content_length, ngram_length
from service.store.sqlite import postings
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
# Every statement keyed by a project id carries the tenant and checks it itself (issue #8):
# there is no separate ownership query, and a statement that finds the project is not the
# tenant's touches nothing (the caller then raises the NotFound of an id that exists nowhere).
OWNED = "EXISTS (SELECT 1 FROM projects WHERE project_id = :project_id AND tenant = :tenant)"
SELECT_OWNED = "SELECT 1 FROM projects WHERE project_id = :project_id AND tenant = :tenant"
# No row: not the tenant's project. Otherwise the project's document count.
OWNED_PROJECT_DOCUMENTS = """
SELECT count(d.id) FROM projects AS p
LEFT JOIN documents AS d ON d.project_id = p.project_id
WHERE p.project_id = :project_id AND p.tenant = :tenant
GROUP BY p.project_id
"""
DELETE_PROJECT_VEC = f"""
DELETE FROM vec_chunks
WHERE chunk_id IN (SELECT id FROM chunks WHERE project_id = :project_id) AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_PROJECT_FTS = f"""
DELETE FROM docs_fts
WHERE rowid IN (SELECT id FROM documents WHERE project_id = :project_id) AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
# The projects row goes last, so the guard of the statements before it still holds.
DELETE_PROJECT_ROWS = (
    f"DELETE FROM vectors WHERE project_id = :project_id AND {OWNED}",  # noqa: S608
    f"DELETE FROM chunks WHERE project_id = :project_id AND {OWNED}",  # noqa: S608
    f"DELETE FROM documents WHERE project_id = :project_id AND {OWNED}",  # noqa: S608
    "DELETE FROM projects WHERE project_id = :project_id AND tenant = :tenant",
)

# No row: not the tenant's project; (NULL, NULL): the document is not there.
SELECT_DOCUMENT = """
SELECT d.id, d.created_at, d.doc_len, d.ngram_len FROM projects AS p
LEFT JOIN documents AS d
  ON d.project_id = p.project_id AND d.kind = :kind AND d.row_id = :row_id
WHERE p.project_id = :project_id AND p.tenant = :tenant
"""
INSERT_DOCUMENT = """
INSERT INTO documents (
    project_id, kind, row_id, title, path, body, category, note_type, note_type_key,
    metadata, created_at, updated_at, content_hash, doc_len, ngram_len
)
SELECT p.project_id, :kind, :row_id, :title, :path, :body, :category, :note_type,
       :note_type_key, :metadata, :created_at, :updated_at, :content_hash, :doc_len, :ngram_len
FROM projects AS p WHERE p.project_id = :project_id AND p.tenant = :tenant
"""
UPDATE_DOCUMENT = f"""
UPDATE documents SET title = :title, path = :path, body = :body, category = :category,
    note_type = :note_type, note_type_key = :note_type_key, metadata = :metadata,
    created_at = :created_at, updated_at = :updated_at, content_hash = :content_hash,
    doc_len = :doc_len, ngram_len = :ngram_len
WHERE id = :doc_id AND project_id = :project_id AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_DOCUMENT = f"""
DELETE FROM documents WHERE id = :doc_id AND project_id = :project_id AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_DOCUMENT_VEC = f"""
DELETE FROM vec_chunks WHERE chunk_id IN (
    SELECT id FROM chunks WHERE project_id = :project_id AND document_id = :doc_id
) AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_DOCUMENT_VECTORS = f"""
DELETE FROM vectors WHERE chunk_id IN (
    SELECT id FROM chunks WHERE project_id = :project_id AND document_id = :doc_id
) AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_DOCUMENT_CHUNKS = f"""
DELETE FROM chunks WHERE project_id = :project_id AND document_id = :doc_id AND {OWNED}
"""  # noqa: S608 - only constant fragments are interpolated
DELETE_DOCUMENT_FTS = f"DELETE FROM docs_fts WHERE rowid = :doc_id AND {OWNED}"  # noqa: S608
INSERT_FTS = f"""
INSERT INTO docs_fts (rowid, content, ngrams) SELECT :doc_id, :content, :ngrams WHERE {OWNED}
"""
INSERT_CHUNK = f"""
INSERT INTO chunks (project_id, document_id, chunk_index, text, source_hash)
SELECT :project_id, :doc_id, :chunk_index, :text, :source_hash WHERE {OWNED}
"""
INSERT_VECTOR = f"""
INSERT INTO vectors (chunk_id, project_id, model, dimensions, source_hash, state, embedding)
SELECT :chunk_id, :project_id, :model, :dimensions, :source_hash, :state, :embedding
WHERE {OWNED}
"""
INSERT_VEC = f"""
INSERT INTO vec_chunks (chunk_id, project_id, embedding)
SELECT :chunk_id, :project_id, :embedding WHERE {OWNED}
"""

Owner = dict[str, Any]  # the :project_id and :tenant bindings every guarded statement takes


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
    owner: Owner = {"project_id": project_id, "tenant": tenant}
    with immediate(conn):
        row = conn.execute(OWNED_PROJECT_DOCUMENTS, owner).fetchone()
        if row is None:
            return None
        if index.usable:
            conn.execute(DELETE_PROJECT_VEC, owner)
        conn.execute(DELETE_PROJECT_FTS, owner)
        postings.remove_project(conn, owner)
        for statement in DELETE_PROJECT_ROWS:
            conn.execute(statement, owner)
    return int(row[0])


def write_documents(
    conn: apsw.Connection,
    tenant: str,
    project_id: int,
    writes: list[DocumentWrite],
    index: VectorIndex,
) -> list[Outcome]:
    """Replace each document with its chunks and vectors, all in one transaction.

    NotFound (the transaction rolls back, nothing written) when the project is not the
    tenant's: the first document's lookup already finds no project row.
    """
    for write in writes:
        _check_vectors(write)
    now = now_micros()
    owner: Owner = {"project_id": project_id, "tenant": tenant}
    with immediate(conn):
        batch = postings.Batch(conn, owner)
        outcomes = [_write_one(conn, owner, write, index, now, batch) for write in writes]
        batch.flush()
        return outcomes


def delete_documents(
    conn: apsw.Connection, tenant: str, project_id: int, keys: list[DocKey], index: VectorIndex
) -> int:
    """Delete documents with their chunks and vectors; returns how many existed.

    NotFound when the project is not the tenant's (also for an empty key list).
    """
    owner: Owner = {"project_id": project_id, "tenant": tenant}
    deleted = 0
    with immediate(conn):  # the first document's lookup checks the tenant
        if not keys and conn.execute(SELECT_OWNED, owner).fetchone() is None:
            raise project_not_found(project_id)
        batch = postings.Batch(conn, owner)
        for kind, row_id in dict.fromkeys(keys):
            doc_id, _, lengths = _find(conn, owner, kind, row_id)
            if doc_id is None:
                continue
            _delete_parts(conn, owner, doc_id, index)
            batch.remove(doc_id, lengths)
            conn.execute(DELETE_DOCUMENT, {**owner, "doc_id": doc_id})
            deleted += 1
    return deleted


def _find(
    conn: apsw.Connection, owner: Owner, kind: str, row_id: str
) -> tuple[int | None, int, tuple[int, int]]:
    """The document's id, creation time and stored BM25 lengths ((None, 0, (0, 0)) when
    absent); NotFound: not owned."""
    row = conn.execute(SELECT_DOCUMENT, {**owner, "kind": kind, "row_id": row_id}).fetchone()
    if row is None:
        raise project_not_found(int(owner["project_id"]))
    return row[0], row[1] or 0, (row[2] or 0, row[3] or 0)


def _insert(conn: apsw.Connection, sql: str, bindings: Owner) -> int:
    """Run a guarded insert; its rowid. NotFound when the guard let nothing through."""
    conn.execute(sql, bindings)
    if conn.changes() != 1:
        raise project_not_found(int(bindings["project_id"]))
    return conn.last_insert_rowid()


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


def _delete_parts(conn: apsw.Connection, owner: Owner, doc_id: int, index: VectorIndex) -> None:
    bindings = {**owner, "doc_id": doc_id}
    if index.usable:
        conn.execute(DELETE_DOCUMENT_VEC, bindings)
    conn.execute(DELETE_DOCUMENT_VECTORS, bindings)
    conn.execute(DELETE_DOCUMENT_CHUNKS, bindings)
    conn.execute(DELETE_DOCUMENT_FTS, bindings)


def _write_one(
    conn: apsw.Connection,
    owner: Owner,
    write: DocumentWrite,
    index: VectorIndex,
    now: int,
    batch: postings.Batch,
) -> Outcome:
    doc = write.document
    doc_id, stored_created, stored_lengths = _find(conn, owner, doc.kind, doc.row_id)
    lengths = (content_length(doc.title, doc.path, doc.body), ngram_length(doc.ngrams))
    fields: Owner = {
        **owner,
        "title": doc.title,
        "path": doc.path,
        "body": doc.body,
        "category": doc.category,
        "note_type": doc.note_type,
        "note_type_key": doc.note_type.lower(),
        "metadata": dump_json(dict(doc.metadata)),
        "updated_at": to_micros(doc.updated_at) if doc.updated_at else now,
        "content_hash": doc.content_hash,
        "doc_len": lengths[0],
        "ngram_len": lengths[1],
    }
    if doc_id is None:
        created = to_micros(doc.created_at) if doc.created_at else now
        bindings = {**fields, "kind": doc.kind, "row_id": doc.row_id, "created_at": created}
        doc_id, outcome = _insert(conn, INSERT_DOCUMENT, bindings), Outcome.CREATED
    else:
        outcome = Outcome.UPDATED
        # A re-sent document without a creation time keeps the one it was created with.
        created = to_micros(doc.created_at) if doc.created_at else stored_created
        _delete_parts(conn, owner, doc_id, index)
        batch.remove(doc_id, stored_lengths)
        _insert(conn, UPDATE_DOCUMENT, {**fields, "created_at": created, "doc_id": doc_id})
    content = postings.indexed_content(doc.title, doc.path, doc.body)
    conn.execute(INSERT_FTS, {**owner, "doc_id": doc_id, "content": content, "ngrams": doc.ngrams})
    batch.add(doc_id, (content, doc.ngrams), lengths)
    for chunk in write.chunks:
        chunk_id = _insert(
            conn,
            INSERT_CHUNK,
            {
                **owner,
                "doc_id": doc_id,
                "chunk_index": chunk.index,
                "text": chunk.text,
                "source_hash": chunk.source_hash,
            },
        )
        _write_vector(conn, owner, chunk_id, chunk, index)
    return outcome


def _write_vector(
    conn: apsw.Connection, owner: Owner, chunk_id: int, chunk: ChunkInput, index: VectorIndex
) -> None:
    identity: EmbeddingIdentity | None = chunk.identity
    if identity is None:
        return  # no vector and no identity: the chunk simply needs embedding
    blob = vector_blob(chunk.vector) if chunk.vector is not None else None
    bindings: Owner = {
        **owner,
        "chunk_id": chunk_id,
        "model": identity.model,
        "dimensions": identity.dimensions,
        "source_hash": chunk.source_hash,
        "state": "ready" if blob is not None else "pending",
        "embedding": blob,
    }
    _insert(conn, INSERT_VECTOR, bindings)
    if blob is not None and index.usable and identity == index.identity:
        conn.execute(INSERT_VEC, bindings)
