"""Pytest plugin: `world` and `exact_world`, workspace engines on the fakes and SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from service.fakes.suite import FakeProviders
from service.store.sqlite import SqliteStore
from tests.integration.workspace_support import World, build_world


@pytest_asyncio.fixture
async def world(fakes: FakeProviders, tmp_path: Path) -> AsyncIterator[World]:
    """A fresh World for one test, default engine settings."""
    store = SqliteStore(tmp_path / "search.sqlite3", None)
    await store.open()
    try:
        yield build_world(fakes, store)
    finally:
        await store.close()


@pytest_asyncio.fixture
async def exact_world(fakes: FakeProviders, tmp_path: Path) -> AsyncIterator[World]:
    """A World allowed enough fetch rounds per page to read small corpora to their end."""
    store = SqliteStore(tmp_path / "search.sqlite3", None)
    await store.open()
    try:
        yield build_world(fakes, store, max_rounds_per_page=12)
    finally:
        await store.close()
