"""Connections: one writer thread, a small pool of reader threads, statement tracing."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import apsw

from service import errors
from service.store.base import StatementHook

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5_000
_SETUP = (
    "PRAGMA journal_mode = WAL",
    # WAL + NORMAL: a crashed process loses nothing that committed; only power loss may
    # roll back the last transactions, and never leaves a half-written document.
    "PRAGMA synchronous = NORMAL",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA cache_size = -32000",
    # Reads come from the OS page cache without a system call and a copy per page. The whole
    # file is mapped (up to 256 GiB of address space, not memory): with only its first GiB
    # mapped, a 1M-chunk file (7.6 GB) read its chunk and vector rows by pread, ~7 us a
    # lookup, and a VECTOR statement's 55 row lookups took 0.8 ms instead of 0.45.
    "PRAGMA mmap_size = 274877906944",
)
_READER_SETUP = ("PRAGMA query_only = ON",)
_UNAVAILABLE = (
    apsw.BusyError,
    apsw.LockedError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.FullError,
    apsw.ConnectionClosedError,
)


@dataclass(frozen=True)
class VectorSupport:
    """Whether sqlite-vec loaded, and if not, what to install."""

    loaded: bool
    reason: str = ""


DISABLED_REASON = (
    "the SQLite vector extension is disabled (load_vector_extension=False); install sqlite-vec "
    "(`pip install sqlite-vec`) on a SQLite build that allows extension loading, or use FTS mode"
)
MISSING_PACKAGE_REASON = (
    "the sqlite-vec package is not installed: `pip install sqlite-vec`, or use FTS mode"
)
NO_EXTENSION_LOADING_REASON = (
    "this SQLite build does not allow extension loading, so sqlite-vec cannot load: use a "
    "Python/SQLite build that allows extension loading (e.g. the apsw wheel), or use FTS mode"
)


def load_vector_extension(conn: apsw.Connection, enabled: bool) -> VectorSupport:
    """Load sqlite-vec into `conn`; never raises, reports why vectors are off instead."""
    if not enabled:
        return VectorSupport(False, DISABLED_REASON)
    try:
        import sqlite_vec
    except ImportError:
        return VectorSupport(False, MISSING_PACKAGE_REASON)
    try:
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)
    except (AttributeError, apsw.Error) as exc:
        return VectorSupport(False, f"{NO_EXTENSION_LOADING_REASON} ({exc})")
    return VectorSupport(True)


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only, like the key files beside it
    (SQLite gives its -wal and -shm files the database file's permissions)."""
    if str(path) == ":memory:" or path.exists():
        return
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def connect(path: Path, vectors: bool, *, reader: bool) -> tuple[apsw.Connection, VectorSupport]:
    """Open one configured connection to the database file."""
    _create_private(path)
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    support = load_vector_extension(conn, vectors)
    for pragma in _SETUP + (_READER_SETUP if reader else ()):
        conn.execute(pragma).fetchall()
    return conn, support


def unhooked(conn: apsw.Connection, read: Callable[[], T]) -> T:
    """Run `read` on `conn` with its statement hooks off: the reads a SQL function makes
    for the statement calling it (the in-process caches') are that statement's inner work."""
    tracer, conn.exec_trace = conn.exec_trace, None
    try:
        return read()
    finally:
        conn.exec_trace = tracer


def map_errors(exc: apsw.Error) -> Exception:
    """Lock contention and I/O failures become a retryable Unavailable; the rest stays."""
    if isinstance(exc, _UNAVAILABLE):
        return errors.Unavailable(f"SQLite database unavailable: {exc}", retry_after=0.2)
    return exc


class ConnectionPool:
    """A fixed set of threads, each with its own connection; jobs run off the event loop."""

    def __init__(self, path: Path, vectors: bool, *, reader: bool, size: int, name: str) -> None:
        self._path = path
        self._vectors = vectors
        self._reader = reader
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[apsw.Connection] = []
        self._hooks: list[StatementHook] = []
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        self._size = size
        self._busy = 0
        self.support = VectorSupport(False, "not opened")

    @property
    def usage(self) -> tuple[int, int]:
        """(connections running a job now, connections the pool may use)."""
        return self._busy, self._size

    def add_hook(self, hook: StatementHook) -> None:
        """Report every statement this pool executes to `hook`."""
        self._hooks.append(hook)

    def _trace(self, _cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        for hook in self._hooks:
            hook(sql)
        return True

    def _connection(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn, self.support = connect(self._path, self._vectors, reader=self._reader)
            conn.exec_trace = self._trace
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _call(self, job: Callable[[apsw.Connection], T]) -> T:
        with self._lock:
            self._busy += 1
        try:
            return job(self._connection())
        except apsw.Error as exc:
            raise map_errors(exc) from exc
        finally:
            with self._lock:
                self._busy -= 1

    async def run(self, job: Callable[[apsw.Connection], T]) -> T:
        """Run `job(connection)` on one of the pool's threads."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self._call, job)
        except RuntimeError as exc:  # the executor was shut down
            raise errors.Unavailable("the SQLite store is closed") from exc
        return await future

    async def run_unhooked(self, job: Callable[[apsw.Connection], T]) -> T:
        """`run`, not reported to the statement hooks (background work of no request)."""

        def quiet(conn: apsw.Connection) -> T:
            conn.exec_trace = None
            try:
                return job(conn)
            finally:
                conn.exec_trace = self._trace

        return await self.run(quiet)

    def close(self) -> None:
        """Wait for running jobs, then close every connection."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
