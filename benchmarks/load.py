"""Fixed-rate (open-loop) load on grpc.aio: the request rate held before p99 passes 300 ms.

Requests are scheduled at exact times (i / rate after the start) whatever happened to earlier
ones, and each latency is measured from its scheduled time, so a server that falls behind
shows the queueing delay (no coordinated omission). Rates grow step by step until p99
passes the limit or a call fails; the highest rate that stayed under is the result.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from benchmarks.client import Client, channel
from benchmarks.latency import workload
from benchmarks.measure import Query
from benchmarks.servers import SEARCH_METHOD, ServerHandle
from benchmarks.stats import percentile, summarize
from benchmarks.workbench import LoadedCorpus, log

P99_LIMIT_MS = 300.0
CHANNELS = 4
DEADLINE = 10.0
MIN_RATE = 0.5
MIN_REQUESTS = 12  # per step, so a slow step still has a p99 worth the name


@dataclass
class Step:
    """One rate held for a while."""

    rate: float
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    server: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """Summary of the step."""
        done = len(self.latencies)
        return {
            "rate": self.rate, "seconds": self.seconds, "sent": done + sum(self.errors.values()),
            "ok": done, "errors": dict(self.errors),
            "achieved_rps": done / self.seconds if self.seconds else 0.0,
            "latency": summarize(self.latencies), "server": summarize(self.server),
        }

    @property
    def held(self) -> bool:
        """No errors and p99 within the limit."""
        return not self.errors and percentile(self.latencies, 99) * 1000 <= P99_LIMIT_MS


async def _one(client: Client, query: Query, scheduled: float, step: Step) -> None:
    loop = asyncio.get_running_loop()
    try:
        await client.search(query.scope, query.text, query.mode, deadline=DEADLINE)
    except grpc.aio.AioRpcError as error:
        name = error.code().name
        step.errors[name] = step.errors.get(name, 0) + 1
        return
    step.latencies.append(loop.time() - scheduled)


async def run_step(
    server: ServerHandle, queries: Sequence[Query], rate: float, seconds: float
) -> Step:
    """Send `rate` requests per second for `seconds`, cycling through `queries`."""
    step = Step(rate, seconds)
    loop = asyncio.get_running_loop()
    channels = [channel(server.target) for _ in range(CHANNELS)]
    clients = [Client(c) for c in channels]
    tasks: list[asyncio.Task[None]] = []
    await server.take_timings()
    try:
        start = loop.time() + 0.05
        total = max(1, int(rate * seconds))
        for i, query in zip(range(total), itertools.cycle(queries), strict=False):
            scheduled = start + i / rate
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(clients[i % CHANNELS], query, scheduled, step)))
        await asyncio.gather(*tasks)
    finally:
        for c in channels:
            await c.close()
    step.server = [t.seconds for t in await server.take_timings()
                   if t.method == SEARCH_METHOD and t.code == "OK"]
    return step


async def find_capacity(
    server: ServerHandle, queries: Sequence[Query], *, start: float, factor: float,
    seconds: float, max_steps: int,
) -> tuple[float, list[Step]]:
    """Raise the rate by `factor` until a step is not held; the last held rate and all steps.

    When even `start` is not held, halve it (down to MIN_RATE) to find a rate that is.
    """
    steps: list[Step] = []
    held = 0.0
    rate = start
    for _ in range(max_steps):
        step = await run_step(server, queries, rate, max(seconds, MIN_REQUESTS / rate))
        steps.append(step)
        row = step.row()
        log(f"load {rate:.2g}/s: p99 {row['latency']['p99_ms']:.0f} ms, "
            f"achieved {row['achieved_rps']:.2g}/s, errors {sum(step.errors.values())}")
        await asyncio.sleep(0.5)  # let the queue drain between steps
        if step.held:
            held = rate
            rate *= factor
        elif held or rate / 2 < MIN_RATE:
            break
        else:
            rate /= 2
    return held, steps


async def measure(corpus: LoadedCorpus, *, seconds: float, max_steps: int, start: float = 10.0
                  ) -> dict[str, Any]:
    """Mixed FTS / VECTOR / HYBRID load (scope 10) on the corpus' default server."""
    per_mode = [workload(corpus, 60, mode, seed=31) for mode in ("fts", "vector", "hybrid")]
    mixed = [q for triple in zip(*per_mode, strict=True) for q in triple]
    held, steps = await find_capacity(corpus.server, mixed, start=start, factor=1.5,
                                      seconds=seconds, max_steps=max_steps)
    return {
        "store": corpus.store, "chunks": corpus.chunks, "scope": 10,
        "workload": "FTS/VECTOR/HYBRID round robin", "p99_limit_ms": P99_LIMIT_MS,
        "held_rps": held, "steps": [s.row() for s in steps],
    }
