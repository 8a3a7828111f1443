"""A process killed in the middle of upserts leaves every document fully old or fully new."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import apsw

ROOT = Path(__file__).resolve().parents[2]
WRITER = r"""
import asyncio, hashlib, sys
from pathlib import Path
from service.embeddings.base import EmbeddingIdentity
from service.store.base import ChunkInput, DocumentInput, DocumentWrite
from service.store.sqlite import SqliteStore

IDENTITY = EmbeddingIdentity("m", 4)

def write(version, i):
    texts = [f"v{version} doc{i} part{p}" for p in range(1 + version % 3)]
    body = "\n\n".join(texts)
    doc = DocumentInput("note", str(i), f"v{version}", "p.md", body, "", "", {"v": version},
                        None, None, f"{version}", "")
    chunks = [ChunkInput(p, t, hashlib.sha256(t.encode()).hexdigest(), [1.0, 0, 0, 0], IDENTITY)
              for p, t in enumerate(texts)]
    return DocumentWrite(doc, chunks)

async def main():
    store = SqliteStore(Path(sys.argv[1]), IDENTITY)
    await store.open()
    project = await store.create_project("t", "p", "p")
    print("ready", flush=True)
    version = 0
    while True:
        version += 1
        await store.write_documents("t", project.project_id, [write(version, i) for i in range(40)])

asyncio.run(main())
"""


def _check(path: Path) -> tuple[int, int]:
    conn = apsw.Connection(str(path))
    docs = conn.execute("SELECT id, title, body, json_extract(metadata, '$.v') FROM documents")
    count = newest = 0
    for doc_id, title, body, stored_version in docs.fetchall():
        version = int(str(stored_version))
        count += 1
        newest = max(newest, version)
        chunks = conn.execute(
            "SELECT c.text, v.state FROM chunks c JOIN vectors v ON v.chunk_id = c.id "
            "WHERE c.document_id = ? ORDER BY c.chunk_index",
            (doc_id,),
        ).fetchall()
        assert title == f"v{version}"
        assert len(chunks) == 1 + version % 3
        assert body == "\n\n".join(str(text) for text, _ in chunks)
        assert all(
            state == "ready" and str(text).startswith(f"v{version} ") for text, state in chunks
        )
        fts = conn.execute(
            "SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?", (f'content : "{title}"',)
        ).fetchall()
        assert (doc_id,) in fts
    conn.close()
    return count, newest


async def test_kill_during_upserts_leaves_whole_documents(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(path), stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
        await asyncio.sleep(0.6)
    finally:
        proc.kill()  # SIGKILL: no cleanup, most likely inside a transaction
        await proc.wait()
    documents, newest = _check(path)
    assert documents == 40
    assert newest >= 2, "the writer should have replaced documents before it was killed"
