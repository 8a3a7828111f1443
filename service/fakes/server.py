"""A tiny HTTP/1.1 server on asyncio streams, with fault knobs, for fake provider APIs.

Real sockets on loopback: the code under test speaks real HTTP through httpx. Faults are
applied per request (optionally only to paths containing a substring, a limited number of
times): latency, any status with headers, malformed JSON, a truncated body, a connection
reset, a body trickled slowly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
import struct
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# Requests kept in `FakeHttpServer.log` (the most recent): a demo or benchmark server answers
# hundreds of thousands, and a test reads a handful.
LOG_LIMIT = 10_000

_REASONS = {
    200: "OK",
    204: "No Content",
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass
class Request:
    """One request as the fake saw it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    received: float = field(default_factory=time.monotonic)  # when it was read (monotonic)

    # Parsed once per request (handlers read several parameters; benchmarks send thousands).
    @functools.cached_property
    def path(self) -> str:
        """Decoded path without the query string."""
        return unquote(self.raw_path)

    @functools.cached_property
    def raw_path(self) -> str:
        """Path as sent (percent-encoding kept)."""
        return urlsplit(self.target).path

    @functools.cached_property
    def query(self) -> dict[str, list[str]]:
        """Query parameters (repeated keys kept)."""
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    def arg(self, name: str, default: str = "") -> str:
        """First value of a query parameter."""
        return self.query.get(name, [default])[0]

    def json(self) -> Any:
        """The body parsed as JSON (None when empty)."""
        return json.loads(self.body) if self.body else None


@dataclass
class Response:
    """What a route answers."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(
        cls, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> Response:
        """A JSON response."""
        merged = {"Content-Type": "application/json; charset=utf-8", **(headers or {})}
        return cls(status, json.dumps(data).encode(), merged)


@dataclass
class Fault:
    """One misbehaviour. `kind`: latency, status, malformed, truncated, reset, drip, body,
    stale (a request on a kept-alive connection finds it closed by the server, unanswered:
    an idle timeout that fired as the request arrived; requests on new connections are
    served and do not count)."""

    kind: str
    path: str = ""  # only requests whose path contains this
    times: int | None = None  # apply to this many matching requests (None = always)
    on_call: int | None = None  # only the n-th request (1-based) whose path contains `path`
    calls: int = 0  # requests seen whose path contains `path`
    delay: float = 0.0  # seconds before answering (latency) or between drip chunks
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # JSON body for `status`/`body` faults

    def matches(self, request: Request) -> bool:
        """True when this fault applies to `request` and has uses left (counts the call)."""
        if self.path not in request.path:
            return False
        self.calls += 1
        if self.on_call is not None and self.calls != self.on_call:
            return False
        return self.times is None or self.times > 0


Handler = Callable[[Request], Awaitable[Response]]


class FakeHttpServer:
    """Serves `handler` on 127.0.0.1:<ephemeral>, applying `faults` before routing."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.faults: list[Fault] = []
        self.latency = 0.0
        self.requests: Counter[str] = Counter()  # every request seen, by path
        self.log: deque[Request] = deque(maxlen=LOG_LIMIT)  # the most recent requests
        self.served = 0  # requests read since the last reset (the log keeps the latest)
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.port = 0

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on an ephemeral loopback port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is not None:
            self._server.close()
        # Idle keep-alive connections (clients pool them across calls) end on EOF; a request
        # still being answered is cancelled.
        for task, writer in list(self._connections.items()):
            writer.transport.abort()
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))
        if self._server is not None:
            await self._server.wait_closed()

    def reset(self) -> None:
        """Forget faults, latency and the request log."""
        self.faults.clear()
        self.latency = 0.0
        self.requests.clear()
        self.log.clear()
        self.served = 0

    def _take_fault(self, request: Request, reused: bool) -> Fault | None:
        chosen = None
        for fault in self.faults:  # every fault counts the request, the first one applies
            if fault.kind == "stale" and not reused:
                continue
            if fault.matches(request) and chosen is None:
                chosen = fault
        if chosen is not None and chosen.times is not None:
            chosen.times -= 1
        return chosen

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # stop(): end quietly (asyncio logs a handler task that ends cancelled)
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reused = False
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            self.requests[request.path] += 1
            self.log.append(request)
            self.served += 1
            fault = self._take_fault(request, reused)
            reused = True
            if fault is not None and fault.kind == "stale":
                return  # closed unanswered (FIN), as an idle timeout would have
            delay = self.latency + (fault.delay if fault and fault.kind == "latency" else 0.0)
            if delay:
                await asyncio.sleep(delay)
            if fault is not None and fault.kind == "reset":
                _reset(writer)
                return
            response = await self._respond(request, fault)
            if fault is not None and fault.kind == "truncated":
                writer.write(_head(response, len(response.body) + 512) + response.body)
                await writer.drain()
                return
            if fault is not None and fault.kind == "drip":
                await _drip(writer, response, fault.delay or 0.05)
            else:
                writer.write(_head(response, len(response.body)) + response.body)
                await writer.drain()
            if request.headers.get("connection", "").lower() == "close":
                return

    async def _respond(self, request: Request, fault: Fault | None) -> Response:
        if fault is None or fault.kind in ("latency", "drip", "truncated"):
            response = await self._handler(request)
            if fault is not None and fault.kind in ("drip", "truncated") and not response.body:
                response.body = b'{"padding": "' + b"x" * 256 + b'"}'
            return response
        if fault.kind == "status":
            body = fault.body if fault.body is not None else {"message": "fault injected"}
            return Response.json(body, fault.status, fault.headers)
        if fault.kind == "body":
            return Response.json(fault.body, 200, fault.headers)
        if fault.kind == "malformed":
            return Response(200, b'{"items": [1, 2,', {"Content-Type": "application/json"})
        raise ValueError(f"unknown fault kind {fault.kind!r}")


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return Request(method, target, headers, body)


def _head(response: Response, length: int) -> bytes:
    reason = _REASONS.get(response.status, "Status")
    lines = [f"HTTP/1.1 {response.status} {reason}", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in response.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _drip(writer: asyncio.StreamWriter, response: Response, interval: float) -> None:
    writer.write(_head(response, len(response.body)))
    await writer.drain()
    for index in range(0, len(response.body), 16):
        writer.write(response.body[index : index + 16])
        await writer.drain()
        await asyncio.sleep(interval)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # SO_LINGER 0 turns close into an RST, which clients see as a connection reset.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
