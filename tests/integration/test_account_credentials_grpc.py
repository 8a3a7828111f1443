"""UpdateAccountCredentials and the credential lifetime in ListAccounts, over a real server."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import timestamp_pb2

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from tests.integration.test_workspace_grpc import SLACK, Client, q, serving
from tests.support.status import decode

pytest_plugins = ["tests.fakes.fixtures"]

WRONG = "xoxp-wrong-token-0123456789"
REFRESH = "xoxe-1-refresh-secret-0123456789"
EXPIRES = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)


def _stamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _update(account_id: str, **credentials: object) -> apb.UpdateAccountCredentialsRequest:
    return apb.UpdateAccountCredentialsRequest(
        account_id=account_id, credentials=apb.Credentials(**credentials)  # type: ignore[arg-type]
    )


async def _connect(client: Client, token: str, **credentials: object) -> apb.ConnectAccountResponse:
    request = apb.ConnectAccountRequest(
        provider=SLACK, display_name="work",
        credentials=apb.Credentials(token=token, **credentials),  # type: ignore[arg-type]
    )
    reply: apb.ConnectAccountResponse = await client.accounts.ConnectAccount(
        request, metadata=client.metadata
    )
    return reply


async def _state(client: Client) -> pb.QueryState:
    statuses, _ = await client.run(pb.SearchWorkspaceRequest(queries=[q("deploy")]))
    return statuses[-1].state


async def _listed(client: Client) -> pb.ListAccountsResponse:
    reply: pb.ListAccountsResponse = await client.search.ListAccounts(
        pb.ListAccountsRequest(), metadata=client.metadata
    )
    return reply


async def test_update_brings_a_refused_account_back_with_its_id(
    fakes: FakeProviders, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fakes.slack.add_message("C1", "general", "100.000000", "deploy")
    async with serving(fakes, tmp_path) as client:
        account_id = (await _connect(client, WRONG)).account.account_id
        assert await _state(client) == pb.QUERY_STATE_NEEDS_RECONNECT  # invalid_auth
        (refused,) = (await _listed(client)).accounts
        assert refused.state == pb.ACCOUNT_STATE_NEEDS_RECONNECT

        reply = await client.accounts.UpdateAccountCredentials(
            _update(account_id, token=fakes.slack.token, refresh_token=REFRESH,
                    expire_time=_stamp(EXPIRES)),
            metadata=client.metadata,
        )
        assert reply.account.account_id == account_id
        assert reply.account.state == pb.ACCOUNT_STATE_CONNECTED
        assert reply.account.HasField("card")
        assert reply.account.refreshable
        assert reply.account.credentials_expire_time.ToDatetime(tzinfo=UTC) == EXPIRES

        listed = await _listed(client)
        (account,) = listed.accounts
        assert (account.account_id, account.state) == (account_id, pb.ACCOUNT_STATE_CONNECTED)
        assert account.create_time == refused.create_time
        assert account.refreshable
        assert account.credentials_expire_time.ToDatetime(tzinfo=UTC) == EXPIRES
        assert [card.provider for card in listed.guidance.cards] == [SLACK]
        assert await _state(client) == pb.QUERY_STATE_OK

        for secret in (fakes.slack.token, REFRESH, WRONG):
            for message in (reply, listed):
                assert secret.encode() not in message.SerializeToString()
            assert secret not in caplog.text


async def test_an_account_without_expiry_or_refresh_token_lists_neither(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    async with serving(fakes, tmp_path) as client:
        connected = await _connect(client, fakes.slack.token)
        assert not connected.account.HasField("credentials_expire_time")
        assert not connected.account.refreshable
        with_both = await _connect(client, fakes.slack.token, refresh_token=REFRESH,
                                   expire_time=_stamp(EXPIRES))
        assert with_both.account.refreshable
        by_id = {a.account_id: a for a in (await _listed(client)).accounts}
        plain = by_id[connected.account.account_id]
        assert not plain.HasField("credentials_expire_time")
        assert not plain.refreshable
        rich = by_id[with_both.account.account_id]
        assert rich.refreshable
        assert rich.credentials_expire_time.ToDatetime(tzinfo=UTC) == EXPIRES

        # Replacing erases what the new credentials do not carry.
        reply = await client.accounts.UpdateAccountCredentials(
            _update(with_both.account.account_id, token=fakes.slack.token),
            metadata=client.metadata,
        )
        assert not reply.account.refreshable
        assert not reply.account.HasField("credentials_expire_time")


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        (apb.UpdateAccountCredentialsRequest(), ["account_id", "credentials"]),
        (apb.UpdateAccountCredentialsRequest(account_id="acc_x"), ["credentials"]),
        (_update("", token="ok"), ["account_id"]),
        (_update("acc_x"), ["credentials.token"]),
        (_update("acc_x", token="has space"), ["credentials.token"]),
        (_update("acc_x", token="ok", refresh_token="bad refresh"), ["credentials.refresh_token"]),
        (_update("acc_x", token="ok", expire_time=timestamp_pb2.Timestamp(seconds=3600)),
         ["credentials.expire_time"]),
        (_update("acc_x", token="ok",
                 expire_time=timestamp_pb2.Timestamp(seconds=2**40)),  # out of Timestamp range
         ["credentials.expire_time"]),
        (_update("acc_x", token="ok", scopes=["a b"], refresh_token="r r"),
         ["credentials.scopes[0]", "credentials.refresh_token"]),
    ],
)
async def test_update_refuses_bad_input(
    fakes: FakeProviders, tmp_path: Path, request_: apb.UpdateAccountCredentialsRequest,
    fields: list[str],
) -> None:
    async with serving(fakes, tmp_path) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.accounts.UpdateAccountCredentials(request_, metadata=client.metadata)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert [field for field, _ in decode(caught.value).violations] == fields
        assert "bad refresh" not in str(caught.value)


async def test_update_finds_only_the_callers_accounts_and_needs_admin(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_message("C1", "general", "100.000000", "deploy")
    async with serving(fakes, tmp_path) as client:
        alice_account = await client.connect(fakes)
        bob = client.as_("bob-token")
        for caller, account_id in [(client, "acc_unknown"), (bob, alice_account)]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await caller.accounts.UpdateAccountCredentials(
                    _update(account_id, token=WRONG), metadata=caller.metadata
                )
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
            assert decode(caught.value).info.reason == "ACCOUNT_NOT_FOUND"  # type: ignore[union-attr]
        reader = client.as_("reader-token")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await reader.accounts.UpdateAccountCredentials(
                _update(alice_account, token=WRONG), metadata=reader.metadata
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert await _state(client) == pb.QUERY_STATE_OK  # alice's credentials untouched


async def test_an_expiry_in_the_past_is_taken(fakes: FakeProviders, tmp_path: Path) -> None:
    async with serving(fakes, tmp_path) as client:
        account_id = await client.connect(fakes)
        past = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
        reply = await client.accounts.UpdateAccountCredentials(
            _update(account_id, token=fakes.slack.token, expire_time=_stamp(past)),
            metadata=client.metadata,
        )
        assert reply.account.credentials_expire_time.ToDatetime(tzinfo=UTC) == past
