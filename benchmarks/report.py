"""Markdown tables for every benchmark section of results.json."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.results import is_failure_only as results_is_failure

Row = dict[str, Any]


def fmt(value: Any, digits: int = 1) -> str:
    """A number for a table cell ('-' when missing)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def stamp_line(stamp: dict[str, Any]) -> str:
    """Where and when a section was measured."""
    dirty = " + uncommitted changes" if stamp.get("dirty") else ""
    return (f"_Measured {stamp.get('date', '?')} at commit `{stamp.get('commit', '?')}`{dirty}; "
            f"{stamp.get('cores', '?')} cores ({stamp.get('cpu', '?')}), "
            f"{stamp.get('memory_gib', '?')} GiB, Python {stamp.get('python', '?')}; "
            f"load average at the end {stamp.get('load_average', '?')}._")


def _p(summary: dict[str, Any] | None, key: str) -> str:
    return fmt((summary or {}).get(key))


def _triple(summary: dict[str, Any] | None) -> str:
    return " / ".join(_p(summary, k) for k in ("p50_ms", "p95_ms", "p99_ms"))


def render_index(data: Any) -> str:
    """Indexing throughput."""
    rows = [[r["store"], r["embedder"], r["corpus"], fmt(r["documents"]), fmt(r["chunks"]),
             fmt(r["seconds"]), fmt(r["docs_per_s"], 0), fmt(r["chunks_per_s"], 0),
             fmt(r.get("target_chunks_per_s"), 0)] for r in data["rows"]]
    return table(["store", "embedder", "corpus", "documents", "chunks", "seconds", "docs/s",
                  "chunks/s", "target chunks/s"], rows)


def render_latency(data: Any) -> str:
    """Latency per store, size and mode."""
    rows = [[r["store"], fmt(r["chunks"]), r["mode"].upper(), r.get("filter") or "-",
             _triple(r["server"]),
             _triple(r["client"]), fmt(r["exact_share"], 2), fmt(r["mean_hits"]),
             fmt(r.get("target_server_p50_ms"), 0)] for r in data["rows"]]
    return table(["store", "chunks", "mode", "filter", "server p50 / p95 / p99 ms",
                  "client p50 / p95 / p99 ms", "exact share", "hits/page",
                  "target server p50 ms"], rows)


def render_load(data: Any) -> str:
    """Capacity per store and the steps that found it."""
    parts = []
    summary = [[r["store"], fmt(r["chunks"]), r["workload"], fmt(r["held_rps"], 1),
                fmt(r["p99_limit_ms"], 0)] for r in data["rows"]]
    parts.append(table(["store", "chunks", "workload", "held requests/s", "p99 limit ms"],
                       summary))
    steps = [[r["store"], fmt(s["rate"], 1), fmt(s["achieved_rps"], 1), fmt(s["ok"]),
              fmt(sum(s["errors"].values())), _triple(s["latency"]), _triple(s["server"])]
             for r in data["rows"] for s in r["steps"]]
    parts.append(table(["store", "offered/s", "achieved/s", "ok", "errors",
                        "latency from schedule p50 / p95 / p99 ms",
                        "server p50 / p95 / p99 ms"], steps))
    return "\n\n".join(parts)


def render_scale(data: Any) -> str:
    """Exact vs index paths by size."""
    rows = []
    for r in data["rows"]:
        exact, index = r["exact"]["server"], r["index"]["server"]
        ratio = (index["p50_ms"] / exact["p50_ms"]
                 if exact.get("p50_ms") and index.get("p50_ms") else None)
        rows.append([r["store"], fmt(r["chunks"]), r["mode"].upper(), _triple(exact),
                     _triple(index), fmt(ratio, 2), fmt(r["recall_at_10"], 3)])
    return table(["store", "chunks", "mode", "exact server p50 / p95 / p99 ms",
                  "index server p50 / p95 / p99 ms", "index / exact p50", "recall@10"], rows)


