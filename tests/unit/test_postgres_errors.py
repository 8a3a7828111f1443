"""Which database failures are a lost connection (UNAVAILABLE), including their aftermath."""

from __future__ import annotations

import asyncpg

from service import errors
from service.store.postgres.errors import is_connection_lost, translate


def _raised_while_handling(first: BaseException, second: BaseException) -> BaseException:
    try:
        try:
            raise first
        except BaseException:
            raise second from None  # `from None` hides the cause but keeps the context
    except BaseException as caught:
        return caught


def test_a_rollback_failing_after_a_cut_copy_is_a_lost_connection() -> None:
    # Seen when PostgreSQL stopped during UpsertDocuments: the COPY broke the protocol state,
    # then the transaction's rollback found "another operation is in progress".
    cut = asyncpg.exceptions.InternalClientError("cannot switch to state 21")
    rollback = asyncpg.InterfaceError("cannot perform operation: another operation is in progress")
    failure = _raised_while_handling(cut, rollback)
    assert is_connection_lost(failure)
    assert isinstance(translate(failure), errors.Unavailable)


def test_the_same_message_alone_is_not_a_lost_connection() -> None:
    busy = asyncpg.InterfaceError("cannot perform operation: another operation is in progress")
    assert not is_connection_lost(busy)  # a bug (one connection used twice): surfaced
    assert translate(busy) is None


def test_a_missing_socket_file_is_a_lost_connection() -> None:
    assert isinstance(translate(FileNotFoundError(2, "No such file or directory")),
                      errors.Unavailable)


def test_a_connection_the_pool_detached_mid_turn_is_a_lost_connection() -> None:
    # Seen when PostgreSQL stopped between two statements of one search (the vector cache's
    # size read after the pool detached the connection the server had closed).
    detached = asyncpg.InterfaceError(
        "cannot call Connection.fetch(): connection has been released back to the pool")
    assert is_connection_lost(detached)
    assert isinstance(translate(detached), errors.Unavailable)
