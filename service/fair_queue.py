"""Turns at a scarce resource, shared fairly by tenant, refused early when they come too late.

At most `concurrency` holders at once; the other callers wait in one queue per tenant and
are served round-robin across tenants, so one tenant's burst waits behind itself rather
than in front of everyone. From a running estimate of one turn's length the queue knows how
long a new caller would wait: when that and its own turn do not fit in the caller's budget
(its remaining deadline), it is refused at once, RESOURCE_EXHAUSTED with RetryInfo, instead
of timing out in the queue; so is a caller whose turn comes too late to finish.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.errors import ResourceExhausted

# Weight of the newest turn in the running estimate of one turn's length.
_SMOOTHING = 0.3


class FairQueue:
    """Round-robin turns by tenant for at most `concurrency` holders; sheds what is late."""

    def __init__(self, concurrency: int, *, reason: str, what: str) -> None:
        self._concurrency = concurrency
        self._reason, self._what = reason, what
        self._running = 0
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._estimate = 0.0  # seconds one turn takes; 0 until one was measured

    def expected_wait(self, tenant: str) -> float:
        """Seconds a new caller of `tenant` would wait for its turn."""
        if self._running < self._concurrency and not self._waiting:
            return 0.0
        own = len(self._waiting.get(tenant, ()))
        ahead = own + sum(
            min(len(queue), own + 1) for name, queue in self._waiting.items() if name != tenant
        )
        return (ahead + 1) * self._estimate / self._concurrency

    @asynccontextmanager
    async def turn(self, tenant: str, budget: float | None) -> AsyncIterator[None]:
        """Hold one turn for the block; RESOURCE_EXHAUSTED (the queue's reason) at once when
        the wait and the turn would take longer than `budget` seconds."""
        wait = self.expected_wait(tenant)
        if budget is not None and wait + self._estimate > budget:
            raise self._shed(wait, budget)
        queued = time.perf_counter()
        await self._acquire(tenant)
        started = time.perf_counter()
        if budget is not None and budget - (started - queued) < self._estimate:
            # Its turn came too late to finish in time: the next caller gets it.
            self._release()
            raise self._shed(self.expected_wait(tenant), budget - (started - queued))
        try:
            yield
        finally:
            took = time.perf_counter() - started
            self._estimate = took if not self._estimate else (
                _SMOOTHING * took + (1 - _SMOOTHING) * self._estimate
            )
            self._release()

    async def _acquire(self, tenant: str) -> None:
        if self._running < self._concurrency and not self._waiting:
            self._running += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(turn)
        try:
            await turn  # _release counted this caller as running before it resolved the future
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # the turn came as the caller was cancelled: pass it on
            else:
                self._forget(tenant, turn)
            raise

    def _forget(self, tenant: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[tenant]

    def _release(self) -> None:
        self._running -= 1
        while self._waiting and self._running < self._concurrency:
            tenant, queue = next(iter(self._waiting.items()))
            turn = queue.popleft()
            del self._waiting[tenant]
            if queue:
                self._waiting[tenant] = queue  # to the back: the next tenant goes first
            if not turn.done():
                self._running += 1
                turn.set_result(None)

    def _shed(self, wait: float, budget: float) -> ResourceExhausted:
        return ResourceExhausted(
            f"waiting for {self._what} would take {wait:.2f} s, more than the "
            f"{max(budget, 0.0):.2f} s left to this call; retry later",
            reason=self._reason,
            metadata={"expectedWaitSeconds": f"{wait:.3f}"},
            retry_after=max(wait, 0.05),
        )