def render_seed(data: Any) -> str:
    """Per-project loop vs combined."""
    rows = []
    for r in data["rows"]:
        published = r.get("published_ms")
        shown = f"{published[0]} -> {published[1]}" if published else "-"
        rows.append([r["case"], r["store"], r["mode"].upper(),
                     f"{_p(r['loop']['server'], 'p50_ms')} / {_p(r['loop']['client'], 'p50_ms')}",
                     f"{_p(r['combined']['server'], 'p50_ms')} / "
                     f"{_p(r['combined']['client'], 'p50_ms')}",
                     f"x{fmt(r['ratio_server_p50'], 2)} / x{fmt(r['ratio_client_p50'], 2)}",
                     fmt(r["same_identities"], 2), fmt(r.get("cases")), shown])
    return table(["case", "store", "mode", "loop p50 ms (server / client)",
                  "combined p50 ms (server / client)", "loop / combined (server / client)",
                  "same result set", "measured pairs", "published ms (loop -> combined)"], rows)


def render_relevance(data: Any) -> str:
    """Relevance per store and run, and the baselines."""
    head = (f"Collection `{data['collection']}`: {fmt(data['documents'])} documents, "
            f"{fmt(data['queries'])} queries, {fmt(data['judgments'])} judgments; depth "
            f"{data['depth']}; embedder {data['embedder']}; metrics by {data['metrics_library']}"
            f"; query text lower-cased: {fmt(data['lower_cased'])}.")
    rows = [[r["store"], r["run"].upper(), fmt(r["ndcg_at_10"], 4), fmt(r["map"], 4),
             fmt(r["recall_at_100"], 4), fmt(r["mrr"], 4), fmt(r["ndcg"], 4),
             _p(r.get("server"), "p50_ms"), fmt(r.get("relaxed_queries")),
             fmt(r.get("empty_queries"))]
            for r in data["rows"]]
    parts = [head, table(["store", "run", "nDCG@10", "MAP (AP@1000)", "Recall@100", "MRR",
                          "nDCG (full)", "server p50 ms", "relaxed queries",
                          "empty queries"], rows)]
    for r in data["rows"]:
        if r.get("paired"):
            c = r["paired"]
            parts.append(
                f"{r['store']}: {r['run'].upper()} against {c['against'].upper()}, query by "
                f"query (AP): better on {c['wins']}, worse on {c['losses']}, equal on "
                f"{c['ties']}; mean difference {fmt(c['mean_difference'], 4)}.")
    if data.get("fts_top10_overlap") is not None:
        parts.append("FTS lists of the two stores: mean top-10 overlap "
                     f"{fmt(data['fts_top10_overlap'], 4)}.")
    if data.get("baselines"):
        base = [[b["run"], fmt(b.get("ndcg_at_10"), 4), fmt(b.get("map"), 4),
                 fmt(b.get("ndcg"), 4)] for b in data["baselines"]]
        parts.append("Published and reference baselines (from the collection's README):")
        parts.append(table(["run", "nDCG@10", "MAP", "nDCG (full)"], base))
    return "\n\n".join(parts)


def render_fanout(data: Any) -> str:
    """Workspace fan-out."""
    if data.get("skipped"):
        return f"Not measured: {data['skipped']}"
    rows = [[r["case"], _triple(r["client"]), _triple(r["server"]),
             fmt(r.get("slowest_provider_ms")), fmt(r.get("p50_minus_slowest_ms")),
             fmt(r.get("searches_per_s"), 0), fmt(r.get("fusion_us_per_search"), 1),
             fmt(r.get("concurrency"))] for r in data["rows"]]
    parts = [table(["case", "client p50 / p95 / p99 ms", "server p50 / p95 / p99 ms",
                    "slowest provider ms", "p50 - slowest ms", "searches/s",
                    "fusion us/search", "concurrent calls"], rows)]
    alone = data.get("alone", {})
    requests = data.get("http_requests_per_search", {})
    per_provider = [[name, _triple(alone[name]), fmt(requests.get(name), 1)] for name in alone]
    if per_provider:
        parts.append("Each provider alone (its 4 queries in one call), and provider HTTP "
                     "requests per 8-account search:")
        parts.append(table(["provider", "alone client p50 / p95 / p99 ms",
                            "HTTP requests per search"], per_provider))
    parts.append(f"Query states over the sequential searches: {data.get('states')}; "
                 f"mean fused results per call: {fmt(data.get('mean_results'))}.")
    parts.extend(_fanout_cpu(data))
    parts.extend(_fanout_floor(data))
    parts.extend(_fanout_baseline(data))
    return "\n\n".join(parts)


