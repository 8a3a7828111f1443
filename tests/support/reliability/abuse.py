"""Issue 17's denial-of-service and hostile-input cases against a server child, both stores.

Each case reuses its integration test's helpers (tests/integration/test_costly_query.py,
test_slow_readers.py, test_big_responses.py, test_nul_strings.py) and gives one row: what
was measured, the promise and whether it held. The workspace cases (the memo, hostile
provider numbers) are in abuse_workspace.py, the write and plan cases (upsert cost,
DeleteProject beside writes, every filter at its limit) in abuse_store.py;
`python -m benchmarks.reliability abuse` runs them all.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as ipb_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from service.indexing.documents import MAX_METADATA_DEPTH
from tests.integration import test_big_responses as big
from tests.integration import test_costly_query as costly
from tests.integration import test_nul_strings as nul
from tests.integration import test_slow_readers as slow
from tests.support.reliability.process import served
from tests.support.status import decode

MIB = 1024 * 1024
DEEP_LEVELS = 32  # the undecodable metadata


@dataclass(frozen=True)
class Row:
    """One case on one store: the measured figure, the promise, whether it held."""

    case: str
    store: str
    figure: str
    promise: str
    held: bool
    data: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@asynccontextmanager
async def _channel(target: str) -> AsyncIterator[grpc.aio.Channel]:
    options = [("grpc.max_receive_message_length", 64 * MIB)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        yield channel


async def costly_query(channel: grpc.aio.Channel, store: str) -> Row:
    """(1) Four cancelled copies of a costly query, then another search's delay."""
    index = ipb_grpc.IndexServiceStub(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    pid = (await index.CreateProject(ipb.CreateProjectRequest(name="costly"))).project.project_id
    await costly._index(index, pid)
    baseline = await costly._timed(search, pid)
    outcome, alone = await _costly_alone(search, pid)
    calls = [search.SearchProjects(costly._request(pid, costly.COSTLY), timeout=600)
             for _ in range(4)]  # as many as SQLite has reader threads
    readers = [asyncio.ensure_future(call.read()) for call in calls]
    await asyncio.sleep(0.5)
    for call in calls:
        call.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    delay = await costly._timed(search, pid) - baseline
    return Row("costly query: 4 cancelled copies (budget raised)", store,
               f"other search delayed {delay:.2f} s (alone {baseline:.2f} s; one costly copy "
               f"uncancelled: {outcome} after {alone:.1f} s)",
               "delayed < 1 s", delay < 1.0,
               {"delay_s": round(delay, 3), "baseline_s": round(baseline, 3),
                "costly_alone_s": round(alone, 2), "costly_alone": outcome})


async def _costly_alone(
    search: ps_grpc.ProjectSearchServiceAsyncStub, pid: int
) -> tuple[str, float]:
    """How one costly copy ends with a 5 s deadline, and when."""
    started = time.monotonic()
    try:
        async for _ in search.SearchProjects(costly._request(pid, costly.COSTLY), timeout=5):
            pass
    except grpc.aio.AioRpcError as error:
        return error.code().name, time.monotonic() - started
    return "OK", time.monotonic() - started


async def unread_streams(
    target: str, rss: Callable[[], int], store: str, streams: int
) -> Row:
    """(2) `streams` never-read SearchProjects streams: RSS growth, when others are served."""
    async with slow._channel(target, window_grows=False) as alice, slow._channel(target) as bob:
        alice_project = await slow._project(alice, "alice", slow.DOCUMENTS)
        bob_project = await slow._project(bob, "bob", 1)
        before = await slow._bob_searches(bob, bob_project)
        baseline = rss()
        stub = ps_grpc.ProjectSearchServiceStub(alice)
        started = time.monotonic()
        calls = [stub.SearchProjects(slow._search(alice_project), metadata=slow._auth("alice"))
                 for _ in range(streams)]
        for call in calls:
            await call.initial_metadata()
        peak, served_after = rss(), None
        while_held = await slow._bob_searches(bob, bob_project)
        while time.monotonic() - started < slow.WRITE_TIMEOUT + 10:
            peak = max(peak, rss())
            if await slow._bob_searches(bob, bob_project) == grpc.StatusCode.OK:
                served_after = time.monotonic() - started
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        peak = max(peak, rss())
        for call in calls:
            call.cancel()
    grown = (peak - baseline) / MIB
    limit = slow.WRITE_TIMEOUT + 3
    held = (before == grpc.StatusCode.OK and grown < slow.RSS_BOUND_MB
            and served_after is not None and served_after < limit)
    waited = "never" if served_after is None else f"after {served_after:.1f} s"
    return Row(f"{streams} never-read streams (100 x 60 KB pages)", store,
               f"RSS +{grown:.0f} MB; another tenant {while_held.name} while the streams "
               f"held their slots, served {waited}",
               f"RSS < +{slow.RSS_BOUND_MB} MB; served within the {slow.WRITE_TIMEOUT:g} s "
               "write timeout + 3 s", held,
               {"streams": streams, "rss_growth_mib": round(grown, 1),
                "while_held": while_held.name,
                "served_after_s": None if served_after is None else round(served_after, 2)})


async def big_responses(channel: grpc.aio.Channel, store: str) -> Row:
    """(4) page_size 1000 over 60 KB documents: pages cut by bytes, nothing skipped."""
    pid = await big._corpus(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    seen: list[str] = []
    largest, pages, token, codes = 0, 0, "", Counter[str]()
    while pages < 4 * big.DOCUMENTS:
        request = ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]),
                                           text="alpha", mode=ps.SEARCH_MODE_FTS,
                                           page_size=1000, page_token=token)
        try:
            messages = [m async for m in search.SearchProjects(request, timeout=60)]
        except grpc.aio.AioRpcError as error:
            codes[error.code().name] += 1
            break
        pages += 1
        largest = max(largest, *(m.ByteSize() for m in messages))
        page = messages[-1].page
        seen += [r.row_id for m in messages for r in m.page.results]
        if not page.has_more:
            break
        token = page.next_page_token
    complete = sorted(seen) == [f"r{i:03d}" for i in range(big.DOCUMENTS)]
    held = not codes and complete and pages > 1 and largest <= big.LIMIT
    return Row("big responses: page_size 1000 x 60 KB metadata", store,
               f"{pages} pages of at most {largest / 1024:,.0f} KiB (limit "
               f"{big.LIMIT / 1024:,.0f} KiB), {len(seen)} of {big.DOCUMENTS} results, "
               f"errors: {dict(codes) or 'none'}",
               "cut by bytes, nothing skipped, no error", held,
               {"pages": pages, "largest_message_bytes": largest, "results": len(seen),
                "errors": dict(codes)})


