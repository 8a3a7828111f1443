"""Projects and index status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.store.base import EmbeddingCounts, ProjectRecord, ProjectStatus
from service.store.postgres import postings
from service.store.postgres.codecs import clean_text
from service.store.postgres.pool import Conn

PROJECT_COLUMNS = "project_id, tenant, external_id, name, created_at"
CREATE_PROJECT = f"""
INSERT INTO projects (tenant, external_id, name) VALUES ($1, $2, $3)
RETURNING {PROJECT_COLUMNS}"""  # noqa: S608 - only constant fragments are interpolated
LIST_PROJECTS = f"""
SELECT {PROJECT_COLUMNS} FROM projects
WHERE tenant = $1 AND project_id > $2
ORDER BY project_id
LIMIT $3"""  # noqa: S608 - only constant fragments are interpolated
GET_PROJECTS = f"""
SELECT {PROJECT_COLUMNS} FROM projects
WHERE tenant = $1 AND project_id = ANY($2::bigint[])
ORDER BY project_id"""  # noqa: S608 - only constant fragments are interpolated
# The count reads the snapshot from before the delete (data-modifying CTE semantics), and
# only documents of the project the tenant-checked delete removed.
# Taken first: the project's in-flight upserts (which hold it FOR KEY SHARE) finish and new
# ones wait, so the cascade below does not meet them half-way.
LOCK_PROJECT = "SELECT 1 FROM projects WHERE tenant = $1 AND project_id = $2 FOR UPDATE"
# Postings have no foreign key (see migrations): they go here, statistics by cascade.
DELETE_PROJECT = f"""
WITH deleted AS (
    DELETE FROM projects WHERE tenant = $1 AND project_id = $2 RETURNING project_id
), unposted AS ({postings.DELETE_PROJECT_POSTINGS}
)
SELECT EXISTS (SELECT 1 FROM deleted) AS found,
       (SELECT count(*) FROM documents AS d
        WHERE d.project_id = $2 AND d.project_id IN (SELECT project_id FROM deleted))
           AS documents"""  # noqa: S608 - only constant fragments are interpolated
STATUS_PROJECTS = f"""
SELECT {PROJECT_COLUMNS},
       (SELECT count(*) FROM documents AS d WHERE d.project_id = p.project_id) AS documents,
       (SELECT count(*) FROM chunks AS c WHERE c.project_id = p.project_id) AS chunks
FROM projects AS p
WHERE p.tenant = $1 AND (cardinality($2::bigint[]) = 0 OR p.project_id = ANY($2::bigint[]))
ORDER BY p.project_id"""  # noqa: S608 - only constant fragments are interpolated
# Ready means what search uses: state ready and the vector's source hash is its chunk's.
STATUS_EMBEDDINGS = """
SELECT v.project_id, v.model, v.dimensions,
       count(*) FILTER (WHERE v.state = 'ready' AND v.source_hash = c.source_hash) AS ready,
       count(*) FILTER (WHERE NOT (v.state = 'ready' AND v.source_hash = c.source_hash))
           AS pending
FROM vectors AS v
JOIN chunks AS c
  ON c.project_id = v.project_id AND c.kind = v.kind AND c.row_id = v.row_id
 AND c.chunk_index = v.chunk_index
