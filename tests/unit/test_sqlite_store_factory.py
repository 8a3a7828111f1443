"""open_store picks the backend from the database URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.embeddings.base import EmbeddingIdentity
from service.store import open_store, sqlite_path
from service.store.sqlite import SqliteStore


def test_sqlite_paths(tmp_path: Path) -> None:
    assert sqlite_path("", tmp_path) == tmp_path / "search.sqlite3"
    assert sqlite_path("sqlite:///idx.db", tmp_path) == tmp_path / "idx.db"
    assert sqlite_path("sqlite:////abs/idx.db", tmp_path) == Path("/abs/idx.db")
    for bad in ("sqlite:///", "sqlite:///:memory:"):
        with pytest.raises(ValueError, match="SQLite file"):
            sqlite_path(bad, tmp_path)


async def test_default_is_an_opened_sqlite_store(tmp_path: Path) -> None:
    store = await open_store("", tmp_path, EmbeddingIdentity("m", 4))
    try:
        assert isinstance(store, SqliteStore)
        assert store.path == tmp_path / "search.sqlite3"
        assert store.capabilities.vector_search
        await store.ping()
    finally:
        await store.close()


async def test_unknown_scheme_is_refused_without_echoing_secrets(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mysql") as caught:
        await open_store("mysql://user:secret@host/db", tmp_path, None)
    assert "secret" not in str(caught.value)
