"""The lean HTTP/1.1 client against real loopback servers that frame answers every legal way,
and some illegal ones: keep-alive reuse, chunked and close-delimited bodies, interim heads,
the body cap, cut-offs, stale pooled sockets, cancellation, the connection limit, TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from service.workspace import http1

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection


class Server:
    """A raw HTTP/1.1 server on loopback whose answers a test writes byte by byte."""

    def __init__(self, reply: Reply, context: ssl.SSLContext | None = None) -> None:
        self.reply = reply
        self.context = context
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                if not await self.reply(request, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self.writers:
            writer.close()
        await self._server.wait_closed()


Start = Callable[..., Awaitable[tuple["Server", http1.OriginPool]]]


def _json(body: bytes = b'{"ok":true}', status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _ok(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(_json())
    return True


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    started: list[tuple[Server, http1.OriginPool]] = []

    async def start(reply: Reply = _ok, **options: object) -> tuple[Server, http1.OriginPool]:
        server = Server(reply)
        port = await server.start()
        pool = http1.OriginPool("http", "127.0.0.1", port, ssl_context=ssl.create_default_context,
                                user_agent="test/1", **options)  # type: ignore[arg-type]
        started.append((server, pool))
        return server, pool

    yield start
    for server, pool in started:
        pool.close()
        await server.close()


async def _get(pool: http1.OriginPool, target: str = "/x", cap: int = 1 << 20) -> http1.Answer:
    return await pool.request("GET", target, [("Accept", "application/json")], None, cap=cap)


async def test_sequential_requests_reuse_one_connection_and_send_what_was_asked(
    serve: Start,
) -> None:
    server, pool = await serve()
    for _ in range(3):
        answer = await _get(pool, "/search?q=a%20b")
        assert (answer.status, answer.body, answer.truncated) == (200, b'{"ok":true}', False)
        assert answer.headers["content-type"] == answer.headers.get("Content-Type")
    assert server.connections == 1
    first = server.requests[0].decode()
    assert first.startswith("GET /search?q=a%20b HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{pool.port}\r\n" in first
    assert "User-Agent: test/1\r\n" in first
    assert "Accept-Encoding" not in first  # bodies are read as sent


async def test_a_post_carries_its_body_with_its_length(serve: Start) -> None:
    server, pool = await serve()
    await pool.request("POST", "/q", [("Content-Type", "application/json")], b'{"a":1}', cap=100)
    assert server.requests[0].endswith(b"Content-Length: 7\r\n\r\n{\"a\":1}")


async def test_chunked_bodies_with_extensions_and_trailers_and_interim_heads(serve: Start) -> None:
    async def chunked(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nLink: <a>\r\nLink: <b>\r\n"
                     b"\r\n4;ext=1\r\n{\"a\"\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)  # the rest in another segment
        writer.write(b"3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n")
        return True

    server, pool = await serve(chunked)
    answer = await _get(pool)
    assert answer.body == b'{"a":1}'
    assert answer.headers["link"] == "<a>, <b>"
    assert (await _get(pool)).body == b'{"a":1}'
    assert server.connections == 1  # a chunked answer leaves the connection reusable


async def test_a_body_ended_by_the_connection_is_complete_and_not_reused(serve: Start) -> None:
    async def until_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"all\":")
        await writer.drain()
        writer.write(b"1}")
        return False

    server, pool = await serve(until_close)
    assert (await _get(pool)).body == b'{"all":1}'
    assert (await _get(pool)).body == b'{"all":1}'
    assert server.connections == 2


async def test_204_and_304_have_no_body(serve: Start) -> None:
    async def empty(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        return True

    server, pool = await serve(empty)
    assert (await _get(pool)).body == b""
    assert (await _get(pool)).status == 204
    assert server.connections == 1


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_past_the_cap_only_the_prefix_is_kept_and_the_connection_dropped(
    serve: Start, framing: str
) -> None:
    body = b"x" * 5000

    async def big(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if framing == "length":
            writer.write(_json(body, "403 Forbidden"))
        elif framing == "chunked":
            writer.write(b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"".join(b"3e8\r\n" + body[:1000] + b"\r\n" for _ in range(5))
                         + b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 403 Forbidden\r\n\r\n" + body)
            return False
        return True

    server, pool = await serve(big)
    answer = await _get(pool, cap=1024)
    assert (answer.status, len(answer.body), answer.truncated) == (403, 1024, True)
    assert (await _get(pool, cap=1 << 20)).body == body
    assert server.connections == 2


async def test_a_connection_closed_before_the_head_is_unreachable_inside_the_body_cut_off(
    serve: Start
) -> None:
    async def reset(request: bytes, writer: asyncio.StreamWriter) -> bool:
        return False

    async def cut(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"half\":")
        return False

    _, pool = await serve(reset)
    with pytest.raises(http1.Unreachable):
        await _get(pool)
    _, pool = await serve(cut)
    with pytest.raises(http1.CutOff):
        await _get(pool)


async def test_an_idle_connection_the_server_closed_is_not_used_again(serve: Start) -> None:
    server, pool = await serve()
    await _get(pool)
    for writer in server.writers:  # the server's idle timeout
        writer.close()
    await asyncio.sleep(0.05)
    assert pool.idle_connections == 0
    assert (await _get(pool)).status == 200
    assert server.connections == 2


async def test_a_kept_alive_connection_closed_as_the_request_arrives_is_resent_once(
    serve: Start,
) -> None:
    """The race a server's idle timeout leaves: the connection looked open when it was taken,
    and the server closed it as the request went out, unread. Once per request, on a new
    connection; a new connection's failure is not resent."""
    served: dict[asyncio.StreamWriter, int] = {}

    async def idle_timeout(request: bytes, writer: asyncio.StreamWriter) -> bool:
        served[writer] = served.get(writer, 0) + 1
        if served[writer] > 1:
            return False  # closed unanswered
        writer.write(_json())
        return True

    server, pool = await serve(idle_timeout)
    for round_ in range(1, 4):
        answer = await pool.request("POST", "/batch", [], b"{}", cap=1 << 20)
        assert answer.status == 200
        # the first round opens one connection; each later one tries the kept one, then a new one
        assert (server.connections, len(server.requests)) == (round_, 2 * round_ - 1)

    async def always_closed(request: bytes, writer: asyncio.StreamWriter) -> bool:
        served[writer] = served.get(writer, 0) + 1
        if served[writer] > 1 or len(server.requests) > 1:
            return False
        writer.write(_json())
        return True

    server, pool = await serve(always_closed)
    await _get(pool)
    with pytest.raises(http1.Unreachable) as caught:
        await _get(pool)
    assert not isinstance(caught.value, http1.Stale)  # the new connection failed: no more tries
    assert (server.connections, len(server.requests)) == (2, 3)


