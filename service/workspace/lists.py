"""Per-call state of result lists: one ListRun per (query, account), and the fusion over them."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from msgspec import structs

from service.ranking import rrf
from service.workspace.http import BUDGET_MESSAGE, HttpClient
from service.workspace.model import (
    NativeDocument,
    ProviderError,
    ProviderPage,
    ProviderQuery,
    QueryState,
)
from service.workspace.paging import (
    FetchedPage,
    ListState,
    Pass,
    ReadPass,
    resume_state,
)
from service.workspace.plan import Slot
from service.workspace.providers import ProviderSpec, SearchFn
from service.workspace.providers._common import join_messages
from service.workspace.results import fusion_key, identity

__all__ = ["MAX_IDLE_PAGES", "PARKED_MESSAGE", "WAITING_MESSAGE", "Fusion", "ListRun", "Vote"]

DEADLINE_MESSAGE = ("the call's deadline ran out before this account answered; it goes "
                    "ahead of the others on the next page")
EXPIRED_MESSAGE = ("the provider no longer accepted the page token this query resumed with "
                   "(expired); read again from its first page, skipping what was returned")
PARKED_MESSAGE = ("this query keeps its place: once the account is reconnected "
                  "(UpdateAccountCredentials), a later page or its next_cursor resumes it")
WAITING_MESSAGE = ("not read: the account still needs to be reconnected "
                   "(UpdateAccountCredentials); this query resumes where it stopped once it is")
LEG_EXPIRED_MESSAGE = ("the provider no longer accepted the page token of a part of this "
                       "query (expired); read that part again from its first page, skipping "
                       "what was returned")
MAX_RESTARTS = 5  # in a row without a result emitted in between (see ListRun.restart)
# First-pass provider pages a list may read in a row without contributing a result: past
# them its paging is taken as broken (a cursor that cycles, empty pages without end).
MAX_IDLE_PAGES = 50
ENDED_MESSAGE = ("this query failed on an earlier page of this search (that page's status "
                 "says why) and is not read again")
IDLE_MESSAGE = ("the provider returned {} pages in a row with nothing new (a page cursor "
                "that cycles, or empty pages without end); stopped reading this query")
# A list whose every read failed (5xx, a reset connection, a malformed answer, no answer to a
# request given the whole provider request timeout or half the call's time) on this many
# consecutive calls spanning at least GIVE_UP_SECONDS ends, FAILED: a provider that stays
# down or hangs must not keep a search's pages coming forever. Meanwhile each such status
# advises a `retry_after` that doubles from 1 s to at most 60 s.
GIVE_UP_ATTEMPTS = 3
GIVE_UP_SECONDS = 300.0
MAX_FAILURE_ADVICE = 60.0


class Vote(NamedTuple):
    """A result seen for the first time in a list: its fused identity, rank and document.

    A named tuple, not a frozen dataclass: one is made per result read (hundreds per call),
    and a tuple is made in a fifth of the time.
    """

    key: str  # result id
    short: str
    rank: int
    doc: NativeDocument


class ListRun:
    """One (query, account) list during a call: fetched pages, votes and status.

    `pages` are the pages of the list's current pass (see service.workspace.paging) read in
    this call; reaching the end of a first pass that did not begin at the first page starts
    a sweep from the first page at once.
    """

    def __init__(
        self, slot: Slot, start: ListState, spec: ProviderSpec, *, now: float,
        give_up_seconds: float = GIVE_UP_SECONDS,
    ) -> None:
        self.slot = slot
        self.give_up_seconds = give_up_seconds
        self.streak: tuple[int, int] | None = None  # (failures, since) when every read failed
        self.read_ok = False  # a read of the list succeeded in this call
        self.starved = False  # the call's deadline ran out before any read completed
        self.restarts = start.restarts
        self.parked = False  # refused credentials stopped the list: it waits for a reconnect
        self.start = start
        self.spec = spec
        self.sweep = start.sweep
        self.pass_start = start
        self.pages: list[FetchedPage] = []
        self.read_ids: list[str] = []  # short ids of every result read in this call, in order
        self.next_cursor = start.cursor
        self.exhausted = start.exhausted  # no more pages to read in this call
        self.fetched = start.offset  # results known so far (rank of the last one)
        self.stopped = False  # an error ended fetching for this call
        self.cut = False  # the budget or deadline stopped reading
        self.found = False  # this sweep read a result that was not emitted before it
        self.ended = start.exhausted  # the list will never yield more
        self.wait_until = 0
        self.http: HttpClient | None = None
        self.state: QueryState | None = None
        self.messages: list[str] = []
        if start.exhausted:
            self.state = QueryState.FAILED if start.failed else QueryState.OK
            self.messages.append(ENDED_MESSAGE if start.failed else "no more results")
        self.partial = False
        self.retry_after: float | None = None
        self.total: int | None = None
        self.total_is_exact = False
        self.contributed = start.emitted
        self.prefetch = 0  # stubs whose details are read as soon as their page arrives
        self.prefetched: dict[str, asyncio.Task[NativeDocument | ProviderError]] = {}
        self._undated = 0
        self._voted: set[str] = set()
        self._own_done = frozenset(start.seen)
        wait = start.wait_until - now
        if start.parked and slot.account.needs_reconnect and not start.exhausted:
            self._wait_for_reconnect()
        elif not start.exhausted and wait > 0:
            self._back_off(wait)

    def _wait_for_reconnect(self) -> None:
        """Skip the list in this call: its account is still flagged NEEDS_RECONNECT."""
        self.stopped = True
        self.parked = True
        self.state = QueryState.NEEDS_RECONNECT
        self.messages.append(WAITING_MESSAGE)

    def _back_off(self, wait: float) -> None:
        """Skip the list in this call: the provider asked to wait before it is read again."""
        self.stopped = True
        self.wait_until = self.start.wait_until
        self.state = QueryState.RATE_LIMITED
        self.retry_after = wait
        self.messages.append(f"provider rate limit: read again after {wait:.0f} s")

    @property
    def fetchable(self) -> bool:
        """True while the list may hold more and fetching has not failed in this call."""
        return not self.exhausted and not self.stopped

    @property
    def sweeping(self) -> bool:
        """True while the list is read again after its end (results found are late)."""
        return self.sweep is not Pass.FIRST

    @property
    def message(self) -> str:
        """Joined status sentences."""
        extra = []
        if self._undated:
            extra.append(f"{self._undated} results without a date were excluded by the time range")
        return join_messages([*self.messages, *extra])

    def search_fn(self) -> SearchFn:
        """The adapter call for this list: stubs when the provider has them and no date recheck."""
        if self.spec.search_stubs is not None and not self.slot.query.time_range.is_set:
            return self.spec.search_stubs
        return self.spec.search

    def degrade(self, message: str) -> None:
        """Note a problem that left the list's results usable but incomplete."""
        self.partial = True
        if message not in self.messages:
            self.messages.append(message)

    def provider_query(self) -> ProviderQuery:
        """The provider query for the next page of this list."""
        query = self.slot.query
        return ProviderQuery(query.text, query.kind, query.time_range, query.project,
                             self.start.limit, self.next_cursor, self._may_restart)

    @property
    def _may_restart(self) -> bool:
        """The next read sends the page token the list resumed this call with (a provider
        may have expired it since), and restarts are left (see `restart`)."""
        return (self.next_cursor is not None and self.next_cursor == self.start.cursor
                and not self.pages and self.restarts < MAX_RESTARTS)

    def accept(self, page: ProviderPage) -> list[Vote]:
        """Record a fetched page; returns the votes of results new to this list."""
        kept = self._in_range(page.documents)
        account = self.slot.account
        pairs = [identity(fusion_key(account.provider, account.account_id, d)) for d in kept]
        keys = [key for key, _ in pairs]
        shorts = [short for _, short in pairs]
        cursor_used = self.next_cursor
        next_cursor = page.next_cursor if page.next_cursor != cursor_used else None
        self.pages.append(
            FetchedPage(cursor_used, self.fetched, tuple(shorts), next_cursor, page.complete)
        )
        self.read_ids.extend(shorts)
        votes: list[Vote] = []
        for position, (key, short, doc) in enumerate(zip(keys, shorts, kept, strict=True)):
            if key not in self._voted and short not in self._own_done:
                votes.append(Vote(key, short, self.fetched + position + 1, doc))
            self._voted.add(key)
        self.fetched += len(kept)
        self.read_ok = True
        if page.restarted:  # a leg read its first page again: bounded like a restart
            self.restarts += 1
            self.messages.append(LEG_EXPIRED_MESSAGE)
        self.next_cursor = next_cursor
        self.exhausted = next_cursor is None
        self._settle_ok(page)
        if self.exhausted and self.sweep is Pass.FIRST and not self.pass_start.at_first_page:
            self.begin_sweep()
        return votes

    @property
    def unconfirmed(self) -> bool:
        """Read to its end in this call by a pass whose end is not final (`ReadPass.final`):
        a deletion between its pages can have moved a result onto one already read, so a
        sweep (`begin_sweep`) confirms the end once nothing else is left."""
        return self.exhausted and not self.ended and not self._read_pass().final

    def _read_pass(self) -> ReadPass:
        return ReadPass(self.pass_start, tuple(self.pages), self.sweep, self.cut, self.ended,
                        self.found)

    def begin_sweep(self) -> None:
        """Read the list again from its first page (its end was reached from a later page,
        or is `unconfirmed`)."""
        self.sweep = Pass.SWEEP
        self.pass_start = ListState(limit=self.start.limit, emitted=self.contributed,
                                    sweep=Pass.SWEEP)
        self.found = False
        self.pages = []
        self.next_cursor = None
        self.fetched = 0
        self.exhausted = False

    def resume(self, emitted: Collection[str]) -> ListState:
        """Where the list resumes after this call, given the ids emitted so far."""
        done: Collection[str] = emitted
        if self._own_done:
            done = set(emitted) | self._own_done
        state = resume_state(self._read_pass(), done, self.contributed)
        if self.wait_until and not state.exhausted:
            state = structs.replace(state, wait_until=self.wait_until)
        if self.streak is not None and not self.read_ok and not state.exhausted:
            state = structs.replace(state, failures=self.streak[0], failing_since=self.streak[1])
        if self.starved and not state.exhausted:
            state = structs.replace(state, behind=self.start.behind + 1)
        if self.restarts and self.contributed == self.start.emitted and not state.exhausted:
            state = structs.replace(state, restarts=self.restarts)  # none was worth it yet
        parked = self.parked and not state.exhausted  # only while the account stays refused
        idle = 0 if state.exhausted else self._idle_pages()
        ended_here = self.ended and not self.start.exhausted  # by a failure in this call
        failed = state.exhausted and (self.start.failed or ended_here)
        if (state.parked, state.idle, state.failed) != (parked, idle, failed):
            state = structs.replace(state, parked=parked, idle=idle, failed=failed)
        return state

    def _idle_pages(self) -> int:
        """First-pass provider pages read since the list last contributed (none counted in a
        sweep, which reads emitted results again by design, nor after a restart)."""
        if (self.sweep is not Pass.FIRST or self.restarts > self.start.restarts
                or self.contributed > self.start.emitted):
            return 0
        return self.start.idle + len(self.pages)

    def stop_if_idle(self) -> None:
        """End the list when its paging looks broken (MAX_IDLE_PAGES, FAILED)."""
        pages = self._idle_pages()
        if pages < MAX_IDLE_PAGES or self.ended:
            return
        self.ended = self.stopped = True
        self.state = QueryState.FAILED
        self.messages.append(IDLE_MESSAGE.format(pages))

    def restart(self, error: ProviderError) -> bool:
        """True when the list reads again from its first page after `error`: the provider
        refused the page token the list resumed this call with, as providers do once their
        tokens expire (Jira's after 7 days; Slack answers `invalid_cursor`, Google 400). What
        was emitted is skipped by identity, so nothing is lost or repeated. Never for a
        token this call obtained (a provider refusing its fresh tokens is not expiring
        them), and at most MAX_RESTARTS times in a row without a result of the list emitted
        in between (a provider that refuses the token at the same place again, such as a
        cap on how deep it pages, would otherwise keep the list re-reading forever)."""
        refused = error.state is QueryState.FAILED and not error.retryable
        if not refused or not self._may_restart:
            return False
        self.restarts += 1
        if self.sweep is Pass.LONG_SWEEP:
            self.sweep = Pass.SWEEP
        self.pass_start = ListState(limit=self.start.limit, emitted=self.contributed,
                                    sweep=self.sweep)
        self.next_cursor = None
        self.fetched = 0
        self.messages.append(EXPIRED_MESSAGE)
        return True

    def own_emitted(self, emitted: Collection[str]) -> tuple[str, ...]:
        """Ids of this list's results emitted so far (for its per-query cursor). A list that
        read nothing in this call (rate-limited, waiting for a reconnect) cannot tell its own
        from the others: it keeps the latest of them all (a cursor may repeat, never skip)."""
        fresh = [item for item in self.read_ids if item in emitted] if self.read_ok else emitted
        return (*self.start.seen, *fresh)

    def _in_range(self, documents: Iterable[NativeDocument]) -> list[NativeDocument]:
        usable = [d for d in documents if d.id or d.url]
        time_range = self.slot.query.time_range
        if not time_range.is_set:
            return usable
        self._undated += sum(1 for d in usable if d.source_date is None)
        return [d for d in usable if time_range.contains(d.source_date)]

    def _settle_ok(self, page: ProviderPage) -> None:
        if self.state is None:
            self.state = QueryState.OK
        if page.total is not None:
            self.total, self.total_is_exact = page.total, page.total_is_exact
        self.partial = (
            self.partial or page.partial or not page.complete or bool(self._undated)
        )
        if page.retry_after is not None:
            self.retry_after = max(self.retry_after or 0.0, page.retry_after)
        skipped = [
            f"skipped {leg}: {why}" for leg, why in page.skipped_legs.items()
            if why not in page.message
        ]
        for sentence in [page.message, *skipped]:
            if sentence and sentence not in self.messages:
                self.messages.append(sentence)

    def fail(self, error: ProviderError, *, now: float) -> None:
        """Record a failed fetch: the query's state when nothing was fetched, else partial.

        A retryable failure keeps the page in the resume state (read again on the next page,
        after the provider's wait); a final one ends the list.
        """
        self.stopped = True
        if error.state is QueryState.NEEDS_RECONNECT:
            self.parked = True  # a human may fix this one: the list keeps its place
            error = ProviderError(error.state, join_messages([error.message, PARKED_MESSAGE]),
                                  retryable=False)
        elif not error.retryable:
            self.ended = True
        elif error.state is QueryState.TIMED_OUT or error.message == BUDGET_MESSAGE:
            self.cut = True
            if error.stalled and not self.read_ok:  # a provider that hangs is down too
                error = self._failed_again(error, now)
            elif error.state is QueryState.TIMED_OUT and not self.read_ok:
                self.starved = True  # the call's deadline, not the provider: first next time
                error = ProviderError(QueryState.TIMED_OUT, DEADLINE_MESSAGE)
        elif error.state is QueryState.FAILED and not self.read_ok:
            error = self._failed_again(error, now)
        if error.retry_after is not None:
            self.retry_after = max(self.retry_after or 0.0, error.retry_after)
            if error.retryable and error.retry_after > 0:
                self.wait_until = math.ceil(now + error.retry_after)
        if self.state is None:
            self.state = error.state
            self.messages.append(error.message)
            return
        self.partial = True
        self.messages.append(f"stopped after {len(self.pages)} pages: {error.message}")


    def _failed_again(self, error: ProviderError, now: float) -> ProviderError:
        """Every read of the list failed in this call too: the streak grows, `retry_after`
        advises a wait, and the list ends once the streak is GIVE_UP_ATTEMPTS calls and
        GIVE_UP_SECONDS long."""
        failures = self.start.failures + 1
        since = self.start.failing_since or int(now)
        self.streak = (failures, since)
        advice = min(2.0 ** (failures - 1), MAX_FAILURE_ADVICE)
        if failures >= GIVE_UP_ATTEMPTS and now - since >= self.give_up_seconds:
            self.ended = True
            span = now - since
            took = f"{span:.0f} s" if span < 120 else f"{span / 60:.0f} min"
            message = (f"{error.message}; gave up: every read failed on {failures} consecutive "
                       f"pages over {took}, search again later")
            return ProviderError(QueryState.FAILED, message, retryable=False)
        # Advice, not enforced: the next page reads the list again, however soon it comes.
        self.retry_after = max(self.retry_after or 0.0, advice)
        return error


