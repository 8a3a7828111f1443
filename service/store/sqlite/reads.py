"""Read path outside search: projects, stored hashes, reusable vectors, index status."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

import apsw

from service.embeddings.base import EmbeddingIdentity
from service.store.base import (
    DocKey,
    EmbeddingCounts,
    ProjectRecord,
    ProjectStatus,
    project_not_found,
)
from service.store.sqlite.values import blob_vector, from_micros

LIST_PROJECTS = """
SELECT project_id, tenant, external_id, name, created_at FROM projects
WHERE tenant = ? AND project_id > ? ORDER BY project_id LIMIT ?
"""
GET_PROJECTS = """
SELECT project_id, tenant, external_id, name, created_at FROM projects
WHERE tenant = ? AND project_id IN (SELECT value FROM json_each(?)) ORDER BY project_id
"""
ALL_PROJECTS = """
SELECT project_id, tenant, external_id, name, created_at FROM projects
WHERE tenant = ? ORDER BY project_id
"""
# Each statement keyed by a project id carries the tenant (issue #8). The two lookups of
# the write path start from the tenant's project row: no row at all means the project is not
# the tenant's, one all-NULL row that the tenant's project has none of the keys.
DOCUMENT_HASHES = """
SELECT h.kind, h.row_id, h.content_hash
FROM projects AS p
LEFT JOIN (
    SELECT d.project_id, d.kind, d.row_id, d.content_hash
    FROM json_each(:keys) AS k
    -- CROSS JOIN keeps the keys as the outer loop (SQLite never reorders it), so each key is
    -- one lookup in the (project_id, kind, row_id) index: O(batch), not O(project x batch).
    CROSS JOIN documents AS d
      ON d.project_id = :project_id AND d.kind = k.value ->> 0 AND d.row_id = k.value ->> 1
) AS h ON h.project_id = p.project_id
WHERE p.project_id = :project_id AND p.tenant = :tenant
"""
READY_VECTORS = """
SELECT r.source_hash, r.embedding
FROM projects AS p
LEFT JOIN (
    SELECT c.project_id, c.source_hash, v.embedding
    FROM chunks AS c JOIN vectors AS v ON v.chunk_id = c.id
    WHERE c.project_id = :project_id
      AND c.source_hash IN (SELECT value FROM json_each(:hashes))
      AND v.state = 'ready' AND v.model = :model AND v.dimensions = :dimensions
      AND v.source_hash = c.source_hash
) AS r ON r.project_id = p.project_id
WHERE p.project_id = :project_id AND p.tenant = :tenant
"""
DOCUMENT_AND_CHUNK_COUNTS = """
SELECT p.project_id,
       (SELECT COUNT(*) FROM documents AS d WHERE d.project_id = p.project_id),
       (SELECT COUNT(*) FROM chunks AS c WHERE c.project_id = p.project_id)
FROM projects AS p
WHERE p.tenant = ? AND p.project_id IN (SELECT value FROM json_each(?))
"""
# Ready = the statement search uses: state ready and the vector's source hash is the chunk's.
VECTOR_COUNTS = """
SELECT v.project_id, v.model, v.dimensions,
       SUM(v.state = 'ready' AND v.source_hash = c.source_hash),
       SUM(NOT (v.state = 'ready' AND v.source_hash = c.source_hash))
FROM vectors AS v
JOIN chunks AS c ON c.id = v.chunk_id
JOIN projects AS p ON p.project_id = v.project_id AND p.tenant = ?
WHERE v.project_id IN (SELECT value FROM json_each(?))
GROUP BY v.project_id, v.model, v.dimensions
"""

# Every tenant: the metrics' index backlog (chunks minus ready, current vectors).
PENDING_CHUNKS = """
SELECT (SELECT COUNT(*) FROM chunks)
     - (SELECT COUNT(*) FROM vectors AS v JOIN chunks AS c ON c.id = v.chunk_id
        WHERE v.model = ? AND v.dimensions = ? AND v.state = 'ready'
          AND v.source_hash = c.source_hash)
