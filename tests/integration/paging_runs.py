"""One seeded run of the randomized paging tests, whatever their corpus: page a search to its
end by page token (then the lists still waiting for a reconnect by their cursors), or one
query by its `next_cursor`, changing the providers between pages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import pytest
from msgspec import structs

from service.workspace.model import Credentials, ProviderId, QueryState
from service.workspace.plan import NativeQuery
from tests.integration.workspace_support import TENANT, World

MAX_CALLS = 150  # a run that needs more calls than this never ends: a failure


class Changing(Protocol):
    """A corpus the runs change between pages."""

    def change(self) -> None:
        """A random handful of changes and faults."""

    def due(self, *, all_: bool = False) -> list[str]:
        """The revoked providers to reconnect now."""


async def reconnect(world: World, accounts: Mapping[str, Sequence[str]],
                    names: Sequence[str]) -> None:
    """Store each named provider's current token for its accounts (UpdateAccountCredentials)."""
    for name in names:
        token = world.fakes.of(ProviderId(name)).token
        for account in accounts[name]:
            await world.accounts.replace_credentials(TENANT, account, Credentials(token))


async def page_to_end(world: World, accounts: Mapping[str, Sequence[str]], corpus: Changing,
                      queries: Sequence[NativeQuery], top_k: int, key: Callable[[str], str],
                      label: str) -> tuple[list[str], int]:
    """Keys of every result emitted, in order, and the calls the pages took: the search paged
    by token, changing the corpus between pages; then the lists still waiting for a
    reconnect when the pages ended go on, together, from their cursors, in a search of
    their own paged to its end."""
    emitted: list[str] = []
    token = ""
    calls = 0
    for calls in range(1, MAX_CALLS + 1):  # noqa: B007 - reported when an assertion fails
        outcome = await world.search(queries, top_k=top_k, page_token=token)
        (page,) = outcome.pages
        emitted.extend(key(r.url) for r in page.results)
        token = page.next_page_token
        if not token:
            break
        await reconnect(world, accounts, corpus.due())
        corpus.change()
    else:
        pytest.fail(f"{label}: paging did not end within {MAX_CALLS} calls")
    await reconnect(world, accounts, corpus.due(all_=True))
    waiting = [structs.replace(queries[index], cursor=status.next_cursor)
               for (index, _), status in outcome.latest().items()
               if status.state is QueryState.NEEDS_RECONNECT and status.next_cursor]
    token = ""
    for _ in range(MAX_CALLS if waiting else 0):
        resumed = await world.search(waiting, top_k=top_k, page_token=token)
        (page,) = resumed.pages
        emitted.extend(key(r.url) for r in page.results)
        for status in resumed.latest().values():  # faults still armed may fail a read
            assert status.state is not QueryState.NEEDS_RECONNECT, f"{label}: {status}"
        token = page.next_page_token
        if not token:
            break
    assert not token, f"{label}: the resumed lists did not end"
    return emitted, calls


async def page_by_cursor(world: World, accounts: Mapping[str, Sequence[str]],
                         corpus: Changing, query: NativeQuery, top_k: int,
                         key: Callable[[str], str], label: str) -> list[str]:
    """Keys of every result emitted, in order: one query paged alone by its `next_cursor`,
    changing the corpus between pages."""
    emitted: list[str] = []
    cursor = ""
    for _ in range(MAX_CALLS):
        outcome = await world.search([structs.replace(query, cursor=cursor)], top_k=top_k)
        (page,) = outcome.pages
        emitted.extend(key(r.url) for r in page.results)
        (status,) = outcome.latest().values()
        cursor = status.next_cursor
        if not cursor:
            return emitted
        await reconnect(world, accounts, corpus.due())
        corpus.change()
    pytest.fail(f"{label}: paging did not end within {MAX_CALLS} calls")
