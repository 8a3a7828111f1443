"""Connections: vector-extension reasons, error mapping, jobs off the event loop."""

from __future__ import annotations

import sqlite3
import sys
import threading
from pathlib import Path

import apsw
import pytest

from service import errors
from service.store.sqlite.connection import (
    MISSING_PACKAGE_REASON,
    ConnectionPool,
    load_vector_extension,
    map_errors,
)


def test_loads_sqlite_vec() -> None:
    conn = apsw.Connection(":memory:")
    support = load_vector_extension(conn, True)
    assert support.loaded
    assert conn.execute("SELECT vec_version()").fetchall()


def test_disabled_extension_says_what_to_install() -> None:
    support = load_vector_extension(apsw.Connection(":memory:"), False)
    assert not support.loaded
    assert "pip install sqlite-vec" in support.reason
    assert "extension loading" in support.reason


def test_missing_package_says_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # import raises ImportError
    support = load_vector_extension(apsw.Connection(":memory:"), True)
    assert (support.loaded, support.reason) == (False, MISSING_PACKAGE_REASON)


def test_binding_without_extension_loading_is_named() -> None:
    # The stdlib binding of this Python has no enable_load_extension at all.
    stdlib = sqlite3.connect(":memory:")
    try:
        support = load_vector_extension(stdlib, True)  # type: ignore[arg-type]
    finally:
        stdlib.close()
    assert not support.loaded
    assert "extension loading" in support.reason


def test_busy_database_is_unavailable_and_retryable() -> None:
    mapped = map_errors(apsw.BusyError("database is locked"))
    assert isinstance(mapped, errors.Unavailable)
    assert mapped.retry_after is not None
    other = apsw.SQLError("no such table")
    assert map_errors(other) is other


async def test_jobs_run_on_pool_threads_and_closed_pool_is_unavailable(tmp_path: Path) -> None:
    pool = ConnectionPool(tmp_path / "x.db", False, reader=False, size=1, name="probe")
    seen: list[str] = []
    pool.add_hook(seen.append)

    def job(conn: apsw.Connection) -> str:
        conn.execute("SELECT 1").fetchall()
        return threading.current_thread().name

    name = await pool.run(job)
    assert name.startswith("probe")
    assert name != threading.current_thread().name
    assert seen == ["SELECT 1"]
    pool.close()
    with pytest.raises(errors.Unavailable):
        await pool.run(job)


async def test_reader_connections_cannot_write(tmp_path: Path) -> None:
    writer = ConnectionPool(tmp_path / "x.db", False, reader=False, size=1, name="w")
    await writer.run(lambda conn: conn.execute("CREATE TABLE t (x)"))
    reader = ConnectionPool(tmp_path / "x.db", False, reader=True, size=1, name="r")
    try:
        with pytest.raises(apsw.ReadOnlyError):
            await reader.run(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
        mode = await reader.run(lambda conn: conn.execute("PRAGMA journal_mode").fetchall())
        assert mode == [("wal",)]
    finally:
        reader.close()
        writer.close()
