"""The fakes' request log is bounded: a demo or benchmark server answers requests for hours."""

from __future__ import annotations

import httpx
import pytest

from service.fakes import server as fake_server
from service.fakes.server import FakeHttpServer, Request, Response


async def _ok(request: Request) -> Response:
    return Response.json({"path": request.path})


async def test_the_log_keeps_the_most_recent_requests_and_the_counts_keep_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fake_server, "LOG_LIMIT", 3)
    fake = FakeHttpServer(_ok)
    await fake.start()
    try:
        async with httpx.AsyncClient(base_url=fake.base_url) as client:
            for number in range(5):
                answer = await client.get(f"/items/{number}")
                assert answer.json() == {"path": f"/items/{number}"}
        assert [request.path for request in fake.log] == ["/items/2", "/items/3", "/items/4"]
        assert sum(fake.requests.values()) == 5
        assert fake.served == 5
        fake.reset()
        assert not fake.log
        assert not fake.requests
        assert fake.served == 0
    finally:
        await fake.stop()
