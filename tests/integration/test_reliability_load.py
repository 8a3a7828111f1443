"""A short version of the load run: 50 concurrent streaming searches for 3 s on a server child.

Project searches (FTS, VECTOR, HYBRID; two pages) and workspace searches over the fake
providers, read to the end by 50 concurrent callers; no call may fail. The child's resident
set size is sampled through the run. The full run (`python -m benchmarks.reliability load`:
200 streams for 60 s) records p99 and memory flatness in benchmarks/reliability/results.json.
"""

from __future__ import annotations

from pathlib import Path

from service.fakes.suite import FakeProviders
from tests.support.reliability.load import load_scenario
from tests.support.reliability.world import seed

SMOKE_GROWTH_LIMIT = 0.25  # 3 s include warm-up; the 60 s run holds 10 %


async def test_fifty_concurrent_streaming_searches_without_errors(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes)
    report = await load_scenario(tmp_path, concurrency=50, seconds=3.0, fakes=fakes)
    summary = report.summary()
    assert summary["errors"] == 0, summary["errors_by_code"]
    assert summary["calls"] >= 50, summary
    assert set(summary["by_kind"]) == {"fts", "vector", "hybrid", "workspace"}, summary
    assert 0 < summary["p50_ms"] <= summary["p99_ms"], summary
    assert summary["rss_samples"] >= 8, summary
    assert report.memory_growth < SMOKE_GROWTH_LIMIT, summary
