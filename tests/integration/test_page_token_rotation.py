"""Rotating the page-token key without failing the tokens callers hold.

Page tokens and cursors are signed with SEARCH_PAGE_TOKEN_KEY, shared by every replica.
Changing it made every token in flight INVALID_ARGUMENT "token signature is invalid" (the
caller starts again and sees every result again), and during a rolling change replicas with
different keys refused each other's tokens. SEARCH_PAGE_TOKEN_PREVIOUS_KEYS lists keys whose
tokens are still accepted, while only the current key signs.
"""

from __future__ import annotations

import base64
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.support.server import channel_to, running_server

OLD = base64.b64encode(b"o" * 32).decode()
NEW = "a new key of at least sixteen characters"
DOCUMENTS = 12


def _request(pid: int, token: str = "") -> ps.SearchProjectsRequest:
    return ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]), text="alpha",
                                    mode=ps.SEARCH_MODE_FTS, page_size=5, page_token=token)


async def _page(channel: grpc.aio.Channel, pid: int, token: str = "") -> ps.ProjectSearchPage:
    search = ps_grpc.ProjectSearchServiceStub(channel)
    (message,) = [m async for m in search.SearchProjects(_request(pid, token), timeout=30)]
    return message.page


async def test_tokens_signed_with_a_previous_key_are_still_honoured(tmp_path: Path) -> None:
    env = {"SEARCH_EMBEDDER": "none", "SEARCH_PAGE_TOKEN_KEY": OLD}
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        index = index_pb2_grpc.IndexServiceStub(channel)
        created = await index.CreateProject(index_pb2.CreateProjectRequest(name="p"))
        pid = created.project.project_id
        await index.UpsertDocuments(iter([index_pb2.UpsertDocumentsRequest(
            project_id=pid, documents=[
                index_pb2.Document(kind="note", row_id=f"r{i:02d}", title=f"alpha {i}",
                                   body="alpha") for i in range(DOCUMENTS)])]), timeout=30)
        first = await _page(channel, pid)
        assert first.next_page_token
    rotated = env | {"SEARCH_PAGE_TOKEN_KEY": NEW, "SEARCH_PAGE_TOKEN_PREVIOUS_KEYS": f" {OLD} ,"}
    async with running_server(tmp_path, rotated) as app, channel_to(app) as channel:
        second = await _page(channel, pid, first.next_page_token)
        assert second.page_number == 2
        third = await _page(channel, pid, second.next_page_token)  # signed with the new key
        rows = [r.row_id for r in (*first.results, *second.results, *third.results)]
        assert sorted(rows) == [f"r{i:02d}" for i in range(DOCUMENTS)]
    only_new = env | {"SEARCH_PAGE_TOKEN_KEY": NEW}
    async with running_server(tmp_path, only_new) as app, channel_to(app) as channel:
        await _page(channel, pid, second.next_page_token)  # the new key's token
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _page(channel, pid, first.next_page_token)  # the old key is no longer listed
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in (caught.value.details() or "")


async def test_a_short_previous_key_is_a_settings_error(tmp_path: Path) -> None:
    from service.settings import SettingsError

    env = {"SEARCH_EMBEDDER": "none", "SEARCH_PAGE_TOKEN_PREVIOUS_KEYS": "short"}
    with pytest.raises(SettingsError, match="SEARCH_PAGE_TOKEN_PREVIOUS_KEYS"):
        async with running_server(tmp_path, env):
            pass
