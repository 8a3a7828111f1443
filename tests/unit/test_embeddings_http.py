"""OpenAIEmbedder against a real HTTP server on loopback that speaks OpenAI's embeddings API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from service.embeddings import Embedder, EmbeddingError, OpenAIEmbedder
from service.embeddings.http import parse_retry_after

DIMS = 8
API_KEY = "sk-test-secret-123"


@dataclass(frozen=True)
class Reply:
    """What the fake server answers to one request; the default is a good 200."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # None: build embeddings for the request's input
    dims: int = DIMS
    delay: float = 0.0


@dataclass(frozen=True)
class Seen:
    """One request the fake server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def raw_vector(text: str, dims: int) -> list[float]:
    """Deliberately not unit length, so the test sees the client normalise."""
    seed = sum(text.encode()) + len(text)
    return [float((seed + 3 * j) % 11 + 1) for j in range(dims)]


def unit(vector: list[float]) -> list[float]:
    array = np.array(vector, dtype=np.float64)
    return list(array / np.linalg.norm(array))


class FakeOpenAI:
    """A tiny HTTP/1.1 server (asyncio streams) for `POST /v1/embeddings`, driven by a script."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up, e.g. after its timeout
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        request_line = await reader.readline()
        if not request_line:
            return False
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = json.loads(raw) if raw else {}
        self.seen.append(Seen(request_line.decode().split()[1], headers, body))
        reply = self.script.popleft() if self.script else Reply()
        await asyncio.sleep(reply.delay)
        payload = reply.body if reply.body is not None else self._embeddings(body, reply.dims)
        head = [f"HTTP/1.1 {reply.status} X", f"Content-Length: {len(payload)}"]
        head += ["Content-Type: application/json", "Connection: keep-alive"]
        head += [f"{name}: {value}" for name, value in reply.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        return True

    @staticmethod
    def _embeddings(body: dict[str, Any], dims: int) -> bytes:
        texts: list[str] = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": raw_vector(text, dims)}
            for i, text in enumerate(texts)
        ]
        data.reverse()  # the API does not promise order; the client must sort by index
        return json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def embedder(server: FakeOpenAI) -> AsyncIterator[OpenAIEmbedder]:
    client = make(server)
    yield client
    await client.aclose()


def make(server: FakeOpenAI, **options: Any) -> OpenAIEmbedder:
    settings: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "text-embedding-test",
        "dimensions": DIMS,
        "api_key": API_KEY,
        "batch_size": 64,
        "timeout": 5.0,
        "max_attempts": 3,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    }
    settings.update(options)
    return OpenAIEmbedder(**settings)


