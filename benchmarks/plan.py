"""What a command runs, at which sizes, and the order that lets benchmarks share corpora."""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks import index, latency, load, relevance, report, results, scale, seed
from benchmarks.stamp import machine_stamp
from benchmarks.workbench import LoadedCorpus, Options, Workbench, log

HERE = Path(__file__).resolve().parent
CORPUS_BENCHMARKS = ("latency", "scale", "seed", "load", "peers")
# Not part of `all`: the peers' index builds would add minutes per store to its time budget.
NOT_IN_ALL = ("peers",)


@dataclass(frozen=True)
class Sizes:
    """Sizes and repetitions; `smoke()` shrinks them to a harness check."""

    corpus_chunks: tuple[int, ...] = (10_000, 100_000)
    projects: int = 50
    latency_queries: int = 100
    scale_queries: int = 40
    seed_reps: int = 100
    seed_scale_queries: int = 12
    load_step_seconds: float = 4.0
    load_max_steps: int = 12
    load_start_rps: float = 2.0
    index_synthetic_chunks: int = 12_000
    index_model_docs: int = 240
    relevance_max_docs: int = 0
    relevance_max_queries: int = 0
    fanout_searches: int = 80
    peers_queries: int = 100
    budget_seconds: float = 8.0  # per measured series; slow paths run fewer queries

    @classmethod
    def smoke(cls) -> Sizes:
        """Tiny everything."""
        return cls(corpus_chunks=(120, 240), projects=12, latency_queries=3, scale_queries=3,
                   seed_reps=2, seed_scale_queries=2, load_step_seconds=0.4, load_max_steps=2,
                   load_start_rps=5.0, index_synthetic_chunks=60, index_model_docs=4,
                   relevance_max_docs=60, relevance_max_queries=4, fanout_searches=4,
                   peers_queries=6, budget_seconds=5.0)


@dataclass(frozen=True)
class Plan:
    """One invocation."""

    command: str
    options: Options
    sizes: Sizes
    collection: Path
    depth: int = 1000
    keep_case: bool = False
    embed_cache: str = ""
    with_1m: bool = False
    out: Path = HERE
    wanted: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        """From the parsed command line."""
        stores = tuple(s.strip() for s in args.stores.split(",") if s.strip())
        unknown = [s for s in stores if s not in ("sqlite", "postgres")]
        if unknown:
            raise SystemExit(f"unknown store {unknown[0]!r}")
        out = Path(args.out) if args.out else HERE
        everything = tuple(n for n in ("index", *CORPUS_BENCHMARKS, "relevance", "fanout",
                                       "scaleout") if n not in NOT_IN_ALL)
        wanted = everything if args.command == "all" \
            else (() if args.command == "report" else (args.command,))
        return cls(
            command=args.command,
            options=Options(inprocess=args.inprocess, pg_dsn=args.pg_dsn, stores=stores,
                            smoke=args.smoke),
            sizes=Sizes.smoke() if args.smoke else Sizes(),
            collection=Path(args.collection),
            depth=args.depth,
            keep_case=args.keep_case,
            embed_cache="" if args.no_embed_cache else str(HERE / ".cache" / "embeddings.sqlite3"),
            with_1m=args.with_1m,
            out=out,
            wanted=wanted,
        )

    def with_out(self, out: Path) -> Plan:
        """The same plan writing elsewhere."""
        return replace(self, out=out)

    @property
    def json_path(self) -> Path:
        """results.json of this plan."""
        return self.out / "results.json"

    @property
    def markdown_path(self) -> Path:
        """RESULTS.md of this plan."""
        return self.out / "RESULTS.md"


class Recorder:
    """Saves each finished section at once (a later failure keeps the earlier results)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        plan.out.mkdir(parents=True, exist_ok=True)

    def save(self, name: str, data: Any) -> None:
        """Store a section and regenerate RESULTS.md."""
        results.save_section(name, data, machine_stamp(), self.plan.json_path)
        self.render()

    def fail(self, name: str, error: str) -> None:
        """Record a failed run beside the section's previous figures; regenerate RESULTS.md."""
        results.save_failure(name, error, machine_stamp(), self.plan.json_path)
        self.render()

    def render(self) -> None:
        """RESULTS.md from results.json."""
        results.write_markdown(report.render(results.load(self.plan.json_path)),
                               self.plan.markdown_path)


async def run_plan(plan: Plan) -> list[str]:
    """Run the plan's benchmarks in the order that shares the most work; the failed phases.

    A phase that fails (say, the service answers INTERNAL) is recorded as failed in
    results.json and RESULTS.md, and the other phases still run.
    """
    recorder = Recorder(plan)
    bench = Workbench(plan.options)
    phases: list[tuple[tuple[str, ...], Callable[[], Awaitable[None]]]] = [
        (("index",), lambda: _index(bench, plan, recorder)),
        (CORPUS_BENCHMARKS, lambda: _corpus_benchmarks(bench, plan, recorder)),
        (("relevance",), lambda: _relevance(bench, plan, recorder)),
        (("fanout",), lambda: _fanout(plan, recorder)),
        (("scaleout",), lambda: _scaleout(bench, plan, recorder)),
    ]
    failed: list[str] = []
    try:
        for names, run in phases:
            wanted = [n for n in names if n in plan.wanted]
            if not wanted:
                continue
            try:
                await run()
            except Exception as error:  # recorded, reported, and the next phase still runs
                log(f"FAILED {', '.join(wanted)}: {error!r}")
                traceback.print_exc()
                for name in wanted:
                    recorder.fail(name, f"{type(error).__name__}: {error}")
                failed += wanted
    finally:
        await bench.close()
    recorder.render()
    return failed


