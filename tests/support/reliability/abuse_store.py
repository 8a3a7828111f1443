"""Issue 17's write and plan cases against server children, both stores.

(8) a 500-document batch into a big project against one into an empty project, and another
tenant's searches beside concurrent batches (item 4); (9) DeleteProject racing upserts and
deletes of the same project (item 11); (10) a search with every filter kind at its request
limit in every mode (SQLite answered INTERNAL "VIEWs and/or subqueries nested too deep").
Each case reuses its integration test's helpers (tests/integration/
test_sqlite_upsert_cost_grpc.py, test_postgres_delete_project_grpc.py, test_store_filters.py)
and gives one `Row` of abuse.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import grpc
from google.protobuf import struct_pb2, timestamp_pb2

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as ipb_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from service.projects.request import MAX_FILTER_ITEMS, MAX_FILTER_VALUES, MAX_METADATA_FILTERS
from tests.integration import test_postgres_delete_project_grpc as race
from tests.integration import test_sqlite_upsert_cost_grpc as cost
from tests.integration import test_store_filters as filters
from tests.support.reliability.abuse import Row, _channel
from tests.support.reliability.process import served


async def upsert_cost(channel: grpc.aio.Channel, store: str, documents: int) -> Row:
    """(8) A batch into a project of `documents` against one into an empty project; the other
    tenant's FTS search beside `cost.STREAMS` concurrent batches."""
    index = ipb_grpc.IndexServiceStub(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    big = await cost._project(index, "alice", "big")
    empty = await cost._project(index, "alice", "empty")
    bob = await cost._project(index, "bob", "small")
    small = ipb.UpsertDocumentsRequest(project_id=bob, documents=[
        ipb.Document(kind="note", row_id="1", body="comet tail")])
    await index.UpsertDocuments(iter([small]), metadata=cost._auth("bob"), timeout=30)
    loaded = await cost._upsert(index, big, 0, documents, seconds=300)
    into_empty = await cost._upsert(index, empty, 0, cost.BATCH)
    into_big = await cost._upsert(index, big, documents, cost.BATCH)
    writes = [asyncio.create_task(
        cost._upsert(index, big, documents + cost.BATCH * (1 + n), cost.BATCH))
        for n in range(cost.STREAMS)]
    waits = [await cost._search_seconds(search, bob)]
    while not all(task.done() for task in writes):
        waits.append(await cost._search_seconds(search, bob))
    concurrent = await asyncio.gather(*writes)
    bound = max(5 * into_empty, 1.0)
    held = (into_big < bound and max(waits) < 1.0
            and max(concurrent) < cost.STREAMS * bound)
    return Row(f"upsert cost: {cost.BATCH}-document batch into {documents:,} documents", store,
               f"{into_big:.2f} s against {into_empty:.2f} s into an empty project "
               f"(x{into_big / into_empty:.1f}; loading the {documents:,}: {loaded:.1f} s); "
               f"beside {cost.STREAMS} concurrent batches (slowest {max(concurrent):.2f} s) "
               f"another tenant's {len(waits)} searches took at most {max(waits):.2f} s",
               "batch < max(5 x empty, 1 s); other tenant's searches < 1 s", held,
               {"documents": documents, "into_big_s": round(into_big, 3),
                "into_empty_s": round(into_empty, 3), "load_s": round(loaded, 1),
                "concurrent_batches_max_s": round(max(concurrent), 3),
                "other_tenant_searches": len(waits),
                "other_tenant_max_s": round(max(waits), 3)})


async def delete_beside_writes(channel: grpc.aio.Channel, store: str, rounds: int) -> Row:
    """(9) Rounds of DeleteProject racing `race.WRITERS` writers of the same project."""
    rng = random.Random(17)
    index = ipb_grpc.IndexServiceStub(channel)
    deletes: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    unavailable_without_retry = 0
    pids: list[int] = []
    for _ in range(rounds):
        created = await index.CreateProject(ipb.CreateProjectRequest(name="race"))
        pid = created.project.project_id
        pids.append(pid)
        await index.UpsertDocuments(race._documents(pid, list(range(race.DOCUMENTS)), 0),
                                    timeout=30)
        churned, deleted = await asyncio.gather(
            asyncio.gather(*(race._churn(index, pid, rng) for _ in range(race.WRITERS))),
            race._delete(index, pid, rng))
        deletes[deleted[0].name] += 1
        for code, retry in (outcome for outcomes in churned for outcome in outcomes):
            writes[code.name] += 1
            unavailable_without_retry += code is grpc.StatusCode.UNAVAILABLE and not retry
    listed = await index.ListProjects(ipb.ListProjectsRequest(page_size=1000))
    still_there = len(set(pids) & {p.project_id for p in listed.projects})
    clean = {code.name for code in race.CLEAN}
    held = (deletes == Counter({"OK": rounds}) and set(writes) <= clean
            and not unavailable_without_retry and not still_there)
    return Row(f"DeleteProject beside concurrent upserts and deletes ({rounds} rounds)", store,
               f"DeleteProject {dict(deletes)}; {race.WRITERS} writers' calls {dict(writes)}, "
               f"UNAVAILABLE without RetryInfo: {unavailable_without_retry}; "
               f"deleted projects still listed: {still_there}",
               "every DeleteProject OK; writes OK, NOT_FOUND or UNAVAILABLE with RetryInfo, "
               "no INTERNAL", held,
               {"rounds": rounds, "deletes": dict(deletes), "writes": dict(writes),
                "unavailable_without_retry": unavailable_without_retry,
                "still_listed": still_there})


def _stamp(year: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime(year, 1, 1, tzinfo=UTC))
    return stamp


_OPERATORS = {"contains_all": ps.METADATA_OPERATOR_CONTAINS_ALL,
              "in": ps.METADATA_OPERATOR_IN, "eq": ps.METADATA_OPERATOR_EQ}


def limit_filters() -> ps.ProjectSearchFilters:
    """test_every_filter_at_its_limit_still_plans's filters as a request: 100 kinds,
    categories and note types, a directory prefix, both time ranges and 20 metadata
    conditions of 100 values (one for eq)."""
    values = [struct_pb2.Value(string_value=f"v{j}") for j in range(MAX_FILTER_VALUES)]
    assert len(filters.LIMIT_METADATA_OPS) == MAX_METADATA_FILTERS
    return ps.ProjectSearchFilters(
        kinds=[*(f"kind{j}" for j in range(MAX_FILTER_ITEMS - 1)), "observation"],
        note_types=[f"t{j}" for j in range(MAX_FILTER_ITEMS)],
        categories=[f"c{j}" for j in range(MAX_FILTER_ITEMS)],
        directory_prefix="notes",
        metadata=[ps.MetadataFilter(path=f"m{i}.x", operator=_OPERATORS[op],
                                    values=values if op != "eq" else values[:1])
                  for i, op in enumerate(filters.LIMIT_METADATA_OPS)],
        create_time=cpb.TimeRange(start_time=_stamp(2000), end_time=_stamp(2100)),
        update_time=cpb.TimeRange(start_time=_stamp(2000), end_time=_stamp(2100)),
    )


def _filter_document(row_id: str, category: str) -> ipb.Document:
    """A document every filter keeps (category c7) or one that only the category drops."""
    meta = struct_pb2.Struct()
    for i, op in enumerate(filters.LIMIT_METADATA_OPS):
        if op == "contains_all":
            meta.get_or_create_struct(f"m{i}").get_or_create_list("x").extend(
                [f"v{j}" for j in range(MAX_FILTER_VALUES)])
        else:
            meta.get_or_create_struct(f"m{i}")["x"] = "v0"
    return ipb.Document(kind="observation", row_id=row_id, path=f"notes/{row_id}.md",
                        title="shared nebula", body="the shared nebula of 70803 el/1 東京",
                        category=category, note_type="T7", metadata=meta,
                        create_time=_stamp(2026), update_time=_stamp(2026))


async def filters_at_limit(channel: grpc.aio.Channel, store: str) -> Row:
    """(10) Every filter kind at its limit, in each mode and lexical query shape."""
    index = ipb_grpc.IndexServiceStub(channel)
    search = ps_grpc.ProjectSearchServiceStub(channel)
    pid = (await index.CreateProject(ipb.CreateProjectRequest(name="limits"))).project.project_id
    reply = await index.UpsertDocuments(iter([ipb.UpsertDocumentsRequest(
        project_id=pid, documents=[_filter_document("match", "c7"),
                                   _filter_document("decoy", "other")])]), timeout=30)
    assert reply.documents_created == 2, reply
    codes: Counter[str] = Counter()
    found: Counter[str] = Counter()  # per mode: searches that returned the matching document
    wrong: list[str] = []
    slowest: dict[str, float] = {}
    modes = {"FTS": ps.SEARCH_MODE_FTS, "VECTOR": ps.SEARCH_MODE_VECTOR,
             "HYBRID": ps.SEARCH_MODE_HYBRID}
    for name, mode in modes.items():
        for text in filters.LEXICAL_SHAPES:
            request = ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]),
                                               text=text, mode=mode, page_size=10,
                                               filters=limit_filters())
            started = time.monotonic()
            try:
                rows = [r.row_id async for m in search.SearchProjects(request, timeout=30)
                        for r in m.page.results]
            except grpc.aio.AioRpcError as error:
                codes[error.code().name] += 1
                wrong.append(f"{name} {text!r}: {error.code().name} {error.details()}"[:200])
                continue
            finally:
                slowest[name] = max(slowest.get(name, 0.0), time.monotonic() - started)
            codes["OK"] += 1
            found[name] += rows == ["match"]
            if set(rows) - {"match"}:
                wrong.append(f"{name} {text!r}: returned {rows}")
    searches = len(modes) * len(filters.LEXICAL_SHAPES)
    held = codes == Counter({"OK": searches}) and not wrong and found["VECTOR"] == len(
        filters.LEXICAL_SHAPES)
    return Row("every filter at its request limit (FTS, VECTOR, HYBRID)", store,
               f"{searches} searches ({len(filters.LEXICAL_SHAPES)} query shapes per mode): "
               f"{dict(codes)}; the one document every filter keeps found by "
               f"{', '.join(f'{m} {found[m]}' for m in modes)}; slowest "
               f"{', '.join(f'{m} {slowest[m]:.2f} s' for m in modes)}; "
               f"wrong: {wrong or 'none'}",
               "OK in every mode, no INTERNAL; only the document every filter keeps", held,
               {"searches": searches, "codes": dict(codes),
                "found": {m: found[m] for m in modes},
                "slowest_s": {m: round(slowest[m], 3) for m in modes}, "wrong": wrong})


async def write_cases(
    workdir: Path, store: str, env: dict[str, str], *, documents: int, rounds: int
) -> list[Row]:
    """Cases 8, 9 and 10 on one store (two server children)."""
    tenants = env | {"SEARCH_EMBEDDER": "none", "SEARCH_AUTH_TOKENS": cost.AUTH}
    async with served(workdir / f"{store}-upserts", tenants) as server, \
            _channel(server.target) as channel:
        rows = [await upsert_cost(channel, store, documents)]
    embedded = env | {"SEARCH_EMBEDDER": "deterministic"}
    async with served(workdir / f"{store}-writes", embedded) as server, \
            _channel(server.target) as channel:
        rows += [await delete_beside_writes(channel, store, rounds),
                 await filters_at_limit(channel, store)]
    return rows
