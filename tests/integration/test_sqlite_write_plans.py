"""Upserts cost O(batch) on SQLite: the per-key reads use the unique index (issue 17 item 4).

Without statistics (a database that never ran ANALYZE) SQLite planned DOCUMENT_HASHES as a
scan of the project's documents per key: one 500-document batch took 7.5 s at 20,000
documents here, on a reader thread, stalling every other tenant's search.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from service.store.sqlite import SqliteStore, reads

DOCUMENTS = 5000


async def _project_with_documents(path: Path) -> int:
    store = SqliteStore(path, None)
    await store.open()
    try:
        project = await store.create_project("acme", "big", "big")
    finally:
        await store.close()
    conn = apsw.Connection(str(path))
    with conn:
        conn.executemany(
            "INSERT INTO documents (project_id, kind, row_id, title, path, body, category, "
            "note_type, note_type_key, metadata, created_at, updated_at, content_hash) "
            "VALUES (?, 'note', ?, 't', ?, 'b', '', '', '', '{}', 0, 0, 'h')",
            [(project.project_id, f"r{i}", f"docs/{i}.md") for i in range(DOCUMENTS)],
        )
    conn.close()
    return project.project_id


async def test_document_hashes_look_up_each_key_in_the_unique_index(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    project_id = await _project_with_documents(path)
    conn = apsw.Connection(str(path))
    bindings = {"keys": json.dumps([["note", f"r{i}"] for i in range(0, 1000, 2)]),
                "project_id": project_id, "tenant": "acme"}
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + reads.DOCUMENT_HASHES,
                                           bindings)]
    keys_at = next(i for i, step in enumerate(plan) if step.startswith("SCAN k"))
    lookup_at = next(i for i, step in enumerate(plan) if "SEARCH d" in step)
    assert keys_at < lookup_at, plan  # the keys drive the loop
    assert "(project_id=? AND kind=? AND row_id=?)" in plan[lookup_at], plan
    assert len(conn.execute(reads.DOCUMENT_HASHES, bindings).fetchall()) == 500
    conn.close()
