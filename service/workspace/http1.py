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
- one resend, and only of a request whose kept-alive connection ended before a byte of its
  answer (`Stale`): the server closed the connection idle as the request went out, so it
  never read it (HTTP/1.1 allows a server to close an idle connection at any time; Go's and
  urllib3's clients resend there too). It goes once more on a new connection; the budget
  above counts it once. Any other failure is not resent (paging retries it);
- no timers: the caller bounds every request (service.deadlines.within); a cancelled or failed
  exchange closes its connection, which is never reused;
- no proxies, no cookies, no redirects, no content codings (no `Accept-Encoding` is sent).

Errors: `Unreachable` before a complete response head arrived (connect refused, reset, the
peer closed a reused connection), `CutOff` after it (the body ended early), `Malformed` for
a response that is not HTTP/1.x.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Callable, Sequence

from service.workspace.http1_connection import (
    READ_BYTES,
    AddressRefused,
    Answer,
    Connection,
    CutOff,
    Headers,
    Malformed,
    Stale,
    Unreachable,
)

__all__ = [
    "READ_BYTES",
    "AddressRefused",
    "Answer",
    "CutOff",
    "Headers",
    "Malformed",
    "OriginPool",
    "Stale",
    "Unreachable",
]

_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # not allowed in a request target
_UNSAFE_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # not allowed in a header value


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
        address_check: Callable[[str], bool] | None = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port or (443 if scheme == "https" else 80)
        self._ssl_context = ssl_context
        self._limit = limit
        self._keepalive = keepalive
        self._idle: list[Connection] = []
        self._busy = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        bracketed = f"[{host}]" if ":" in host else host
        default = self.port == (443 if scheme == "https" else 80)
        authority = bracketed if default else f"{bracketed}:{self.port}"
        self._preamble = f"Host: {authority}\r\nUser-Agent: {user_agent}\r\n"
        self._address_check = address_check

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
        try:
            return await self._send(request, cap, method == "HEAD", fresh=False)
        except Stale:  # once more, on a new connection (the other idle ones may be stale too)
            return await self._send(request, cap, method == "HEAD", fresh=True)

    async def _send(self, request: bytes, cap: int, head_only: bool, *, fresh: bool) -> Answer:
        connection = await self._acquire(fresh=fresh)
        try:
            return await connection.exchange(request, cap, head_only)
        finally:
            self._release(connection)

    async def _acquire(self, *, fresh: bool = False) -> Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise Unreachable("connection pool closed")
            now = loop.time()
            while self._idle and not fresh:
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
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._waiters.remove(waiter)
                    self._wake()  # woken, then cancelled: the next waiter gets the turn
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _open(self) -> Connection:
        """A new connection; with an `address_check`, the host is resolved here, every address
        it resolves to is checked and the connection goes to a checked one (a host that
        resolves elsewhere later, DNS rebinding, is caught at the next connection)."""
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if self.scheme == "https" else None
        hosts = [self.host] if self._address_check is None else await self._checked()
        failure: BaseException | None = None
        for host in hosts:
            try:
                _, protocol = await loop.create_connection(
                    lambda: Connection(self._lost), host, self.port, ssl=context,
                    server_hostname=self.host if context is not None else None,
                )
                return protocol
            except (OSError, ssl.SSLError) as exc:
                failure = exc
        raise Unreachable(type(failure).__name__) from None

    async def _checked(self) -> list[str]:
        assert self._address_check is not None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise Unreachable(type(exc).__name__) from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        refused = [a for a in addresses if not self._address_check(a)]
        if refused or not addresses:
            raise AddressRefused(
                f"{self.host} resolves to {refused[0] if refused else 'nothing'}: private, "
                "loopback and link-local addresses are not allowed"
            )
        return addresses

    def _release(self, connection: Connection) -> None:
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

    def _lost(self, connection: Connection) -> None:
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