class Fusion:
    """Votes of every list of the call, and which fused results were emitted."""

    def __init__(self, k: int, emitted: Iterable[str] = ()) -> None:
        self.k = k
        self.emitted: dict[str, None] = dict.fromkeys(emitted)  # short ids, in emission order
        self._votes: dict[str, list[rrf.Contribution]] = {}
        self._pending: dict[str, list[rrf.Contribution]] = {}  # the keys not emitted yet
        self._docs: dict[str, dict[int, NativeDocument]] = {}
        self._short: dict[str, str] = {}

    def add(self, list_index: int, votes: Sequence[Vote]) -> bool:
        """Add one list's new votes; True when one of them is for a result not emitted."""
        k = self.k
        found = False
        for vote in votes:
            contribution = rrf.Contribution(list_index, vote.rank, rrf.term(vote.rank, k))
            known = self._votes.get(vote.key)
            if known is None:
                known = self._votes[vote.key] = [contribution]
                self._docs[vote.key] = {list_index: vote.doc}
                self._short[vote.key] = vote.short
                if vote.short not in self.emitted:
                    self._pending[vote.key] = known
                    found = True
            else:
                known.append(contribution)
                self._docs[vote.key][list_index] = vote.doc
                found = found or vote.key in self._pending
        return found

    def candidates(self) -> Mapping[str, list[rrf.Contribution]]:
        """Fused results seen but not yet emitted, with their votes (kept current, not a
        copy: read it, never change it)."""
        return self._pending

    def best(self, key: str) -> tuple[int, NativeDocument]:
        """The list whose document represents a result (its best rank), and that document."""
        best = min(self._votes[key], key=lambda c: (c.rank, c.list_index))
        return best.list_index, self._docs[key][best.list_index]

    def replace(self, key: str, list_index: int, doc: NativeDocument) -> None:
        """Swap in a completed document (a hydrated stub)."""
        self._docs[key][list_index] = doc

    def settle(self, key: str) -> None:
        """A result that is gone (deleted since it was listed): never emitted, but done."""
        self.emitted[self._short[key]] = None
        del self._pending[key]

    def take(self, key: str) -> tuple[list[rrf.Contribution], NativeDocument, int]:
        """Mark a result emitted; its votes, best document and the list of that document."""
        self.emitted[self._short[key]] = None
        del self._pending[key]
        votes = sorted(self._votes[key])
        best = min(votes, key=lambda c: (c.rank, c.list_index))
        return votes, self._docs[key][best.list_index], best.list_index