async def _fanout(plan: Plan, recorder: Recorder) -> None:
    from benchmarks import fanout

    log("== fanout")
    recorder.save("fanout", await fanout.measure(plan.sizes.fanout_searches,
                                                 inprocess=plan.options.inprocess))


async def _scaleout(bench: Workbench, plan: Plan, recorder: Recorder) -> None:
    from benchmarks import scaleout

    log("== scaleout" + (" (with 1M chunks)" if plan.with_1m else ""))
    sizes = scaleout.ScaleoutSizes.smoke() if plan.options.smoke else scaleout.ScaleoutSizes()
    # With --with-1m the 100k-chunk part is saved first: the 1M growth takes a long time.
    recorder.save("scaleout", await scaleout.measure(
        bench, sizes, with_1m=plan.with_1m, save=lambda part: recorder.save("scaleout", part)))


async def _index(bench: Workbench, plan: Plan, recorder: Recorder) -> None:
    log("== index")
    rows = await index.measure(bench, synthetic_chunks=plan.sizes.index_synthetic_chunks,
                               model_docs=plan.sizes.index_model_docs,
                               collection=plan.collection)
    recorder.save("index", {"rows": rows, "postgres": await _pg(bench)})


async def _pg(bench: Workbench) -> dict[str, Any] | None:
    if "postgres" not in bench.options.stores:
        return None
    return await bench.postgres.describe()


async def _relevance(bench: Workbench, plan: Plan, recorder: Recorder) -> None:
    log(f"== relevance on {plan.collection}")
    data = await relevance.measure(
        bench, plan.collection, depth=plan.depth, max_docs=plan.sizes.relevance_max_docs,
        max_queries=plan.sizes.relevance_max_queries, keep_case=plan.keep_case,
        cache=plan.embed_cache,
    )
    recorder.save("relevance", data)


@dataclass
class _CorpusRows:
    latency: list[dict[str, Any]] = field(default_factory=list)
    scale: list[dict[str, Any]] = field(default_factory=list)
    seed: list[dict[str, Any]] = field(default_factory=list)
    load: list[dict[str, Any]] = field(default_factory=list)
    peers: list[dict[str, Any]] = field(default_factory=list)
    loads: list[dict[str, Any]] = field(default_factory=list)


async def _corpus_benchmarks(bench: Workbench, plan: Plan, recorder: Recorder) -> None:
    log("== " + ", ".join(n for n in CORPUS_BENCHMARKS if n in plan.wanted))
    if "peers" in plan.wanted:
        import benchmarks.peers  # noqa: F401 - without the `peers` extra, fail before loading
    rows = _CorpusRows()
    sizes = plan.sizes
    if "seed" in plan.wanted:
        for store in bench.options.stores:
            rows.seed += await seed.fixture(bench, store, sizes.seed_reps)
    for store in bench.options.stores:
        await _one_store(bench, plan, store, rows)
    pg = await _pg(bench)
    common = {"projects": sizes.projects, "bulk_loads": rows.loads, "postgres": pg}
    for name in CORPUS_BENCHMARKS:
        if name in plan.wanted:
            recorder.save(name, {"rows": getattr(rows, name), **common})


async def _one_store(bench: Workbench, plan: Plan, store: str, rows: _CorpusRows) -> None:
    sizes = plan.sizes
    corpus = None
    for size in sizes.corpus_chunks:
        corpus = await bench.corpus(store, size, sizes.projects)
        if "latency" in plan.wanted:
            rows.latency += await latency.measure(corpus, sizes.latency_queries,
                                                  sizes.budget_seconds)
        if "scale" in plan.wanted:
            rows.scale += await scale.measure(corpus, sizes.scale_queries, sizes.budget_seconds)
    assert corpus is not None
    if "peers" in plan.wanted:  # at the largest size only: the peers index what is there
        rows.peers.append(await _peers(corpus, sizes))
    if "seed" in plan.wanted:
        rows.seed += await seed.at_scale(corpus, sizes.seed_scale_queries,
                                         budget=sizes.budget_seconds)
    if "load" in plan.wanted:
        rows.load.append(await load.measure(
            corpus, seconds=sizes.load_step_seconds, max_steps=sizes.load_max_steps,
            start=sizes.load_start_rps))
    if plan.with_1m and {"scale", "peers"} & set(plan.wanted):
        corpus = await bench.corpus(store, 1_000_000, sizes.projects)
        if "scale" in plan.wanted:
            rows.scale += await scale.measure(corpus, sizes.scale_queries, sizes.budget_seconds)
        if "peers" in plan.wanted:
            rows.peers.append(await _peers(corpus, sizes))
    rows.loads += [{"store": store, "documents": r.documents, "chunks": r.chunks,
                    "seconds": r.seconds, "chunks_per_s": r.chunks_per_second}
                   for r in corpus.loads]
    await bench.release_corpus(store)


async def _peers(corpus: LoadedCorpus, sizes: Sizes) -> dict[str, Any]:
    from benchmarks import peers  # imports tantivy and lancedb (the `peers` extra)

    return await peers.measure(corpus, sizes.peers_queries, sizes.budget_seconds)
