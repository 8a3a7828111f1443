"""One HTTP/1.1 keep-alive connection of the provider client (service.workspace.http1): a
request goes out, its response is parsed as it arrives (Content-Length, chunked or ended by
the connection; 1xx heads skipped; the body capped).

A buffered protocol: the transport reads into the connection's own 64 KiB buffer. With
`data_received`, asyncio's socket transport makes a 256 KiB bytes object for every read and
shrinks it to what arrived; that allocation was a fifth of the CPU of the provider I/O
(benchmarks/fanout_floor.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

__all__ = ["MAX_HEAD_BYTES", "READ_BYTES", "AddressRefused", "Answer", "Connection", "CutOff",
           "Headers", "Malformed", "Stale", "Unreachable"]

MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response
READ_BYTES = 64 * 1024  # what one read of the socket may take
_NO_BODY = frozenset({204, 304})


class Unreachable(Exception):
    """No complete response head: the provider could not be reached or closed first."""


class Stale(Unreachable):
    """A kept-alive connection ended before a byte of its answer: the server had closed it
    idle as the request went out (the request was never read; another connection may carry
    it)."""


class AddressRefused(Unreachable):
    """The host resolved to an address the pool may not reach (a private one)."""


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


class Connection(asyncio.BufferedProtocol):
    """One keep-alive connection: a request goes out, its response is parsed as it arrives."""

    def __init__(self, on_lost: Callable[[Connection], None]) -> None:
        self._on_lost = on_lost
        self._read = memoryview(bytearray(READ_BYTES))
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.exchanges = 0  # requests sent on this connection
        self._answered = False  # a byte of the current exchange's answer arrived
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

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport by construction (uvloop's does not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._read[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        """Bytes from the peer (what `buffer_updated` read into the buffer)."""
        if self._waiter is None or self._waiter.done():
            self._close()  # bytes nobody asked for: the connection is not in a known state
            return
        self._answered = True
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
            raise Stale("connection closed") if self.exchanges else Unreachable("connection closed")
        loop = asyncio.get_running_loop()
        self.exchanges += 1
        self._answered = False
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
        elif self._headers is None and not self._answered and self.exchanges > 1:
            waiter.set_exception(Stale("kept-alive connection closed before a response"))
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
