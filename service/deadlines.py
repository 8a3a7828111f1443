"""`within(seconds)`: `asyncio.timeout` with one loop timer for all scopes, not one each.

A search makes dozens of provider requests, each bounded by its own deadline. With
`asyncio.timeout` every request creates, schedules and cancels a timer handle of its own in
the loop's heap (with Python-level comparisons): about a twentieth of the server's CPU per
search. Here the scopes of a loop share one heap of (deadline, entry) tuples and one armed
timer, set for the earliest deadline still open; a scope that ends only marks its entry, and
closed entries are dropped when they reach the top of the heap or when they outnumber the
open ones.

Semantics are `asyncio.timeout`'s: past the deadline the scope's task is cancelled, and the
scope turns the cancellation into `TimeoutError` unless the task was also cancelled from
outside (then the cancellation propagates). A deadline already past cancels at the next
loop iteration, as `asyncio.timeout(0)` does.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import weakref
from types import TracebackType

__all__ = ["within"]

_OPEN, _CLOSED, _EXPIRED = 0, 1, 2


class _Entry:
    __slots__ = ("state", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.state = _OPEN


class _LoopDeadlines:
    """The open scopes of one event loop, and the one timer armed for the earliest."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, _Entry]] = []
        self._order = itertools.count()
        self._open = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = math.inf

    def open(self, when: float, task: asyncio.Task[object]) -> _Entry:
        entry = _Entry(task)
        heapq.heappush(self._heap, (when, next(self._order), entry))
        self._open += 1
        if len(self._heap) > 2 * self._open + 256:
            self._compact()
        if when < self._armed_for:
            self._arm(when)
        return entry

    def close(self, entry: _Entry) -> None:
        if entry.state == _OPEN:
            entry.state = _CLOSED
            self._open -= 1

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._fire)
        self._armed_for = when

    def _fire(self) -> None:
        # The loop runs a timer within its clock resolution of the time it was armed for:
        # whatever was due then is due now (no re-arm for the same instant).
        now = max(self.loop.time(), self._armed_for)
        self._timer = None
        self._armed_for = math.inf
        heap = self._heap
        while heap and (heap[0][0] <= now or heap[0][2].state != _OPEN):
            entry = heapq.heappop(heap)[2]
            if entry.state == _OPEN:
                entry.state = _EXPIRED
                self._open -= 1
                entry.task.cancel()
        if heap:
            self._arm(heap[0][0])

    def _compact(self) -> None:
        """Drop closed entries (they outnumber the open ones): the heap stays bounded."""
        self._heap = [item for item in self._heap if item[2].state == _OPEN]
        heapq.heapify(self._heap)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopDeadlines] = (
    weakref.WeakKeyDictionary()
)


class within:  # noqa: N801 - used as `async with within(seconds)`, like asyncio.timeout
    """Bound the enclosed block to `seconds` of loop time (TimeoutError past it)."""

    __slots__ = ("_cancelling", "_deadlines", "_entry", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("within() must be used inside a task")
        deadlines = _by_loop.get(loop)
        if deadlines is None:
            deadlines = _by_loop[loop] = _LoopDeadlines(loop)
        self._deadlines = deadlines
        self._cancelling = task.cancelling()
        self._entry = deadlines.open(loop.time() + self._seconds, task)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        entry = self._entry
        if entry.state == _OPEN:
            self._deadlines.close(entry)
            return
        # Expired: this scope cancelled the task. Unless someone else cancelled it too, the
        # cancellation is ours and becomes TimeoutError.
        ours = entry.task.uncancel() <= self._cancelling
        if ours and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            raise TimeoutError from exc