async def test_embeds_in_order_with_unit_vectors(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.identity.key() == "text-embedding-test@8"
    texts = [f"text number {i}" for i in range(150)]
    vectors = await embedder.embed(texts)
    assert [len(s.body["input"]) for s in server.seen] == [64, 64, 22]
    assert [s.path for s in server.seen] == ["/v1/embeddings"] * 3
    assert server.seen[0].body["model"] == "text-embedding-test"
    assert "dimensions" not in server.seen[0].body
    np.testing.assert_allclose(vectors, [unit(raw_vector(t, DIMS)) for t in texts], rtol=1e-6)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(np.ones(150), abs=1e-6)


async def test_sends_bearer_key_but_never_shows_it(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    await embedder.embed(["x"])
    assert server.seen[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in repr(embedder)
    assert "api_key='***'" in repr(embedder)

    anonymous = make(server, api_key=None)
    await anonymous.embed(["y"])
    await anonymous.aclose()
    assert "authorization" not in server.seen[1].headers


async def test_empty_input_makes_no_request(server: FakeOpenAI, embedder: OpenAIEmbedder) -> None:
    assert await embedder.embed([]) == []
    assert server.seen == []


async def test_send_dimensions(server: FakeOpenAI) -> None:
    client = make(server, send_dimensions=True)
    await client.embed(["x"])
    await client.aclose()
    assert server.seen[0].body["dimensions"] == DIMS


async def test_429_then_200_honours_retry_after(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    server.script.append(Reply(429, {"Retry-After": "0.3"}, b'{"error": "slow down"}'))
    started = time.monotonic()
    vectors = await embedder.embed(["hello"])
    assert time.monotonic() - started >= 0.3
    assert len(server.seen) == 2
    np.testing.assert_allclose(vectors, [unit(raw_vector("hello", DIMS))], rtol=1e-6)


async def test_retry_after_ms_is_preferred(server: FakeOpenAI, embedder: OpenAIEmbedder) -> None:
    server.script.append(Reply(429, {"retry-after-ms": "200", "Retry-After": "20"}, b"{}"))
    started = time.monotonic()
    await embedder.embed(["hello"])
    assert 0.2 <= time.monotonic() - started < 5
    assert len(server.seen) == 2


async def test_too_long_retry_after_fails_at_once(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    server.script.append(Reply(429, {"Retry-After": "120"}, b"{}"))
    with pytest.raises(EmbeddingError, match="HTTP 429") as raised:
        await embedder.embed(["hello"])
    assert raised.value.retry_after == 120.0
    assert len(server.seen) == 1


async def test_500_then_200_recovers(server: FakeOpenAI, embedder: OpenAIEmbedder) -> None:
    server.script.extend([Reply(500, body=b"oops"), Reply(503, body=b"busy")])
    assert len(await embedder.embed(["a", "b"])) == 2
    assert len(server.seen) == 3


async def test_persistent_500_gives_up_after_max_attempts(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    server.script.extend([Reply(500, body=b"oops")] * 5)
    with pytest.raises(EmbeddingError, match=r"after 3 attempt\(s\): HTTP 500"):
        await embedder.embed(["a"])
    assert len(server.seen) == 3


async def test_wrong_dimensions_fail_without_retry(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    server.script.append(Reply(dims=5))
    with pytest.raises(EmbeddingError, match=r"returned 5-dimensional vectors, configured .* 8"):
        await embedder.embed(["a", "b"])
    assert len(server.seen) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "malformed"),
        (b'{"data": "nope"}', "malformed"),
        (b'{"data": [{"index": 0}, {"index": 1}]}', "malformed"),
        (
            b'{"data": [{"index": 0, "embedding": "AAAAAAAA"},'
            b' {"index": 1, "embedding": "AAAAAAAA"}]}',
            "malformed",
        ),
        (b'{"data": [{"index": 0, "embedding": [1, 2, 3, 4, 5, 6, 7, 8]}]}', "1 vectors for 2"),
        (
            b'{"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}',
            "duplicate",
        ),
    ],
)
async def test_malformed_responses(
    server: FakeOpenAI, embedder: OpenAIEmbedder, body: bytes, message: str
) -> None:
    server.script.append(Reply(body=body))
    with pytest.raises(EmbeddingError, match=message):
        await embedder.embed(["a", "b"])
    assert len(server.seen) == 1


async def test_zero_vector_is_an_error(server: FakeOpenAI, embedder: OpenAIEmbedder) -> None:
    server.script.append(Reply(body=b'{"data": [{"index": 0, "embedding": [0,0,0,0,0,0,0,0]}]}'))
    with pytest.raises(EmbeddingError, match="zero vector"):
        await embedder.embed(["a"])


async def test_client_error_is_not_retried_and_hides_the_key(
    server: FakeOpenAI, embedder: OpenAIEmbedder
) -> None:
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {API_KEY}"}})
    server.script.append(Reply(401, body=echo.encode()))
    with pytest.raises(EmbeddingError, match="HTTP 401") as raised:
        await embedder.embed(["a"])
    assert API_KEY not in str(raised.value)
    assert "***" in str(raised.value)
    assert len(server.seen) == 1


async def test_timeouts_are_retried_then_reported(server: FakeOpenAI) -> None:
    server.script.extend([Reply(delay=2.0), Reply(delay=2.0)])
    client = make(server, timeout=0.2, max_attempts=2)
    with pytest.raises(EmbeddingError, match="ReadTimeout"):
        await client.embed(["a"])
    await client.aclose()
    assert len(server.seen) == 2


async def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        dimensions=DIMS,
        max_attempts=2,
        backoff_base=0.01,
    )
    with pytest.raises(EmbeddingError, match=r"after 2 attempt\(s\): ConnectError"):
        await client.embed(["a"])
    await client.aclose()


def test_constructor_validates_settings() -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIEmbedder(base_url="ftp://example.invalid", model="m", dimensions=4)
    with pytest.raises(ValueError, match="positive"):
        OpenAIEmbedder(base_url="http://127.0.0.1:9", model="m", dimensions=4, batch_size=0)


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now=now) == pytest.approx(10.0)
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:00 GMT", now=now) == 0.0
