"""Provider answers of the wrong shape, through the real server and channel: one real JSON
answer of a provider, changed at random (a node replaced by a value of another type, a key
dropped, a value wrapped in a list), served once in its place. The call always ends normally:
the query is OK or FAILED with a message, never INTERNAL; and an adapter that meets an
unexpected shape says so itself (never the fan-out's catch-all "failed unexpectedly")."""

from __future__ import annotations

import asyncio
import copy
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.fakes.suite import FakeProviders
from service.workspace.fanout import UNEXPECTED
from service.workspace.model import ProviderId
from tests.integration.test_workspace_grpc import serving
from tests.support.reliability.world import PROVIDERS, connect_all, queries_for, seed

pytest_plugins = ["tests.fakes.fixtures"]

WORD = "deploy"
SEEDS = range(24)
_ODD: tuple[Any, ...] = (None, 0, -1, 10**30, 1e308, True, "", "x", [], {}, [[[]]], {"a": {}},
                         "9" * 50, [None], "\u0000")


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found += _nodes(item, (*path, index))
    return found


def _mutate(data: Any, rng: random.Random) -> Any:
    """`data` with one to three random changes of shape."""
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_nodes(data)[1:] or [()])
        if not path:
            return rng.choice(_ODD)
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = rng.random()
        if action < 0.2 and isinstance(parent, dict):
            del parent[last]
        elif action < 0.35:
            parent[last] = [parent[last]]
        else:
            parent[last] = rng.choice(_ODD)
    return data


def _fetch(fakes: FakeProviders, provider: str, method: str, target: str,
           headers: dict[str, str], body: bytes) -> Any:
    """The fake's real JSON answer to a request the server sent."""
    url = fakes.of(ProviderId(provider)).base_url + target
    kept = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
    return httpx.request(method, url, content=body or None, headers=kept, timeout=10).json()


@pytest.mark.parametrize("seed_value", SEEDS)
async def test_an_answer_of_the_wrong_shape_fails_its_query_cleanly(
    fakes: FakeProviders, tmp_path: Path, seed_value: int
) -> None:
    rng = random.Random(seed_value)
    seed(fakes, 3)
    provider = list(PROVIDERS)[seed_value % len(PROVIDERS)]
    fake = fakes.of(ProviderId(provider))
    request = pb.SearchWorkspaceRequest(queries=queries_for(provider, (WORD,)), top_k=10)
    async with serving(fakes, tmp_path) as client:
        await connect_all(client.accounts, fakes, client.metadata)
        await client.run(request, seconds=30)  # warm: account lists cached, requests logged
        searched = [r for r in fake.log if "json" in r.headers.get("accept", "json")
                    and not r.path.startswith("/batch")][-1]
        original = await asyncio.to_thread(  # the fakes serve on this loop
            _fetch, fakes, provider, searched.method, searched.target, searched.headers,
            searched.body)
        served = fake.answer(_mutate(original, rng), path=searched.path, times=1)
        statuses, pages = await client.run(request, seconds=30)
    assert served.times == 0, "the changed answer was never asked for"
    assert statuses, "no status"
    for status in statuses:
        assert status.state in (pb.QUERY_STATE_OK, pb.QUERY_STATE_FAILED), status
        assert status.message != UNEXPECTED, f"{provider}: an adapter raised on a bad shape"
    assert len(pages) == 1

