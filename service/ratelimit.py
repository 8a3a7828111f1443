"""Per-tenant token buckets for search calls."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TenantRateLimiter:
    """Allows `rate` calls per second per tenant with bursts up to `burst`; rate 0 = off."""

    def __init__(self, rate: float, burst: float, *, max_tenants: int = 100_000) -> None:
        self._rate = rate
        self._burst = max(burst, 1.0)
        self._buckets: dict[str, _Bucket] = {}
        self._max_tenants = max_tenants

    @property
    def enabled(self) -> bool:
        """False when unlimited."""
        return self._rate > 0

    def acquire(self, tenant: str) -> float | None:
        """None when allowed, else the seconds to wait before a token is free."""
        if not self.enabled:
            return None
        now = time.monotonic()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            if len(self._buckets) >= self._max_tenants:
                self._buckets.clear()  # bounded memory; a reset only ever loosens limits
            bucket = self._buckets[tenant] = _Bucket(self._burst, now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
        bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return (1 - bucket.tokens) / self._rate
