"""Value preparation for PostgreSQL: NUL stripping, JSON and timestamps."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from service import errors


def clean_text(value: str) -> str:
    """`value` without NUL characters (PostgreSQL text cannot hold them)."""
    return value.replace("\x00", "") if "\x00" in value else value


def clean_json(value: Any) -> Any:
    """A JSON value with NUL characters removed from every string and key (jsonb rejects them)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(key)): clean_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(item) for item in value]
    return value


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Metadata as JSON text for a jsonb column; InvalidArgument when it is not JSON."""
    try:
        return json.dumps(clean_json(metadata), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument.field("metadata", f"not JSON-serialisable: {exc}") from exc


def utc(value: datetime | None) -> datetime | None:
    """A tz-aware datetime (naive values are taken as UTC)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


