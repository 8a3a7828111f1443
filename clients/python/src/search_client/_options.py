"""Per-call options: deadline, metadata (bearer token, request id) and the retry policy."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from search_client._errors import SearchError

__all__ = ["CallSpec", "RetryPolicy", "call_spec", "channel_options"]

DEFAULT_TIMEOUT = 30.0
# The longest a token-following workspace iterator waits out a provider's rate limit
# before its next call, whatever `retry_after` says.
MAX_RATE_LIMIT_PAUSE = 60.0
# Servers configured past gRPC's 4 MiB default (SEARCH_MAX_RESPONSE_BYTES) send larger pages.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries for UNAVAILABLE only: exponential backoff with full jitter, bounded.

    `max_attempts` counts the first call too; 1 disables retries. A `RetryInfo` delay from
    the server raises the wait up to `max_backoff`.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.initial_backoff <= self.max_backoff:
            raise ValueError("backoffs must satisfy 0 <= initial_backoff <= max_backoff")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")

    def backoff(self, retry: int, server_delay: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        ceiling = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        delay = random.uniform(0, ceiling)
        if server_delay is not None:
            delay = max(delay, min(server_delay, self.max_backoff))
        return delay

    def next_delay(self, error: SearchError, retry: int) -> float | None:
        """Seconds to wait before retry number `retry` after `error`; None: give up."""
        if not error.retryable or retry >= self.max_attempts:
            return None
        return self.backoff(retry, error.retry_delay)


@dataclass(frozen=True, slots=True)
class CallSpec:
    """What one call sends besides its request."""

    timeout: float | None
    metadata: tuple[tuple[str, str], ...]
    request_id: str


def call_spec(
    token: str | None,
    default_timeout: float | None,
    timeout: float | None,
    request_id: str | None,
    metadata: Sequence[tuple[str, str]],
) -> CallSpec:
    """The deadline and metadata of one call; a request id is generated when none is given."""
    rid = request_id or uuid.uuid4().hex
    headers = [("x-request-id", rid)]
    if token:
        headers.append(("authorization", f"Bearer {token}"))
    headers.extend(metadata)
    return CallSpec(
        timeout=default_timeout if timeout is None else timeout,
        metadata=tuple(headers),
        request_id=rid,
    )


def channel_options(extra: Sequence[tuple[str, object]]) -> list[tuple[str, object]]:
    """Channel arguments: a receive limit that fits the largest pages, then `extra`."""
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        *extra,
    ]
