"""What both stores' vector caches share: per-project matrices held least recently used
within a byte budget, row normalisation, and the k nearest rows, ties by identity."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger(__name__)


def nearest_positions(
    distances: NDArray[np.float32], tiebreak: NDArray[np.int64], k: int
) -> NDArray[np.intp]:
    """Positions of the k smallest distances, nearest first, equal distances by `tiebreak`.

    Both caches hold a scope's rows in document identity order (project, kind, row id,
    chunk), the order the statement breaks equal similarities by, so their `tiebreak` is the
    row's position: the first k rows are then the ones the statement would pick from the
    whole scope, and a larger k only appends rows (a later page's candidates begin with an
    earlier page's)."""
    if k <= 0 or not len(distances):
        return np.empty(0, dtype=np.intp)
    keep = np.arange(len(distances))
    if len(distances) > k:
        kth = distances[np.argpartition(distances, k - 1)[k - 1]]
        if not np.isnan(kth):  # NaN rows (never written by the store) sort last
            nearer = np.flatnonzero(distances < kth)
            tied = np.flatnonzero(distances == kth)
            wanted = k - len(nearer)
            if len(tied) > wanted:
                tied = tied[np.argpartition(tiebreak[tied], wanted - 1)[:wanted]]
            keep = np.concatenate([nearer, tied])
    return keep[np.lexsort((tiebreak[keep], distances[keep]))][:k]


# A plain single-threaded product (einsum), not BLAS: OpenBLAS' sgemv takes a second thread
# for a 20k-row matrix and leaves it spinning for work afterwards, which on a 2-core machine
# slowed every other thread and process (interleaved with other numpy work at 100k chunks:
# the PostgreSQL server's VECTOR p50 29.9 ms, 9.6 ms with einsum). Alone, einsum is as fast
# as two BLAS threads (1.2 ms for 20k x 384, 13.5 ms for 200k) and 1.6-1.8x faster than one;
# concurrent searches still use both cores, each product on its own worker thread.
def cosine_distances(
    matrices: Iterable[NDArray[np.float32]], probe: NDArray[np.float32]
) -> NDArray[np.float32]:
    """`1 - row . probe` for every row of the (normalised) matrices, in order."""
    return np.concatenate([1.0 - np.einsum("ij,j->i", rows, probe) for rows in matrices])


def normalised(rows: NDArray[np.float32]) -> NDArray[np.float32]:
    """`rows` (a writable float32 matrix) with each non-zero row scaled to length 1, in place."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


M = TypeVar("M", bound=Sized)


class MatrixLru(Generic[M]):
    """Matrices by project within `budget` bytes, least recently used out first. Not
    synchronised: a cache shared by threads calls it under its own lock."""

    def __init__(self, budget: int) -> None:
        self.budget = max(0, int(budget))
        self.bytes = 0
        self.loads = self.evictions = 0
        self._items: OrderedDict[int, M] = OrderedDict()
        self._used: dict[int, float] = {}  # project -> monotonic time of its last use

    def __len__(self) -> int:
        return len(self._items)

    def get(self, project_id: int) -> M | None:
        """The project's matrix, without counting it as used."""
        return self._items.get(project_id)

    def use(self, project_id: int) -> None:
        """The project's matrix was just used: last out."""
        if project_id in self._items:
            self._items.move_to_end(project_id)
            self._used[project_id] = time.monotonic()

    def drop(self, project_id: int) -> None:
        """Forget the project's matrix (it moved on)."""
        found = self._items.pop(project_id, None)
        self._used.pop(project_id, None)
        if found is not None:
            self.bytes -= found.nbytes

    def put(self, project_id: int, matrix: M) -> bool:
        """Hold a matrix just read (counted as a load and as used), evicting the least
        recently used ones to make room; False when it alone exceeds the budget."""
        self.loads += 1
        self.drop(project_id)
        if matrix.nbytes > self.budget:
            return False
        while self._items and self.bytes + matrix.nbytes > self.budget:
            gone, evicted = self._items.popitem(last=False)
            self._used.pop(gone, None)
            self.bytes -= evicted.nbytes
            self.evictions += 1
        self._items[project_id] = matrix
        self.bytes += matrix.nbytes
        self._used[project_id] = time.monotonic()
        return True

    def cold_bytes(self, keep: Iterable[int], idle_seconds: float) -> int:
        """Bytes of the matrices outside `keep` not used for `idle_seconds`."""
        kept, before = set(keep), time.monotonic() - idle_seconds
        return sum(m.nbytes for p, m in self._items.items()
                   if p not in kept and self._used.get(p, 0.0) <= before)


class QuietRefresh:
    """Runs `refresh` in the background once writes have been quiet for `quiet` seconds.

    The stores notice their own committed writes here: a write that moved a project's
    vectors leaves its matrix stale, and without this the next search of the project would
    pay the read (~4 us a vector; at 1M chunks ~80 ms for a 20k-vector project), or on
    PostgreSQL be answered by the index once first. One refresh at a time; writes noticed
    while it runs start another after it. `quiet` 0 turns it off.
    """

    def __init__(self, refresh: Callable[[], Awaitable[object]], quiet: float) -> None:
        self._refresh = refresh
        self._quiet = quiet
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    def notice(self) -> None:
        """A write committed (call on the event loop)."""
        if self._quiet <= 0:
            return
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wait = self._last + self._quiet - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            started = loop.time()
            try:
                await self._refresh()
            except Exception:  # a stale matrix is only slower: the next search reads it
                log.warning("vector cache refresh failed", exc_info=True)
            if self._last < started:
                return

    async def aclose(self) -> None:
        """Stop a pending or running refresh."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
