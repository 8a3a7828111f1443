"""No access or refresh token ever leaves the service (issue 15): after a run with refreshes,
rotations, refused and failing refreshes, a provider error that quotes the token, refused
credentials and a reconnect, none of the tokens the fake token endpoints issued (nor the
static ones, the OAuth client secrets or the caller's bearer) appears in the server's log
records, the Prometheus exposition, any span, or any RPC answer (messages, error details,
trailing metadata).

The real server runs in-process (`build_app`, metrics on port 0, tracing to an in-memory
exporter) so that its log records are captured; the providers and token endpoints are the
fakes over loopback HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import urllib.request
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from google.protobuf import text_format
from google.protobuf.message import Message
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as agrpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.oauth import Grant
from service.fakes.suite import FakeProviders
from service.workspace.model import ProviderId
from tests.support.reliability.world import server_env
from tests.support.server import channel_to, running_server

pytest_plugins = ["tests.fakes.fixtures"]
pytestmark = pytest.mark.timeout(120)

BEARER = "leak-test-bearer-s3cret"
META = (("authorization", f"Bearer {BEARER}"),)
DRIVE, SLACK, GITHUB = cpb.PROVIDER_GOOGLE_DRIVE, cpb.PROVIDER_SLACK, cpb.PROVIDER_GITHUB
JIRA = cpb.PROVIDER_JIRA
QUERIES = {
    DRIVE: pb.NativeQuery(provider=DRIVE, text="name contains 'plan'"),
    SLACK: pb.NativeQuery(provider=SLACK, text="plan"),
    GITHUB: pb.NativeQuery(provider=GITHUB, text="plan", kind=pb.QUERY_KIND_ISSUES),
    JIRA: pb.NativeQuery(provider=JIRA, text='text ~ "plan"'),
}
T = TypeVar("T")


class Recorder:
    """Every answer the server gave, as text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def message(self, message: Message) -> None:
        self.texts.append(text_format.MessageToString(message, as_utf8=True))
        self.texts.append(message.SerializeToString().decode("latin-1"))

    def error(self, error: grpc.aio.AioRpcError) -> None:
        self.texts += [str(error.code()), error.details() or "",
                       error.debug_error_string() or ""]
        for key, value in error.trailing_metadata() or ():
            raw = value if isinstance(value, str) else value.decode("latin-1")
            self.texts.append(f"{key}: {raw}")

    async def call(self, answer: Awaitable[T]) -> T | None:
        """The answer recorded; None when the call failed (its error recorded)."""
        try:
            reply = await answer
        except grpc.aio.AioRpcError as error:
            self.error(error)
            return None
        if isinstance(reply, Message):
            self.message(reply)
        return reply


class Caller:
    """Stubs on one channel that record everything they receive."""

    def __init__(self, channel: grpc.aio.Channel, recorder: Recorder) -> None:
        self.workspace = wgrpc.WorkspaceSearchServiceStub(channel)
        self.accounts = agrpc.AccountServiceStub(channel)
        self.recorder = recorder

    async def connect(self, provider: cpb.Provider, grant: Grant) -> str:
        credentials = apb.Credentials(token=grant.access_token, refresh_token=grant.refresh_token)
        reply = await self.recorder.call(self.accounts.ConnectAccount(
            apb.ConnectAccountRequest(provider=provider, display_name="work",
                                      credentials=credentials),
            metadata=META,
        ))
        assert isinstance(reply, apb.ConnectAccountResponse)
        return reply.account.account_id

    async def update(self, account_id: str, credentials: apb.Credentials) -> bool:
        reply = await self.recorder.call(self.accounts.UpdateAccountCredentials(
            apb.UpdateAccountCredentialsRequest(account_id=account_id, credentials=credentials),
            metadata=META,
        ))
        return reply is not None

    async def search(self, *providers: cpb.Provider) -> list[pb.QueryStatus]:
        request = pb.SearchWorkspaceRequest(queries=[QUERIES[p] for p in providers])
        statuses: list[pb.QueryStatus] = []
        try:
            async for message in self.workspace.SearchWorkspace(request, metadata=META):
                self.recorder.message(message)
                if message.HasField("query_status"):
                    statuses.append(message.query_status)
        except grpc.aio.AioRpcError as error:
            self.recorder.error(error)
        return statuses

    async def listed(self) -> pb.ListAccountsResponse:
        reply = await self.recorder.call(
            self.workspace.ListAccounts(pb.ListAccountsRequest(), metadata=META)
        )
        assert isinstance(reply, pb.ListAccountsResponse)
        return reply


def seed(fakes: FakeProviders) -> None:
    """One 'plan' item in every provider searched."""
    fakes.google_drive.add_file("f1", "plan.doc")
    fakes.slack.add_message("C1", "general", "100.000000", "the plan")
    fakes.github.add_issue("acme/app", 1, "plan bug")
    fakes.jira.add_site("c1", "acme")
    fakes.jira.add_issue("c1", "OPS-1", "release plan")


