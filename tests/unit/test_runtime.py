"""service.runtime.tune_collector: frozen start-up heap, rarer young collections, cycles
still collected (run in a child process: the settings are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import gc, weakref
    from service.runtime import YOUNG_THRESHOLD, tune_collector

    before = gc.get_threshold()
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:]), gc.get_threshold()
    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()

    class Node:
        pass

    # A reference cycle left behind is still collected, once enough containers are made.
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    kept = [[i] for i in range(3 * YOUNG_THRESHOLD)]
    assert gone() is None, "a cycle survived 3x the young threshold of allocations"
    print("ok")
    """
)


def test_the_collector_is_tuned_and_still_collects_cycles() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
