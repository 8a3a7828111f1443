"""Child process of the benchmarks: a real server plus a stdin/stdout line protocol.

`python -m benchmarks.serve SPEC_JSON` runs the service (`build_app`) for a ServerSpec;
`--fakes LATENCY [NAME]` runs the fake providers, or only the one named (`READY 0
<name=url,...>`), `--workspace DATA_DIR
URLS` the workspace servicers against them, `--floor RECORDING URLS` the fan-out's I/O floor
(benchmarks.fanout_floor). Prints `READY <port>`, then answers `timings` (a JSON list of
[method, code, seconds] finished since the last request), `fusion`, `requests` and
`exchanges` (fan-out: seconds spent fusing, HTTP requests per fake provider, the requests
themselves, since the last request), and stops on `stop` or end of input.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.servers import ServerSpec, TimingObserver, build_overrides
from service.runtime import tune_collector


async def _loop(observer: TimingObserver, extra: dict[str, Callable[[], Any]]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        command = line.strip()
        if command == "timings":
            records = [[t.method, t.code, t.seconds] for t in observer.take()]
            print(json.dumps(records), flush=True)
        elif command in extra:
            print(json.dumps(extra[command]()), flush=True)
        elif command == "stop" or not line:
            return


async def _serve(spec: ServerSpec) -> None:
    from service.server import build_app
    from service.settings import Settings

    observer = TimingObserver()
    overrides = await build_overrides(spec, observer)
    app = await build_app(Settings.from_mapping(spec.env()), **overrides)
    await app.start()
    tune_collector()  # as service.server.serve does once the server is up
    await _run(app.port, observer, {}, lambda: app.stop(grace=0))


async def _fakes(latency: float, only: str | None) -> None:
    from benchmarks.fanout_world import Fakes

    fakes = Fakes(latency, only)
    await fakes.start()
    await _run(0, TimingObserver(),
               {"requests": fakes.take_requests, "exchanges": fakes.take_exchanges},
               fakes.close, info=fakes.urls)


async def _workspace(data_dir: Path, urls: str) -> None:
    from benchmarks.fanout_world import WorkspaceServer

    server = WorkspaceServer(data_dir, urls)
    await server.start()
    tune_collector()  # as service.server.serve does once the server is up
    await _run(server.port, server.observer, {"fusion": server.clock.take}, server.close)


async def _floor(recording: Path, urls: str) -> None:
    from benchmarks.fanout_floor import serve_floor

    floor = await serve_floor(recording, urls)
    tune_collector()  # as the workspace child does
    await _run(floor.port, TimingObserver(), {}, floor.close)


async def _run(port: int, observer: TimingObserver, extra: dict[str, Callable[[], Any]],
               stop: Callable[[], Awaitable[None]], info: str = "") -> None:
    print(f"READY {port} {info}".rstrip(), flush=True)
    try:
        await _loop(observer, extra)
    finally:
        await stop()


def main() -> None:
    """Entry point."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if sys.argv[1] == "--fakes":
        asyncio.run(_fakes(float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
    elif sys.argv[1] == "--workspace":
        asyncio.run(_workspace(Path(sys.argv[2]), sys.argv[3]))
    elif sys.argv[1] == "--floor":
        asyncio.run(_floor(Path(sys.argv[2]), sys.argv[3]))
    else:
        asyncio.run(_serve(ServerSpec.from_json(sys.argv[1])))


if __name__ == "__main__":
    main()
