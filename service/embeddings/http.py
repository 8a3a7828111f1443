"""OpenAI-compatible HTTP embedder: `POST {base_url}/embeddings`, batched, with bounded retries."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
from numpy.typing import NDArray

from service.embeddings.base import EmbeddingError, EmbeddingIdentity, check_texts, normalize_rows

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 64
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_ATTEMPTS = 4
# What OpenAI's own client retries, besides every 5xx.
_RETRY_STATUS = frozenset({408, 409, 429})
_BODY_SNIPPET = 200


class _RetryableError(Exception):
    """One failed attempt worth repeating; `retry_after` is the server's wish, if any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _retry_after(response: httpx.Response) -> float | None:
    # retry-after-ms is what OpenAI sends for sub-second waits; prefer it when present.
    millis = parse_retry_after(response.headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    return parse_retry_after(response.headers.get("retry-after"))


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


class OpenAIEmbedder:
    """Embeds through any server speaking OpenAI's embeddings API (OpenAI, vLLM, Ollama, ...)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimensions: int,
        api_key: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 30.0,
        send_dimensions: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if batch_size <= 0 or max_attempts <= 0 or timeout <= 0:
            raise ValueError("batch_size, max_attempts and timeout must be positive")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"embedding base_url must be an http(s) URL, got {base_url!r}")
        self._identity = EmbeddingIdentity(model, dimensions)
        self._url = base_url.rstrip("/") + "/embeddings"
        self._api_key = api_key
        self._batch_size = batch_size
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._max_retry_after = max_retry_after
        # Only models with adjustable output size (text-embedding-3-*) accept `dimensions`.
        self._send_dimensions = send_dimensions
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
            follow_redirects=False,
        )

    @property
    def identity(self) -> EmbeddingIdentity:
        """The configured model name and dimensions."""
        return self._identity

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed in batches of `batch_size`, in order; EmbeddingError once retries run out."""
        batch = check_texts(texts)
        out: list[list[float]] = []
        for start in range(0, len(batch), self._batch_size):
            chunk = batch[start : start + self._batch_size]
            out.extend(normalize_rows(await self._embed_batch(chunk)).tolist())
        return out

    async def warmup(self) -> None:
        """Nothing to load: the model is remote, and each call reports its own failures."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.aclose()

    async def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        for attempt in range(1, self._max_attempts + 1):
            try:
                return await self._attempt(texts)
            except _RetryableError as exc:
                delay = self._delay(attempt, exc.retry_after)
                if attempt == self._max_attempts or delay is None:
                    raise EmbeddingError(
                        f"embedding service failed after {attempt} attempt(s): {exc}",
                        retry_after=exc.retry_after,
                    ) from exc
                log.warning(
                    "embedding attempt %d/%d failed (%s); retrying in %.2fs",
                    attempt,
                    self._max_attempts,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    def _delay(self, attempt: int, retry_after: float | None) -> float | None:
        if retry_after is not None:
            if retry_after > self._max_retry_after:
                return None  # waiting that long would outlast any caller's deadline
            return retry_after + random.uniform(0, 0.1 * retry_after)
        # Exponential backoff with full jitter: spreads out clients that failed together.
        return random.uniform(0, min(self._backoff_max, self._backoff_base * 2 ** (attempt - 1)))

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _attempt(self, texts: list[str]) -> NDArray[np.float32]:
        body: dict[str, Any] = {"model": self._identity.model, "input": texts}
        if self._send_dimensions:
            body["dimensions"] = self._identity.dimensions
        try:
            response = await self._client.post(self._url, json=body, headers=self._headers())
        except httpx.TransportError as exc:
            raise _RetryableError(f"{type(exc).__name__} calling {self._url}") from exc
        except httpx.RequestError as exc:
            raise EmbeddingError(f"{type(exc).__name__} calling {self._url}") from exc
        status = response.status_code
        if status in _RETRY_STATUS or status >= 500:
            raise _RetryableError(f"HTTP {status} from {self._url}", _retry_after(response))
        if not 200 <= status < 300:
            raise EmbeddingError(f"HTTP {status} from {self._url}: {self._snippet(response)}")
        return self._parse(response, len(texts))

    def _snippet(self, response: httpx.Response) -> str:
        text = response.text[:_BODY_SNIPPET]
        if self._api_key:
            text = text.replace(self._api_key, "***")  # some servers echo the key they got
        return text

    def _parse(self, response: httpx.Response, expected: int) -> NDArray[np.float32]:
        dims = self._identity.dimensions
        malformed = f"malformed embeddings response from {self._url}"
        try:
            items = response.json()["data"]
            pairs = sorted(((int(item["index"]), item["embedding"]) for item in items), key=_first)
            lengths = [len(vector) for _, vector in pairs]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(malformed) from exc
        if len(pairs) != expected:
            raise EmbeddingError(
                f"embedding service returned {len(pairs)} vectors for {expected} texts"
            )
        if [index for index, _ in pairs] != list(range(expected)):
            raise EmbeddingError("embedding service returned duplicate or out-of-range indexes")
        wrong = [length for length in lengths if length != dims]
        if wrong:
            raise EmbeddingError(
                f"model {self._identity.model!r} returned {wrong[0]}-dimensional vectors, "
                f"configured dimensions are {dims}"
            )
        try:
            return np.array([vector for _, vector in pairs], dtype=np.float32)
        except (ValueError, TypeError) as exc:
            raise EmbeddingError(malformed) from exc

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return (
            f"OpenAIEmbedder(url={self._url!r}, model={self._identity.model!r}, "
            f"dimensions={self._identity.dimensions}, api_key={key})"
        )
