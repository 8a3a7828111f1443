"""Workspace search as the servicers call it: list accounts, and search with streamed events.

`WorkspaceEngine.search` validates the whole request before the first event (raising
service.errors), then yields before each `FusedPage` the `QueryStatus`es that changed
(see service.workspace.pager for the order and exactness rules).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass

from service.ranking.rrf import DEFAULT_K
from service.ranking.tokens import TokenSigner
from service.workspace.accounts import AccountManager
from service.workspace.events import AccountListing, ListedAccount, QueryStatus, SearchEvent
from service.workspace.fanout import Call, FanoutSettings
from service.workspace.guidance import guidance_for
from service.workspace.limits import RateLimits
from service.workspace.lists import GIVE_UP_SECONDS, ListRun
from service.workspace.model import ProviderId, QueryState
from service.workspace.pager import Pager, PagerSettings
from service.workspace.paging import ListState
from service.workspace.plan import Limits, Plan, SearchRequest, Slot, build_plan
from service.workspace.pool import PoolRegistry
from service.workspace.providers import REGISTRY, ProviderSpec
from service.workspace.renewal import Renewer

__all__ = ["EngineSettings", "WorkspaceEngine"]

NO_ACCOUNT = (
    "nothing was searched: no connected {provider} account; "
    "connect one with AccountService.ConnectAccount"
)
GONE = (
    "this account was disconnected after an earlier page of this search: nothing more is "
    "searched on it"
)


@dataclass(frozen=True)
class EngineSettings:
    """Tunables of workspace search (the composition root maps settings onto these)."""

    rrf_k: int = DEFAULT_K
    query_budget: int = 30  # provider HTTP requests per (query, account) and call
    account_concurrency: int = 8  # accounts searched at once in one call
    request_timeout: float = 10.0  # seconds per provider request, capped by the deadline
    max_response_bytes: int = 4 * 1024 * 1024
    allow_insecure_http: bool = False  # http:// provider origins (tests and demos only)
    default_timeout: float = 20.0  # call time budget when the caller sets no deadline
    deadline_reserve: float = 0.25  # seconds kept back from provider I/O to fuse and reply
    max_rounds_per_page: int = 3  # extra fetch rounds per page to make the order exact
    # Provider page size is max(top_k, this): a list that ends within its first page needs
    # no second round before the fused order is exact (each round costs a provider latency).
    min_provider_page: int = 20
    # Read the details of each list's first stubs (Gmail messages) while the other providers
    # answer, sized to what a first page can take from one list; the rest are read on emit.
    prefetch_details: bool = True
    max_queries: int = 32
    # A list failing every read on consecutive pages ends once the streak is this old (s).
    give_up_seconds: float = GIVE_UP_SECONDS

    def limits(self) -> Limits:
        """Request limits for the planner."""
        return Limits(max_queries=self.max_queries, rrf_k=self.rrf_k)

    def fanout(self) -> FanoutSettings:
        """Provider I/O settings."""
        return FanoutSettings(
            query_budget=self.query_budget,
            account_concurrency=self.account_concurrency,
            request_timeout=self.request_timeout,
            max_response_bytes=self.max_response_bytes,
            allow_insecure_http=self.allow_insecure_http,
        )

    def pager(self) -> PagerSettings:
        """Paging settings."""
        return PagerSettings(rrf_k=self.rrf_k, max_rounds_per_page=self.max_rounds_per_page)


class WorkspaceEngine:
    """Federated search over a tenant's provider accounts."""

    def __init__(
        self,
        accounts: AccountManager,
        signer: TokenSigner,
        *,
        registry: Mapping[ProviderId, ProviderSpec] = REGISTRY,
        settings: EngineSettings = EngineSettings(),
        renewer: Renewer | None = None,
        limits: RateLimits | None = None,
    ) -> None:
        self._accounts = accounts
        self._limits = limits  # rate-limit waits shared through the store (None: per call)
        self._renewer = renewer  # renews expiring access tokens (None: accounts never renew)
        self._signer = signer
        self._registry = registry
        self._settings = settings
        self._pools = PoolRegistry(public_only=accounts.checks_addresses)

    async def list_accounts(
        self, tenant: str, provider: ProviderId | None = None
    ) -> AccountListing:
        """The tenant's accounts with cards, and guidance for providers of connected ones."""
        views = await self._accounts.list_accounts(tenant, provider)
        listed = []
        for view in views:
            spec = self._registry[view.account.provider]
            card = None if view.account.needs_reconnect else spec.account_card(view.scopes)
            listed.append(ListedAccount(view, spec.kinds, card))
        connected = {v.account.provider for v in views if not v.account.needs_reconnect}
        return AccountListing(tuple(listed), guidance_for(connected, self._registry))

    async def search(
        self, tenant: str, request: SearchRequest, *, deadline: float | None = None
    ) -> AsyncGenerator[SearchEvent]:
        """Validate, then stream statuses and fused pages; `deadline` is absolute loop time."""
        snapshot = await self._accounts.snapshot(tenant)
        plan = build_plan(
            tenant, request, snapshot.accounts, self._registry, self._signer,
            self._settings.limits(),
        )
        first_page = plan.resume.page_number if plan.resume else 1
        for query_index, provider, account_id in plan.unmatched:
            yield QueryStatus(
                query_index=query_index,
                account_id=account_id,
                provider=provider,
                state=QueryState.SKIPPED,
                message=GONE if account_id else NO_ACCOUNT.format(provider=provider.value),
                page_number=first_page,
            )
        page_size = max(plan.top_k, self._settings.min_provider_page)
        now = time.time()
        runs = [
            ListRun(slot, self._start(plan, slot, page_size),
                    self._registry[slot.account.provider], now=now,
                    give_up_seconds=self._settings.give_up_seconds)
            for slot in plan.slots
        ]
        if self._settings.prefetch_details and runs:
            share = -(-plan.top_k // len(runs)) + 1  # ceil(top_k / lists) + 1
            for run in runs:
                run.prefetch = min(share, page_size)
        call = Call(
            tenant, snapshot, self._accounts, self._settings.fanout(),
            self._provider_deadline(deadline), pools=self._pools, renewer=self._renewer,
            limits=self._limits,
        )
        try:
            pager = Pager(plan, runs, call, self._signer, self._registry, self._settings.pager())
            async with aclosing(pager.events()) as events:
                async for event in events:
                    yield event
        finally:
            await call.aclose()

    async def aclose(self) -> None:
        """Close the provider connections kept between calls."""
        await self._pools.aclose()

    def _provider_deadline(self, deadline: float | None) -> float:
        now = asyncio.get_running_loop().time()
        end = deadline if deadline is not None else now + self._settings.default_timeout
        reserve = min(self._settings.deadline_reserve, 0.2 * max(0.0, end - now))
        return end - reserve

    @staticmethod
    def _start(plan: Plan, slot: Slot, page_size: int) -> ListState:
        resumed = plan.resume.resume_of(slot.key) if plan.resume is not None else None
        if resumed is not None:
            return resumed
        return slot.start or ListState(limit=page_size)
