"""Smoke versions of every benchmark: the harness is correct at tiny sizes (no timing checks).

Servers run in-process (real gRPC on port 0, real SQLite and PostgreSQL); results go to a
temporary directory, never to the committed benchmarks/results.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from benchmarks import fanout, fanout_floor, index, relevance, report, results
from benchmarks.__main__ import build_parser
from benchmarks.load import run_step
from benchmarks.measure import Query
from benchmarks.plan import Plan, Sizes, run_plan
from benchmarks.workbench import Options, Workbench
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc

pytestmark = [pytest.mark.postgres]
MODES = {"fts", "vector", "hybrid"}


def _plan(tmp_path: Path, command: str, dsn: str, **changes: Any) -> Plan:
    args = build_parser().parse_args([command, "--smoke", "--inprocess", "--pg-dsn", dsn,
                                      "--out", str(tmp_path / "out")])
    plan = Plan.from_args(args)
    return Plan(**{**plan.__dict__, **changes})


async def test_corpus_benchmarks_write_tables_for_both_stores(tmp_path: Path, pg_dsn: str) -> None:
    plan = _plan(tmp_path, "all", pg_dsn,
                 wanted=("latency", "scale", "seed", "load"), sizes=Sizes.smoke())
    await run_plan(plan)
    stored = json.loads(plan.json_path.read_text())["benchmarks"]
    assert set(stored) == {"latency", "scale", "seed", "load"}
    assert stored["latency"]["stamp"]["cores"] >= 1
    assert stored["latency"]["stamp"]["commit"]
    latency_rows = stored["latency"]["data"]["rows"]
    assert {(r["store"], r["mode"], r["filter"]) for r in latency_rows} == {
        (s, m, f) for s in ("sqlite", "postgres") for m in MODES
        for f in ("", "kind", "directory")}
    for row in latency_rows:
        assert row["server"]["n"] == row["client"]["n"] == 3
        assert 0 < row["server"]["p50_ms"] <= row["client"]["p50_ms"]
    for row in stored["scale"]["data"]["rows"]:
        # Tiny corpora: the index path must find exactly what the exact scan finds.
        assert row["exact"]["exact_share"] == 1.0
        assert row["index"]["exact_share"] == 0.0
        assert row["recall_at_10"] == pytest.approx(1.0)
    fixture_rows = [r for r in stored["seed"]["data"]["rows"] if r["case"].startswith("3 proj")]
    assert len(fixture_rows) == 6
    assert all(r["same_identities"] == 1.0 for r in fixture_rows if r["mode"] != "fts")
    assert all(r["ratio_server_p50"] > 0 for r in stored["seed"]["data"]["rows"])
    assert {r["store"] for r in stored["load"]["data"]["rows"]} == {"sqlite", "postgres"}
    markdown = plan.markdown_path.read_text()
    for title in ("Search latency", "Fixed-rate load", "Scaling", "Seed comparison"):
        assert f"## {title}" in markdown
    assert "Not run yet: `python -m benchmarks relevance`" in markdown


def test_a_failed_run_keeps_the_previous_figures_and_records_the_failure(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    stamp = {"when": "2026-12-01T00:00:00Z"}
    results.save_failure("fanout", "RuntimeError: never ran", stamp, path)  # nothing before
    never = results.load(path)["benchmarks"]["fanout"]["data"]
    assert never == {"error": "RuntimeError: never ran"}
    good = results.load()["benchmarks"]["fanout"]["data"]  # the committed figures' shape
    results.save_section("fanout", good, stamp, path)
    results.save_failure("fanout", "PgvectorCanaryError: backend died", stamp, path)
    section = results.load(path)["benchmarks"]["fanout"]
    assert section["data"] == good  # the figures survive the failed run
    assert section["failure"]["error"] == "PgvectorCanaryError: backend died"
    shown = report.render(results.load(path))
    assert "The last run failed" in shown
    assert "backend died" in shown
    assert report.render_fanout(good) in shown  # and the previous figures under it
    results.save_section("fanout", good, stamp, path)  # a later success clears the failure
    assert "failure" not in results.load(path)["benchmarks"]["fanout"]


def test_regenerating_results_md_keeps_the_hand_written_reading(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    results.write_markdown("## Tables\n\nold", path)
    text = path.read_text().replace(results.DEFAULT_READING, "We are fast enough.\n\nReally.")
    path.write_text(text)
    results.write_markdown("## Tables\n\nnew", path)
    regenerated = path.read_text()
    assert "We are fast enough.\n\nReally." in regenerated
    assert "new" in regenerated
    assert "old" not in regenerated


async def test_index_benchmark_counts_documents_and_chunks(tmp_path: Path, pg_dsn: str) -> None:
    # A small BEIR folder of its own: a clone without ../shared runs this test too.
    collection = _beir_folder(tmp_path / "mini-beir")
    bench = Workbench(Options(inprocess=True, pg_dsn=pg_dsn, workdir=tmp_path / "work"))
    try:
        rows = await index.measure(bench, synthetic_chunks=30, model_docs=3,
                                   collection=collection)
    finally:
        await bench.close()
    assert {(r["store"], r["embedder"], r["corpus"]) for r in rows} == {
        (s, e, c) for s in ("sqlite", "postgres")
        for e, c in (("deterministic", "synthetic"), ("deterministic", "mini-beir"),
                     ("local", "mini-beir"))}
    for row in rows:
        assert row["chunks"] >= row["documents"] > 0
        assert row["chunks_embedded"] == row["chunks"]  # empty database: everything embedded
        assert row["chunks_per_s"] > 0


def _beir_folder(root: Path) -> Path:
    docs = [
        ("a", "Microwave dielectric measurement", "dielectric constant of liquids at microwave"),
        ("b", "", "waveguide fed antenna radiation patterns"),
        ("c", "", "digital computers in band pass filter design"),
        ("d", "", "liquid helium thermal conductivity"),
        ("e", "", "transistor amplifier noise figure"),
    ]
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "DIELECTRIC CONSTANT OF LIQUIDS"}) + "\n"
        + json.dumps({"_id": "q2", "text": "band pass filter design computers"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tc\t1\n")
    return root


async def test_relevance_runs_unchanged_on_another_beir_folder(
    tmp_path: Path, pg_dsn: str
) -> None:
    folder = _beir_folder(tmp_path / "tiny-beir")
    bench = Workbench(Options(inprocess=True, pg_dsn=pg_dsn, workdir=tmp_path / "work"))
    try:
        data = await relevance.measure(bench, folder, depth=20, cache=str(tmp_path / "c.db"))
    finally:
        await bench.close()
    assert data["collection"] == "tiny-beir"
    assert data["baselines"] == []
    assert {(r["store"], r["run"]) for r in data["rows"]} == {
        (s, run) for s in ("sqlite", "postgres")
        for run in ("fts", "vector", "hybrid", "hybrid_rrf", "hybrid_max_min", "rrf",
                    "fts_any")}
    for row in data["rows"]:
        for metric in ("ndcg_at_10", "map", "recall_at_100", "mrr", "ndcg"):
            assert 0.0 <= row[metric] <= 1.0
        assert row["mrr"] == pytest.approx(1.0), row  # each query's one relevant doc ranks 1st
        assert row["empty_queries"] == 0, row
        assert "ranked" not in row
    assert data["fts_top10_overlap"] == pytest.approx(1.0)


def test_metrics_come_from_ir_measures_and_count_queries_without_results() -> None:
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d9": 1}}
    metrics = relevance.evaluate(qrels, {"q1": ["d1", "d3", "d2"], "q2": []})
    assert metrics["mrr"] == pytest.approx(0.5)  # q1: 1.0, q2 (no results): 0
    assert metrics["map"] == pytest.approx((1.0 + 2 / 3) / 2 / 2)
    assert metrics["recall_at_100"] == pytest.approx(0.5)
    fused = relevance.rrf({"q": ["x", "y"]}, {"q": ["y", "z"]}, 10)
    assert fused["q"][0] == "y"


async def test_load_driver_sends_at_the_fixed_rate(tmp_path: Path) -> None:
    bench = Workbench(Options(inprocess=True, stores=("sqlite",), workdir=tmp_path))
    try:
        corpus = await bench.corpus("sqlite", 30, projects=3)
        queries = [Query(tuple(corpus.projects), "alpha", "fts")]
        step = await run_step(corpus.server, queries, rate=20.0, seconds=0.5)
    finally:
        await bench.close()
    assert len(step.latencies) == 10
    assert not step.errors
    assert len(step.server) == 10
    assert all(latency > 0 for latency in step.latencies)


async def test_fanout_reports_every_provider_and_fusion_cost() -> None:
    data = await fanout.measure(2, inprocess=True)
    assert set(data["alone"]) == set(fanout.PROVIDERS)
    assert set(data["states"]) == {"QUERY_STATE_OK"}
    sequential, in_page, concurrent = data["rows"]
    assert sequential["client"]["n"] == 2
    assert sequential["fusion_us_per_search"] > 0
    assert in_page["client"]["n"] == 2  # the same series, statuses inside the page
    assert concurrent["searches_per_s"] > 0


async def test_fanout_with_one_process_per_fake_provider() -> None:
    """The separate-fakes rows: eight fake children, every provider answering, p50 - slowest."""
    streamed, in_page = await fanout.separate_fakes(2)
    for row in (streamed, in_page):
        assert row["client"]["n"] == 2
        assert row["slowest_provider_ms"] > 0
        assert set(row["states"]) == {"QUERY_STATE_OK"}
        assert row["p50_minus_slowest_ms"] == row["client"]["p50_ms"] - row["slowest_provider_ms"]
    assert "statuses in the page" in in_page["case"]


async def test_the_fanout_floor_replays_a_search_and_sends_its_stream(tmp_path: Path) -> None:
    """The I/O floor: one real search's provider requests in waves (Gmail's batch reads after
    its lists), each replay answered, the recorded stream sent back message for message; then
    its CPU measured in a child per delivery."""
    world = fanout._World(False)
    try:
        async with grpc.aio.insecure_channel(await world.start()) as channel:
            driver = fanout.Driver(channel)
            await driver.connect_all()
            every = [q for name in fanout.PROVIDERS for q in fanout.queries_for(name)]
            request = wpb.SearchWorkspaceRequest(queries=every, top_k=fanout.TOP_K)
            fakes = world.fakes_children[0]
            recording = await fanout_floor.record(fakes, driver.stub, request, fanout.LATENCY)
            floor = fanout_floor.FloorServer(recording, fakes.info)
            await floor.start()
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{floor.port}") as replay:
                    stub = wgrpc.WorkspaceSearchServiceStub(replay)
                    request.status_delivery = wpb.STATUS_DELIVERY_STREAMED
                    sent = [m async for m in stub.SearchWorkspace(request, timeout=30)]
                    assert await fakes.take_exchanges()  # it did ask the providers
            finally:
                await floor.close()
            measured = await fanout_floor.measure_floor(
                fakes, driver.stub, request, 2, tmp_path, fanout.LATENCY)
    finally:
        await world.close()
    # Gmail's batch reads wait for its lists: a later wave (the timing decides the rest).
    wave_of = {id(e): n for n, wave in enumerate(floor.waves) for e in wave}
    gmail = [e for wave in floor.waves for e in wave if e.provider == "gmail"]
    lists = [wave_of[id(e)] for e in gmail if not e.target.startswith("/batch/")]
    batches = [wave_of[id(e)] for e in gmail if e.target.startswith("/batch/")]
    assert lists
    assert batches
    assert min(batches) > max(lists)
    assert sum(map(len, floor.waves)) == len(recording["exchanges"]) >= 32
    assert sum(measured["waves"]) == measured["exchanges"] >= 32
    streamed = floor.messages[wpb.STATUS_DELIVERY_STREAMED]
    assert sent == streamed
    assert sum(m.HasField("query_status") for m in streamed) == len(every)
    assert set(measured["cpu_ms_per_search"]) == {"streamed", "in_page"}


async def test_a_failing_benchmark_is_recorded_and_the_rest_still_runs(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "all", "", wanted=("relevance",),
                 collection=tmp_path / "not-a-beir-folder")
    plan = Plan(**{**plan.__dict__, "options": Options(inprocess=True, stores=("sqlite",))})
    assert await run_plan(plan) == ["relevance"]
    stored = json.loads(plan.json_path.read_text())["benchmarks"]["relevance"]["data"]
    assert "FileNotFoundError" in stored["error"]
    assert "**Failed:** `FileNotFoundError" in plan.markdown_path.read_text()


async def test_scaleout_measures_replicas_partitions_and_pruning(
    tmp_path: Path, pg_dsn: str
) -> None:
    plan = _plan(tmp_path, "scaleout", pg_dsn)
    assert await run_plan(plan) == []
    data = json.loads(plan.json_path.read_text())["benchmarks"]["scaleout"]["data"]
    assert [r["replicas"] for r in data["replicas"]] == [1, 2]
    for row in data["replicas"]:
        assert row["ok"] > 0
        assert not row["errors"]
        assert len(row["calls_per_replica"]) == row["replicas"]  # round-robin reached each
    assert {(r["partitions"], r["mode"]) for r in data["partitions"]} == {
        (p, m) for p in (0, 1, 4) for m in MODES}
    assert [r["setup"] for r in data["read_replica"]] == ["primary only", "primary + 1 standby"]
    assert all(r["ok"] > 0 and not r["errors"] for r in data["read_replica"])
    # Every partition carries its own HNSW index after the rebuild (not an empty parent).
    assert {r["partitions"]: r["hnsw_indexes"] for r in data["loads"]} == {0: 1, 1: 1, 4: 4}
    four = [p for p in data["explain"] if p["partitions"] == 4]
    assert {p["mode"] for p in four} == MODES
    for probe in four:
        for plan_kind in ("force_custom_plan", "force_generic_plan", "element_params_generic"):
            assert probe[plan_kind]["partition_scans_executed"] >= 1
        assert probe["auto"]["custom_plans"] + probe["auto"]["generic_plans"] >= 8
    assert "## Scale-out (issue 9)" in plan.markdown_path.read_text()


async def test_peers_time_every_engine_on_the_same_data(tmp_path: Path, pg_dsn: str) -> None:
    plan = _plan(tmp_path, "peers", pg_dsn)
    assert await run_plan(plan) == []
    stored = json.loads(plan.json_path.read_text())["benchmarks"]["peers"]
    assert stored["stamp"]["commit"]
    rows = stored["data"]["rows"]
    assert [r["store"] for r in rows] == ["sqlite", "postgres"]
    for row in rows:
        assert row["exported"]["chunks"] == row["chunks"]  # the peers index what the store holds
        # The statement alone is timed unless its internal builder changed shape (then why).
        statement = row["engines"]["statement"]
        assert statement["timed"] != bool(statement["skipped"]), statement
        engines = ("lancedb", "store", "grpc") + (("statement",) if statement["timed"] else ())
        series = {(s["engine"], s["mode"]): s for s in row["series"]}
        assert set(series) == {("tantivy", "fts"), ("numpy", "vector")} | {
            (e, m) for e in engines for m in MODES}
        for (engine, _mode), one in series.items():
            assert one["queries"] == row["queries"] == 6, one
            assert one["latency"]["p50_ms"] > 0
            assert (engine == "grpc") == ("server" in one)
        # Both searched the same documents: some common results, and the same exact cosine.
        assert row["overlap"]["tantivy_vs_store_fts"]["queries_with_overlap"] > 0, row["overlap"]
        assert row["overlap"]["tantivy_vs_grpc_fts"]["queries_with_overlap"] > 0, row["overlap"]
        assert row["overlap"]["numpy_vs_store_vector"]["mean"] > 0.8, row["overlap"]
        assert set(row["ratios"]) == {"fts_store_over_tantivy", "fts_statement_over_tantivy",
                                      "hybrid_server_over_lancedb", "vector_server_over_numpy"}
        assert all(r["p50"] > 0 for r in row["ratios"].values())
        assert len(row["load_average_before"]) == len(row["load_average_after"]) == 3
    assert "## Peers: tantivy, LanceDB" in plan.markdown_path.read_text()
