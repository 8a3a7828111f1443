"""A half-open time interval shared by filters of both searches."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TimeRange:
    """Start inclusive, end exclusive; either bound may be open (None). Always tz-aware UTC."""

    start: datetime | None = None
    end: datetime | None = None

    def contains(self, when: datetime | None) -> bool:
        """True when `when` lies in the range; an undated value never does if a bound is set."""
        if self.start is None and self.end is None:
            return True
        if when is None:
            return False
        if self.start is not None and when < self.start:
            return False
        return not (self.end is not None and when >= self.end)

    @property
    def is_set(self) -> bool:
        """True when at least one bound is given."""
        return self.start is not None or self.end is not None