JOIN projects AS p ON p.project_id = v.project_id AND p.tenant = $1
WHERE v.project_id = ANY($2::bigint[])
GROUP BY v.project_id, v.model, v.dimensions"""

# Every tenant: the metrics' index backlog (chunks minus ready, current vectors).
PENDING_CHUNKS = """
SELECT (SELECT count(*) FROM chunks)
     - (SELECT count(*) FROM vectors AS v
        JOIN chunks AS c
          ON c.project_id = v.project_id AND c.kind = v.kind AND c.row_id = v.row_id
         AND c.chunk_index = v.chunk_index
        WHERE v.model = $1 AND v.dimensions = $2 AND v.state = 'ready'
          AND v.source_hash = c.source_hash)"""


def project_record(row: Any) -> ProjectRecord:
    """A ProjectRecord from a row with PROJECT_COLUMNS."""
    return ProjectRecord(
        project_id=row["project_id"],
        tenant=row["tenant"],
        external_id=row["external_id"],
        name=row["name"],
        created_at=row["created_at"],
    )


async def create_project(conn: Conn, tenant: str, external_id: str, name: str) -> ProjectRecord:
    """Insert a project; AlreadyExists when the tenant already uses the external id."""
    try:
        row = await conn.fetchrow(
            CREATE_PROJECT, clean_text(tenant), clean_text(external_id), clean_text(name)
        )
    except asyncpg.UniqueViolationError as exc:
        raise errors.AlreadyExists(
            f"project with external id {external_id!r} already exists",
            reason="PROJECT_ALREADY_EXISTS",
            metadata={"externalId": external_id},
        ) from exc
    return project_record(row)


async def list_projects(conn: Conn, tenant: str, after_id: int, limit: int) -> list[ProjectRecord]:
    """Projects of the tenant after `after_id`, by id."""
    rows = await conn.fetch(LIST_PROJECTS, tenant, after_id, limit)
    return [project_record(row) for row in rows]


async def get_projects(conn: Conn, tenant: str, project_ids: Sequence[int]) -> list[ProjectRecord]:
    """The tenant's projects among the ids."""
    if not project_ids:
        return []
    rows = await conn.fetch(GET_PROJECTS, tenant, list(project_ids))
    return [project_record(row) for row in rows]


async def delete_project(conn: Conn, tenant: str, project_id: int) -> int | None:
    """Delete a project with its documents; their number, or None when not found."""
    if await conn.fetchval(LOCK_PROJECT, tenant, project_id) is None:
        return None
    row = await conn.fetchrow(DELETE_PROJECT, tenant, project_id)
    return int(row["documents"]) if row["found"] else None


async def index_status(
    conn: Conn, tenant: str, project_ids: Sequence[int], identity: EmbeddingIdentity | None
) -> list[ProjectStatus]:
    """Documents, chunks and vectors per identity of the tenant's selected projects."""
    rows = await conn.fetch(STATUS_PROJECTS, tenant, list(project_ids))
    if not rows:
        return []
    vectors: dict[int, dict[EmbeddingIdentity, tuple[int, int]]] = {}
    for row in await conn.fetch(STATUS_EMBEDDINGS, tenant, [r["project_id"] for r in rows]):
        found = EmbeddingIdentity(row["model"], row["dimensions"])
        vectors.setdefault(row["project_id"], {})[found] = (row["ready"], row["pending"])
    return [_status(row, vectors.get(row["project_id"], {}), identity) for row in rows]


def _status(
    row: Any, vectors: dict[EmbeddingIdentity, tuple[int, int]], identity: EmbeddingIdentity | None
) -> ProjectStatus:
    chunks = int(row["chunks"])
    embeddings: list[EmbeddingCounts] = []
    needing = 0
    if identity is not None:
        ready = vectors.get(identity, (0, 0))[0]
        # For the configured identity every chunk without a ready vector is pending.
        embeddings.append(EmbeddingCounts(identity, ready, chunks - ready))
        needing = chunks - ready
    others = sorted((i for i in vectors if i != identity), key=lambda i: (i.model, i.dimensions))
    embeddings.extend(EmbeddingCounts(i, *vectors[i]) for i in others)
    return ProjectStatus(
        project_record(row), int(row["documents"]), chunks, tuple(embeddings), needing
    )


async def pending_chunks_raw(conn: asyncpg.Connection, identity: EmbeddingIdentity) -> int:
    """Chunks of every tenant without a ready vector of `identity` (unhooked connection)."""
    return int(await conn.fetchval(PENDING_CHUNKS, identity.model, identity.dimensions))
