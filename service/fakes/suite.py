"""All fake providers together, and helpers to open sessions against them."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.fakes.atlassian import FakeConfluence, FakeJira
from service.fakes.base import FakeProvider
from service.fakes.github import FakeGitHub
from service.fakes.gitlab import FakeGitLab
from service.fakes.gmail import FakeGmail
from service.fakes.google_calendar import FakeCalendar
from service.fakes.google_drive import FakeDrive
from service.fakes.oauth import FakeTokenIssuer
from service.fakes.slack import FakeSlack
from service.workspace.http import AccountSession
from service.workspace.model import Account, Credentials, ProviderId
from service.workspace.oauth import FAMILY_OF


@dataclass
class FakeProviders:
    """One running fake per provider."""

    github: FakeGitHub
    gitlab: FakeGitLab
    slack: FakeSlack
    google_drive: FakeDrive
    gmail: FakeGmail
    google_calendar: FakeCalendar
    jira: FakeJira
    confluence: FakeConfluence
    # One token endpoint per authorization server ("google", "slack", ...), linked to the
    # provider fakes it issues tokens for.
    issuers: dict[str, FakeTokenIssuer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for provider, family in FAMILY_OF.items():
            issuer = self.issuers.get(family.value)
            if issuer is None:
                issuer = self.issuers[family.value] = FakeTokenIssuer(family.value)
            self.of(provider).issuer = issuer

    @classmethod
    def create(cls) -> FakeProviders:
        """One fake of every provider, not yet listening."""
        return cls(
            FakeGitHub(),
            FakeGitLab(),
            FakeSlack(),
            FakeDrive(),
            FakeGmail(),
            FakeCalendar(),
            FakeJira(),
            FakeConfluence(),
        )

    async def start(self) -> None:
        """Listen on an ephemeral loopback port each."""
        for fake in [*self.all(), *self.issuers.values()]:
            await fake.server.start()

    async def stop(self) -> None:
        """Stop every fake."""
        for fake in [*self.all(), *self.issuers.values()]:
            await fake.server.stop()

    def base_urls(self) -> str:
        """`SEARCH_PROVIDER_BASE_URLS` pointing every provider at its fake."""
        return ",".join(f"{fake.name}={fake.base_url}" for fake in self.all())

    def all(self) -> list[FakeProvider]:
        """Every fake, in provider order."""
        return [
            self.github,
            self.gitlab,
            self.slack,
            self.google_drive,
            self.gmail,
            self.google_calendar,
            self.jira,
            self.confluence,
        ]

    def of(self, provider: ProviderId) -> FakeProvider:
        """The fake serving `provider`."""
        fake: FakeProvider = getattr(self, provider.value)
        return fake

    def issuer(self, provider: ProviderId) -> FakeTokenIssuer:
        """The token endpoint of the provider's authorization server."""
        return self.issuers[FAMILY_OF[provider].value]

    def oauth_settings(self) -> dict[str, str]:
        """`SEARCH_OAUTH_*` settings pointing every family's OAuth client at its fake."""
        env: dict[str, str] = {}
        for family, issuer in self.issuers.items():
            prefix = f"SEARCH_OAUTH_{family.upper()}_"
            env[prefix + "CLIENT_ID"] = issuer.client_id
            env[prefix + "CLIENT_SECRET"] = issuer.client_secret
            env[prefix + "TOKEN_URL"] = issuer.token_url
        return env

    def account(self, provider: ProviderId, *, account_id: str = "acc-1") -> Account:
        """An account whose base URL is the provider's fake."""
        return Account(
            account_id, "tenant-1", provider, f"{provider.value} test", self.of(provider).base_url
        )

    def credentials(
        self, provider: ProviderId, *, username: str = "", scopes: tuple[str, ...] = ()
    ) -> Credentials:
        """The credential the provider's fake accepts."""
        fake = self.of(provider)
        if username:
            fake.basic_user = username
        return Credentials(fake.token, username, scopes)

    def session(self, provider: ProviderId, **options: object) -> AccountSession:
        """An AccountSession to the provider's fake (plain http allowed). Close it after use."""
        username = str(options.pop("username", ""))
        scopes = options.pop("scopes", ())
        assert isinstance(scopes, tuple)
        return AccountSession(
            self.account(provider),
            self.credentials(provider, username=username, scopes=scopes),
            allow_insecure_http=True,
            **options,  # type: ignore[arg-type]
        )

    def reset(self) -> None:
        """Empty every corpus, drop faults and request counts."""
        for fake in [*self.all(), *self.issuers.values()]:
            fake.reset()
