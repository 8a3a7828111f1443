"""What responses may cost the server: message size, unread streams, per-tenant memory.

gRPC keeps a stream message until the client's flow control takes it, for ever when the
client never reads, and whatever the handler does after (grpc.aio cannot reset one stream).
So, per tenant, only a few stream messages may be produced or awaiting their client at
once, a message the client does not take within the write timeout ends its call, and what
such timed-out messages still hold counts against the tenant until they go.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from service.deadlines import within
from service.errors import DeadlineExceeded, ResourceExhausted

# Streams whose messages may be large (pages of documents): their production is gated.
GATED_METHODS = frozenset({"/search.v1.ProjectSearchService/SearchProjects"})


@dataclass(frozen=True)
class ResponseLimits:
    """The response size limit (SEARCH_MAX_RESPONSE_BYTES or SEARCH_MAX_MESSAGE_BYTES, the
    smaller: `message_setting` names it), SEARCH_STREAM_WRITE_TIMEOUT,
    SEARCH_STALLED_STREAM_BYTES and SEARCH_STREAM_MESSAGES_PER_TENANT."""

    max_message_bytes: int = 4 * 1024 * 1024
    message_setting: str = "SEARCH_MAX_RESPONSE_BYTES"
    write_timeout: float = 30.0
    stalled_bytes_per_tenant: int = 128 * 1024 * 1024
    messages_per_tenant: int = 16


class StreamBudget:
    """Per tenant: stream messages in flight, and bytes of timed-out unread messages."""

    def __init__(self, limits: ResponseLimits) -> None:
        self.limits = limits
        self._permits: dict[str, asyncio.Semaphore] = {}  # one per tenant (configured)
        self._stalled: dict[str, int] = {}

    def check(self, tenant: str) -> None:
        """RESOURCE_EXHAUSTED when the tenant's unread streams hold its whole budget."""
        held = self._stalled.get(tenant, 0)
        budget = self.limits.stalled_bytes_per_tenant
        if held >= budget:
            raise ResourceExhausted(
                f"this tenant's unread streams hold {held} bytes (limit {budget}); read or "
                "close them",
                reason="STALLED_STREAMS_LIMIT",
                metadata={"limit": str(budget), "setting": "SEARCH_STALLED_STREAM_BYTES"},
                retry_after=self.limits.write_timeout,
            )

    @asynccontextmanager
    async def message(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of the tenant's message permits while a message is produced and sent."""
        permits = self._permits.get(tenant)
        if permits is None:
            permits = self._permits[tenant] = asyncio.Semaphore(self.limits.messages_per_tenant)
        try:
            async with within(self.limits.write_timeout):  # no task per message (wait_for's)
                await permits.acquire()
        except TimeoutError:
            raise ResourceExhausted(
                f"this tenant's other streams hold every message slot "
                f"({self.limits.messages_per_tenant}) for {self.limits.write_timeout:g} s: "
                "their clients are not reading",
                reason="TENANT_STREAMS_BUSY",
                metadata={"limit": str(self.limits.messages_per_tenant),
                          "setting": "SEARCH_STREAM_MESSAGES_PER_TENANT"},
                retry_after=self.limits.write_timeout,
            ) from None
        try:
            self.check(tenant)  # a stream that waited may find its tenant over budget now
            yield
        finally:
            permits.release()

    async def write(self, tenant: str, write: Awaitable[None], size: int) -> None:
        """Await `write`; past the write timeout its `size` bytes count as stalled (until
        `unstall`) and StreamStalled (DEADLINE_EXCEEDED) ends the call."""
        timeout = self.limits.write_timeout
        try:
            async with within(timeout):  # no task per message, as wait_for makes
                await write
        except TimeoutError:
            self._stalled[tenant] = self._stalled.get(tenant, 0) + size
            raise StreamStalled(size, timeout) from None

    def unstall(self, tenant: str, size: int) -> None:
        """`size` stalled bytes of the tenant are gone (the client read or went away)."""
        left = self._stalled.get(tenant, 0) - size
        if left > 0:
            self._stalled[tenant] = left
        else:
            self._stalled.pop(tenant, None)


class StreamStalled(DeadlineExceeded):
    """A stream message the client did not take within the write timeout."""

    reason = "STREAM_WRITE_TIMEOUT"

    def __init__(self, size: int, timeout: float) -> None:
        super().__init__(
            f"the client did not read the stream for {timeout:g} s: call ended",
            metadata={"setting": "SEARCH_STREAM_WRITE_TIMEOUT", "seconds": f"{timeout:g}"},
        )
        self.size = size
