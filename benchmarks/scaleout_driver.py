"""Closed-loop search driver: N workers, each sending its next search as soon as one returns.

Calls are spread round-robin over the targets (one channel per target per worker group), as a
client with a `round_robin` policy over several service replicas would. Run in a child process
(`python -m benchmarks.scaleout_driver JOB_JSON`, prints one JSON result line) so the driver's
Python work never shares an event loop with a server; `run_inline` runs the same loop here
(smoke tests).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import grpc

from benchmarks.client import Client, channel
from benchmarks.measure import Query
from benchmarks.servers import REPO, ServerHandle
from benchmarks.stats import summarize
from benchmarks.workbench import log

DEADLINE = 30.0


@dataclass(frozen=True)
class Job:
    """What one driver process does."""

    targets: tuple[str, ...]
    queries: tuple[Query, ...]
    concurrency: int
    seconds: float
    warmup: float = 2.0
    offset: int = 0  # first query and target, so several drivers do not move in lockstep

    def to_json(self) -> str:
        """The job for the child process."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        """Inverse of to_json."""
        data: dict[str, Any] = json.loads(text)
        queries = tuple(Query(tuple(q["scope"]), q["text"], q["mode"], q["page_size"],
                              q["max_pages"]) for q in data.pop("queries"))
        return cls(targets=tuple(data.pop("targets")), queries=queries, **data)


@dataclass
class Outcome:
    """What one driver measured after its warm-up."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    per_target: dict[str, int] = field(default_factory=dict)

    def merge(self, other: Outcome) -> None:
        """Add another driver's outcome (its window overlaps this one's)."""
        self.seconds = max(self.seconds, other.seconds)
        self.latencies += other.latencies
        for name, count in other.errors.items():
            self.errors[name] = self.errors.get(name, 0) + count
        for name, count in other.per_target.items():
            self.per_target[name] = self.per_target.get(name, 0) + count


async def _worker(clients: Sequence[tuple[str, Client]], queries: Sequence[Query],
                  turn: itertools.count[int], state: dict[str, float], out: Outcome) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < state["end"]:
        i = next(turn)
        target, client = clients[i % len(clients)]
        query = queries[i % len(queries)]
        started = loop.time()
        try:
            await client.search(query.scope, query.text, query.mode, deadline=DEADLINE)
            failed = ""
        except grpc.aio.AioRpcError as error:
            failed = error.code().name
        done = loop.time()
        if started < state["measure_from"] or done > state["end"]:
            continue
        if failed:
            out.errors[failed] = out.errors.get(failed, 0) + 1
        else:
            out.latencies.append(done - started)
            out.per_target[target] = out.per_target.get(target, 0) + 1


async def run_inline(job: Job) -> Outcome:
    """The job on this event loop."""
    loop = asyncio.get_running_loop()
    channels = [channel(t) for t in job.targets]
    clients = list(zip(job.targets, (Client(c) for c in channels), strict=True))
    out = Outcome()
    start = loop.time()
    state = {"measure_from": start + job.warmup, "end": start + job.warmup + job.seconds}
    turn = itertools.count(job.offset)
    try:
        await asyncio.gather(*(_worker(clients, job.queries, turn, state, out)
                               for _ in range(job.concurrency)))
    finally:
        for c in channels:
            await c.close()
    out.seconds = job.seconds
    return out


async def run_child(job: Job) -> Outcome:
    """The job in `python -m benchmarks.scaleout_driver`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.scaleout_driver", job.to_json(),
        stdout=asyncio.subprocess.PIPE, cwd=str(REPO), env=env, limit=256 * 1024 * 1024,
    )
    stdout, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"scale-out driver failed (exit {process.returncode})")
    return Outcome(**json.loads(stdout.decode().strip().splitlines()[-1]))


async def run_drivers(jobs: Sequence[Job], *, inprocess: bool) -> Outcome:
    """Run the jobs at the same time (one process each unless `inprocess`); merged outcome."""
    runner = run_inline if inprocess else run_child
    total = Outcome()
    for outcome in await asyncio.gather(*(runner(job) for job in jobs)):
        total.merge(outcome)
    return total


class WindowSizes(Protocol):
    """How hard and how long a throughput window drives the servers."""

    @property
    def drivers(self) -> int:
        """Driver processes."""
        ...

    @property
    def concurrency(self) -> int:
        """Calls in flight per driver."""
        ...

    @property
    def seconds(self) -> float:
        """Measured seconds."""
        ...

    @property
    def warmup(self) -> float:
        """Seconds driven before measuring."""
        ...


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot (0, 0 where /proc/stat is missing)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


async def window(servers: Sequence[ServerHandle], queries: Sequence[Query], sizes: WindowSizes,
                 *, inprocess: bool) -> dict[str, Any]:
    """One throughput window over `servers`: searches/s, latencies, CPU busy share."""
    targets = tuple(s.target for s in servers)
    jobs = [Job(targets, tuple(queries), sizes.concurrency, sizes.seconds, sizes.warmup,
                offset=i * 7) for i in range(sizes.drivers)]
    for server in servers:
        await server.take_timings()
    busy0, total0 = cpu_times()
    outcome = await run_drivers(jobs, inprocess=inprocess)
    busy1, total1 = cpu_times()
    server_seconds = [t.seconds for s in servers for t in await s.take_timings()
                      if t.code == "OK"]
    # The CPU window includes the warm-up and start-up: a lower bound of the busy share.
    busy = (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")
    row: dict[str, Any] = {
        "replicas": len(servers), "drivers": sizes.drivers,
        "in_flight": sizes.drivers * sizes.concurrency, "seconds": outcome.seconds,
        "ok": len(outcome.latencies), "errors": outcome.errors,
        "searches_per_s": len(outcome.latencies) / outcome.seconds,
        "latency": summarize(outcome.latencies), "server": summarize(server_seconds),
        "calls_per_replica": sorted(outcome.per_target.values()), "cpu_busy_share": busy,
    }
    log(f"scaleout {len(servers)} replica(s): {row['searches_per_s']:.1f} searches/s, p50 "
        f"{row['latency']['p50_ms']:.0f} ms, p99 {row['latency']['p99_ms']:.0f} ms, "
        f"CPU busy {busy:.0%}")
    return row


def main() -> None:
    """Entry point of the child: run the job, print its outcome as one JSON line."""
    job = Job.from_json(sys.argv[1])
    outcome = asyncio.run(run_inline(job))
    print(json.dumps(asdict(outcome)), flush=True)


if __name__ == "__main__":
    main()
