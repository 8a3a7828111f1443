"""The I/O floor of a workspace search: the server's CPU per search without its search logic.

A search's server CPU has two parts: the I/O any implementation in this process model pays
(the provider HTTP exchanges, their JSON decoded, the gRPC call and its stream messages) and
the search logic (planning, provider parsing, fusion, paging, statuses, cursors, deadlines,
budgets). The floor server measures the first alone. It answers SearchWorkspace by replaying
the provider requests the fakes read during one real search, in the same waves (a request
sent after an answer arrived is sent after its wave's answers), with the service's own HTTP
client (`service.workspace.http1`) and JSON decoding (`http_wire.loads`); then it sends the
stream messages the real server sent for that search. Its CPU per search beside the server's
says what the logic costs, and what a CPU target leaves for it.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from benchmarks.servers import ChildServer
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.api.workspace_wiring import parse_base_urls
from service.workspace.http1 import OriginPool
from service.workspace.http_wire import loads, origin

# Headers the replaying client writes itself (or that describe the fakes' side).
_OWN_HEADERS = frozenset({"host", "content-length", "connection", "user-agent"})
_DELIVERIES = (wpb.STATUS_DELIVERY_STREAMED, wpb.STATUS_DELIVERY_IN_PAGE)


@dataclass(frozen=True)
class Exchange:
    """One provider request as a fake read it."""

    provider: str
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    received: float

    @classmethod
    def from_json(cls, item: Sequence[Any]) -> Exchange:
        provider, method, target, headers, body, received = item
        kept = tuple((k, v) for k, v in headers if k not in _OWN_HEADERS)
        return cls(provider, method, target, kept, base64.b64decode(body), float(received))


def waves(exchanges: Sequence[Exchange], latency: float) -> list[list[Exchange]]:
    """Requests in arrival order, in waves: the fakes answer `latency` seconds after a request
    arrives, so a request read less than `latency` after the first of its wave cannot depend
    on an answer of it, and one read later may (it starts the next wave). On a busy machine a
    slow first wave may lend a request to the next one: a later replay, never an earlier."""
    ordered = sorted(exchanges, key=lambda e: e.received)
    split: list[list[Exchange]] = []
    for exchange in ordered:
        if not split or exchange.received - split[-1][0].received >= latency:
            split.append([])
        split[-1].append(exchange)
    return split


class FloorServer:
    """SearchWorkspace answered by replaying one recorded search (see the module doc)."""

    def __init__(self, recording: dict[str, Any], urls: str) -> None:
        exchanges = [Exchange.from_json(item) for item in recording["exchanges"]]
        self.waves = waves(exchanges, float(recording["latency"]))
        self.messages = {
            int(delivery): [wpb.SearchWorkspaceResponse.FromString(base64.b64decode(m))
                            for m in messages]
            for delivery, messages in recording["messages"].items()
        }
        self._pools = {
            provider.value: OriginPool(*origin(url), ssl_context=_no_tls,
                                       user_agent="fanout-floor")
            for provider, url in parse_base_urls(urls).items()
        }
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler("search.v1.WorkspaceSearchService", {
            "SearchWorkspace": grpc.unary_stream_rpc_method_handler(
                self._search, request_deserializer=wpb.SearchWorkspaceRequest.FromString,
                response_serializer=wpb.SearchWorkspaceResponse.SerializeToString)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop(0)
        for pool in self._pools.values():
            pool.close()

    async def _exchange(self, exchange: Exchange) -> Any:
        answer = await self._pools[exchange.provider].request(
            exchange.method, exchange.target, exchange.headers, exchange.body or None,
            cap=1 << 24)
        if answer.status != 200:
            raise RuntimeError(f"{exchange.provider} answered {answer.status} to a replay")
        if exchange.target.startswith("/batch/"):
            return answer.body  # multipart: the service reads its parts' JSON (cost ignored)
        return loads(answer.body)

    async def _search(self, request: wpb.SearchWorkspaceRequest, context: Any
                      ) -> AsyncIterator[wpb.SearchWorkspaceResponse]:
        for wave in self.waves:
            await asyncio.gather(*(self._exchange(exchange) for exchange in wave))
        delivery = request.status_delivery or wpb.STATUS_DELIVERY_STREAMED
        for message in self.messages[delivery]:
            yield message


def _no_tls() -> Any:
    raise RuntimeError("the floor replays plain-HTTP fakes only")


async def record(fakes: ChildServer, stub: Any, request: wpb.SearchWorkspaceRequest,
                 latency: float) -> dict[str, Any]:
    """One search in each delivery against the real server: the provider requests of the
    first (the fakes' log) and the stream messages of both. A search before them fills the
    server's caches (account lists, profiles) as in the measured series."""
    messages: dict[str, list[str]] = {}
    exchanges: list[Any] = []
    await _drain(stub, request)
    for delivery in _DELIVERIES:
        await fakes.take_exchanges()
        request.status_delivery = delivery
        sent = [m.SerializeToString() async for m in stub.SearchWorkspace(request, timeout=30)]
        messages[str(delivery)] = [base64.b64encode(m).decode() for m in sent]
        exchanges = exchanges or await fakes.take_exchanges()
    return {"exchanges": exchanges, "messages": messages, "latency": latency}


async def measure_floor(fakes: ChildServer, stub: Any, request: wpb.SearchWorkspaceRequest,
                        searches: int, work: Path, latency: float) -> dict[str, Any]:
    """Server CPU ms per search of the floor server, per delivery, with what it replayed."""
    recording = await record(fakes, stub, request, latency)
    path = work / "floor.json"
    await asyncio.to_thread(path.write_text, json.dumps(recording))
    floor = await ChildServer.spawn("--floor", str(path), fakes.info)
    cpu: dict[str, float] = {}
    try:
        async with grpc.aio.insecure_channel(floor.target) as channel:
            replay = wgrpc.WorkspaceSearchServiceStub(channel)
            for delivery in _DELIVERIES:
                request.status_delivery = delivery
                for _ in range(min(5, searches)):
                    await _drain(replay, request)
                before = floor.cpu_seconds()
                for _ in range(searches):
                    await _drain(replay, request)
                name = "in_page" if delivery == wpb.STATUS_DELIVERY_IN_PAGE else "streamed"
                cpu[name] = (floor.cpu_seconds() - before) * 1000 / max(1, searches)
    finally:
        await floor.close()
    shown = waves([Exchange.from_json(item) for item in recording["exchanges"]], latency)
    return {"cpu_ms_per_search": cpu, "exchanges": sum(map(len, shown)),
            "waves": [len(wave) for wave in shown]}


async def _drain(stub: Any, request: wpb.SearchWorkspaceRequest) -> None:
    async for _ in stub.SearchWorkspace(request, timeout=30):
        pass


async def serve_floor(path: Path, urls: str) -> FloorServer:
    """The floor server of a recording, started (for `benchmarks.serve --floor`)."""
    server = FloorServer(json.loads(await asyncio.to_thread(path.read_text)), urls)
    await server.start()
    return server