def scrape(port: int) -> str:
    """The Prometheus exposition."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text: str = reply.read().decode()
    return text


def final_states(statuses: list[pb.QueryStatus]) -> list[int]:
    """The last state of each query, by query index."""
    last = {s.query_index: s.state for s in statuses}
    return [last[index] for index in sorted(last)]


async def exercise(caller: Caller, fakes: FakeProviders) -> dict[str, list[int]]:
    """Refreshes, rotations, failures and a reconnect; the states each step saw."""
    seen: dict[str, list[int]] = {}
    accounts = {p: await caller.connect(p, fakes.issuer(pid).grant()) for p, pid in [
        (DRIVE, ProviderId.GOOGLE_DRIVE), (SLACK, ProviderId.SLACK),
        (GITHUB, ProviderId.GITHUB), (JIRA, ProviderId.JIRA),
    ]}
    seen["first"] = final_states(await caller.search(DRIVE, SLACK, GITHUB, JIRA))
    for issuer in fakes.issuers.values():  # every token expires: four refreshes, three rotate
        issuer.expire_all()
    seen["refreshed"] = final_states(await caller.search(DRIVE, SLACK, GITHUB, JIRA))
    # GitHub quotes the token it was sent in an error; Slack refuses its token.
    github_token = fakes.github.log[-1].headers["authorization"].removeprefix("Bearer ")
    fakes.github.fault("status", status=500, times=1,
                       body={"message": f"boom for token {github_token}"})
    fakes.slack.answer({"ok": False, "error": "invalid_auth"}, times=1)
    seen["refused"] = final_states(await caller.search(SLACK, GITHUB))
    # The token endpoint fails (503), then refuses a revoked grant.
    google = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    google.expire_all()
    google.fail_status(503, times=1)
    seen["endpoint 503"] = final_states(await caller.search(DRIVE))
    atlassian = fakes.issuer(ProviderId.JIRA)
    atlassian.expire_all()
    atlassian.revoke()
    seen["revoked"] = final_states(await caller.search(JIRA))
    # Credentials refused in a request: the answer must not echo them.
    bad = apb.Credentials(token=f"{github_token} x", refresh_token=f"r {github_token}")
    seen["refused update"] = [int(await caller.update(accounts[SLACK], bad))]
    # Reconnect the revoked account with a new grant; it searches again.
    fresh = atlassian.grant()
    seen["reconnected"] = [int(await caller.update(accounts[JIRA], apb.Credentials(
        token=fresh.access_token, refresh_token=fresh.refresh_token,
    )))]
    seen["after reconnect"] = final_states(await caller.search(JIRA))
    seen["listed"] = [a.state for a in (await caller.listed()).accounts]
    return seen


async def test_no_token_in_logs_metrics_traces_or_answers(
    fakes: FakeProviders, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seed(fakes)
    exporter = InMemorySpanExporter()
    env = server_env(fakes) | fakes.oauth_settings() | {
        "SEARCH_AUTH_TOKENS": f"{hashlib.sha256(BEARER.encode()).hexdigest()}:acme:admin",
        "SEARCH_METRICS_PORT": "0",
        "SEARCH_OTEL_ENABLED": "true",
        "SEARCH_OTEL_EXPORTER": "none",
        "SEARCH_LOG_LEVEL": "DEBUG",
    }
    recorder = Recorder()
    async with running_server(tmp_path, env, span_exporter=exporter) as app, (
        channel_to(app)
    ) as channel:
        seen = await exercise(Caller(channel, recorder), fakes)
        assert app.metrics_port is not None
        exposition = await asyncio.to_thread(scrape, app.metrics_port)
    ok, failed = pb.QUERY_STATE_OK, pb.QUERY_STATE_FAILED
    reconnect, connected = pb.QUERY_STATE_NEEDS_RECONNECT, pb.ACCOUNT_STATE_CONNECTED
    assert seen == {
        "first": [ok] * 4,
        "refreshed": [ok] * 4,
        "refused": [reconnect, failed],  # Slack invalid_auth, GitHub's 500
        "endpoint 503": [failed],
        "revoked": [reconnect],
        "refused update": [0],
        "reconnected": [1],
        "after reconnect": [ok],
        # Registry order: GitHub, Slack (refused, waits for a reconnect), Drive, Jira.
        "listed": [connected, pb.ACCOUNT_STATE_NEEDS_RECONNECT, connected, connected],
    }

    secrets = {BEARER, *(fake.token for fake in fakes.all())}
    for issuer in fakes.issuers.values():
        secrets |= issuer.issued()
        secrets.add(issuer.client_secret)
    assert len(secrets) > 15  # the run handed out many tokens
    spans = [span.to_json() for span in exporter.get_finished_spans()]
    places: dict[str, list[str]] = {
        "log": [caplog.text, *(str(r.__dict__) for r in caplog.records)],
        "metrics": [exposition],
        "traces": spans,
        "answers": recorder.texts,
    }
    # The places hold what they should (a check that the capture works).
    assert "access token refreshed" in caplog.text
    assert 'search_oauth_token_refreshes_total{outcome="ok"' in exposition
    assert any('"provider slack"' in span for span in spans)
    assert any("lacks" in t or "refused the refresh token" in t for t in recorder.texts)
    for place, texts in places.items():
        for text in texts:
            leaked = [secret for secret in secrets if secret in text]
            assert not leaked, (place, leaked, text[:2000])
