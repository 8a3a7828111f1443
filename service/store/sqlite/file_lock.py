"""A lock shared by every process that opens one database file (flock on a file beside it).

SQLite's own write lock cannot be held across an await without stalling every writer of the
file, so work that must not run twice at once across processes (spending a single-use refresh
token) takes this lock instead and writes through the normal writer afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["file_lock"]

POLL_SECONDS = 0.02


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive flock on `path` (created owner-only); polls so it can be cancelled."""
    # One open file description per holder: flock then also excludes other holders in this
    # process, which POSIX record locks would not.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while not _try_lock(fd):  # noqa: ASYNC110 - another process holds it: no event to await
            await asyncio.sleep(POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # releases the lock
