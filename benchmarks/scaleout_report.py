"""Markdown of the scale-out section (issue 9)."""

from __future__ import annotations

from typing import Any

from benchmarks.report import fmt, table


def _triple(summary: dict[str, Any] | None) -> str:
    s = summary or {}
    return " / ".join(fmt(s.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms"))


def _replicas(data: Any) -> str:
    rows = data.get("replicas", [])
    first = rows[0]["searches_per_s"] if rows else None
    body = [[fmt(r["replicas"]), fmt(r["in_flight"]), fmt(r["searches_per_s"], 1),
             fmt(r["searches_per_s"] / first if first else None, 2), _triple(r["latency"]),
             _triple(r["server"]), fmt(sum(r["errors"].values())),
             " / ".join(fmt(c) for c in r["calls_per_replica"]),
             fmt(100.0 * r["cpu_busy_share"] if r.get("cpu_busy_share") is not None else None,
                 0)]
            for r in rows]
    return table(["service replicas", "calls in flight", "searches/s", "vs 1 replica",
                  "client p50 / p95 / p99 ms", "server p50 / p95 / p99 ms", "errors",
                  "calls per replica", "CPU busy %"], body)


def _read_replica(data: Any) -> str:
    rows = data.get("read_replica") or []
    if not rows:
        return "Not measured in this run."
    body = [[r["setup"], fmt(r["in_flight"]), fmt(r["searches_per_s"], 1),
             _triple(r["latency"]), _triple(r["server"]), fmt(sum(r["errors"].values())),
             fmt(r["standby_transactions"]),
             fmt(100.0 * r["cpu_busy_share"] if r.get("cpu_busy_share") is not None else None,
                 0)] for r in rows]
    return table(["one service replica over", "calls in flight", "searches/s",
                  "client p50 / p95 / p99 ms", "server p50 / p95 / p99 ms", "errors",
                  "transactions on the standby", "CPU busy %"], body)


def _partitions(data: Any) -> str:
    body = [[fmt(r["chunks"]), fmt(r["partitions"]) if r["partitions"] else "none",
             r["mode"].upper(), fmt(r["queries"]), _triple(r["server"]), _triple(r["client"]),
             fmt(r["exact_share"], 2)] for r in data.get("partitions", [])]
    return table(["chunks", "partitions", "mode", "queries", "server p50 / p95 / p99 ms",
                  "client p50 / p95 / p99 ms", "exact share"], body)


def _plan_cell(probe: dict[str, Any], key: str) -> str:
    p = probe.get(key) or {}
    planning = (f" + {fmt(p['planning_ms'])} ms planning" if p.get("planning_ms") is not None
                else "")
    return (f"{fmt(p.get('partition_scans_executed'))} of "
            f"{fmt(p.get('partition_scans_planned'))} run, "
            f"{fmt(p.get('subplans_removed'))} removed, {fmt(p.get('execution_ms'))} ms"
            f"{planning}")


def _explain(data: Any) -> str:
    body = []
    for probe in data.get("explain", []):
        auto = probe.get("auto") or {}
        body.append([fmt(probe["chunks"]), fmt(probe["partitions"]), probe["mode"].upper(),
                     fmt(probe["scope_partitions_per_table"]),
                     _plan_cell(probe, "force_custom_plan"),
                     _plan_cell(probe, "force_generic_plan"),
                     _plan_cell(probe, "element_params_generic"),
                     f"{fmt(auto.get('custom_plans'))} custom / "
                     f"{fmt(auto.get('generic_plans'))} generic"])
    return table(["chunks", "partitions", "mode", "scope's partitions per table",
                  "custom plan: partition scans", "generic plan: partition scans",
                  "generic plan, scope as ARRAY[$a, $b, ...]", "plans chosen by auto, 8 runs"],
                 body)


def _loads(data: Any) -> str:
    body = [[fmt(r["partitions"]) if r["partitions"] else "none", fmt(r["chunks"]),
             fmt(r["load_seconds"], 0), fmt(r.get("index_seconds"), 0),
             fmt(r.get("vacuum_seconds"), 0), fmt(r.get("hnsw_indexes"))]
            for r in data.get("loads", [])]
    return table(["partitions", "chunks", "load s", "HNSW build s", "VACUUM ANALYZE s",
                  "HNSW indexes (one per partition)"], body)


def render_scaleout(data: Any) -> str:
    """Replica throughput, partition latency, the pruning probe and the loads."""
    big = "" if data.get("with_1m") else (
        " 1M-chunk rows come from `--with-1m` (not run, or not finished, in this run).")
    return "\n\n".join([
        f"Machine: {data.get('cpu_count')} CPUs shared by PostgreSQL, every service replica "
        f"and the driver processes. {fmt(data.get('projects'))} projects, scope of "
        f"{fmt(data.get('scope'))}; {data.get('workload')}.",
        "**Throughput by service replicas** (closed loop: each call starts when one returns; "
        "calls round-robin over the replicas; one PostgreSQL):",
        _replicas(data),
        "**Read replica** (one service replica; the primary alone, then with "
        "SEARCH_DATABASE_REPLICA_URLS naming a streaming standby of the same primary; both "
        "PostgreSQL instances on this machine):",
        _read_replica(data),
        "**Latency by partition count** (sequential calls, default exact-scan limit; "
        f"'none' = unpartitioned schema).{big}",
        _partitions(data),
        "**Partition pruning** (EXPLAIN ANALYZE of the service's statement, one query per "
        "mode; partition scans = distinct documents/chunks/vectors partitions in the plan; "
        "removed = 'Subplans Removed' by run-time pruning):",
        _explain(data),
        "**Loads**:",
        _loads(data),
    ])
