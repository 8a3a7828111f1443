"""A lean HTTP/1.1 client for provider requests: keep-alive connections on asyncio protocols.

Provider requests are small JSON exchanges on a few origins, sent at high rates (one
8-account search makes ~40). aiohttp spent about a third of the server's CPU per search on
them (request and response objects, stream readers, timers, header multidicts); this client
does only what those exchanges need:

- one request at a time per connection, `Content-Length` bodies, keep-alive reuse (LIFO, so
  few sockets stay warm), idle connections closed after `keepalive` seconds;
- responses framed by `Content-Length`, `chunked` or the connection's end; 1xx heads skipped;
- a body cap: past it only the prefix is kept (`Answer.truncated`) and the connection is
  dropped, so an error body can still be read for its reason while a 2xx one is refused;
- never a resend: a request that fails on a reused connection fails (each request counts
  against a query's budget exactly once; paging retries it);
- no timers: the caller bounds every request (asyncio.timeout); a cancelled or failed
  exchange closes its connection, which is never reused;
- no proxies, no cookies, no redirects, no content codings (no `Accept-Encoding` is sent).

Errors: `Unreachable` before a complete response head arrived (connect refused, reset, the
peer closed a reused connection), `CutOff` after it (the body ended early), `Malformed` for
a response that is not HTTP/1.x.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Answer",
    "CutOff",
    "Headers",
    "Malformed",
    "OriginPool",
    "Unreachable",
]

MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # not allowed in a request target
_UNSAFE_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # not allowed in a header value
_NO_BODY = frozenset({204, 304})


class Unreachable(Exception):
    """No complete response head: the provider could not be reached or closed first."""


class CutOff(Exception):
    """The response head arrived but its body ended early."""


class Malformed(Exception):
    """The peer's answer is not an HTTP/1.x response."""


