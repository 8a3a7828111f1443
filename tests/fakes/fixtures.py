"""Pytest plugin: fake provider servers on loopback, started once in the session loop.

Use `pytest_plugins = ["tests.fakes.fixtures"]` in a root conftest (or a test module), then
ask for `fakes` (state reset for each test) and build accounts with `fakes.account(...)`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.fakes.atlassian import FakeConfluence, FakeJira
from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import FakeGitLab
from tests.fakes.gmail import FakeGmail
from tests.fakes.google_calendar import FakeCalendar
from tests.fakes.google_drive import FakeDrive
from tests.fakes.slack import FakeSlack
from tests.fakes.suite import FakeProviders


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def fake_servers() -> AsyncIterator[FakeProviders]:
    """Start every fake once per session."""
    providers = FakeProviders(
        FakeGitHub(),
        FakeGitLab(),
        FakeSlack(),
        FakeDrive(),
        FakeGmail(),
        FakeCalendar(),
        FakeJira(),
        FakeConfluence(),
    )
    for fake in providers.all():
        await fake.server.start()
    yield providers
    for fake in providers.all():
        await fake.server.stop()


@pytest.fixture
def fakes(fake_servers: FakeProviders) -> Iterator[FakeProviders]:
    """The running fakes with clean state for this test."""
    fake_servers.reset()
    yield fake_servers
    fake_servers.reset()
