"""Fixtures of the benchmark smoke tests: the suite's PostgreSQL server (tests/support/pg)."""

from __future__ import annotations

import os

import pytest

from tests.support.pg import check_session_server, pg_dsn, pg_server  # noqa: F401 - fixtures

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a PostgreSQL test: the session server is up (as tests/conftest.py does)."""
    if item.get_closest_marker("postgres") is not None:
        check_session_server()
