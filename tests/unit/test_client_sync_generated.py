"""The blocking client is generated from the asyncio one: the committed copy must match."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sync_client_is_regenerated_from_the_async_one() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "clients" / "python" / "generate_sync.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
