"""Per-call request context (request id, tenant, role, method, deadline) in a contextvar."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from dataclasses import dataclass

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class RequestContext:
    """Who is calling what, and until when."""

    request_id: str
    method: str
    tenant: str = DEFAULT_TENANT
    role: str = "admin"
    deadline: float | None = None  # absolute, on the running loop's clock

    def time_remaining(self) -> float | None:
        """Seconds left before the call's deadline, or None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())


_current: contextvars.ContextVar[RequestContext] = contextvars.ContextVar("request_context")


def current() -> RequestContext:
    """The context of the call being served (a default one outside calls)."""
    return _current.get(RequestContext(request_id="-", method="-"))


def bind(ctx: RequestContext) -> contextvars.Token[RequestContext]:
    """Make `ctx` current; returns the token to reset it."""
    return _current.set(ctx)


def reset(token: contextvars.Token[RequestContext]) -> None:
    """Restore the previous context (a no-op from another context).

    A streaming handler's generator may be closed from another task's context (its deadline
    passed, the client went away); the context that held the value ends with the call then.
    """
    with contextlib.suppress(ValueError):
        _current.reset(token)
