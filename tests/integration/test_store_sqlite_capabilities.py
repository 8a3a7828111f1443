"""SQLite without its vector extension: FTS keeps working, semantic modes say what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from service import errors
from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Mode
from service.store.sqlite import SqliteStore
from tests.integration.conftest import Backend, Corpus, shared_nebula


async def test_without_vector_extension_fts_works_and_semantic_is_actionable(
    tmp_path: Path, embedder: DeterministicEmbedder
) -> None:
    backend = Backend("sqlite", tmp_path)
    async with backend.opened(embedder.identity, load_vector_extension=False) as store:
        caps = store.capabilities
        assert (caps.backend, caps.vector_search, caps.vector_adapter) == (
            "sqlite",
            False,
            "sqlite-vec",
        )
        assert "pip install sqlite-vec" in caps.vector_reason
        assert "extension loading" in caps.vector_reason
        corpus = Corpus(store, embedder, "acme")
        projects = await shared_nebula(corpus)
        scope = [p.project_id for p in projects]

        page = await corpus.search(scope, Mode.FTS, "shared nebula")
        assert page.total == 9
        for mode in (Mode.VECTOR, Mode.HYBRID):
            with pytest.raises(errors.SemanticUnavailable, match="sqlite-vec"):
                await corpus.search(scope, mode, "shared nebula")

    # Vectors written meanwhile are indexed once the extension is back.
    async with backend.opened(embedder.identity) as store:
        assert store.capabilities.vector_search is True
        corpus = Corpus(store, embedder, "acme")
        for limit in (50_000, 0):
            page = await corpus.search(scope, Mode.VECTOR, "shared nebula", exact_scan_limit=limit)
            assert len(page.hits) == 9


async def test_reopen_is_idempotent(tmp_path: Path, embedder: DeterministicEmbedder) -> None:
    backend = Backend("sqlite", tmp_path)
    async with backend.opened(embedder.identity) as store:
        corpus = Corpus(store, embedder, "acme")
        projects = await shared_nebula(corpus, 1)
    async with backend.opened(embedder.identity) as store:
        corpus = Corpus(store, embedder, "acme")
        page = await corpus.search([projects[0].project_id], Mode.HYBRID, "shared nebula")
        assert len(page.hits) == 3


async def test_store_without_identity_serves_fts(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x.sqlite3", None)
    await store.open()
    try:
        project = await store.create_project("acme", "p", "p")
        statuses = await store.index_status("acme", [project.project_id], None)
        assert statuses[0].embeddings == ()
        assert statuses[0].chunks_needing_embedding == 0
    finally:
        await store.close()