def _nested(levels: int) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    inner = meta
    for _ in range(levels - 1):
        inner = inner.get_or_create_struct("d")
    inner["leaf"] = "x"
    return meta


async def deep_metadata(channel: grpc.aio.Channel, store: str) -> Row:
    """(5) Metadata 32 objects deep is refused; at the limit it stays searchable."""
    index = ipb_grpc.IndexServiceStub(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    pid = (await index.CreateProject(ipb.CreateProjectRequest(name="deep"))).project.project_id

    async def messages() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
        yield ipb.UpsertDocumentsRequest(project_id=pid, documents=[
            ipb.Document(kind="note", row_id="deep", body="gamma deep",
                         metadata=_nested(DEEP_LEVELS)),
            ipb.Document(kind="note", row_id="limit", body="gamma limit",
                         metadata=_nested(MAX_METADATA_DEPTH))])

    reply = await index.UpsertDocuments(messages(), timeout=30)
    rejected = [r.field for r in reply.results if r.outcome == ipb.DOCUMENT_OUTCOME_REJECTED]
    request = ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]), text="gamma",
                                       mode=ps.SEARCH_MODE_FTS, page_size=10)
    try:
        found = [r.row_id async for m in search.SearchProjects(request, timeout=30)
                 for r in m.page.results]
        outcome = "OK"
    except grpc.aio.AioRpcError as error:
        found, outcome = [], error.code().name
    held = rejected == ["messages[0].documents[0].metadata"] and found == ["limit"]
    return Row(f"deep metadata ({DEEP_LEVELS} levels)", store,
               f"{DEEP_LEVELS} levels rejected at {rejected or 'nothing'}; "
               f"{MAX_METADATA_DEPTH} levels stored, search {outcome} with {found}",
               f"refused; {MAX_METADATA_DEPTH} levels decodable", held,
               {"rejected": rejected, "search": outcome, "found": found})