class Headers(Mapping[str, str]):
    """Response headers, case-insensitive; a repeated header's values joined by ", "."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields  # lower-case names

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Headers({self._fields!r})"


@dataclass(slots=True)
class Answer:
    """One response: status, headers, body (only its first `cap` bytes when `truncated`)."""

    status: int
    headers: Headers
    body: bytes
    truncated: bool = False


def _parse_head(head: bytes) -> tuple[int, bool, Headers]:
    """(status, HTTP/1.1, headers) of a response head without its final blank line."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise Malformed("undecodable head") from None
    lines = text.split("\r\n")
    status_line = lines[0]
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise Malformed("not an HTTP/1.x status line")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise Malformed("malformed header line")
        key = name.lower()
        value = value.strip()
        previous = fields.get(key)
        fields[key] = value if previous is None else f"{previous}, {value}"
    return int(code), version == "HTTP/1.1", Headers(fields)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request goes out, its response is parsed as it arrives."""

    def __init__(self, on_lost: Callable[[_Connection], None]) -> None:
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Answer] | None = None
        self._buffer = bytearray()
        self._cap = 0
        self._head_only = False
        # Parse state of the current response.
        self._status = 0
        self._headers: Headers | None = None
        self._keep_alive = False
        self._framing = ""  # "length" | "chunked" | "close"
        self._remaining = 0  # bytes of the body (length) or of the current chunk (chunked)
        self._body = bytearray()
        self._chunk_state = "size"  # "size" | "data" | "crlf" | "trailers"
        self._truncated = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._close()  # bytes nobody asked for: the connection is not in a known state
            return
        self._buffer += data
        try:
            self._advance()
        except Malformed as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self._end_of_stream()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_of_stream()
        self.closed = True
        self._on_lost(self)

    # one exchange

    async def exchange(self, request: bytes, cap: int, head_only: bool) -> Answer:
        """Send `request`; the response, its body capped at `cap` bytes."""
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            raise Unreachable("connection closed")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Answer] = loop.create_future()
        self._waiter = waiter
        self._cap = cap
        self._head_only = head_only
        self._headers = None
        self._body = bytearray()
        self._truncated = False
        self.transport.write(request)
        return await waiter

    @property
    def reusable(self) -> bool:
        """True when the last exchange ended cleanly and the server keeps the connection."""
        return (not self.closed and self._keep_alive and not self._truncated
                and self._waiter is not None and self._waiter.done()
                and not self._waiter.cancelled() and self._waiter.exception() is None
                and not self._buffer)

    def close(self) -> None:
        """Abort the connection (nothing in flight is worth a graceful close)."""
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # parsing

    def _advance(self) -> None:
        while True:
            if self._headers is None:
                if not self._read_head():
                    return
                if self._waiter is None or self._waiter.done():
                    return
                continue
            if self._framing == "length":
                self._read_length()
                return
            if self._framing == "chunked":
                self._read_chunks()
                return
            self._read_until_close()
            return

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise Malformed("response head too large")
            return False
        if end > MAX_HEAD_BYTES:
            raise Malformed("response head too large")
        head = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        status, http11, headers = _parse_head(head)
        if 100 <= status < 200:
            return True  # an interim response: the final one follows
        self._status = status
        self._headers = headers
        connection = (headers.get("connection") or "").lower()
        self._keep_alive = http11 and "close" not in connection
        coding = (headers.get("transfer-encoding") or "").lower()
        length = headers.get("content-length")
        if self._head_only or status in _NO_BODY:
            self._finish()
        elif coding:
            if coding.rsplit(",", 1)[-1].strip() != "chunked":
                raise Malformed("unsupported transfer coding")
            self._framing = "chunked"
            self._chunk_state = "size"
        elif length is not None:
            if not length.isdigit():
                raise Malformed("invalid Content-Length")
            self._framing = "length"
            self._remaining = int(length)
            if self._remaining == 0:
                self._finish()
        else:
            self._framing = "close"
            self._keep_alive = False
        return True

    def _take(self, count: int) -> None:
        """Move up to `count` buffered bytes into the body, honouring the cap."""
        room = self._cap - len(self._body)
        piece = self._buffer[:count]
        del self._buffer[:count]
        if len(piece) > room:
            self._body += piece[:max(0, room)]
            self._truncated = True
        else:
            self._body += piece

    def _read_length(self) -> None:
        if not self._buffer:
            return
        count = min(self._remaining, len(self._buffer))
        if not self._body and count == self._remaining and count <= self._cap:
            self._body = self._buffer[:count]  # the common case: the whole body at once
            del self._buffer[:count]
        else:
            self._take(count)
        self._remaining -= count
        if self._truncated or self._remaining == 0:
            self._finish()

    def _read_chunks(self) -> None:
        steps = {"size": self._chunk_size, "data": self._chunk_data,
                 "crlf": self._chunk_end, "trailers": self._trailer_line}
        while not self._finished() and steps[self._chunk_state]():
            pass

    def _finished(self) -> bool:
        return self._waiter is None or self._waiter.done()

    def _chunk_size(self) -> bool:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > 1024:
                raise Malformed("chunk size line too long")
            return False
        line = bytes(self._buffer[:end]).split(b";", 1)[0].strip()
        del self._buffer[: end + 2]
        try:
            size = int(line, 16)
        except ValueError:
            raise Malformed("invalid chunk size") from None
        if size < 0:
            raise Malformed("invalid chunk size")
        self._remaining = size
        self._chunk_state = "data" if size else "trailers"
        return True

    def _chunk_data(self) -> bool:
        if not self._buffer:
            return False
        count = min(self._remaining, len(self._buffer))
        self._take(count)
        self._remaining -= count
        if self._truncated:
            self._finish()
        elif not self._remaining:
            self._chunk_state = "crlf"
        return not self._remaining

    def _chunk_end(self) -> bool:
        if len(self._buffer) < 2:
            return False
        if self._buffer[:2] != b"\r\n":
            raise Malformed("chunk not followed by CRLF")
        del self._buffer[:2]
        self._chunk_state = "size"
        return True

    def _trailer_line(self) -> bool:
        """Trailers are read and dropped, up to the blank line that ends the response."""
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise Malformed("trailers too large")
            return False
        del self._buffer[: end + 2]
        if end == 0:
            self._finish()
        return True

    def _read_until_close(self) -> None:
        if self._buffer:
            self._take(len(self._buffer))
            if self._truncated:
                self._finish()

    def _end_of_stream(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._framing == "close":
            self._finish()
        elif self._headers is None:
            waiter.set_exception(Unreachable("connection closed before a response"))
        else:
            waiter.set_exception(CutOff("connection closed inside the response body"))

    def _finish(self) -> None:
        waiter = self._waiter
        assert self._headers is not None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self._status, self._headers, bytes(self._body),
                                     self._truncated))

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._close()


class OriginPool:
    """Keep-alive connections to one origin, at most `limit` at once (callers beyond it wait)."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int | None,
        *,
        ssl_context: Callable[[], ssl.SSLContext],
        user_agent: str,
        limit: int = 64,
        keepalive: float = 10.0,
        connect: Callable[[str, int], object] | None = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port or (443 if scheme == "https" else 80)
        self._ssl_context = ssl_context
        self._limit = limit
        self._keepalive = keepalive
        self._idle: list[_Connection] = []
        self._busy = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        bracketed = f"[{host}]" if ":" in host else host
        default = self.port == (443 if scheme == "https" else 80)
        authority = bracketed if default else f"{bracketed}:{self.port}"
        self._preamble = f"Host: {authority}\r\nUser-Agent: {user_agent}\r\n"
        self._connect_check = connect

    async def request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        *,
        cap: int,
    ) -> Answer:
        """One exchange; the answer's body holds at most `cap` bytes (`truncated` past it)."""
        if _UNSAFE.search(target) or not target.startswith("/"):
            raise ValueError("request target is not a valid origin-form path")
        lines = [f"{method} {target} HTTP/1.1\r\n", self._preamble]
        for name, value in headers:
            if _UNSAFE_VALUE.search(value):
                raise ValueError(f"header {name} holds a control character")
            lines.append(f"{name}: {value}\r\n")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}\r\n")
        lines.append("\r\n")
        request = "".join(lines).encode("latin-1")
        if body:
            request += body
        connection = await self._acquire()
        try:
            return await connection.exchange(request, cap, method == "HEAD")
        finally:
            self._release(connection)

    async def _acquire(self) -> _Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise Unreachable("connection pool closed")
            now = loop.time()
            while self._idle:
                connection = self._idle.pop()
                if not connection.closed and now - connection.idle_since < self._keepalive:
                    self._busy += 1
                    return connection
                connection.close()
            if self._busy < self._limit:
                self._busy += 1
                try:
                    return await self._open()
                except BaseException:
                    self._busy -= 1
                    self._wake()
                    raise
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._connect_check is not None:
            result = self._connect_check(self.host, self.port)
            if asyncio.iscoroutine(result):
                await result
        context = self._ssl_context() if self.scheme == "https" else None
        try:
            _, protocol = await loop.create_connection(
                lambda: _Connection(self._lost), self.host, self.port, ssl=context,
                server_hostname=self.host if context is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise Unreachable(type(exc).__name__) from None
        return protocol

    def _release(self, connection: _Connection) -> None:
        self._busy -= 1
        if connection.reusable and not self._closed and len(self._idle) < self._limit:
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle.append(connection)
            self._arm_sweeper()
        else:
            connection.close()
        self._wake()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return

    def _lost(self, connection: _Connection) -> None:
        if connection in self._idle:
            self._idle.remove(connection)

    def _arm_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._keepalive, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for `keepalive` seconds; re-arm while any stay idle."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        keep = []
        for connection in self._idle:
            if connection.closed or now - connection.idle_since >= self._keepalive:
                connection.close()
            else:
                keep.append(connection)
        self._idle = keep
        if keep:
            self._arm_sweeper()

    def close(self) -> None:
        """Close every idle connection; busy ones close when their exchange ends."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    @property
    def idle_connections(self) -> int:
        """Connections kept open for reuse now."""
        return len(self._idle)
