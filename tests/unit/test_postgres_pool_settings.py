"""Session settings of the PostgreSQL pool."""

from __future__ import annotations

from service.store.postgres.pool import PoolSettings, server_settings
from service.store.postgres.store import PostgresStore


def test_partitioned_stores_plan_each_call_for_its_scope() -> None:
    # A reused generic plan cannot prune hash partitions by an array parameter.
    partitioned = PostgresStore("postgresql://unused", partitions=16)
    plain = PostgresStore("postgresql://unused")
    assert server_settings(partitioned._settings)["plan_cache_mode"] == "force_custom_plan"
    assert server_settings(plain._settings)["plan_cache_mode"] == "force_generic_plan"


def test_jit_is_off_and_iterative_scans_are_on() -> None:
    settings = server_settings(PoolSettings())
    assert settings["jit"] == "off"
    assert settings["hnsw.iterative_scan"] == "relaxed_order"
