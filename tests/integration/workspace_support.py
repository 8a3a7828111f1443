"""A workspace search engine wired to the fake providers and a real SQLite store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.fakes.suite import FakeProviders
from service.ranking.tokens import TokenSigner
from service.store.sqlite import SqliteStore
from service.workspace.accounts import AccountManager, ConnectRequest
from service.workspace.engine import EngineSettings, WorkspaceEngine
from service.workspace.events import FusedPage, QueryStatus
from service.workspace.model import Credentials, ProviderId
from service.workspace.plan import NativeQuery, SearchRequest
from service.workspace.providers import REGISTRY

TENANT = "tenant-a"
CREDENTIALS_KEY = b"c" * 32
SIGNER = TokenSigner(b"p" * 32)


@dataclass
class Outcome:
    """Everything one search call streamed."""

    statuses: list[QueryStatus]
    pages: list[FusedPage]

    def latest(self) -> dict[tuple[int, str], QueryStatus]:
        """The last status per (query_index, account_id)."""
        return {(s.query_index, s.account_id): s for s in self.statuses}

    def ids(self) -> list[str]:
        """Result ids of every page, in order."""
        return [r.result_id for page in self.pages for r in page.results]


@dataclass
class World:
    """Fakes + store + account manager + engine."""

    fakes: FakeProviders
    store: SqliteStore
    accounts: AccountManager
    engine: WorkspaceEngine

    async def connect(
        self, provider: ProviderId, name: str = "", *, tenant: str = TENANT, token: str = ""
    ) -> str:
        """Connect an account to the provider's fake; returns its id."""
        credentials = Credentials(token or self.fakes.of(provider).token)
        request = ConnectRequest(provider, name or f"{provider.value} account", "", credentials)
        view = await self.accounts.connect(tenant, request)
        return view.account.account_id

    async def search(
        self,
        queries: Sequence[NativeQuery],
        *,
        tenant: str = TENANT,
        deadline: float | None = None,
        **options: Any,
    ) -> Outcome:
        """Run one search call to the end."""
        request = SearchRequest(tuple(queries), **options)
        outcome = Outcome([], [])
        async for event in self.engine.search(tenant, request, deadline=deadline):
            if isinstance(event, FusedPage):
                outcome.pages.append(event)
            else:
                outcome.statuses.append(event)
        return outcome


def build_world(
    fakes: FakeProviders, store: SqliteStore, **settings: Any
) -> World:
    """A World whose providers all point at their fakes."""
    overrides = {provider: fakes.of(provider).base_url for provider in ProviderId}
    accounts = AccountManager(
        store, CREDENTIALS_KEY, REGISTRY, allow_private_base_urls=True, allow_insecure_http=True,
        base_url_overrides=overrides,
    )
    options = {"allow_insecure_http": True, **settings}
    engine = WorkspaceEngine(accounts, SIGNER, settings=EngineSettings(**options))
    return World(fakes, store, accounts, engine)
