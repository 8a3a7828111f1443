"""Process settings for a long-running server: the cyclic garbage collector's.

CPython collects its youngest generation every 700 net container allocations, and each
full collection walks every object alive, including the tens of thousands built at start-up
(modules, settings, the embedding model's tables, gRPC). A workspace search decodes hundreds
of provider JSON objects that reference counting frees as soon as the page is parsed, so
almost every young collection finds nothing to free, yet they cost about 0.7 ms of CPU per
8-account search (benchmarks/fanout, stop 41).

`tune_collector()` freezes what exists once the server is up (never collected, never walked
again) and collects the youngest generation every 10,000 net allocations instead. Reference
cycles are still collected, later: the young generation holds at most those 10,000 objects.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 10_000


def tune_collector() -> None:
    """Collect once, freeze the survivors, raise the young generation's threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
