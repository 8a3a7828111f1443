"""Provider I/O of one search call: one HTTP session per account, queries run concurrently.

Each account's queries share its session and run together (asyncio.TaskGroup); accounts run
concurrently up to a bound. Every query has its own request budget for the whole call, and
every request's timeout is capped by the call's deadline. A failing query never fails the
call: provider errors become its state, anything else becomes FAILED (and is logged).
Cancelling the consumer cancels every request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import dataclass

from service import tracing
from service.workspace.accounts import AccountManager, AccountSnapshot
from service.workspace.credentials import SEALED
from service.workspace.http import AccountSession, HttpClient
from service.workspace.limits import AccountLimits, RateLimits
from service.workspace.lists import ListRun, Vote
from service.workspace.model import (
    Account,
    NativeDocument,
    ProviderError,
    ProviderPage,
    QueryState,
)
from service.workspace.pool import PoolRegistry
from service.workspace.providers import HydrateFn
from service.workspace.renewal import Renewer

__all__ = ["Call", "FanoutSettings", "details"]

log = logging.getLogger(__name__)

UNEXPECTED = "provider search failed unexpectedly; try again later"
STALL_SHARE = 0.5


@dataclass(frozen=True)
class FanoutSettings:
    """Limits of provider I/O."""

    query_budget: int = 30  # provider HTTP requests per query and account, per call
    account_concurrency: int = 8
    request_timeout: float = 10.0
    max_response_bytes: int = 4 * 1024 * 1024
    allow_insecure_http: bool = False  # http:// provider origins (tests, demos)


class Call:
    """The provider I/O of one search call; close it with `aclose`."""

    def __init__(
        self,
        tenant: str,
        snapshot: AccountSnapshot,
        accounts: AccountManager,
        settings: FanoutSettings,
        deadline: float,
        *,
        pools: PoolRegistry | None = None,
        renewer: Renewer | None = None,
        limits: RateLimits | None = None,
    ) -> None:
        self.deadline = deadline
        # A request given half the call's provider time that got no answer is the provider's
        # fault (it counts toward giving the list up); one cut sooner, its turn came late.
        self._stall_after = STALL_SHARE * max(0.0, deadline - asyncio.get_running_loop().time())
        self._limits = limits
        self._opened: dict[str, AccountLimits] = {}
        self._renewer = renewer
        self._tenant = tenant
        self._snapshot = snapshot
        self._accounts = accounts
        self._settings = settings
        self._pools = pools
        self._sessions: dict[str, AccountSession | ProviderError] = {}
        self._marked: set[str] = set()  # accounts whose reconnect flag this call settled
        self._tasks: set[asyncio.Task[NativeDocument | ProviderError]] = set()
        self._gate = asyncio.Semaphore(settings.account_concurrency)

    def time_left(self) -> float:
        """Seconds before the provider deadline."""
        return self.deadline - asyncio.get_running_loop().time()

    async def fetch(self, runs: Sequence[ListRun]) -> AsyncGenerator[tuple[ListRun, list[Vote]]]:
        """Fetch the next page of every run; yield each run with its new votes as it settles."""
        queue: asyncio.Queue[tuple[ListRun, list[Vote]] | None] = asyncio.Queue()
        producer = asyncio.create_task(self._fetch_all(runs, queue))
        try:
            while (item := await queue.get()) is not None:
                yield item
            await producer
        finally:
            if not producer.done():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer

    async def aclose(self) -> None:
        """Cancel detail reads still running and close every session of the call."""
        pending = [t for t in self._tasks if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        sessions = [s for s in self._sessions.values() if isinstance(s, AccountSession)]
        self._sessions.clear()
        await asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True)

    async def _fetch_all(
        self, runs: Sequence[ListRun], queue: asyncio.Queue[tuple[ListRun, list[Vote]] | None]
    ) -> None:
        by_account: dict[str, list[ListRun]] = {}
        # Accounts whose lists the deadline left unread on the most consecutive calls go out
        # first (more accounts than the gate lets through, under a short deadline, must
        # not leave the same ones unread on every page). Then lists whose emitted results
        # need a second round trip (Gmail's details): their answers come back first, so
        # that round trip overlaps the others'.
        for run in sorted(runs, key=lambda r: (-r.start.behind, r.spec.hydrate is None)):
            by_account.setdefault(run.slot.account.account_id, []).append(run)
        try:
            await self._open_limits(by_account)
            async with asyncio.TaskGroup() as group:
                if len(by_account) <= self._settings.account_concurrency:
                    # The gate could never make an account wait (fetches of a call do not
                    # overlap): a task per query, without a task and a group per account.
                    for account_runs in by_account.values():
                        for run in account_runs:
                            group.create_task(self._one(run, queue))
                else:
                    for account_runs in by_account.values():
                        group.create_task(self._account(account_runs, queue))
        finally:
            queue.put_nowait(None)

    async def _account(
        self, runs: Sequence[ListRun], queue: asyncio.Queue[tuple[ListRun, list[Vote]] | None]
    ) -> None:
        async with self._gate:
            if len(runs) == 1:  # no task group for one query: a task and a group less
                await self._one(runs[0], queue)
                return
            async with asyncio.TaskGroup() as group:
                for run in runs:
                    group.create_task(self._one(run, queue))

    async def _one(
        self, run: ListRun, queue: asyncio.Queue[tuple[ListRun, list[Vote]] | None]
    ) -> None:
        votes: list[Vote] = []
        tracing.mark_query(run.slot.query_index)  # for the provider request spans (no-op off)
        try:
            if run.http is None:
                session = self._session(run.slot.account)
                run.http = session.for_query(
                    budget=self._settings.query_budget, deadline=self.deadline,
                    stall_after=self._stall_after,
                )
            page = await _read(run)
        except ProviderError as error:
            await self._share_limit(run, error)
            run.fail(error, now=time.time())
        except Exception:
            log.exception("provider %s search failed", run.spec.id.value)
            run.fail(ProviderError(QueryState.FAILED, UNEXPECTED, retryable=True), now=time.time())
        else:
            votes = run.accept(page)
            self._prefetch(run, votes)
        await self._track_reconnect(run)
        queue.put_nowait((run, votes))

    async def _share_limit(self, run: ListRun, error: ProviderError) -> None:
        """Share a rate limit the provider module read from an answer's body."""
        session = self._sessions.get(run.slot.account.account_id)
        if isinstance(session, AccountSession) and run.http is not None:
            await session.share_limit(run.http.last_url, error)

    def _prefetch(self, run: ListRun, votes: Sequence[Vote]) -> None:
        """Start reading the details of the list's first stubs, overlapping fusion's wait."""
        hydrate = run.spec.hydrate
        if hydrate is None or run.http is None or run.prefetch <= 0:
            return
        for vote in votes[: run.prefetch]:
            if vote.doc.stub and vote.key not in run.prefetched:
                task = asyncio.create_task(details(hydrate, run.http, vote.doc))
                run.prefetched[vote.key] = task
                self._tasks.add(task)

    async def _open_limits(self, accounts: Iterable[str]) -> None:
        """Read the accounts' shared rate-limit waits once per call (one store read), before
        their sessions open."""
        new = [account_id for account_id in accounts if account_id not in self._opened]
        if self._limits is None or not new:
            return
        self._opened.update(await self._limits.open(new, now=time.time()))

    def _session(self, account: Account) -> AccountSession:
        known = self._sessions.get(account.account_id)
        if isinstance(known, ProviderError):
            raise known
        if known is not None:
            return known
        try:
            try:
                credentials = self._snapshot.credentials(account)
            except ValueError:
                # This server's key, not the provider's refusal: the flag is left as it is.
                self._marked.add(account.account_id)
                raise ProviderError(QueryState.NEEDS_RECONNECT, SEALED) from None
            session = AccountSession(
                account,
                credentials,
                request_timeout=self._settings.request_timeout,
                max_response_bytes=self._settings.max_response_bytes,
                allow_insecure_http=self._settings.allow_insecure_http,
                pool=self._pools.pool(account, credentials) if self._pools else None,
                renewer=self._renewer,
                limits=self._opened.get(account.account_id),
            )
        except ProviderError as error:
            self._sessions[account.account_id] = error
            raise
        self._sessions[account.account_id] = session
        return session

    async def _track_reconnect(self, run: ListRun) -> None:
        """Flag the account after a 401/403; clear the flag after a success (once a call)."""
        account = run.slot.account
        refused = run.state is QueryState.NEEDS_RECONNECT
        cleared = bool(run.pages) and account.needs_reconnect
        if account.account_id in self._marked or not (refused or cleared):
            return
        self._marked.add(account.account_id)
        # A refusal flags the credentials this call read, not ones a reconnect stored since
        # (credentials the call renewed itself are flagged whatever the store holds).
        session = self._sessions.get(account.account_id)
        renewed = isinstance(session, AccountSession) and session.credential.renewed
        sealed = self._snapshot.sealed(account) if refused and not renewed else None
        try:
            await self._accounts.mark_reconnect(self._tenant, account.account_id, refused,
                                                sealed=sealed)
        except Exception:
            log.warning("could not record the reconnect state of account %s", account.account_id,
                        exc_info=True)


async def _read(run: ListRun) -> ProviderPage:
    """The list's next provider page; read again from its first page when the provider
    refuses the (expired) page token the list resumed with (see ListRun.restart)."""
    assert run.http is not None
    try:
        return await run.search_fn()(run.http, run.provider_query())
    except ProviderError as error:
        if not run.restart(error):
            raise
    return await run.search_fn()(run.http, run.provider_query())


async def details(
    hydrate: HydrateFn, http: HttpClient, doc: NativeDocument
) -> NativeDocument | ProviderError:
    """A stub's complete document, or the error that prevented reading it."""
    try:
        return await hydrate(http, doc)
    except ProviderError as error:
        return error
    except Exception:
        log.exception("reading result details failed")
        return ProviderError(QueryState.FAILED, UNEXPECTED)

