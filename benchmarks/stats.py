"""Small statistics over latency samples (seconds in, milliseconds out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Summary = dict[str, float]


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation); NaN when there are no samples."""
    if not samples:
        return float("nan")
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def summarize(seconds: Sequence[float]) -> Summary:
    """n, mean, p50, p95, p99 and max of latencies given in seconds, reported in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": float(len(ms)),
        "mean_ms": float(np.mean(ms)) if ms else float("nan"),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else float("nan"),
    }


def ratio(slow: float, fast: float) -> float:
    """slow / fast, NaN when either is missing or fast is zero."""
    if not fast or fast != fast or slow != slow:
        return float("nan")
    return slow / fast
