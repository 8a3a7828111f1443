"""Does a scoped search touch only the scope's partitions? EXPLAIN ANALYZE of the real statement.

The statement is the service's own (`service.store.postgres.search.build`), prepared with
SQL `PREPARE` and run with `EXPLAIN (ANALYZE) EXECUTE` under `plan_cache_mode` forced to a
custom plan (parameters known while planning) and to a generic plan (what a prepared
statement reuses: parameters known only at execution, when run-time pruning would show as
"Subplans Removed"). A third probe runs the statement the way the service does (asyncpg's
statement cache, plan_cache_mode auto) and reads from `pg_prepared_statements` which kind of
plan PostgreSQL settled on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import asyncpg
from pgvector import Vector

from service.embeddings import build_embedder
from service.projects.lexical import compile_query
from service.settings import Settings
from service.store.base import Filters, Mode, SearchPlan
from service.store.postgres.pool import PoolSettings, init_connection, server_settings
from service.store.postgres.search import build
from service.store.postgres.search_sql import numbered, sql_literal

PLAN_MODES = ("force_custom_plan", "force_generic_plan")
AUTO_RUNS = 8  # PostgreSQL compares generic and custom costs after five custom plans
PARTITION = re.compile(r"^(documents|chunks|vectors)_p\d+$")
SCOPE_PARTITIONS = """
SELECT count(DISTINCT tableoid) FROM documents WHERE project_id = ANY($1::bigint[])"""
PARTITION_COUNT = """
SELECT count(*) FROM pg_inherits WHERE inhparent = 'documents'::regclass"""
PLAN_CHOICE = """
SELECT generic_plans, custom_plans FROM pg_prepared_statements
WHERE NOT from_sql ORDER BY generic_plans + custom_plans DESC LIMIT 1"""


def literal(value: Any) -> str:
    """`value` as an SQL literal for EXECUTE's argument list."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Vector):
        return sql_literal(str(value.to_list()).replace(" ", ""))
    if isinstance(value, list):
        return sql_literal("{" + ",".join(str(int(v)) for v in value) + "}")
    return sql_literal(str(value))


async def search_plan(conn: asyncpg.Connection, mode: str, scope: list[int],
                      text: str) -> SearchPlan:
    """The plan the service would build for this request (deterministic embedder)."""
    tenant = await conn.fetchval("SELECT tenant FROM projects LIMIT 1")
    embedder = build_embedder("deterministic")
    vector = None if mode == "fts" else tuple((await embedder.embed([text]))[0])
    return SearchPlan(
        tenant=str(tenant), project_ids=tuple(sorted(scope)), mode=Mode(mode),
        lexical=compile_query(text), query_vector=vector, identity=embedder.identity,
        filters=Filters(), limit=10, offset=0, exact_scan_limit=Settings().exact_scan_limit,
    )


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def summarize_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """Partitions in the plan, partitions executed, and subplans removed by run-time pruning."""
    planned: set[str] = set()
    executed: set[str] = set()
    removed = 0
    for node in _nodes(plan["Plan"]):
        removed += int(node.get("Subplans Removed", 0))
        name = node.get("Relation Name", "")
        if PARTITION.match(name):
            planned.add(name)
            if node.get("Actual Loops", 0) > 0:
                executed.add(name)
    return {"partition_scans_planned": len(planned), "partition_scans_executed": len(executed),
            "subplans_removed": removed, "execution_ms": plan.get("Execution Time"),
            "planning_ms": plan.get("Planning Time")}


def element_params(sql: str, bindings: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The statement with the scope as `ARRAY[$a, $b, ...]`: one parameter per project.

    Partition pruning understands `= ANY(ARRAY[...])` whose elements are parameters (at
    executor start-up in a generic plan), but not `= ANY($n)` over an array parameter.
    """
    scope = list(bindings["scope"])
    names = [f"scope_{i}" for i in range(len(scope))]
    array = "ARRAY[" + ", ".join(f":{n}::bigint" for n in names) + "]"
    return sql.replace(":scope::bigint[]", array), {**bindings, **dict(zip(names, scope,
                                                                            strict=True))}


async def _probe(conn: asyncpg.Connection, sql: str, args: list[Any],
                 modes: tuple[str, ...]) -> dict[str, Any]:
    """EXPLAIN ANALYZE EXECUTE of the statement under each forced plan_cache_mode."""
    out: dict[str, Any] = {}
    await conn.execute(f"PREPARE probe AS {sql}")
    call = "EXECUTE probe(" + ", ".join(literal(a) for a in args) + ")"
    try:
        for cache_mode in modes:
            await conn.execute(f"SET plan_cache_mode = {cache_mode}")
            raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {call}")
            out[cache_mode] = summarize_plan(json.loads(raw)[0])
    finally:
        await conn.execute("DEALLOCATE probe")
        await conn.execute("RESET plan_cache_mode")
    return out


async def explain(dsn: str, mode: str, scope: list[int], text: str) -> dict[str, Any]:
    """Pruning under custom and generic plans, and the kind of plan `auto` picks."""
    conn = await asyncpg.connect(dsn, server_settings=server_settings(PoolSettings()))
    try:
        await init_connection(conn)
        plan = await search_plan(conn, mode, scope, text)
        statement, bindings = build(plan)
        sql, args = numbered(statement, bindings)
        out: dict[str, Any] = {
            "mode": mode, "scope": len(scope),
            "partitions": await conn.fetchval(PARTITION_COUNT),
            "scope_partitions_per_table": await conn.fetchval(SCOPE_PARTITIONS, plan.project_ids),
        }
        out.update(await _probe(conn, sql, args, PLAN_MODES))
        alternative = await _probe(conn, *numbered(*element_params(statement, bindings)),
                                   ("force_generic_plan",))
        out["element_params_generic"] = alternative["force_generic_plan"]
        for _ in range(AUTO_RUNS):
            await conn.fetch(sql, *args)
        choice = await conn.fetchrow(PLAN_CHOICE)
        out["auto"] = dict(choice) if choice else None
        return out
    finally:
        await conn.close()
