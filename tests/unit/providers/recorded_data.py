"""Load recorded provider answers (real wire formats) from `recorded/`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).parent / "recorded"


def load(name: str) -> Any:
    """The decoded JSON of `recorded/<name>.json`."""
    return json.loads((RECORDED / f"{name}.json").read_text())
