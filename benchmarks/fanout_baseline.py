"""The fan-out benchmark of a reference commit, run on this machine just before this one.

CPU milliseconds depend on the machine (the same search costs 21 ms of server CPU on one
Intel Xeon and 63 ms on one AMD EPYC), so a target like "at most 0.4x the starting commit"
is only checkable against the reference measured here, now. `SEARCH_BENCH_FANOUT_BASELINE`
names a git ref; the benchmark checks it out into a throw-away worktree under
benchmarks/.work, runs that commit's own `python -m benchmarks fanout` there (its code, its
fakes), and keeps the figures it printed beside this run's. The reference runs on its own
dependencies (its pyproject.toml; an older commit may need a package this one dropped), in a
virtualenv kept under benchmarks/.work per commit and made on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.workbench import log

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / ".work"
VARIABLE = "SEARCH_BENCH_FANOUT_BASELINE"
TIMEOUT = 900.0


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                          timeout=120)
    return done.stdout.strip()


def _figures(results: Path) -> dict[str, Any]:
    fanout = json.loads(results.read_text())["benchmarks"]["fanout"]["data"]
    sequential = fanout["rows"][0]
    return {
        "cpu_ms_per_search": fanout.get("cpu_ms_per_search", {}),
        "p50_ms": sequential["client"]["p50_ms"],
        "slowest_provider_ms": sequential.get("slowest_provider_ms"),
        "p50_minus_slowest_ms": sequential.get("p50_minus_slowest_ms"),
        "http_requests_per_search": sum(fanout.get("http_requests_per_search", {}).values()),
    }


def _reference_python(tree: Path, commit: str) -> Path:
    """The interpreter of a virtualenv holding the reference commit's own dependencies."""
    venv = WORK / f"venv-{commit[:12]}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        log(f"fanout: installing the dependencies of {commit[:12]} into {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT)
        # Not editable (the worktree goes away after the run, the virtualenv stays); with the
        # dev extras, which its benchmark harness imports.
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        str(tree / "clients" / "python"), f"{tree}[dev]"],
                       check=True, timeout=TIMEOUT, stdout=subprocess.DEVNULL)
        (venv / ".installed").write_text(commit + "\n")
    return python


def measure_reference() -> dict[str, Any] | None:
    """The reference commit's fan-out figures, or None when no reference is asked for."""
    ref = os.environ.get(VARIABLE, "").strip()
    if not ref:
        return None
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = WORK / f"fanout-baseline-{commit[:12]}"
    if tree.exists():
        shutil.rmtree(tree)
    WORK.mkdir(parents=True, exist_ok=True)
    _git("worktree", "add", "--detach", "--force", str(tree), commit)
    try:
        log(f"fanout: measuring the baseline commit {commit[:12]} first, on this machine")
        python = _reference_python(tree, commit)
        env = {k: v for k, v in os.environ.items() if k != VARIABLE}
        env["PYTHONPATH"] = str(tree)
        subprocess.run([str(python), "-m", "benchmarks", "fanout"], cwd=tree, env=env,
                       check=True, timeout=TIMEOUT, stdout=subprocess.DEVNULL)
        figures = _figures(tree / "benchmarks" / "results.json")
    finally:
        _git("worktree", "remove", "--force", str(tree))
    return {"commit": commit, **figures}
