"""What a store holds, read straight from its database, for the peer engines to index.

SQLite is read through apsw (read-only), PostgreSQL through asyncpg; both give the same
records: every document (key, title, path, body) and every chunk with its ready vector of
the configured embedding, chunks grouped by document and documents by project.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import asyncpg
import numpy as np
from numpy.typing import NDArray
from pgvector import Vector
from pgvector.asyncpg import register_vector

from benchmarks.client import Key
from service.embeddings.base import EmbeddingIdentity

FETCH_ROWS = 10_000

DOCUMENTS = """
SELECT project_id, kind, row_id, title, path, body FROM documents
ORDER BY project_id, kind, row_id"""  # the same on both stores
SQLITE_CHUNKS = """
SELECT d.project_id, d.kind, d.row_id, c.text, v.embedding
FROM chunks AS c
JOIN documents AS d ON d.id = c.document_id
JOIN vectors AS v ON v.chunk_id = c.id
WHERE v.model = ? AND v.dimensions = ? AND v.state = 'ready' AND v.source_hash = c.source_hash
ORDER BY d.project_id, d.kind, d.row_id, c.chunk_index"""
POSTGRES_CHUNKS = """
SELECT c.project_id, c.kind, c.row_id, c.text, v.embedding
FROM chunks AS c
JOIN vectors AS v USING (project_id, kind, row_id, chunk_index)
WHERE v.model = $1 AND v.dimensions = $2 AND v.state = 'ready' AND v.source_hash = c.source_hash
ORDER BY c.project_id, c.kind, c.row_id, c.chunk_index"""


@dataclass
class Exported:
    """Documents and chunks of one store; chunk `i` belongs to document `chunk_doc[i]`."""

    dimensions: int
    keys: list[Key] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # title, path and body, one per document
    chunk_doc: list[int] = field(default_factory=list)
    chunk_texts: list[str] = field(default_factory=list)
    _vectors: list[NDArray[np.float32]] = field(default_factory=list)

    @property
    def vectors(self) -> NDArray[np.float32]:
        """Chunk vectors, one row per chunk (unit length, as the service stores them)."""
        if len(self._vectors) != 1:
            empty = np.zeros((0, self.dimensions), dtype=np.float32)
            self._vectors = [np.vstack(self._vectors) if self._vectors else empty]
        return self._vectors[0]

    def add_documents(self, rows: Iterable[Sequence[Any]]) -> None:
        """(project_id, kind, row_id, title, path, body) rows."""
        for project_id, kind, row_id, title, path, body in rows:
            self.keys.append((int(project_id), kind, row_id))
            # The same text the service's FTS index reads (title, path, body on lines).
            self.texts.append(f"{title}\n{path}\n{body}")

    def add_chunks(self, rows: Sequence[Sequence[Any]], index: dict[Key, int]) -> None:
        """(project_id, kind, row_id, text, vector) rows; `index` maps keys to documents."""
        if not rows:
            return
        block = np.empty((len(rows), self.dimensions), dtype=np.float32)
        for i, (project_id, kind, row_id, text, vector) in enumerate(rows):
            self.chunk_doc.append(index[(int(project_id), kind, row_id)])
            self.chunk_texts.append(text)
            block[i] = _as_array(vector)
        self._vectors.append(block)

    def summary(self) -> dict[str, Any]:
        """Counts for results.json."""
        return {
            "documents": len(self.keys),
            "chunks": len(self.chunk_texts),
            "dimensions": self.dimensions,
        }


def _as_array(vector: Any) -> NDArray[np.float32]:
    if isinstance(vector, bytes | memoryview):  # SQLite: float32 little-endian
        return np.frombuffer(vector, dtype="<f4")
    if isinstance(vector, Vector):  # PostgreSQL: pgvector's asyncpg codec
        return np.asarray(vector.to_numpy(), dtype=np.float32)
    return np.asarray(vector, dtype=np.float32)


def export_sqlite(path: Path, identity: EmbeddingIdentity) -> Exported:
    """Everything in a SQLite store's file (opened read-only beside the running server)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out = Exported(identity.dimensions)
        with conn:  # one read transaction: documents and chunks of the same snapshot
            out.add_documents(conn.execute(DOCUMENTS))
            index = {key: i for i, key in enumerate(out.keys)}
            cursor = conn.execute(SQLITE_CHUNKS, (identity.model, identity.dimensions))
            while rows := _take(cursor, FETCH_ROWS):
                out.add_chunks(rows, index)
        return out
    finally:
        conn.close()


def _take(cursor: Iterable[Sequence[Any]], count: int) -> list[Sequence[Any]]:
    rows = []
    for row in cursor:
        rows.append(row)
        if len(rows) >= count:
            break
    return rows


async def export_postgres(dsn: str, identity: EmbeddingIdentity) -> Exported:
    """Everything in a PostgreSQL store's database (one repeatable-read snapshot)."""
    conn = await asyncpg.connect(dsn)
    try:
        await register_vector(conn)
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog", format="text"
        )
        out = Exported(identity.dimensions)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            out.add_documents(await conn.fetch(DOCUMENTS))
            index = {key: i for i, key in enumerate(out.keys)}
            cursor = await conn.cursor(POSTGRES_CHUNKS, identity.model, identity.dimensions)
            while rows := await cursor.fetch(FETCH_ROWS):
                out.add_chunks(rows, index)
        return out
    finally:
        await conn.close()
