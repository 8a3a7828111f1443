"""asyncpg and socket failures mapped once onto the service's error tree (by SQLSTATE class)."""

from __future__ import annotations

import asyncpg

from service import errors

# Retrying later helps: the server is shutting down or starting, out of connections, or a
# transaction lost a race (serialization failure, deadlock) and can simply run again.
_RETRYABLE_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now
        "57P05",  # idle_session_timeout
        "53300",  # too_many_connections
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "25006",  # read_only_sql_transaction (a standby took the primary's address)
    }
)
QUERY_CANCELED = "57014"
UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
# "released back to the pool": asyncpg detaches a pooled connection's proxy when the server
# closes the connection under it, so the next statement of the same turn fails with this
# message (the service never uses a connection after handing it back: that is the pool's
# own doing when the server went away).
_CLOSED_MARKERS = (
    "closed", "closing", "not connected", "connection was lost", "released back to the pool"
)


def is_connection_lost(exc: BaseException) -> bool:
    """True for failures meaning the connection (or the server behind it) went away.

    Also an error raised while handling such a failure: a COPY cut by a dying server leaves
    the protocol mid-operation, and the transaction's rollback then fails with "another
    operation is in progress" (its context is the lost connection).
    """
    seen = 0
    while exc is not None and seen < 4:
        if _lost(exc):
            return True
        exc, seen = exc.__context__, seen + 1  # type: ignore[assignment]
    return False


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        # The client's protocol state broke (seen when a server dies mid-statement).
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return state.startswith("08") or state in {"57P01", "57P02", "57P03"}
    if isinstance(exc, asyncpg.InterfaceError):
        return any(marker in str(exc).lower() for marker in _CLOSED_MARKERS)
    return isinstance(exc, ConnectionError | EOFError) or (
        isinstance(exc, OSError) and not isinstance(exc, TimeoutError)
    )


def translate(exc: BaseException) -> errors.ServiceError | None:
    """The ServiceError a caller should see for `exc`, or None when it is a bug to surface."""
    if isinstance(exc, errors.ServiceError):
        return None
    if isinstance(exc, TimeoutError):
        return errors.DeadlineExceeded("the database did not answer in time")
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        if state == QUERY_CANCELED:
            return errors.DeadlineExceeded("the database statement was cancelled (timeout)")
        if state.startswith("08") or state in _RETRYABLE_SQLSTATES:
            return unavailable(exc)
        return None
    if is_connection_lost(exc):
        return unavailable(exc)
    return None


def unavailable(exc: BaseException) -> errors.Unavailable:
    """An Unavailable naming the cause's class only (messages may carry connection details)."""
    return errors.Unavailable(
        f"the database is unavailable ({type(exc).__name__})",
        metadata={"cause": type(exc).__name__},
        retry_after=1.0,
    )
