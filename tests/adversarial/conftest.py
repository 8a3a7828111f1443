"""The adversarial suite: hostile input of every kind against the real server, both stores."""

from __future__ import annotations

from tests.support.pg import pg_dsn, pg_server  # noqa: F401 - fixtures