async def nul_strings(channel: grpc.aio.Channel, store: str) -> Row:
    """(6) U+0000 in every string field of test_nul_strings: INVALID_ARGUMENT, never INTERNAL."""
    index = ipb_grpc.IndexServiceStub(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    accounts = apb_grpc.AccountServiceStub(channel)
    codes, wrong = Counter[str](), []

    async def expect(call: Any, field: str) -> None:
        try:
            await nul._finish(call)
        except grpc.aio.AioRpcError as error:
            decoded = decode(error)
            codes[error.code().name] += 1
            if decoded.code != grpc.StatusCode.INVALID_ARGUMENT or [
                    f for f, _ in decoded.violations] != [field]:
                wrong.append(f"{field}: {error.code().name}")
            return
        codes["OK"] += 1
        wrong.append(f"{field}: accepted")

    await expect(index.CreateProject(ipb.CreateProjectRequest(name=nul.NUL)), "name")
    await expect(index.CreateProject(ipb.CreateProjectRequest(name="p", external_id=nul.NUL)),
                 "external_id")
    pid = (await index.CreateProject(ipb.CreateProjectRequest(name="nul"))).project.project_id

    async def messages() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
        yield ipb.UpsertDocumentsRequest(project_id=pid, documents=[
            ipb.Document(kind="note", row_id="ok", body="alpha fine"),
            ipb.Document(kind="note", row_id=nul.NUL, body="alpha"),
            ipb.Document(kind="note", row_id="t", title=nul.NUL, body="alpha"),
            ipb.Document(kind="note", row_id="m", body="alpha", metadata=nul._meta(nul.NUL))])

    reply = await index.UpsertDocuments(messages(), timeout=30)
    if (reply.documents_created, reply.documents_rejected) != (1, 3):
        wrong.append(f"upsert: {reply.documents_created} created, "
                     f"{reply.documents_rejected} rejected")
    await expect(index.DeleteDocuments(ipb.DeleteDocumentsRequest(
        project_id=pid, keys=[ipb.DocumentKey(kind="note", row_id=nul.NUL)])), "keys[0].row_id")
    for template, field in nul.SEARCHES:
        request = ps.SearchProjectsRequest()
        request.CopyFrom(template)
        request.scope.project_ids[:] = [pid]
        await expect(search.SearchProjects(request, timeout=30), field)
    await expect(accounts.DisconnectAccount(apb.DisconnectAccountRequest(account_id=nul.NUL)),
                 "account_id")
    entry_points = sum(codes.values()) + 3
    return Row("NUL (U+0000) in every request string field", store,
               f"{entry_points} entry points: {dict(codes)}, 3 of 3 upserted documents "
               f"rejected alone; wrong: {wrong or 'none'}",
               "INVALID_ARGUMENT naming the field (per document in upserts), no INTERNAL",
               not wrong and "INTERNAL" not in codes,
               {"entry_points": entry_points, "codes": dict(codes), "wrong": wrong})


async def store_cases(workdir: Path, store: str, env: dict[str, str], streams: int) -> list[Row]:
    """Cases 1, 2, 4, 5 and 6 on one store (two server children)."""
    general = env | {"SEARCH_EMBEDDER": "none", "SEARCH_MAX_MESSAGE_BYTES": str(big.LIMIT),
                     **costly.RAISED}
    async with served(workdir / f"{store}-general", general) as server, \
            _channel(server.target) as channel:
        rows = [await costly_query(channel, store), await big_responses(channel, store),
                await deep_metadata(channel, store), await nul_strings(channel, store)]
    streaming = env | {
        "SEARCH_EMBEDDER": "none",
        "SEARCH_AUTH_TOKENS": slow.AUTH,
        "SEARCH_MAX_CONCURRENT_STREAMS": str(max(streams, slow.SLOTS)),
        "SEARCH_STREAM_WRITE_TIMEOUT": str(slow.WRITE_TIMEOUT),
        "SEARCH_STALLED_STREAM_BYTES": str(slow.STALLED_BUDGET),
        "SEARCH_STREAM_MESSAGES_PER_TENANT": str(slow.MESSAGES_PER_TENANT),
    }
    async with served(workdir / f"{store}-streams", streaming) as server:
        rows.insert(1, await unread_streams(server.target, server.rss_bytes, store, streams))
    return rows


def rows_summary(rows: Sequence[Row]) -> dict[str, Any]:
    """JSON-ready figures of a run."""
    return {"rows": [row.summary() for row in rows],
            "cases": len(rows), "held": sum(row.held for row in rows)}
