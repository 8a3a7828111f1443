"""kill -9 of the server process during large upsert streams: nothing acknowledged is lost, and
every document is wholly one version (row, chunks and vectors), after a restart; what is
derived from the documents (lexical postings and statistics, vector generations) agrees
with them.

Two writers stream new versions of their half of the documents (8 messages of 25 documents per
call) into a real `python -m service serve` child. The child is killed with SIGKILL while
streams are in flight, then started again on the same data. Each document must be at the
version of its last acknowledged call or at a later version that was sent, and its stored row,
chunk texts (re-chunked here the way the service chunks) and vectors must all be that version.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from service.indexing.chunking import chunk_markdown, document_source_text
from tests.support.pg import fresh_database
from tests.support.pg_postings import postings_and_stats
from tests.support.reliability.process import ServerProcess, start_server
from tests.support.sqlite_postings import (
    documents_stats,
    fts5_postings,
    postings_table,
    stats_table,
)

DOCUMENTS = 200
PER_MESSAGE = 25
WRITERS = 2


def _body(row: int, version: int) -> str:
    """A Markdown body whose every word names its document and version; 1 to 5 chunks."""
    tag = f"d{row}v{version}"
    sections = 1 + (row + version) % 5
    return "\n\n".join(
        f"## {tag} part {s}\n\n" + " ".join(f"{tag} word{w}" for w in range(60))
        for s in range(sections)
    )


def _document(row: int, version: int) -> index_pb2.Document:
    metadata = struct_pb2.Struct()
    metadata.update({"v": version})
    return index_pb2.Document(
        kind="note", row_id=str(row), title=f"doc {row} version {version}",
        path=f"docs/{row}.md", body=_body(row, version), metadata=metadata,
    )


def _expected_chunks(row: int, version: int) -> list[tuple[str, str]]:
    doc = _document(row, version)
    source = document_source_text(doc.title, doc.path, doc.body)
    return [(c.text, c.source_hash) for c in chunk_markdown(source)]


@dataclass
class Ledger:
    """What was sent and what the server acknowledged, per row."""

    acked: dict[int, int] = field(default_factory=dict)
    sent: dict[int, set[int]] = field(default_factory=dict)
    calls_acked: int = 0
    ends: list[grpc.StatusCode] = field(default_factory=list)  # how each writer stopped
    end_details: list[str] = field(default_factory=list)  # their messages, for a failure


async def _upsert(
    stub: index_pb2_grpc.IndexServiceAsyncStub, pid: int, rows: list[int], version: int
) -> index_pb2.UpsertDocumentsResponse:
    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        for start in range(0, len(rows), PER_MESSAGE):
            batch = rows[start:start + PER_MESSAGE]
            yield index_pb2.UpsertDocumentsRequest(
                project_id=pid, documents=[_document(r, version) for r in batch]
            )

    reply: index_pb2.UpsertDocumentsResponse = await stub.UpsertDocuments(messages(), timeout=60)
    return reply


async def _writer(
    target: str, pid: int, rows: list[int], ledger: Ledger, first_version: int, step: int
) -> None:
    """Write ever newer versions of `rows` until the server dies."""
    version = first_version
    async with grpc.aio.insecure_channel(target) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        while True:
            version += step
            for row in rows:
                ledger.sent.setdefault(row, set()).add(version)
            try:
                reply = await _upsert(stub, pid, rows, version)
            except grpc.aio.AioRpcError as error:
                ledger.ends.append(error.code())  # the server died under the stream
                ledger.end_details.append(f"{error.code().name}: {error.details()}")
                return
            assert reply.documents_rejected == 0
            for row in rows:
                ledger.acked[row] = version
            ledger.calls_acked += 1


async def _kill_mid_stream(server: ServerProcess, ledger: Ledger, rng: random.Random) -> None:
    while ledger.calls_acked < 3:  # noqa: ASYNC110 - the writers own the counter
        await asyncio.sleep(0.01)
    await asyncio.sleep(rng.uniform(0.05, 0.4))
    server.kill()


@dataclass(frozen=True)
class Stored:
    """One stored document as the database holds it."""

    title: str
    path: str
    body: str
    version: float
    chunks: list[tuple[str, str, str | None, str | None]]  # text, hash, vector state, hash


def _chunk(row: Any) -> tuple[str, str, str | None, str | None]:
    text, digest, state, vector_hash = row
    return str(text), str(digest), state, vector_hash


async def _read_sqlite(path: Path, pid: int) -> dict[int, Stored]:
    conn = apsw.Connection(str(path))
    try:
        docs = conn.execute(
            "SELECT id, row_id, title, path, body, json_extract(metadata, '$.v') FROM documents "
            "WHERE project_id = ?", (pid,),
        ).fetchall()
        out: dict[int, Stored] = {}
        for doc_id, row_id, title, doc_path, body, version in docs:
            chunks = conn.execute(
                "SELECT c.text, c.source_hash, v.state, v.source_hash FROM chunks c "
                "LEFT JOIN vectors v ON v.chunk_id = c.id WHERE c.document_id = ? "
                "ORDER BY c.chunk_index", (doc_id,),
            ).fetchall()
            out[int(str(row_id))] = Stored(str(title), str(doc_path), str(body),
                                           float(str(version)), [_chunk(c) for c in chunks])
        return out
    finally:
        conn.close()


async def _read_postgres(dsn: str, pid: int) -> dict[int, Stored]:
    conn = await asyncpg.connect(dsn)
    try:
        docs = await conn.fetch(
            "SELECT row_id, title, path, body, (metadata->>'v')::float8 AS v FROM documents "
            "WHERE project_id = $1", pid,
        )
        chunks = await conn.fetch(
            "SELECT c.row_id, c.text, c.source_hash, v.state, v.source_hash AS vhash "
            "FROM chunks c LEFT JOIN vectors v USING (project_id, kind, row_id, chunk_index) "
            "WHERE c.project_id = $1 ORDER BY c.row_id, c.chunk_index", pid,
        )
    finally:
        await conn.close()
    by_row: dict[str, list[tuple[str, str, str | None, str | None]]] = {}
    for c in chunks:
        by_row.setdefault(c["row_id"], []).append(
            (c["text"], c["source_hash"], c["state"], c["vhash"])
        )
    return {
        int(d["row_id"]): Stored(d["title"], d["path"], d["body"], d["v"],
                                 by_row.get(d["row_id"], []))
        for d in docs
    }


def _check(stored: dict[int, Stored], ledger: Ledger) -> list[str]:
    problems: list[str] = []
    if sorted(stored) != list(range(DOCUMENTS)):
        problems.append(f"{DOCUMENTS - len(stored)} documents missing")
    for row, doc in stored.items():
        version = int(doc.version)
        if version < ledger.acked[row] or version not in ledger.sent[row] | {0}:
            problems.append(f"row {row}: version {version}, acknowledged {ledger.acked[row]}")
            continue
        want = _document(row, version)
        if (doc.title, doc.path, doc.body) != (want.title, want.path, want.body):
            problems.append(f"row {row}: row fields are not all version {version}")
        texts = [(text, digest) for text, digest, _, _ in doc.chunks]
        if texts != _expected_chunks(row, version):
            problems.append(f"row {row}: chunks are not exactly those of version {version}")
        if any(state != "ready" or vhash != digest for _, digest, state, vhash in doc.chunks):
            problems.append(f"row {row}: a vector is missing or belongs to other text")
    return problems


async def _healthy(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="search.v1.IndexService"), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_kill_9_during_upsert_streams_loses_nothing_acknowledged(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with AsyncExitStack() as stack:
        env: dict[str, str] = {}
        if backend == "postgres":
            admin_dsn: str = request.getfixturevalue("pg_dsn")
            env["SEARCH_DATABASE_URL"] = await stack.enter_async_context(
                fresh_database(admin_dsn)
            )
        await _crash_and_check(backend, tmp_path, env)


async def _crash_and_check(backend: str, tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(3)
    ledger = Ledger()
    server = await start_server(tmp_path, env)
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = index_pb2_grpc.IndexServiceStub(channel)
            project = await stub.CreateProject(index_pb2.CreateProjectRequest(external_id="crash"))
            pid = project.project.project_id
            rows = list(range(DOCUMENTS))
            first = await _upsert(stub, pid, rows, 0)
            assert first.documents_created == DOCUMENTS
            ledger.acked.update(dict.fromkeys(rows, 0))
        halves = [rows[w::WRITERS] for w in range(WRITERS)]
        await asyncio.gather(
            *(_writer(server.target, pid, half, ledger, w, WRITERS)
              for w, half in enumerate(halves)),
            _kill_mid_stream(server, ledger, rng),
        )
        assert await server.process.wait() == -9
    finally:
        await server.stop()
    assert ledger.ends == [grpc.StatusCode.UNAVAILABLE] * WRITERS, ledger.end_details
    in_flight = sum(
        1 for row in rows if max(ledger.sent[row]) > ledger.acked[row]
    )
    assert in_flight > 0, "the kill did not land during a stream"

    restarted = await start_server(tmp_path, env)
    try:
        await _healthy(restarted.target)
        async with grpc.aio.insecure_channel(restarted.target) as channel:
            status = await index_pb2_grpc.IndexServiceStub(channel).GetIndexStatus(
                index_pb2.GetIndexStatusRequest(project_ids=[pid])
            )
            assert status.projects[0].documents == DOCUMENTS
            assert status.projects[0].chunks_needing_embedding == 0
            row = rng.randrange(DOCUMENTS)
            tag = f"d{row}v{ledger.acked[row]}"
            search = pgrpc.ProjectSearchServiceStub(channel)
            found: list[Any] = [
                r async for m in search.SearchProjects(ppb.SearchProjectsRequest(
                    scope=ppb.ProjectScope(project_ids=[pid]), text=f"doc {row}", page_size=1000))
                for r in m.page.results if r.row_id == str(row)
            ]
            assert found, tag
        stored = (
            await _read_sqlite(tmp_path / "search.sqlite3", pid)
            if backend == "sqlite"
            else await _read_postgres(env["SEARCH_DATABASE_URL"], pid)
        )
        derived = (
            _sqlite_derived(tmp_path / "search.sqlite3")
            if backend == "sqlite"
            else await _postgres_derived(env["SEARCH_DATABASE_URL"])
        )
    finally:
        await restarted.stop()
    assert _check(stored, ledger) == []
    assert derived == [], derived


def _sqlite_derived(path: Path) -> list[str]:
    """What the lexical postings, statistics and vector generations must equal after the
    kill: FTS5's own index, the documents' lengths, every project with vectors counted."""
    conn = apsw.Connection(str(path))
    try:
        problems = []
        if postings_table(conn) != fts5_postings(conn):
            problems.append("term_postings differ from FTS5's index")
        if stats_table(conn) != documents_stats(conn):
            problems.append("lexical_stats differ from the documents")
        missing = conn.execute(
            "SELECT DISTINCT v.project_id FROM vectors AS v LEFT JOIN vector_generations AS g"
            " ON g.project_id = v.project_id WHERE g.project_id IS NULL"
        ).fetchall()
        if missing:
            problems.append(f"projects with vectors but no generation: {missing}")
        return problems
    finally:
        conn.close()


async def _postgres_derived(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        postings, expected, stats, document_stats = await postings_and_stats(conn)
    finally:
        await conn.close()
    problems = []
    if postings != expected:
        problems.append("term_postings differ from the documents' tsvectors")
    if stats != document_stats:
        problems.append("lexical_stats differ from the documents")
    return problems
