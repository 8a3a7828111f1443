"""`python -m service demo --workspace` run as a user runs it: a subprocess, its printed output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = re.compile(r"^\s+\d+\. \d\.\d{4}\s+(\w+)\s", re.MULTILINE)
STATUS = re.compile(r"^\s+\[(\d)\] (\w+)\s+(\w+)\s+\d+ shown so far", re.MULTILINE)


def test_the_workspace_demo_prints_fused_pages_from_several_providers(tmp_path: Path) -> None:
    # Another directory and no SEARCH_* settings: the demo needs neither ./data nor a server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    done = subprocess.run(
        [sys.executable, "-m", "service", "demo", "--workspace"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    first, _, second = out.partition("Second page")
    assert second, out
    assert "Fused page 1" in first
    assert "Fused page 2" in second
    assert set(RESULT.findall(first)) >= {"slack", "github", "jira", "gmail"}
    assert len(RESULT.findall(second)) >= 1
    statuses = STATUS.findall(first)
    assert [int(i) for i, _, _ in statuses] == list(range(6))
    assert {state for _, _, state in statuses} == {"OK"}
    assert re.search(r"from query \[\d\] rank \d+ \(\d\.\d{4}\) \+ \[\d\]", first)  # fused
    assert "example:" in first  # the query cards
    assert not list(tmp_path.iterdir())  # its data stayed in a temporary directory
