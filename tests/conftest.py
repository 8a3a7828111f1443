"""Session-wide test configuration."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.fakes.fixtures"]

# A test that asks for any of these needs a PostgreSQL server: it gets the `postgres` marker
# whether or not its module says so, so `-m "not postgres"` deselects every one of them.
PG_FIXTURES = frozenset(
    {"pg_server", "pg_dsn", "fresh_pg_dsn", "isolated_pg_dsn", "pg_cluster", "private_pg_server"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses PostgreSQL `postgres`."""
    for item in items:
        if PG_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a PostgreSQL test (and its module fixtures): the session server is up."""
    if item.get_closest_marker("postgres") is not None:
        from tests.support.pg import check_session_server

        check_session_server()