"""

ProjectRow = tuple[int, str, str, str, int]


def project_record(row: ProjectRow) -> ProjectRecord:
    """A project row as a record."""
    return ProjectRecord(row[0], row[1], row[2], row[3], from_micros(row[4]))


def list_projects(
    conn: apsw.Connection, tenant: str, after_id: int, limit: int
) -> list[ProjectRecord]:
    """Projects of `tenant` with id > after_id, by id."""
    return [project_record(r) for r in conn.execute(LIST_PROJECTS, (tenant, after_id, limit))]


def get_projects(conn: apsw.Connection, tenant: str, ids: Sequence[int]) -> list[ProjectRecord]:
    """The subset of `ids` owned by `tenant`, by id."""
    rows = conn.execute(GET_PROJECTS, (tenant, json.dumps([int(i) for i in ids])))
    return [project_record(r) for r in rows]


def document_hashes(
    conn: apsw.Connection, tenant: str, project_id: int, keys: Sequence[DocKey]
) -> dict[DocKey, str]:
    """Stored content hashes of the given documents; NotFound for another tenant's project."""
    bindings = {
        "keys": json.dumps([list(k) for k in keys]),
        "project_id": project_id,
        "tenant": tenant,
    }
    found = conn.execute(DOCUMENT_HASHES, bindings).fetchall()
    rows = cast(list[tuple[str | None, str, str]], found)
    if not rows:
        raise project_not_found(project_id)
    return {(kind, row_id): digest for kind, row_id, digest in rows if kind is not None}


def ready_vectors(
    conn: apsw.Connection,
    tenant: str,
    project_id: int,
    hashes: Sequence[str],
    identity: EmbeddingIdentity,
) -> dict[str, list[float]]:
    """Ready, current vectors of `identity` for these chunk texts (NotFound: not owned)."""
    bindings = {
        "project_id": project_id,
        "tenant": tenant,
        "hashes": json.dumps(list(hashes)),
        "model": identity.model,
        "dimensions": identity.dimensions,
    }
    rows = cast(list[tuple[str | None, bytes]], conn.execute(READY_VECTORS, bindings).fetchall())
    if not rows:
        raise project_not_found(project_id)
    return {h: blob_vector(blob) for h, blob in rows if h is not None}


def index_status(
    conn: apsw.Connection,
    tenant: str,
    project_ids: Sequence[int],
    identity: EmbeddingIdentity | None,
) -> list[ProjectStatus]:
    """Documents, chunks and vectors per identity of the tenant's selected projects."""
    if project_ids:
        projects = get_projects(conn, tenant, project_ids)
    else:
        projects = [project_record(r) for r in conn.execute(ALL_PROJECTS, (tenant,))]
    ids = json.dumps([p.project_id for p in projects])
    counts = {
        pid: (docs, chunks)
        for pid, docs, chunks in conn.execute(DOCUMENT_AND_CHUNK_COUNTS, (tenant, ids))
    }
    vectors: dict[int, dict[EmbeddingIdentity, tuple[int, int]]] = {}
    for pid, model, dims, ready, pending in conn.execute(VECTOR_COUNTS, (tenant, ids)):
        vectors.setdefault(pid, {})[EmbeddingIdentity(model, dims)] = (ready, pending)
    return [
        _status(p, *counts.get(p.project_id, (0, 0)), vectors.get(p.project_id, {}), identity)
        for p in projects
    ]


def _status(
    project: ProjectRecord,
    documents: int,
    chunks: int,
    vectors: dict[EmbeddingIdentity, tuple[int, int]],
    identity: EmbeddingIdentity | None,
) -> ProjectStatus:
    embeddings = []
    needing = 0
    if identity is not None:
        ready = vectors.get(identity, (0, 0))[0]
        # For the configured identity every chunk without a ready vector is pending.
        embeddings.append(EmbeddingCounts(identity, ready, chunks - ready))
        needing = chunks - ready
    others = sorted((i for i in vectors if i != identity), key=lambda i: (i.model, i.dimensions))
    embeddings.extend(EmbeddingCounts(i, *vectors[i]) for i in others)
    return ProjectStatus(project, documents, chunks, tuple(embeddings), needing)


def pending_chunks(conn: apsw.Connection, identity: EmbeddingIdentity) -> int:
    """Chunks of every tenant without a ready vector of `identity`."""
    row = conn.execute(PENDING_CHUNKS, (identity.model, identity.dimensions)).fetchone()
    return int(row[0]) if row is not None else 0
