"""Pytest plugin: fake provider servers on loopback, started once in the session loop.

Use `pytest_plugins = ["tests.fakes.fixtures"]` in a root conftest (or a test module), then
ask for `fakes` (state reset for each test) and build accounts with `fakes.account(...)`.
The fakes themselves live in `service.fakes` (the workspace demo runs them too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from service.fakes.suite import FakeProviders


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def fake_servers() -> AsyncIterator[FakeProviders]:
    """Start every fake once per session."""
    providers = FakeProviders.create()
    await providers.start()
    yield providers
    await providers.stop()


@pytest.fixture
def fakes(fake_servers: FakeProviders) -> Iterator[FakeProviders]:
    """The running fakes with clean state for this test."""
    fake_servers.reset()
    yield fake_servers
    fake_servers.reset()