def _fanout_floor(data: Any) -> list[str]:
    """The server's CPU beside the I/O floor (benchmarks.fanout_floor)."""
    floor = data.get("floor")
    if not floor:
        return []
    base = (data.get("baseline") or {}).get("cpu_ms_per_search", {}).get("server")
    rows = []
    for name, label, server in (
            ("streamed", "streamed", data.get("cpu_ms_per_search", {}).get("server")),
            ("in_page", "statuses in the page", data.get("cpu_ms_per_search_in_page", {})
             .get("server"))):
        low = floor["cpu_ms_per_search"].get(name)
        rows.append([label, fmt(server, 1), fmt(low, 1),
                     fmt(server - low, 1) if server is not None and low is not None else "-",
                     f"{low / base:.2f}x" if low is not None and base else "-"])
    return [f"The I/O floor: a server that only replays the {floor['exchanges']} provider "
            f"requests of one search (in {len(floor['waves'])} waves, with the service's HTTP "
            "client and JSON decoding) and sends the stream the real server sent, with no "
            "search logic. Server CPU ms per search:",
            table(["statuses", "server", "I/O floor", "search logic (server - floor)",
                   "floor / baseline server"], rows)]


def _fanout_baseline(data: Any) -> list[str]:
    """This run against the reference commit measured just before it on the same machine."""
    base = data.get("baseline")
    if not base:
        return []
    now_cpu, base_cpu = data.get("cpu_ms_per_search", {}), base.get("cpu_ms_per_search", {})
    sequential = data["rows"][0]

    def ratio(now: float | None, before: float | None) -> str:
        return f"{now / before:.2f}x" if now is not None and before else "-"

    rows = [[f"{name} CPU ms per search", fmt(base_cpu.get(name), 1), fmt(now_cpu.get(name), 1),
             ratio(now_cpu.get(name), base_cpu.get(name))] for name in ("server", "fakes")]
    in_page = data.get("cpu_ms_per_search_in_page", {}).get("server")
    if in_page is not None:
        rows.insert(1, ["server CPU ms per search, statuses in the page (IN_PAGE)",
                        fmt(base_cpu.get("server"), 1), fmt(in_page, 1),
                        ratio(in_page, base_cpu.get("server"))])
    rows.append(["client p50 ms", fmt(base.get("p50_ms"), 1),
                 fmt(sequential["client"]["p50_ms"], 1),
                 ratio(sequential["client"]["p50_ms"], base.get("p50_ms"))])
    rows.append(["p50 - slowest provider ms", fmt(base.get("p50_minus_slowest_ms"), 1),
                 fmt(sequential.get("p50_minus_slowest_ms"), 1), "-"])
    rows.append(["server CPU / fakes CPU", ratio(base_cpu.get("server"), base_cpu.get("fakes")),
                 ratio(now_cpu.get("server"), now_cpu.get("fakes")), "-"])
    return [f"Against the baseline commit `{base['commit'][:12]}`, measured just before on the "
            "same machine (SEARCH_BENCH_FANOUT_BASELINE):",
            table(["figure", "baseline", "this run", "this / baseline"], rows)]


def _fanout_cpu(data: Any) -> list[str]:
    """The throughput sweep and where the CPU of a search goes (server, fakes, driver)."""
    sweep = data.get("throughput_sweep") or []
    if not sweep:
        return []
    names = sorted({name for row in sweep for name in row.get("cpu_ms_per_search", {})})
    sequential = data.get("cpu_ms_per_search", {})

    def per_core(cpu: dict[str, float]) -> str:
        """Searches one fully busy server core would serve: 1000 / server CPU ms."""
        server = cpu.get("server")
        return fmt(1000.0 / server, 1) if server else "-"

    rows = [["1 (one call at a time)", "-", "-",
             *(fmt(sequential.get(n), 1) for n in names), per_core(sequential)]]
    in_page = data.get("cpu_ms_per_search_in_page")
    if in_page:
        rows.append(["1, statuses in the page", "-", "-",
                     *(fmt(in_page.get(n), 1) for n in names), per_core(in_page)])
    rows += [[fmt(row["concurrency"]), fmt(row["searches_per_s"], 1), _triple(row["client"]),
              *(fmt(row["cpu_ms_per_search"].get(n), 1) for n in names),
              per_core(row["cpu_ms_per_search"])] for row in sweep]
    return ["Throughput by concurrent callers, CPU milliseconds per search by process, and "
            "searches/s per server core (1000 / server CPU ms: what one core of the service "
            "serves, whatever else shares the machine):",
            table(["callers", "searches/s", "client p50 / p95 / p99 ms",
                   *(f"{n} CPU ms" for n in names), "searches/s per server core"], rows)]


