"""The server as a real child process (`python -m service serve`): address, RSS, SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support.serve_process import ROOT, clean_env

_LISTENING = re.compile(r"listening on (\S+)")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class ServerProcess:
    """A running server child; `target` is host:port."""

    process: asyncio.subprocess.Process
    target: str
    log_path: Path

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def rss_bytes(self) -> int:
        """Resident set size now (0 once the process is gone)."""
        try:
            fields = Path(f"/proc/{self.pid}/statm").read_text().split()
        except OSError:
            return 0
        return int(fields[1]) * _PAGE

    def kill(self) -> None:
        """SIGKILL: no drain, no cleanup, like a crash or the OOM killer."""
        if self.process.returncode is None:
            self.process.kill()

    async def stop(self, grace: float = 15.0) -> int:
        """SIGTERM (drain), then SIGKILL after `grace` seconds; returns the exit code."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), grace)
            except TimeoutError:
                self.kill()
        code = await self.process.wait()
        return code

    def log(self) -> str:
        """The child's stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


async def start_server(
    data_dir: Path, env: Mapping[str, str] | None = None, *, startup_timeout: float = 60.0
) -> ServerProcess:
    """Start `python -m service serve` on 127.0.0.1:<free port> and wait until it listens."""
    values = {"SEARCH_EMBEDDER": "deterministic", "SEARCH_LOG_LEVEL": "WARNING"}
    values.update(env or {})
    log_path = _new_log(data_dir)
    with _open_log(log_path) as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", "0",
            "--data-dir", str(data_dir),
            cwd=ROOT, env=clean_env(values), stdout=asyncio.subprocess.PIPE, stderr=log,
        )
    try:
        target = await asyncio.wait_for(_listening(process), startup_timeout)
    except (TimeoutError, EOFError):
        if process.returncode is None:
            process.kill()
        await process.wait()
        raise RuntimeError(f"server did not start; log:\n{_tail(log_path)}") from None
    return ServerProcess(process, target, log_path)


def _new_log(data_dir: Path) -> Path:
    """A fresh log file name in `data_dir` (created), one per start."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir / f"server-{os.getpid()}-{len(list(data_dir.glob('server-*.log')))}.log"


def _open_log(path: Path) -> IO[str]:
    return path.open("w")


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


async def _listening(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    while True:
        line = await process.stdout.readline()
        if not line:
            raise EOFError("server exited before listening")
        found = _LISTENING.search(line.decode(errors="replace"))
        if found:
            return found.group(1)


@asynccontextmanager
async def served(
    data_dir: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[ServerProcess]:
    """A server child for the duration of the block (SIGTERM on exit)."""
    server = await start_server(data_dir, env)
    try:
        yield server
    finally:
        await server.stop()
