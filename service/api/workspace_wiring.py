"""Builds the workspace servicers from settings (called by the composition root)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from service.api.accounts import AccountServicer
from service.api.workspace import QueryObserver, WorkspaceSearchServicer
from service.keys import credential_keys
from service.ranking.tokens import TokenSigner
from service.settings import OAUTH_FAMILIES, Settings, SettingsError
from service.store.base import Store
from service.workspace.accounts import AccountManager, Resolver
from service.workspace.credentials import CredentialSealer
from service.workspace.engine import EngineSettings, WorkspaceEngine
from service.workspace.limits import RateLimits
from service.workspace.lists import GIVE_UP_SECONDS
from service.workspace.model import ProviderId
from service.workspace.oauth import Family, OAuthClient
from service.workspace.providers import REGISTRY
from service.workspace.refresh import ManagerStore, RefreshObserver, TokenRefresher
from service.workspace.reseal import reseal_credentials

__all__ = ["build_workspace_servicers", "oauth_clients", "parse_base_urls"]

log = logging.getLogger(__name__)


def parse_base_urls(text: str, setting: str = "SEARCH_PROVIDER_BASE_URLS") -> dict[ProviderId, str]:
    """`slack=https://...,gmail=https://...` as a mapping (tests and demos point at fakes)."""
    found: dict[ProviderId, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, url = item.partition("=")
        try:
            provider = ProviderId(name.strip())
        except ValueError:
            raise SettingsError(f"{setting}: unknown provider {name.strip()!r}") from None
        if not url.strip().startswith(("https://", "http://")):
            raise SettingsError(f"{setting}: {provider.value} needs an http(s) URL")
        found[provider] = url.strip().rstrip("/")
    return found


def _client_secret(settings: Settings, family: str) -> str:
    secret: str = getattr(settings, f"oauth_{family}_client_secret").reveal()
    path: str = getattr(settings, f"oauth_{family}_client_secret_file")
    if not path:
        return secret
    key = f"SEARCH_OAUTH_{family.upper()}_CLIENT_SECRET_FILE"
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{key}={path!r} cannot be read ({type(exc).__name__})") from None


def oauth_clients(settings: Settings, *, allow_insecure_http: bool = False) -> list[OAuthClient]:
    """The OAuth clients configured by `SEARCH_OAUTH_<FAMILY>_*` (a client id enables one)."""
    clients = []
    for family in OAUTH_FAMILIES:
        client_id: str = getattr(settings, f"oauth_{family}_client_id")
        token_url: str = getattr(settings, f"oauth_{family}_token_url")
        if token_url.startswith("http://") and not allow_insecure_http:
            raise SettingsError(
                f"SEARCH_OAUTH_{family.upper()}_TOKEN_URL={token_url!r} must use https"
            )
        if not client_id:
            continue
        clients.append(OAuthClient(
            Family(family), client_id.strip(), _client_secret(settings, family),
            token_url.rstrip("/"),
            settings.oauth_gitlab_redirect_uri if family == "gitlab" else "",
        ))
    return clients


def build_workspace_servicers(
    settings: Settings,
    store: Store,
    signer: TokenSigner,
    *,
    allow_insecure_http: bool = False,
    base_url_overrides: Mapping[ProviderId, str] | None = None,
    max_rounds_per_page: int = 3,
    default_timeout: float = 20.0,
    on_query: QueryObserver | None = None,
    on_refresh: RefreshObserver | None = None,
    closers: list[Callable[[], Awaitable[None]]] | None = None,
    resolver: Resolver | None = None,
    give_up_seconds: float = GIVE_UP_SECONDS,
) -> dict[str, Any]:
    """WorkspaceSearchService and AccountService servicers, keyed by full service name
    (`resolver`: how ConnectAccount resolves a base URL's host; None: the system's;
    `give_up_seconds`: how long a list failing every read goes on being read, tests)."""
    key, previous_keys = credential_keys(settings)
    accounts = AccountManager(
        store,
        key,
        REGISTRY,
        previous_keys=previous_keys,
        allow_private_base_urls=settings.allow_private_base_urls,
        allow_insecure_http=allow_insecure_http,
        base_url_overrides=base_url_overrides,
        resolver=resolver,
    )
    engine_settings = EngineSettings(
        rrf_k=settings.rrf_k,
        query_budget=settings.query_request_budget,
        account_concurrency=settings.account_concurrency,
        request_timeout=settings.provider_request_timeout,
        allow_insecure_http=allow_insecure_http,
        default_timeout=default_timeout,
        max_rounds_per_page=max_rounds_per_page,
        give_up_seconds=give_up_seconds,
    )
    clients = oauth_clients(settings, allow_insecure_http=allow_insecure_http)
    refresher = TokenRefresher(
        clients, ManagerStore(accounts), timeout=settings.provider_request_timeout,
        observer=on_refresh,
    )
    engine = WorkspaceEngine(
        accounts, signer, settings=engine_settings, renewer=refresher,
        limits=RateLimits(store) if settings.shared_provider_waits else None,
    )
    if closers is not None:
        closers.append(engine.aclose)  # provider connections are kept between calls
        closers.append(refresher.aclose)  # after refreshes in flight have stored their tokens
        if previous_keys:
            closers.append(_start_resealing(store, CredentialSealer(key, previous_keys)))
    response_limit = settings.response_limit[0]
    servicer = (
        WorkspaceSearchServicer(engine, response_limit)
        if on_query is None
        else WorkspaceSearchServicer(engine, response_limit, on_query)
    )
    return {
        "search.v1.WorkspaceSearchService": servicer,
        "search.v1.AccountService": AccountServicer(accounts, REGISTRY),
    }


def _start_resealing(store: Store, sealer: CredentialSealer) -> Callable[[], Awaitable[None]]:
    """Re-seal stored credentials with the current key in the background (the server does
    not wait for it); returns the closer that stops it."""

    async def sweep() -> None:
        try:
            report = await reseal_credentials(store, sealer)
        except Exception:
            log.warning("re-sealing credentials with SEARCH_CREDENTIALS_KEY failed; run "
                        "`search-service reseal-credentials`", exc_info=True)
        else:
            log.info("credentials re-sealed with SEARCH_CREDENTIALS_KEY: %s", report)

    task = asyncio.get_running_loop().create_task(sweep())

    async def stop() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    return stop