def _render_scaleout(data: Any) -> str:
    from benchmarks.scaleout_report import render_scaleout  # it imports this module

    return render_scaleout(data)


def _render_peers(data: Any) -> str:
    from benchmarks.peers_report import render_peers  # it imports this module

    return render_peers(data)


SECTIONS: dict[str, tuple[str, str, Callable[[Any], str]]] = {
    "index": ("Indexing throughput (issue 3)",
              "UpsertDocuments through the server, empty database per row, 2 concurrent "
              "streams, the server embeds.", render_index),
    "latency": ("Search latency (issues 4 and 7)",
                "50 projects, scope of 10 random projects, deterministic 384-d vectors, page "
                "size 10, sequential calls; server = time inside the service's interceptor, "
                "client = around the call on a real channel.", render_latency),
    "load": ("Fixed-rate load (issue 7)",
             "Open-loop driver on grpc.aio: requests start at scheduled times; latency counts "
             "from the scheduled time. Rate x1.5 per 4-s step until p99 > 300 ms or an error.",
             render_load),
    "scale": ("Scaling: exact scan vs ANN index (issue 7)",
              "Same database, two servers: exact_scan_limit = 1e9 (always exact) and 0 (always "
              "the index path); recall@10 of the index path against exact, same queries.",
              render_scale),
    "seed": ("Seed comparison: per-project loop vs combined search (issue 4)",
             "Same server, interleaved; loop = one SearchProjects call per project, merged by "
             "score in the client; server time of a loop = sum of its calls.", render_seed),
    "relevance": ("Relevance (issue 7)",
                  "Indexed through the server into one project; MAP = AP over the top 1000.",
                  render_relevance),
    "fanout": ("Workspace fan-out (issue 5)",
               "8 accounts (one per provider) x 4 queries against the fake providers, each "
               "answering after 20 ms.", render_fanout),
    "scaleout": ("Scale-out (issue 9)",
                 "Service replicas over one PostgreSQL, and hash partitions by project "
                 "(SEARCH_PG_PARTITIONS); deterministic 384-d vectors.", _render_scaleout),
    "peers": ("Peers: tantivy, LanceDB and exact numpy on the same data (issue 18)",
              "The store's documents and chunks exported and indexed by each peer in the "
              "harness process; every query on every engine and mode, interleaved (order "
              "rotated per query); same scopes of 10 of 50 projects, page of 10.",
              _render_peers),
}


def render(results: dict[str, Any]) -> str:
    """Every stored section, in a fixed order."""
    parts = []
    for name, (title, intro, draw) in SECTIONS.items():
        section = results["benchmarks"].get(name)
        if section is None:
            parts.append(f"## {title}\n\nNot run yet: `python -m benchmarks {name}`.\n")
            continue
        data = section["data"]
        body = f"**Failed:** `{data['error']}`" if results_is_failure(data) else draw(data)
        failure = section.get("failure")
        if failure is not None:
            body = (f"**The last run failed** ({stamp_line(failure['stamp'])}): "
                    f"`{failure['error']}`. The figures below are from the previous successful "
                    f"run.\n\n{body}")
        parts.append(f"## {title}\n\n{stamp_line(section['stamp'])}\n\n{intro}\n\n{body}\n")
    parts.append(_reliability())
    return "\n".join(parts)


def _reliability() -> str:
    """The reliability runs' section (issue 8), kept in their own results file."""
    from benchmarks.reliability import results as reliability

    return (
        reliability.render_markdown(reliability.load()).rstrip()
        + "\n\n_Reliability figures come from `python -m benchmarks.reliability all` (results in"
        " `benchmarks/reliability/results.json`); see `benchmarks/reliability/README.md`._\n"
    )
