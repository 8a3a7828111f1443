"""RESULTS.md tables of the `peers` section."""

from __future__ import annotations

from typing import Any

from benchmarks.report import fmt, table

RATIOS = (
    ("fts_store_over_tantivy", "FTS store call / tantivy"),
    ("fts_statement_over_tantivy", "FTS statement / tantivy"),
    ("hybrid_server_over_lancedb", "HYBRID server / LanceDB hybrid"),
    ("vector_server_over_numpy", "VECTOR server / numpy exact"),
)
ENGINES = {
    "tantivy": "tantivy",
    "lancedb": "LanceDB",
    "numpy": "numpy exact",
    "store": "service: store.search(plan)",
    "statement": "service: statement alone",
    "grpc": "service: gRPC (client)",
}


def _pair(summary: dict[str, Any] | None) -> str:
    summary = summary or {}
    return f"{fmt(summary.get('p50_ms'), 2)} / {fmt(summary.get('p95_ms'), 2)}"


def _ratio(value: dict[str, Any] | None) -> str:
    value = value or {}
    return f"x{fmt(value.get('p50'), 2)} / x{fmt(value.get('p95'), 2)}"


def render_peers(data: Any) -> str:
    """Per store and size: every engine and mode, the ratios, and what each peer indexed."""
    parts = []
    ratios = [
        [r["store"], fmt(r["chunks"]), *(_ratio(r["ratios"].get(k)) for k, _ in RATIOS)]
        for r in data["rows"]
    ]
    parts.append("Ratios, p50 / p95 (service / peer; above 1: the peer is faster):")
    parts.append(table(["store", "chunks", *(title for _, title in RATIOS)], ratios))
    for row in data["rows"]:
        parts.append(_row(row))
    return "\n\n".join(parts)


def _row(row: dict[str, Any]) -> str:
    lines = [
        [
            ENGINES.get(s["engine"], s["engine"]),
            s["mode"].upper(),
            fmt(s["queries"]),
            _pair(s["latency"]),
            _pair(s.get("server")) if "server" in s else "-",
            s.get("stopped") or "",
        ]
        for s in row["series"]
    ]
    engines = row["engines"]
    overlap = row["overlap"]
    notes = [
        f"**{row['store']}, {fmt(row['chunks'])} chunks** ({fmt(row['documents'])} documents, "
        f"{fmt(row['projects'])} projects, scope {row['scope']}, {fmt(row['queries'])} queries "
        f"offered, each series stops after {fmt(row['budget_seconds'], 0)} s once it ran 10; "
        f"load average before {row['load_average_before']}, after {row['load_average_after']}; "
        f"export {fmt(row['build_seconds'].get('export'))} s, tantivy index "
        f"{fmt(row['build_seconds'].get('tantivy'))} s, LanceDB table and indexes "
        f"{fmt(row['build_seconds'].get('lancedb'))} s)" + _own_run(row) + ".",
        table(
            ["engine", "mode", "queries", "p50 / p95 ms", "server p50 / p95 ms", "stopped"], lines
        ),
        f"tantivy {engines['tantivy']['version']}: {engines['tantivy']['analyzer']}; "
        f"{engines['tantivy']['query']}. LanceDB {engines['lancedb']['version']} (rows are "
        f"chunks): {engines['lancedb']['fts_index']}; vector index "
        f"{engines['lancedb']['vector_index']}; {engines['lancedb']['filter']}. Statement: "
        + (engines["statement"]["how"] or engines["statement"]["skipped"])
        + f". Peers' times exclude {row['peer_timings_exclude']}.",
        "Top-10 overlap (mean share of common documents): "
        + "; ".join(
            f"{name.replace('_', ' ')} {fmt(o.get('mean'), 2)} "
            f"({fmt(o.get('queries_with_overlap'), 0)} of {fmt(o.get('queries'), 0)} queries > 0)"
            for name, o in overlap.items()
        )
        + ".",
    ]
    return "\n\n".join(notes)


def _own_run(row: Any) -> str:
    """Where a row merged from another run of the benchmark says when and at what commit it
    was measured (the section's stamp is the other rows' run)."""
    run = row.get("measured")
    if not run:
        return ""
    return f"; measured in its own run, {run['date']} at commit `{run['commit'][:12]}`"

