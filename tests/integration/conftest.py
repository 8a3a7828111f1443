"""Store fixtures: every `store` test runs on SQLite and on PostgreSQL, with real databases.

`store` is a fresh, opened store per test (a new SQLite file, or a new PostgreSQL database
on the session server). `corpus` writes documents through the Store protocol with vectors
from the deterministic embedder and builds search plans the way the service does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import asyncpg
import pytest
import pytest_asyncio

from service.embeddings.base import EmbeddingIdentity
from service.embeddings.deterministic import DeterministicEmbedder
from service.projects.lexical import LexicalQuery, compile_query, script_ngrams
from service.store.base import (
    ChunkInput,
    DocumentInput,
    DocumentWrite,
    Filters,
    Mode,
    ProjectRecord,
    SearchHit,
    SearchPage,
    SearchPlan,
    Store,
)
from service.store.sqlite import SqliteStore

HAVE_PG_SUPPORT = importlib.util.find_spec("tests.support.pg") is not None
if HAVE_PG_SUPPORT:
    from tests.support.pg import (  # noqa: F401 - fixtures
        fresh_database,
        pg_dsn,
        pg_server,
        private_pg_server,
    )

DIMENSIONS = 384
BACKENDS = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=[pytest.mark.postgres]
        + (
            []
            if HAVE_PG_SUPPORT
            else [pytest.mark.skip(reason="tests/support/pg.py (PostgreSQL fixtures) is missing")]
        ),
    ),
]
SEMANTIC = (Mode.VECTOR, Mode.HYBRID)
WRITE_WORDS = ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")


def sha256(text: str) -> str:
    """The source hash of a chunk text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def at(day: int, month: int = 1, year: int = 2026) -> datetime:
    """A UTC midnight."""
    return datetime(year, month, day, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> DeterministicEmbedder:
    """The deterministic embedder every store test uses."""
    return DeterministicEmbedder(DIMENSIONS)


@dataclass
class Backend:
    """One fresh database of one backend; opens stores on it with any embedding identity."""

    name: str
    directory: Path
    dsn: str = ""

    async def open(self, identity: EmbeddingIdentity | None, **options: Any) -> Store:
        """An opened store on this database."""
        store: Store
        if self.name == "sqlite":
            store = SqliteStore(self.directory / "search.sqlite3", identity, **options)
        else:
            from service.store.postgres import PostgresStore

            # The lexical cache ranks FTS pages as the server's default does; a test that
            # wants the SQL ranking alone passes lexical_cache_bytes=0.
            options.setdefault("lexical_cache_bytes", 64 << 20)
            store = PostgresStore(self.dsn, identity=identity, **options)
        await store.open()
        return store

    @asynccontextmanager
    async def opened(
        self, identity: EmbeddingIdentity | None, **options: Any
    ) -> AsyncIterator[Store]:
        """A store for the duration of the block."""
        store = await self.open(identity, **options)
        try:
            yield store
        finally:
            await store.close()

    async def execute(self, sql: str, *args: Any) -> None:
        """Run one statement behind the store's back (`?` placeholders; `$n` on PostgreSQL)."""
        if self.name == "sqlite":
            conn = apsw.Connection(str(self.directory / "search.sqlite3"))
            try:
                conn.set_busy_timeout(5_000)
                conn.execute(sql, args)
            finally:
                conn.close()
            return
        pg = await asyncpg.connect(self.dsn)
        try:
            count = iter(range(1, 100))
            await pg.execute(re.sub(r"\?", lambda _m: f"${next(count)}", sql), *args)
        finally:
            await pg.close()


@asynccontextmanager
async def fresh_backend(
    name: str, request: pytest.FixtureRequest, directory: Path
) -> AsyncIterator[Backend]:
    """A fresh database: a new SQLite file, or a new database on the session's PostgreSQL."""
    if name == "sqlite":
        yield Backend("sqlite", directory)
        return
    admin_dsn: str = request.getfixturevalue("pg_dsn")
    async with fresh_database(admin_dsn) as dsn:
        yield Backend("postgres", directory, dsn)


@pytest_asyncio.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A fresh database of each backend for one test."""
    async with fresh_backend(request.param, request, tmp_path) as fresh:
        yield fresh


@pytest_asyncio.fixture
async def store(backend: Backend, embedder: DeterministicEmbedder) -> AsyncIterator[Store]:
    """An opened store on `backend`, configured for `embedder`."""
    async with backend.opened(embedder.identity) as opened:
        yield opened


@dataclass
class Doc:
    """A test document: paragraphs of `body` become chunks."""

    kind: str
    row_id: str
    body: str
    title: str = ""
    path: str = "notes/doc.md"
    category: str = ""
    note_type: str = "note"
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    vectors: str = "ready"  # ready | pending | none | other-model | other-dimensions

    def paragraphs(self) -> list[str]:
        """The chunk texts."""
        return [p.strip() for p in self.body.split("\n\n") if p.strip()] or [self.title]


class Corpus:
    """Writes documents and builds plans against one store, for one tenant."""

    def __init__(self, store: Store, embedder: DeterministicEmbedder, tenant: str) -> None:
        self.store = store
        self.embedder = embedder
        self.tenant = tenant
        self.statements: list[str] = []
        self.owners: dict[int, str] = {}  # project id -> tenant, for writes
        store.add_statement_hook(self.statements.append)

    @property
    def identity(self) -> EmbeddingIdentity:
        """The configured embedding identity."""
        return self.embedder.identity

    async def project(self, external_id: str, tenant: str | None = None) -> ProjectRecord:
        """Create a project (of this corpus' tenant unless told otherwise)."""
        project = await self.store.create_project(tenant or self.tenant, external_id, external_id)
        self.owners[project.project_id] = project.tenant
        return project

    async def projects(self, count: int) -> list[ProjectRecord]:
        """Create `count` projects p0, p1, ..."""
        return [await self.project(f"p{i}") for i in range(count)]

    async def write(self, project_id: int, docs: Iterable[Doc]) -> list[str]:
        """Write documents; returns their outcomes."""
        writes = [await self.document_write(doc) for doc in docs]
        tenant = self.owners.get(project_id, self.tenant)
        return [str(o) for o in await self.store.write_documents(tenant, project_id, writes)]

    async def document_write(self, doc: Doc) -> DocumentWrite:
        """The DocumentWrite of `doc` with vectors as `doc.vectors` asks."""
        title = doc.title or f"{doc.kind} {doc.row_id}"
        texts = doc.paragraphs()
        vectors = await self.embedder.embed(texts)
        chunks = [
            self._chunk(i, text, vec, doc.vectors)
            for i, (text, vec) in enumerate(zip(texts, vectors, strict=True))
        ]
        stored = DocumentInput(
            kind=doc.kind,
            row_id=doc.row_id,
            title=title,
            path=doc.path,
            body=doc.body,
            category=doc.category,
            note_type=doc.note_type,
            metadata=doc.metadata,
            created_at=doc.created_at,
            updated_at=doc.updated_at,
            content_hash=sha256(repr(doc)),
            ngrams=script_ngrams(f"{title} {doc.body}"),
        )
        return DocumentWrite(stored, chunks)

    def _chunk(self, index: int, text: str, vector: list[float], mode: str) -> ChunkInput:
        identity = self.identity
        if mode == "ready":
            return ChunkInput(index, text, sha256(text), vector, identity)
        if mode == "pending":
            return ChunkInput(index, text, sha256(text), None, identity)
        if mode == "other-model":
            other = EmbeddingIdentity("other-model", identity.dimensions)
            return ChunkInput(index, text, sha256(text), vector, other)
        if mode == "other-dimensions":
            other = EmbeddingIdentity(identity.model, 8)
            return ChunkInput(index, text, sha256(text), vector[:8], other)
        return ChunkInput(index, text, sha256(text))

    async def plan(
        self,
        project_ids: Sequence[int],
        mode: Mode,
        text: str,
        *,
        filters: Filters | None = None,
        limit: int = 100,
        offset: int = 0,
        lexical: LexicalQuery | None = None,
        tenant: str | None = None,
        **options: Any,
    ) -> SearchPlan:
        """A plan as the service builds it: compiled text, one embedding for semantic modes."""
        vector = None
        if mode is not Mode.FTS:
            vector = tuple((await self.embedder.embed([text]))[0])
        return SearchPlan(
            tenant=tenant or self.tenant,
            project_ids=tuple(sorted(set(project_ids))),
            mode=mode,
            lexical=lexical or (compile_query(text) if text.strip() else None),
            query_vector=vector,
            identity=self.identity,
            filters=filters or Filters(),
            limit=limit,
            offset=offset,
            **options,
        )

    async def search(
        self, project_ids: Sequence[int], mode: Mode, text: str, **kw: Any
    ) -> SearchPage:
        """Plan and run one search."""
        return await self.store.search(await self.plan(project_ids, mode, text, **kw))

    async def counted(self, plan: SearchPlan) -> tuple[SearchPage, list[str]]:
        """Run a plan; also return the statements it executed."""
        self.statements.clear()
        page = await self.store.search(plan)
        return page, list(self.statements)


def keys(hits: Iterable[SearchHit]) -> list[tuple[int, str, str]]:
    """Identities of hits, in order."""
    return [(h.project_id, h.kind, h.row_id) for h in hits]


@pytest.fixture
def corpus(store: Store, embedder: DeterministicEmbedder) -> Corpus:
    """A Corpus on the test's store for tenant "acme"."""
    return Corpus(store, embedder, "acme")


async def shared_nebula(corpus: Corpus, count: int = 3) -> list[ProjectRecord]:
    """Reference fixture: per project a note, an observation and a relation, all row id 500."""
    projects = await corpus.projects(count)
    for i, project in enumerate(projects):
        await corpus.write(
            project.project_id,
            [
                Doc(
                    kind,
                    "500",
                    f"shared nebula project {i} {kind}",
                    title=f"shared nebula {kind}",
                    path="notes/shared.md",
                    category="fact",
                    note_type="note",
                    metadata={"status": "open" if i == 0 else "closed", "tags": ["scope"]},
                )
                for kind in ("note", "observation", "relation")
            ],
        )
    return projects


@pytest_asyncio.fixture
async def sqlite_corpus(
    tmp_path: Path, embedder: DeterministicEmbedder
) -> AsyncIterator[tuple[Corpus, Path]]:
    """A SQLite store's corpus (tenant acme) and the path of its file."""
    path = tmp_path / "search.sqlite3"
    store = SqliteStore(path, embedder.identity)
    await store.open()
    try:
        yield Corpus(store, embedder, "acme"), path
    finally:
        await store.close()
