"""How a provider's HTTP status maps to a query state (PROVIDERS.md "Status mapping")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from service.workspace.model import ProviderError, QueryState

__all__ = ["MAX_RETRY_AFTER", "clamp_wait", "retry_after_seconds", "status_error"]

# A provider's wait is passed on as at most a day: `Retry-After: inf` or a reset time in the
# year 5000 is a provider bug, and a google.protobuf.Duration cannot hold every float.
MAX_RETRY_AFTER = 86_400.0


def clamp_wait(seconds: float) -> float | None:
    """`seconds` within [0, MAX_RETRY_AFTER]; None for NaN (no usable wait)."""
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER)


def retry_after_seconds(headers: Mapping[str, str], *, now: float) -> float | None:
    """Seconds to wait: `Retry-After` (seconds or HTTP date), else `x-ratelimit-reset` - now;
    clamped to [0, MAX_RETRY_AFTER] whatever the provider sent."""
    raw = headers.get("retry-after", "").strip()
    if raw:
        try:
            return clamp_wait(float(raw))
        except ValueError:
            pass
        try:
            return clamp_wait(parsedate_to_datetime(raw).timestamp() - now)
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    reset = headers.get("x-ratelimit-reset", "").strip()
    if reset:
        try:
            return clamp_wait(float(reset) - now)
        except ValueError:
            return None
    return None


def status_error(status: int, headers: Mapping[str, str], *, now: float) -> ProviderError | None:
    """Map a non-2xx HTTP status to the per-query state; None for 2xx."""
    if 200 <= status < 300:
        return None
    limited_403 = status == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining", "").strip() == "0"
    )
    if status == 429 or limited_403:
        wait = retry_after_seconds(headers, now=now)
        hint = f"; retry in {wait:.0f} s" if wait is not None else "; retry later"
        return ProviderError(
            QueryState.RATE_LIMITED,
            f"provider rate limit reached (HTTP {status}){hint}",
            retry_after=wait,
        )
    if status in (401, 403):
        return ProviderError(
            QueryState.NEEDS_RECONNECT,
            f"provider denied access; reconnect with search and read permissions (HTTP {status})",
        )
    if status in (400, 422):
        return ProviderError(
            QueryState.FAILED,
            f"provider rejected this query; check native syntax/scope (HTTP {status})",
        )
    if 300 <= status < 400:
        return ProviderError(
            QueryState.FAILED, f"provider redirected (HTTP {status}); redirects are not followed"
        )
    return ProviderError(QueryState.FAILED, f"provider request failed (HTTP {status})")
