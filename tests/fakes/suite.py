"""All fake providers together, and helpers to open sessions against them."""

from __future__ import annotations

from dataclasses import dataclass

from service.workspace.http import AccountSession
from service.workspace.model import Account, Credentials, ProviderId
from tests.fakes.atlassian import FakeConfluence, FakeJira
from tests.fakes.base import FakeProvider
from tests.fakes.github import FakeGitHub
from tests.fakes.gitlab import FakeGitLab
from tests.fakes.gmail import FakeGmail
from tests.fakes.google_calendar import FakeCalendar
from tests.fakes.google_drive import FakeDrive
from tests.fakes.slack import FakeSlack


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
        for fake in self.all():
            fake.reset()
