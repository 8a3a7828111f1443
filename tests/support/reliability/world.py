"""The eight fake providers, seeded, and valid native queries for each (faults and load runs).

The fakes speak the providers' real wire formats on loopback ports; the server under test
points at them through `SEARCH_PROVIDER_BASE_URLS` (plain http allowed by setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from search_client.pb.search.v1 import accounts_pb2, accounts_pb2_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from service.fakes.atlassian import FakeConfluence, FakeJira
from service.fakes.github import FakeGitHub
from service.fakes.gitlab import FakeGitLab
from service.fakes.gmail import FakeGmail
from service.fakes.google_calendar import FakeCalendar
from service.fakes.google_drive import FakeDrive
from service.fakes.slack import FakeSlack
from service.fakes.suite import FakeProviders

WORDS = ("deploy", "incident", "roadmap", "budget")
ITEMS_PER_WORD = 6
PROVIDERS: Mapping[str, cpb.Provider] = {
    "github": cpb.PROVIDER_GITHUB,
    "gitlab": cpb.PROVIDER_GITLAB,
    "slack": cpb.PROVIDER_SLACK,
    "google_drive": cpb.PROVIDER_GOOGLE_DRIVE,
    "gmail": cpb.PROVIDER_GMAIL,
    "google_calendar": cpb.PROVIDER_GOOGLE_CALENDAR,
    "jira": cpb.PROVIDER_JIRA,
    "confluence": cpb.PROVIDER_CONFLUENCE,
}
_KINDS = {
    "github": (wpb.QUERY_KIND_ISSUES, wpb.QUERY_KIND_CODE, wpb.QUERY_KIND_COMMITS,
               wpb.QUERY_KIND_REPOSITORIES),
    "gitlab": (wpb.QUERY_KIND_ISSUES, wpb.QUERY_KIND_CODE, wpb.QUERY_KIND_MERGE_REQUESTS,
               wpb.QUERY_KIND_WIKI),
}


def new_fakes() -> FakeProviders:
    """Eight fakes (not started)."""
    return FakeProviders(FakeGitHub(), FakeGitLab(), FakeSlack(), FakeDrive(), FakeGmail(),
                         FakeCalendar(), FakeJira(), FakeConfluence())


async def start_fakes(fakes: FakeProviders) -> None:
    """Start every fake that is not listening yet."""
    for fake in fakes.all():
        if not fake.server.port:
            await fake.server.start()


async def stop_fakes(fakes: FakeProviders) -> None:
    """Stop every fake."""
    for fake in fakes.all():
        await fake.server.stop()


def base_urls(fakes: FakeProviders) -> str:
    """The `SEARCH_PROVIDER_BASE_URLS` value pointing every provider at its fake."""
    return ",".join(f"{fake.name}={fake.base_url}" for fake in fakes.all())


def server_env(fakes: FakeProviders) -> dict[str, str]:
    """Settings that let a server search the fakes over plain http on loopback."""
    return {
        "SEARCH_PROVIDER_BASE_URLS": base_urls(fakes),
        "SEARCH_ALLOW_INSECURE_PROVIDER_HTTP": "true",
    }


_NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seed(fakes: FakeProviders, items_per_word: int = ITEMS_PER_WORD) -> None:
    """`items_per_word` items matching each of WORDS in every provider."""
    fakes.github.add_repo("acme/app", description="deploy incident roadmap budget")
    fakes.gitlab.add_project(1, "acme/app")
    fakes.google_calendar.add_calendar("primary")
    fakes.jira.add_site("cloud-1", "acme")
    fakes.confluence.add_site("cloud-1", "acme")
    for w, word in enumerate(WORDS):
        for i in range(items_per_word):
            for provider in PROVIDERS:
                add_item(fakes, provider, word, w * 100 + i + 1)


def add_item(
    fakes: FakeProviders, provider: str, word: str, n: int, *, repository: bool = True
) -> None:
    """One item (of every kind the provider has) matching `word`; `n` makes its ids unique.

    `repository=False` adds no GitHub repository: every new repository joins the account's
    affiliated list, which every later unscoped GitHub search then covers.
    """
    when = _NOW - timedelta(hours=n % 10_000)
    text = f"{word} item {n} of the {word} work"
    if provider == "github":
        fakes.github.add_issue("acme/app", n, text, text, updated_at=_iso(when))
        fakes.github.add_code("acme/app", f"src/{word}_{n}.py", text)
        fakes.github.add_commit("acme/app", f"{n:040x}", text, date=_iso(when))
        if repository:
            fakes.github.add_repo(f"acme/{word}-{n}", description=text)
    elif provider == "gitlab":
        fakes.gitlab.add_issue(1, n, text, text, updated_at=_iso(when))
        fakes.gitlab.add_issue(1, 1_000_000 + n, text, text, updated_at=_iso(when),
                               merge_request=True)
        fakes.gitlab.add_blob(1, f"src/{word}_{n}.py", text)
        fakes.gitlab.add_blob(1, f"wiki/{word}_{n}.md", text, wiki=True)
    elif provider == "slack":
        fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", text)
    elif provider == "google_drive":
        fakes.google_drive.add_file(f"f{n}", f"{word} doc {n}", text, modified=_iso(when))
    elif provider == "gmail":
        fakes.gmail.add_message(f"m{n}", f"{word} mail {n}", text, sent=when)
    elif provider == "google_calendar":
        fakes.google_calendar.add_event("primary", f"e{n}", text, start=_iso(when),
                                        end=_iso(when + timedelta(minutes=30)),
                                        updated=_iso(when))
    elif provider == "jira":
        fakes.jira.add_issue("cloud-1", f"ACME-{n}", text, text)
    else:
        fakes.confluence.add_content("cloud-1", f"c{n}", f"{word} page {n}", text)


def native_text(provider: str, word: str) -> str:
    """A native query for `word` in the provider's own language."""
    if provider == "google_drive":
        return f"fullText contains '{word}'"
    if provider == "jira":
        return f'text ~ "{word}" ORDER BY updated DESC'
    if provider == "confluence":
        return f'text ~ "{word}"'
    return word


def queries_for(provider: str, words: tuple[str, ...]) -> list[wpb.NativeQuery]:
    """Up to four valid queries for one provider's account, one per word (GitHub and GitLab:
    one per kind, since they allow one query per kind)."""
    value = PROVIDERS[provider]
    kinds = _KINDS.get(provider)
    if kinds is not None:
        return [
            wpb.NativeQuery(provider=value, text=native_text(provider, word), kind=kind)
            for word, kind in zip(words, kinds, strict=False)
        ]
    return [wpb.NativeQuery(provider=value, text=native_text(provider, w)) for w in words[:4]]


async def connect_all(
    stub: accounts_pb2_grpc.AccountServiceAsyncStub,
    fakes: FakeProviders,
    metadata: tuple[tuple[str, str], ...] = (),
) -> dict[str, str]:
    """One account per provider, with the credential its fake accepts; provider -> account id."""
    ids: dict[str, str] = {}
    for fake in fakes.all():
        reply = await stub.ConnectAccount(
            accounts_pb2.ConnectAccountRequest(
                provider=PROVIDERS[fake.name],
                display_name=fake.name,
                credentials=accounts_pb2.Credentials(token=fake.token),
            ),
            metadata=metadata,
        )
        ids[fake.name] = reply.account.account_id
    return ids
