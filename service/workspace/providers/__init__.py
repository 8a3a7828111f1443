"""The provider registry: one literal entry per provider, each with a complete query card.

Importing this package fails (ValueError) when a provider is missing or its card is incomplete.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from service.workspace.http import HttpClient
from service.workspace.model import (
    Kind,
    NativeDocument,
    ProviderId,
    ProviderPage,
    ProviderQuery,
    QueryCard,
)
from service.workspace.providers import (
    confluence,
    github,
    gitlab,
    gmail,
    google_calendar,
    google_drive,
    jira,
    slack,
)
from service.workspace.providers._common import check_card

__all__ = ["REGISTRY", "HydrateFn", "ProviderSpec", "SearchFn", "check_registry"]

SearchFn = Callable[[HttpClient, ProviderQuery], Awaitable[ProviderPage]]
HydrateFn = Callable[[HttpClient, NativeDocument], Awaitable[NativeDocument]]


@dataclass(frozen=True)
class ProviderSpec:
    """What the engine needs of one provider."""

    id: ProviderId
    card: QueryCard
    kinds: tuple[Kind, ...]
    max_text_length: int
    default_base_url: str
    search: SearchFn
    # Optional two-step search: `search_stubs` lists results as stubs (identity only) and
    # `hydrate` completes one when it is emitted; used when no time range needs each date.
    search_stubs: SearchFn | None = None
    hydrate: HydrateFn | None = None
    # Validation (service.workspace.plan): what counts against `max_text_length`, and why a
    # text cannot work for a kind ('' when it can).
    text_length: Callable[[str], int] = len
    check_text: Callable[[str, Kind | None], str] | None = None
    # Duplicate queries compare text casefolded only where matching ignores case and there
    # are no case-sensitive operators or ids; elsewhere exactly (Gmail `OR` vs the word `or`).
    text_ignores_case: bool = False
    # The card of one account given its granted scopes (what that account can search), for
    # providers whose search depends on them (Slack files and channels, Drive shared drives).
    card_for_scopes: Callable[[tuple[str, ...]], QueryCard] | None = None

    def account_card(self, scopes: tuple[str, ...]) -> QueryCard:
        """The card of an account with these granted scopes (empty: unknown)."""
        return self.card_for_scopes(scopes) if self.card_for_scopes else self.card


def check_registry(registry: Mapping[ProviderId, ProviderSpec]) -> None:
    """Raise ValueError unless every provider is registered, in order, with a complete card."""
    if list(registry) != list(ProviderId):
        missing = [p.value for p in ProviderId if p not in registry]
        raise ValueError(f"provider registry must list every provider in order; missing {missing}")
    for provider_id, spec in registry.items():
        if spec.id is not provider_id:
            raise ValueError(f"registry entry {provider_id.value!r} holds {spec.id.value!r}")
        if not isinstance(spec.card, QueryCard):
            raise ValueError(f"provider {provider_id.value!r} has no query card")
        check_card(provider_id.value, spec.card)
        if (spec.search_stubs is None) != (spec.hydrate is None):
            raise ValueError(f"provider {provider_id.value!r} needs both search_stubs and hydrate")
        if spec.max_text_length <= 0:
            raise ValueError(f"provider {provider_id.value!r} needs a positive max_text_length")


REGISTRY: Mapping[ProviderId, ProviderSpec] = MappingProxyType(
    {
        ProviderId.GITHUB: ProviderSpec(
            ProviderId.GITHUB,
            github.CARD,
            github.KINDS,
            github.MAX_TEXT_LENGTH,
            github.DEFAULT_BASE_URL,
            github.search,
            text_length=github.search_text_length,
            check_text=github.check_text,
        ),
        ProviderId.GITLAB: ProviderSpec(
            ProviderId.GITLAB,
            gitlab.CARD,
            gitlab.KINDS,
            gitlab.MAX_TEXT_LENGTH,
            gitlab.DEFAULT_BASE_URL,
            gitlab.search,
        ),
        ProviderId.SLACK: ProviderSpec(
            ProviderId.SLACK,
            slack.CARD,
            slack.KINDS,
            slack.MAX_TEXT_LENGTH,
            slack.DEFAULT_BASE_URL,
            slack.search,
            text_ignores_case=True,  # no operators; keyword and semantic matching ignore case
            card_for_scopes=slack.card_for,
        ),
        ProviderId.GOOGLE_DRIVE: ProviderSpec(
            ProviderId.GOOGLE_DRIVE,
            google_drive.CARD,
            google_drive.KINDS,
            google_drive.MAX_TEXT_LENGTH,
            google_drive.DEFAULT_BASE_URL,
            google_drive.search,
            card_for_scopes=google_drive.card_for,
        ),
        ProviderId.GMAIL: ProviderSpec(
            ProviderId.GMAIL,
            gmail.CARD,
            gmail.KINDS,
            gmail.MAX_TEXT_LENGTH,
            gmail.DEFAULT_BASE_URL,
            gmail.search,
            search_stubs=gmail.search_ids,
            hydrate=gmail.hydrate,
        ),
        ProviderId.GOOGLE_CALENDAR: ProviderSpec(
            ProviderId.GOOGLE_CALENDAR,
            google_calendar.CARD,
            google_calendar.KINDS,
            google_calendar.MAX_TEXT_LENGTH,
            google_calendar.DEFAULT_BASE_URL,
            google_calendar.search,
            text_ignores_case=True,  # plain words, no operators, matched regardless of case
        ),
        ProviderId.JIRA: ProviderSpec(
            ProviderId.JIRA,
            jira.CARD,
            jira.KINDS,
            jira.MAX_TEXT_LENGTH,
            jira.DEFAULT_BASE_URL,
            jira.search,
        ),
        ProviderId.CONFLUENCE: ProviderSpec(
            ProviderId.CONFLUENCE,
            confluence.CARD,
            confluence.KINDS,
            confluence.MAX_TEXT_LENGTH,
            confluence.DEFAULT_BASE_URL,
            confluence.search,
        ),
    }
)

check_registry(REGISTRY)
