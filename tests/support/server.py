"""Start the real server in-process on port 0 (tests and benchmarks)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from service.server import App, build_app
from service.settings import Settings


@asynccontextmanager
async def running_server(
    data_dir: Path, env: Mapping[str, str] | None = None, **overrides: Any
) -> AsyncIterator[App]:
    """A started App on 127.0.0.1:<free port>; stopped (grace 0) on exit."""
    values = {
        "SEARCH_HOST": "127.0.0.1",
        "SEARCH_PORT": "0",
        "SEARCH_DATA_DIR": str(data_dir),
        "SEARCH_EMBEDDER": "deterministic",
        "SEARCH_LOG_LEVEL": "WARNING",
    }
    values.update(env or {})
    app = await build_app(Settings.from_mapping(values), **overrides)
    await app.start()
    try:
        yield app
    finally:
        await app.stop(grace=0)


@asynccontextmanager
async def channel_to(app: App) -> AsyncIterator[grpc.aio.Channel]:
    """An insecure channel to `app`."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        yield channel
