"""A PostgreSQL primary with one streaming standby (pg_basebackup -R, same binaries).

`start_cluster` starts both from a helper process (`python -m tests.support.pg_standby`):
As root, `initdb`/`pg_ctl` run as another user, so they are forked,
not vforked, and forked from a process with live gRPC threads the child now and then dies of
SIGSEGV before the program runs (tests/support/reliability/outage.py). The helper has no gRPC;
closing goes through `isolated_control` for the same reason. The fixture `pg_cluster`
(module) yields (primary, standby); import it into a test module to use it.

Replay lag is made with `recovery_min_apply_delay` (`set_apply_delay`), and
`wait_for_replay` waits until the standby has replayed everything the primary wrote so far;
`until` polls any async condition with a bound.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.support import pg
from tests.support.serve_process import ROOT

REPLAYED = "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn"
SHOW_APPLY_DELAY = "SELECT current_setting('recovery_min_apply_delay')::interval"


def start_standby(primary: pg.PgServer) -> pg.PgServer:
    """A hot standby streaming from `primary` (a server started by pg.start_server)."""
    pgdata = Path(tempfile.mkdtemp(prefix="search-pg-standby-"))
    user = pg._prepare_for_user(pgdata)
    source = f"host={primary.pgdata} user=postgres"
    pg._run("pg_basebackup", "-D", str(pgdata), "-d", source, "-R", "-X", "stream",
            "-c", "fast", "--no-sync", user=user)
    # The primary's socket lives in its data directory: its lock file came along.
    for copied in (".s.PGSQL.5432.lock", "server.log"):
        (pgdata / copied).unlink(missing_ok=True)
    with (pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.write(f"unix_socket_directories = '{pgdata}'\nhot_standby_feedback = on\n")
    standby = pg.PgServer(f"postgresql://postgres@/postgres?host={pgdata}", True, pgdata, user)
    try:
        standby.start()
    except BaseException:
        shutil.rmtree(pgdata, ignore_errors=True)
        raise
    return standby


def _describe(server: pg.PgServer) -> dict[str, str]:
    return {"dsn": server.dsn, "pgdata": str(server.pgdata), "user": server.system_user or ""}


def _from_description(fields: dict[str, str]) -> pg.PgServer:
    return pg.PgServer(fields["dsn"], True, Path(fields["pgdata"]), fields["user"] or None)


def _start_here() -> None:
    """Helper process: start both servers and print how to reach them (JSON)."""
    primary = pg.start_server()  # on failure its atexit hook stops it again
    standby = start_standby(primary)
    atexit.unregister(primary.close)  # from now on the parent owns both
    print(json.dumps([_describe(primary), _describe(standby)]))


def close(server: pg.PgServer) -> None:
    """Stop and delete a server from a helper process; no-op once closed."""
    # Imported here: the helper process stays free of gRPC and of numpy's threads.
    from tests.support.reliability.outage import isolated_control

    if server.owned:
        isolated_control(server)("close")


def start_cluster() -> tuple[pg.PgServer, pg.PgServer]:
    """Start a primary and its standby from a helper process; stopped at exit at the latest."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.pg_standby"], cwd=ROOT, capture_output=True,
        text=True, timeout=2 * pg.START_TIMEOUT + 60, stdin=subprocess.DEVNULL, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"starting primary and standby failed: {done.stderr[-3000:]}")
    primary, standby = (_from_description(item) for item in json.loads(done.stdout))
    # A crashed session still stops them (standby first: it streams from the primary).
    atexit.register(close, primary)
    atexit.register(close, standby)
    return primary, standby


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[tuple[pg.PgServer, pg.PgServer]]:
    """A primary of the module's own (settings change on it) and one streaming standby."""
    primary, standby = start_cluster()
    try:
        yield primary, standby
    finally:
        try:
            close(standby)
        finally:
            close(primary)


async def fetchval(dsn: str, statement: str, *args: Any) -> Any:
    """One value from one statement on a new connection."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 60.0) -> None:
    """Poll `check` until it returns True; fail naming `what` after `within` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await check():
        assert loop.time() < end, f"{what}: not within {within} s"
        await asyncio.sleep(0.05)


async def set_apply_delay(standby: pg.PgServer, delay: str) -> None:
    """Delay replay on the standby by `delay` (e.g. '1h'; '0' replays at once again)."""
    assert standby.pgdata is not None
    with (standby.pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.write(f"recovery_min_apply_delay = '{delay}'\n")
    await fetchval(standby.dsn, "SELECT pg_reload_conf()")
    wanted = await fetchval(standby.dsn, "SELECT $1::text::interval", delay)

    async def taken() -> bool:
        # New sessions see the setting once the postmaster has reloaded (so has recovery).
        return bool(await fetchval(standby.dsn, SHOW_APPLY_DELAY) == wanted)

    await until(taken, f"recovery_min_apply_delay = {delay!r}", 10.0)


async def wait_for_database(dsn: str) -> None:
    """Wait until the database `dsn` names exists (on a standby: has been replayed)."""

    async def exists() -> bool:
        try:
            conn = await asyncpg.connect(dsn)
        except asyncpg.InvalidCatalogNameError:
            return False
        await conn.close()
        return True

    await until(exists, "the standby sees the new database")


async def wait_for_replay(primary_dsn: str, standby_dsn: str) -> str:
    """Wait until the standby has replayed every write the primary made so far; the LSN."""
    from service.store.postgres.replicas import WRITE_LSN

    lsn = str(await fetchval(primary_dsn, WRITE_LSN))

    async def replayed() -> bool:
        return bool(await fetchval(standby_dsn, REPLAYED, lsn))

    await until(replayed, f"the standby replays up to {lsn}")
    return lsn


if __name__ == "__main__":
    _start_here()
