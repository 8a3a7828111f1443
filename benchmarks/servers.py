"""The real server under test, in this process or in a child process, with server-side timing.

Server-side latency is the time the service's interceptor measures for a call (it reports
each finished call to an observer: method, status code, seconds). Client-side latency is
measured by the benchmark around the call on a real gRPC channel.

`inprocess=True` (smoke tests) runs the server on the caller's event loop. Real runs use a
child process (`python -m benchmarks.serve`) so the client's work never delays the server's
event loop; the child reports its observations over a line protocol on stdin/stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from service.api.interceptor import CallObserver

SEARCH_METHOD = "/search.v1.ProjectSearchService/SearchProjects"
UPSERT_METHOD = "/search.v1.IndexService/UpsertDocuments"
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Timing:
    """One finished call as the server saw it."""

    method: str
    code: str
    seconds: float


class TimingObserver(CallObserver):
    """Keeps every finished call until taken."""

    def __init__(self) -> None:
        self.records: list[Timing] = []

    def observe(self, method: str, code: str, seconds: float) -> None:
        """Record a finished call."""
        self.records.append(Timing(method, code, seconds))

    def take(self) -> list[Timing]:
        """Calls recorded since the last take."""
        records, self.records = self.records, []
        return records


@dataclass(frozen=True)
class ServerSpec:
    """How to configure one server."""

    data_dir: Path
    database_url: str = ""  # empty: SQLite file in data_dir
    embedder: str = "deterministic"
    exact_scan_limit: int | None = None  # None: the service default
    embed_cache: str = ""  # path of a vector cache file (local model, relevance only)
    extra: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """SEARCH_* settings of this server."""
        values = {
            "SEARCH_HOST": "127.0.0.1",
            "SEARCH_PORT": "0",
            "SEARCH_DATA_DIR": str(self.data_dir),
            "SEARCH_EMBEDDER": self.embedder,
            "SEARCH_LOG_LEVEL": "WARNING",
            "SEARCH_DB_POOL_SIZE": "10",
            "SEARCH_MAX_CONCURRENT_STREAMS": "4096",
        }
        if self.database_url:
            values["SEARCH_DATABASE_URL"] = self.database_url
        if self.exact_scan_limit is not None:
            values["SEARCH_EXACT_SCAN_LIMIT"] = str(self.exact_scan_limit)
        values.update(self.extra)
        return values

    def to_json(self) -> str:
        """The spec for the child process."""
        data = asdict(self)
        data["data_dir"] = str(self.data_dir)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> ServerSpec:
        """Inverse of to_json."""
        data: dict[str, Any] = json.loads(text)
        data["data_dir"] = Path(data["data_dir"])
        return cls(**data)


class ServerHandle(Protocol):
    """A started server."""

    @property
    def target(self) -> str:
        """host:port for a channel."""
        ...

    async def take_timings(self) -> list[Timing]:
        """Server-side timings of the calls finished since the last take."""
        ...

    async def close(self) -> None:
        """Stop the server."""
        ...


async def build_overrides(spec: ServerSpec, observer: CallObserver) -> dict[str, Any]:
    """`build_app` overrides: the observer, and a caching embedder when asked for."""
    overrides: dict[str, Any] = {"observer": observer}
    if spec.embed_cache:
        from benchmarks.embed_cache import CachingEmbedder
        from service.embeddings import build_embedder

        inner = build_embedder(spec.embedder)
        overrides["embedder"] = CachingEmbedder(inner, Path(spec.embed_cache))
    return overrides


class InProcessServer:
    """The server on the current event loop."""

    def __init__(self, app: Any, observer: TimingObserver) -> None:
        self._app = app
        self._observer = observer

    @classmethod
    async def start(cls, spec: ServerSpec) -> InProcessServer:
        """Build and start."""
        from service.server import build_app
        from service.settings import Settings

        observer = TimingObserver()
        overrides = await build_overrides(spec, observer)
        app = await build_app(Settings.from_mapping(spec.env()), **overrides)
        await app.start()
        return cls(app, observer)

    @property
    def target(self) -> str:
        """host:port."""
        return f"127.0.0.1:{self._app.port}"

    async def take_timings(self) -> list[Timing]:
        """Calls finished since the last take."""
        return self._observer.take()

    async def close(self) -> None:
        """Stop at once."""
        await self._app.stop(grace=0)


class ChildServer:
    """The server in `python -m benchmarks.serve`, spoken to over stdin/stdout lines."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, info: str = "") -> None:
        self._process = process
        self._port = port
        self.info = info  # whatever the child printed after its port

    @classmethod
    async def start(cls, spec: ServerSpec) -> ChildServer:
        """Spawn the child and wait for its port."""
        return await cls.spawn(spec.to_json())

    @classmethod
    async def spawn(cls, *args: str) -> ChildServer:
        """`python -m benchmarks.serve ARGS`; waits for its `READY <port>` line."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.serve", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(REPO), env=env,
            limit=64 * 1024 * 1024,
        )
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=300)
        if not line.startswith(b"READY "):
            await process.wait()
            raise RuntimeError(f"benchmark server failed to start (exit {process.returncode})")
        words = line.decode().split()
        return cls(process, int(words[1]), " ".join(words[2:]))

    @property
    def target(self) -> str:
        """host:port."""
        return f"127.0.0.1:{self._port}"

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the child so far (Linux /proc; 0 elsewhere)."""
        try:
            with open(f"/proc/{self._process.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def _command(self, command: str) -> bytes:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(command.encode() + b"\n")
        await self._process.stdin.drain()
        return await self._process.stdout.readline()

    async def take_timings(self) -> list[Timing]:
        """Calls finished since the last take."""
        line = await self._command("timings")
        return [Timing(m, c, s) for m, c, s in json.loads(line)]

    async def take_fusion(self) -> float:
        """Fan-out child only: seconds spent fusing since the last take."""
        return float(json.loads(await self._command("fusion")))

    async def take_requests(self) -> dict[str, int]:
        """Fan-out child only: HTTP requests per fake provider since the last take."""
        counts: dict[str, int] = json.loads(await self._command("requests"))
        return counts

    async def take_exchanges(self) -> list[list[Any]]:
        """Fan-out fakes child only: the requests read since the last take
        (`Fakes.take_exchanges`)."""
        exchanges: list[list[Any]] = json.loads(await self._command("exchanges"))
        return exchanges

    async def close(self) -> None:
        """Ask the child to stop; kill it if it does not within 30 s."""
        if self._process.returncode is not None:
            return
        try:
            await self._command("stop")
            await asyncio.wait_for(self._process.wait(), timeout=30)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self._process.kill()
            await self._process.wait()


async def start_server(spec: ServerSpec, *, inprocess: bool) -> ServerHandle:
    """A started server configured by `spec`."""
    if inprocess:
        return await InProcessServer.start(spec)
    return await ChildServer.start(spec)
