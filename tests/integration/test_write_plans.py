"""Writes cost O(batch) at 100,000 documents, and never run on the readers' threads
(issue 17 item 4).

Every statement an upsert (hash lookup, known vectors, replace, insert) and a document
delete run is captured through the store's statement hook and explained on a project of
100,000 documents (rows inserted with SQL, statistics gathered): none may scan a whole table
or index of the project. On SQLite those statements run on the writer's thread: a 12.5 s
batch on the reader threads once held another tenant's search for 60 s.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import apsw
import asyncpg

from service.embeddings.deterministic import DeterministicEmbedder
from service.indexing.documents import IncomingDocument
from service.indexing.pipeline import Indexer
from service.store.base import Store
from service.store.postgres.postings import POSTINGS_OF
from service.store.sqlite.connection import connect
from tests.integration.conftest import Backend

DOCUMENTS = 100_000
WRITE_WORDS = ("INSERT", "UPDATE", "DELETE", "WITH", "SELECT")
# The tables that grow with the project: a statement may look rows up there, never scan.
BIG_TABLES = frozenset({"documents", "chunks", "vectors", "term_postings"})
_ALIAS = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+(\w+)(?:\s+AS\s+(\w+))?", re.IGNORECASE)


async def _fill(backend: Backend, project_id: int) -> None:
    """DOCUMENTS documents, one chunk and one pending vector each, straight into the tables."""
    if backend.name == "sqlite":
        conn = apsw.Connection(str(backend.directory / "search.sqlite3"))
        with conn:
            conn.executemany(
                "INSERT INTO documents (id, project_id, kind, row_id, title, path, body, "
                "category, note_type, note_type_key, metadata, created_at, updated_at, "
                "content_hash) VALUES (?, ?, 'note', ?, 't', ?, 'b', '', '', '', '{}', 0, 0, "
                "'h')",
                [(i + 1, project_id, f"r{i}", f"docs/{i}.md") for i in range(DOCUMENTS)],
            )
            conn.executemany(
                "INSERT INTO chunks (id, project_id, document_id, chunk_index, text, "
                "source_hash) VALUES (?, ?, ?, 0, 'b', ?)",
                [(i + 1, project_id, i + 1, f"s{i}") for i in range(DOCUMENTS)],
            )
            conn.executemany(
                "INSERT INTO vectors (chunk_id, project_id, model, dimensions, source_hash, "
                "state) VALUES (?, ?, 'deterministic-hash-v1', 384, ?, 'pending')",
                [(i + 1, project_id, f"s{i}") for i in range(DOCUMENTS)],
            )
            conn.execute("ANALYZE")
        conn.close()
        return
    pg = await asyncpg.connect(backend.dsn)
    try:
        await pg.execute(
            "INSERT INTO documents (project_id, kind, row_id, title, path, body, category, "
            "note_type, metadata, created_at, updated_at, content_hash, fts, ngram_fts, "
            "doc_len, ngram_len) SELECT $1, 'note', 'r' || i, 't', 'docs/' || i || '.md', 'b', "
            "'', '', '{}', now(), now(), 'h', to_tsvector('english', 'b'), ''::tsvector, 1, 0 "
            "FROM generate_series(0, $2 - 1) AS i", project_id, DOCUMENTS)
        await pg.execute(
            "INSERT INTO chunks (project_id, kind, row_id, chunk_index, text, source_hash) "
            "SELECT $1, 'note', 'r' || i, 0, 'b', 's' || i FROM generate_series(0, $2 - 1) AS i",
            project_id, DOCUMENTS)
        await pg.execute(
            "INSERT INTO vectors (project_id, kind, row_id, chunk_index, model, dimensions, "
            "source_hash, state) SELECT $1, 'note', 'r' || i, 0, 'deterministic-hash-v1', 384, "
            "'s' || i, 'pending' FROM generate_series(0, $2 - 1) AS i", project_id, DOCUMENTS)
        await pg.execute(POSTINGS_OF.format(source="documents"))
        await pg.execute(
            "INSERT INTO lexical_stats SELECT project_id, count(*), sum(doc_len), sum(ngram_len) "
            "FROM documents GROUP BY project_id")
        await pg.execute("ANALYZE")
    finally:
        await pg.close()


def _document(row_id: str) -> IncomingDocument:
    return IncomingDocument(kind="note", row_id=row_id, title=f"title {row_id}",
                            path=f"docs/{row_id}.md", body=f"body of {row_id} about comets",
                            category="", note_type="", metadata={}, created_at=None,
                            updated_at=None)


async def _writes(store: Store, project_id: int) -> list[tuple[str, str]]:
    """(thread, statement) of an upsert of 50 documents (25 replaced, 25 new) and a delete."""
    seen: list[tuple[str, str]] = []
    store.add_statement_hook(lambda sql: seen.append((threading.current_thread().name, sql)))
    indexer = Indexer(store, DeterministicEmbedder(384))
    batch = [(i, _document(f"r{i * 997}" if i < 25 else f"new{i}")) for i in range(50)]
    report = await indexer.upsert("acme", project_id, batch, "documents")
    assert len(report.results) == 50
    await store.delete_documents("acme", project_id, [("note", f"r{i * 991}") for i in range(10)])
    return seen


def _sqlite_scans(backend: Backend, statements: list[str]) -> list[tuple[str, str]]:
    conn, _ = connect(backend.directory / "search.sqlite3", True, reader=False)  # with vec0
    bad = []
    try:
        for sql in statements:
            names = dict.fromkeys(re.findall(r"[:$@](\w+)", sql), None)
            numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]  # ?1 .. ?N
            bindings: Any = names or (None,) * (max(numbered) if numbered else sql.count("?"))
            tables = {alias or table: table for table, alias in _ALIAS.findall(sql)}
            for row in conn.execute("EXPLAIN QUERY PLAN " + sql, bindings):
                step = row[3]
                scanned = step.split()[1] if step.startswith("SCAN ") else ""
                if tables.get(scanned, scanned) in BIG_TABLES:
                    bad.append((step, sql))
    finally:
        conn.close()
    return bad


async def _postgres_scans(backend: Backend, statements: list[str]) -> list[tuple[str, str]]:
    pg = await asyncpg.connect(backend.dsn)
    bad = []
    try:
        for sql in statements:
            explain = await pg.prepare("EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + sql)
            plan = await explain.fetchval(*[None] * len(explain.get_parameters()))
            plan = json.loads(plan) if isinstance(plan, str) else plan
            for node in _nodes(plan[0]["Plan"] if isinstance(plan, list) else plan):
                if node["Node Type"] == "Seq Scan" and node.get("Relation Name") in BIG_TABLES:
                    bad.append((f"Seq Scan on {node['Relation Name']}", sql))
    finally:
        await pg.close()
    return bad


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [n for child in node.get("Plans", []) for n in _nodes(child)]


async def test_every_write_statement_uses_an_index_at_100k_documents(backend: Backend) -> None:
    async with backend.opened(DeterministicEmbedder(384).identity) as store:
        project = await store.create_project("acme", "big", "big")
        await _fill(backend, project.project_id)
        seen = await _writes(store, project.project_id)
    statements = list(dict.fromkeys(
        sql for _, sql in seen if sql.lstrip().upper().startswith(WRITE_WORDS)))
    # Document writes may be a WITH of data-modifying statements (postings move with them).
    assert any("INSERT INTO documents" in sql for sql in statements)
    assert any("DELETE FROM documents" in sql for sql in statements)
    if backend.name == "sqlite":
        bad = _sqlite_scans(backend, statements)
        on_readers = [sql for thread, sql in seen if thread.startswith("sqlite-reader")]
        assert not on_readers, on_readers
    else:
        bad = await _postgres_scans(backend, statements)
    assert not bad, "\n".join(f"{step}: {sql[:200]}" for step, sql in bad)
