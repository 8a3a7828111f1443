"""What an account can search follows its stored scopes, and provider answers that refuse a
token or a scope take the right path (issue 15), through a real gRPC server and channel
against the fake providers and token endpoints over loopback HTTP:

- Drive searches shared drives (`corpora=allDrives` with both shared-drive flags) only with
  scopes that reach every file; `drive.file` searches the app's files (`corpora=user`); the
  account's card says which;
- Slack searches files only with `search:read.files`, and the card names the channels;
- Atlassian's 401 "scope does not match" is a permission failure naming the scope, with no
  refresh;
- a 401 inside one part of a Gmail batch refreshes once and retries, as a top-level 401 does;
- GitHub's refresh is a form-encoded POST asking for JSON (`Accept: application/json`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.oauth import Grant
from service.fakes.suite import FakeProviders
from service.metrics import Metrics
from service.workspace.model import ProviderId
from tests.integration.test_workspace_grpc import Client
from tests.integration.test_workspace_refresh import connect as connect_grant
from tests.integration.test_workspace_refresh import refreshes, serving, states

pytest_plugins = ["tests.fakes.fixtures"]

DRIVE, SLACK, GMAIL = cpb.PROVIDER_GOOGLE_DRIVE, cpb.PROVIDER_SLACK, cpb.PROVIDER_GMAIL
JIRA, GITHUB = cpb.PROVIDER_JIRA, cpb.PROVIDER_GITHUB
GOOGLE = "https://www.googleapis.com/auth/"
FILES_PATH = "/drive/v3/files"
BATCH = "/batch/gmail/v1"


async def connect(
    client: Client, provider: cpb.Provider, token: str, scopes: tuple[str, ...], name: str
) -> pb.Account:
    """Connect an account with a static token and these granted scopes."""
    request = apb.ConnectAccountRequest(
        provider=provider, display_name=name,
        credentials=apb.Credentials(token=token, scopes=scopes),
    )
    reply = await client.accounts.ConnectAccount(request, metadata=client.metadata)
    return reply.account


async def listed_cards(client: Client) -> dict[str, str]:
    """Account id -> the scope line of its card, as ListAccounts shows it."""
    listed = await client.search.ListAccounts(pb.ListAccountsRequest(), metadata=client.metadata)
    return {a.account_id: a.card.scope for a in listed.accounts}


# ---- Drive: shared drives by scope ----------------------------------------------------------


def seed_drive(fakes: FakeProviders) -> None:
    """One file in My Drive, one in a shared drive."""
    fakes.google_drive.add_file("mine", "plan mine")
    fakes.google_drive.add_file("team", "plan team", drive_id="0Team")


@pytest.mark.parametrize(
    ("scopes", "found", "corpora", "says"),
    [
        ((GOOGLE + "drive.readonly",), ["plan mine", "plan team"], "allDrives",
         "files shared with it and its shared drives"),
        (("drive",), ["plan mine", "plan team"], "allDrives", "its shared drives"),
        ((GOOGLE + "drive.metadata.readonly", "openid"), ["plan mine", "plan team"],
         "allDrives", "reads metadata only"),
        ((), ["plan mine", "plan team"], "allDrives", ""),  # unknown: as drive.readonly
        ((GOOGLE + "drive.file", "email"), ["plan mine"], "user",
         "only drive.file: it searches the files created with or opened in this app"),
    ],
)
async def test_drive_searches_shared_drives_only_when_the_scopes_reach_them(
    fakes: FakeProviders, tmp_path: Path, scopes: tuple[str, ...], found: list[str],
    corpora: str, says: str,
) -> None:
    seed_drive(fakes)
    async with serving(fakes, tmp_path, Metrics()) as client:
        account = await connect(client, DRIVE, fakes.google_drive.token, scopes, "drive")
        query = pb.NativeQuery(provider=DRIVE, text="name contains 'plan'")
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[query]))
        cards = await listed_cards(client)
    assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]
    assert sorted(r.title for r in pages[0].results) == found
    (sent,) = [r for r in fakes.google_drive.log if r.path == FILES_PATH]
    assert sent.arg("corpora") == corpora
    flags = {sent.arg("includeItemsFromAllDrives"), sent.arg("supportsAllDrives")}
    assert flags == ({"true"} if corpora == "allDrives" else {""})
    assert says in account.card.scope  # the card ConnectAccount answers with ...
    assert cards[account.account_id] == account.card.scope  # ... is the one listed
    if not scopes:
        assert account.card.scope.endswith("(whose files have no owners).")  # the plain card


async def test_drive_file_scope_refuses_a_shared_drive_and_no_drive_scope_fails_naming_it(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed_drive(fakes)
    async with serving(fakes, tmp_path, Metrics()) as client:
        app_only = await connect(client, DRIVE, fakes.google_drive.token,
                                 (GOOGLE + "drive.file",), "app files")
        mail_only = await connect(client, DRIVE, fakes.google_drive.token,
                                  (GOOGLE + "gmail.readonly",), "no drive")
        full = await connect(client, DRIVE, fakes.google_drive.token,
                             (GOOGLE + "drive.readonly",), "full")
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            pb.NativeQuery(provider=DRIVE, text="name contains 'plan'", project="drive:0Team",
                           account_id=account.account_id)
            for account in (app_only, mail_only, full)
        ]))
        assert await states(client) == dict.fromkeys(
            [app_only.account_id, mail_only.account_id, full.account_id],
            pb.ACCOUNT_STATE_CONNECTED,
        )
    by_index = {s.query_index: s for s in statuses}
    for index in (0, 1):  # refused before any request, as permission failures
        assert by_index[index].state == pb.QUERY_STATE_FAILED
        assert f"lacks the scope {GOOGLE}drive.readonly" in by_index[index].message
    assert by_index[2].state == pb.QUERY_STATE_OK
    assert [r.title for r in pages[0].results] == ["plan team"]
    (sent,) = [r for r in fakes.google_drive.log if r.path == FILES_PATH]
    assert (sent.arg("corpora"), sent.arg("driveId")) == ("drive", "0Team")
    assert "has no Drive scope" in mail_only.card.scope


async def test_fake_drive_refuses_shared_drive_corpora_without_the_flags(
    fakes: FakeProviders,
) -> None:
    seed_drive(fakes)
    auth = {"Authorization": f"Bearer {fakes.google_drive.token}"}
    url = fakes.google_drive.base_url + FILES_PATH
    async with httpx.AsyncClient() as http:
        refused = await http.get(url, params={"corpora": "allDrives"}, headers=auth)
        mine = await http.get(url, headers=auth)
    assert refused.status_code == 400
    assert refused.json()["error"]["errors"][0]["location"] == "corpora"
    assert [f["id"] for f in mine.json()["files"]] == ["mine"]  # corpora=user by default


# ---- Slack: files by scope ------------------------------------------------------------------


async def test_slack_card_says_which_channels_and_whether_files(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_file("F1", "roadmap.pdf", "the quarterly roadmap", updated=100)
    fakes.slack.add_message("C1", "general", "200.000000", "quarterly roadmap review")
    async with serving(fakes, tmp_path, Metrics()) as client:
        files = await connect(client, SLACK, fakes.slack.token,
                              ("search:read.public", "search:read.im", "search:read.files"),
                              "files")
        messages = await connect(client, SLACK, fakes.slack.token,
                                 ("search:read.public", "search:read.private"), "messages")
        unknown = await connect(client, SLACK, fakes.slack.token, (), "unknown")
        statuses, pages = await client.run(pb.SearchWorkspaceRequest(queries=[
            pb.NativeQuery(provider=SLACK, text="quarterly", account_id=account.account_id)
            for account in (files, messages, unknown)
        ]))
        cards = await listed_cards(client)
    assert {s.state for s in statuses} == {pb.QUERY_STATE_OK}
    kinds = {(c.query_index, r.kind) for r in pages[0].results for c in r.contributions}
    assert kinds == {(0, "message"), (0, "file"), (1, "message"), (2, "message")}
    sent = sorted(r.json()["content_types"] for r in fakes.slack.log)
    assert sent == ["messages", "messages", "messages,files"]
    assert "searches messages in public channels, DMs and files." in cards[files.account_id]
    assert ("searches messages in public channels, private channels; not files (reconnect "
            "granting search:read.files)") in cards[messages.account_id]
    assert "connected without its scopes" in cards[unknown.account_id]


# ---- Atlassian: a scope mismatch is no expired token ----------------------------------------


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ("Unauthorized; scope does not match", "read:jira-work"),  # the search's scope
        ("Unauthorized; scope does not match: read:jira-user", "read:jira-user"),  # the body's
    ],
)
async def test_atlassian_scope_mismatch_fails_naming_the_scope_without_a_refresh(
    fakes: FakeProviders, tmp_path: Path, message: str, named: str
) -> None:
    issuer = fakes.issuer(ProviderId.JIRA)
    grant = issuer.grant()
    fakes.jira.add_site("c1", "acme")
    fakes.jira.fault("status", status=401, body={"code": 401, "message": message},
                     path="/search/jql")
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account = await connect_grant(client, JIRA, grant,
                                      expires=datetime.now(UTC) + timedelta(hours=1))
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(
            queries=[pb.NativeQuery(provider=JIRA, text='text ~ "deploy"')]
        ))
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
    (status,) = statuses
    assert status.state == pb.QUERY_STATE_FAILED
    assert f"lacks the scope {named}" in status.message
    assert issuer.requests[issuer.path] == 0  # no refresh was tried
    assert [r.path for r in fakes.jira.log].count("/ex/jira/c1/rest/api/3/search/jql") == 1
    assert refreshes(metrics, "jira", "ok") == 0


# ---- Gmail: a 401 inside a batch part -------------------------------------------------------


def seed_gmail(fakes: FakeProviders) -> None:
    """Three budget messages in March 2026."""
    start = datetime(2026, 3, 1, tzinfo=UTC)
    for i in range(3):
        fakes.gmail.add_message(f"m{i}", f"Budget {i}", f"budget line {i}",
                                sent=start + timedelta(hours=i))


def dated_request() -> pb.SearchWorkspaceRequest:
    """A Gmail query with a time range: every listed message is read through the batch."""
    query = pb.NativeQuery(provider=GMAIL, text="budget")
    query.time_range.start_time.FromDatetime(datetime(2026, 2, 1, tzinfo=UTC))
    query.time_range.end_time.FromDatetime(datetime(2026, 4, 1, tzinfo=UTC))
    return pb.SearchWorkspaceRequest(queries=[query])


async def _gmail_account(client: Client, fakes: FakeProviders) -> tuple[str, Grant]:
    """A Gmail account connected with a grant of the fake Google token endpoint."""
    grant = fakes.issuer(ProviderId.GMAIL).grant()
    return await connect_grant(client, GMAIL, grant), grant


@pytest.mark.parametrize("whole", [False, True], ids=["one part", "every part"])
async def test_gmail_batch_part_401_refreshes_once_and_retries(
    fakes: FakeProviders, tmp_path: Path, whole: bool
) -> None:
    seed_gmail(fakes)
    issuer = fakes.issuer(ProviderId.GMAIL)
    metrics = Metrics()
    async with serving(fakes, tmp_path, metrics) as client:
        account, grant = await _gmail_account(client, fakes)
        if whole:  # the token expires between the listing and the batch: 401 in every part
            fakes.gmail.parts_check_auth = True
            fakes.gmail.before_next_batch = issuer.expire_all
        else:  # Google refuses one inner call only
            fakes.gmail.fail_reads("m1", 401)
        statuses, pages = await client.run(dated_request())
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
    (status,) = statuses
    assert (status.state, status.partial) == (pb.QUERY_STATE_OK, False)
    assert sorted(r.title for r in pages[0].results) == ["Budget 0", "Budget 1", "Budget 2"]
    assert issuer.refreshes == 1
    assert refreshes(metrics, "gmail", "ok") == 1
    batches = [r for r in fakes.gmail.log if r.path == BATCH]
    assert len(batches) == 2  # the refused batch was sent once more, with the new token
    assert batches[0].headers["authorization"] == f"Bearer {grant.access_token}"
    assert batches[1].headers["authorization"] != f"Bearer {grant.access_token}"


async def test_gmail_batch_parts_refused_after_the_refresh_need_reconnect(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed_gmail(fakes)
    issuer = fakes.issuer(ProviderId.GMAIL)
    async with serving(fakes, tmp_path, Metrics()) as client:
        account, _ = await _gmail_account(client, fakes)
        for i in range(3):
            fakes.gmail.fail_reads(f"m{i}", 401, times=2)  # refused before and after
        statuses, _ = await client.run(dated_request())
        assert (await states(client))[account] == pb.ACCOUNT_STATE_NEEDS_RECONNECT
    (status,) = statuses
    assert status.state == pb.QUERY_STATE_NEEDS_RECONNECT
    assert issuer.refreshes == 1  # one refresh, one retry, then reconnect
    assert [r.path for r in fakes.gmail.log].count(BATCH) == 2


# ---- GitHub: the refresh request ------------------------------------------------------------


async def test_github_refresh_is_a_form_post_asking_for_json(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    issuer = fakes.issuer(ProviderId.GITHUB)
    grant = issuer.grant()
    fakes.github.add_issue("acme/app", 1, "login bug")
    async with serving(fakes, tmp_path, Metrics()) as client:
        account = await connect_grant(client, GITHUB, grant)
        issuer.expire_all()
        statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[
            pb.NativeQuery(provider=GITHUB, text="bug", kind=pb.QUERY_KIND_ISSUES)
        ]))
        assert (await states(client))[account] == pb.ACCOUNT_STATE_CONNECTED
    assert [s.state for s in statuses] == [pb.QUERY_STATE_OK]
    (sent,) = issuer.log
    assert (sent.method, sent.path, sent.query) == ("POST", issuer.path, {})  # nothing in the URL
    assert sent.headers["accept"] == "application/json"
    assert sent.headers["content-type"] == "application/x-www-form-urlencoded"
    form = {k: v[0] for k, v in parse_qs(sent.body.decode()).items()}
    assert form == {
        "grant_type": "refresh_token", "refresh_token": grant.refresh_token,
        "client_id": issuer.client_id, "client_secret": issuer.client_secret,
    }
    assert issuer.refreshes == 1