async def test_a_kept_alive_connection_that_began_an_answer_is_not_resent(serve: Start) -> None:
    async def interim_then_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) == 1:
            writer.write(_json())
            return True
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return False

    server, pool = await serve(interim_then_close)
    await _get(pool)
    with pytest.raises(http1.Unreachable) as caught:
        await _get(pool)
    assert not isinstance(caught.value, http1.Stale)
    assert len(server.requests) == 2


async def test_a_cancelled_exchange_closes_its_connection(serve: Start) -> None:
    async def slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) == 1:
            await asyncio.sleep(0.3)
        writer.write(_json())
        return True

    server, pool = await serve(slow)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await _get(pool)
    answer = await _get(pool)  # a new connection: the late answer is never read as this one's
    assert answer.status == 200
    assert server.connections == 2


async def test_malformed_answers_and_unsafe_requests(serve: Start) -> None:
    async def junk(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return True

    _, pool = await serve(junk)
    with pytest.raises(http1.Malformed):
        await _get(pool)
    with pytest.raises(ValueError, match="control character"):
        await pool.request("GET", "/x", [("Authorization", "Bearer a\r\nX-Evil: 1")], None, cap=9)
    with pytest.raises(ValueError, match="origin-form"):
        await pool.request("GET", "/x y", [], None, cap=9)
    with pytest.raises(ValueError, match="origin-form"):
        await pool.request("GET", "http://elsewhere/x", [], None, cap=9)


async def test_concurrent_requests_beyond_the_limit_wait_for_a_connection(serve: Start) -> None:
    open_now = 0
    most = 0

    async def counted(request: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        await asyncio.sleep(0.02)
        open_now -= 1
        writer.write(_json())
        return True

    server, pool = await serve(counted, limit=3)
    answers = await asyncio.gather(*(_get(pool) for _ in range(12)))
    assert all(a.status == 200 for a in answers)
    assert most <= 3
    assert server.connections <= 3


async def test_idle_connections_close_after_the_keepalive(serve: Start) -> None:
    _, pool = await serve(keepalive=0.1)
    await _get(pool)
    assert pool.idle_connections == 1
    await asyncio.sleep(0.35)
    assert pool.idle_connections == 0


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), and its key."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


async def test_https_verifies_the_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server = Server(_ok, server_context)
    port = await server.start()
    trusting = ssl.create_default_context(cafile=str(cert))
    pool = http1.OriginPool("https", "127.0.0.1", port, ssl_context=lambda: trusting,
                            user_agent="test/1")
    untrusting = http1.OriginPool("https", "127.0.0.1", port,
                                  ssl_context=ssl.create_default_context, user_agent="test/1")
    try:
        assert (await _get(pool)).body == b'{"ok":true}'
        with pytest.raises(http1.Unreachable, match="SSL"):
            await _get(untrusting)
    finally:
        pool.close()
        untrusting.close()
        await server.close()


async def test_over_tls_a_kept_alive_connection_closed_on_arrival_is_resent_too(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    served: dict[asyncio.StreamWriter, int] = {}

    async def idle_timeout(request: bytes, writer: asyncio.StreamWriter) -> bool:
        served[writer] = served.get(writer, 0) + 1
        if served[writer] > 1:
            return False  # closed unanswered (close_notify, then FIN)
        writer.write(_json())
        return True

    server = Server(idle_timeout, server_context)
    port = await server.start()
    trusting = ssl.create_default_context(cafile=str(cert))
    pool = http1.OriginPool("https", "127.0.0.1", port, ssl_context=lambda: trusting,
                            user_agent="test/1")
    try:
        for _ in range(3):
            assert (await _get(pool)).status == 200
        assert (server.connections, len(server.requests)) == (3, 5)
    finally:
        pool.close()
        await server.close()


async def test_an_address_check_refuses_a_host_that_resolves_to_a_refused_address(
    serve: Start,
) -> None:
    server, _ = await serve()
    refusing = http1.OriginPool("http", "localhost", server_port(server),
                                ssl_context=ssl.create_default_context, user_agent="test/1",
                                address_check=lambda address: False)
    allowing = http1.OriginPool("http", "localhost", server_port(server),
                                ssl_context=ssl.create_default_context, user_agent="test/1",
                                address_check=lambda address: address in ("127.0.0.1", "::1"))
    try:
        with pytest.raises(http1.AddressRefused, match="resolves to"):
            await _get(refusing)
        assert server.connections == 0  # refused before a connection was opened
        assert (await _get(allowing)).status == 200
    finally:
        refusing.close()
        allowing.close()


def server_port(server: Server) -> int:
    assert server._server is not None
    return int(server._server.sockets[0].getsockname()[1])


async def test_a_waiter_cancelled_as_its_turn_comes_passes_the_turn_on(
    serve: Start, monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = asyncio.Event()

    async def held(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) == 1:
            await release.wait()
        writer.write(_json())
        return True

    server, pool = await serve(held, limit=1)
    first = asyncio.create_task(_get(pool))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(_get(pool))
    third = asyncio.create_task(_get(pool))
    await asyncio.sleep(0.05)
    wake = pool._wake

    def wake_then_cancel_the_woken() -> None:  # `second` is woken, then cancelled at once
        wake()
        monkeypatch.setattr(pool, "_wake", wake)
        second.cancel()

    monkeypatch.setattr(pool, "_wake", wake_then_cancel_the_woken)
    release.set()
    assert (await first).status == 200
    with pytest.raises(asyncio.CancelledError):
        await second
    async with asyncio.timeout(2):
        assert (await third).status == 200


def _big(size: int) -> bytes:
    """`size` bytes that tell any misplaced or repeated piece apart."""
    return b"".join(b"%08d" % i for i in range(size // 8 + 1))[:size]


async def _big_answers(request: bytes, writer: asyncio.StreamWriter) -> bool:
    """/length/N: N bytes with Content-Length; /chunked/N: N bytes in uneven chunks."""
    framing, size = request.split(b" ", 2)[1].decode().strip("/").split("/")
    body = _big(int(size))
    if framing == "length":
        writer.write(_json(body))
        return True
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    at, step = 0, 1
    while at < len(body):
        piece = body[at : at + step]
        writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        at, step = at + len(piece), step * 3 + 7
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    return True


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_bodies_of_many_reads_arrive_whole_over_plain_and_tls(
    tls: bool, certificate: tuple[Path, Path]
) -> None:
    """Bodies several times the connection's read buffer, one after another on one
    connection: every byte in place, and the connection reused."""
    server_context = None
    trusting = ssl.create_default_context()
    if tls:
        cert, key = certificate
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_context.load_cert_chain(cert, key)
        trusting = ssl.create_default_context(cafile=str(cert))
    server = Server(_big_answers, server_context)
    port = await server.start()
    pool = http1.OriginPool("https" if tls else "http", "127.0.0.1", port,
                            ssl_context=lambda: trusting, user_agent="test/1")
    sizes = [0, 1, http1.READ_BYTES - 1, http1.READ_BYTES, http1.READ_BYTES + 1,
             5 * http1.READ_BYTES + 123, 3_000_000]
    try:
        for framing in ("length", "chunked"):
            for size in sizes:
                answer = await _get(pool, f"/{framing}/{size}", cap=4 << 20)
                assert answer.status == 200
                assert not answer.truncated
                assert bytes(answer.body) == _big(size), (framing, size)
        assert server.connections == 1
    finally:
        pool.close()
        await server.close()
