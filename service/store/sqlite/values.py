"""Conversions between records and stored values, and the write transaction helper."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import apsw
import numpy as np

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(when: datetime) -> int:
    """Unix microseconds of `when` (naive values are taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The UTC datetime of unix microseconds (exact, no float rounding)."""
    return EPOCH + timedelta(microseconds=micros)


def now_micros() -> int:
    """The current time in unix microseconds."""
    return time.time_ns() // 1000


def vector_blob(vector: Sequence[float]) -> bytes:
    """float32 little-endian bytes, the format sqlite-vec reads."""
    return np.asarray(vector, dtype="<f4").tobytes()


def blob_vector(blob: bytes) -> list[float]:
    """The floats of a stored vector."""
    values: list[float] = np.frombuffer(blob, dtype="<f4").tolist()
    return values


def dump_json(value: Any) -> str:
    """Compact JSON text with keys in a stable order."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def load_metadata(text: str) -> Mapping[str, Any]:
    """The metadata object of a stored document."""
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


@contextmanager
def immediate(conn: apsw.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock up front (waits on busy_timeout)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
