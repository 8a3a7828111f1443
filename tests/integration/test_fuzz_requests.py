"""Property-based bad input over every request message of every RPC, through the real server.

Strategies are derived from the request descriptors (every field, recursively), with values
that matter to this service mixed in: huge and negative numbers, NaN and infinities, out of
range timestamps, long and odd text, real and other-tenant project and account ids, real page
tokens and cursors, and mutations of them. Only the documented client-error codes may come
back (never INTERNAL, UNKNOWN or UNAVAILABLE), every error carries its ErrorInfo, and the
server stays healthy. Hypothesis runs in a worker thread on a blocking channel while the
server and the fake providers keep serving on the test loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pool, message_factory, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from search_client.pb.search.v1 import (
    accounts_pb2,
    accounts_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
)
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.suite import FakeProviders
from service.server import SERVICES
from tests.support.reliability.load import seed_corpus
from tests.support.reliability.world import connect_all, seed, server_env
from tests.support.server import running_server
from tests.support.status import decode

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))  # raise it for a longer hunt
ALICE, BOB = "alice-fuzz-token", "bob-fuzz-token"
AUTH = ",".join(
    f"{hashlib.sha256(t.encode()).hexdigest()}:{tenant}:admin"
    for t, tenant in ((ALICE, "alice"), (BOB, "bob"))
)
TRAILER_BYTES = 6 * 1024
BASE_ALLOWED = frozenset({
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.NOT_FOUND,
})
EXTRA_ALLOWED = {
    "CreateProject": {grpc.StatusCode.ALREADY_EXISTS},
    "SearchProjects": {grpc.StatusCode.FAILED_PRECONDITION},  # documented capability errors
}
INT_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
}
EDGE_INTS = (0, 1, -1, 2, 4, 5, 10, 11, 32, 33, 50, 51, 100, 500, 501, 1000, 1001, 10**6,
             2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63))
EDGE_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1.0000001, 2.0, 1e308, -1e308, 5e-324,
               float("inf"), float("-inf"), float("nan"))
ODD_TEXT = ("", " ", "\t\n", "x" * 2001, "é" * 300, "a" * 65, "NOTE", "note", "a/../b", "./x/",
            "\x00", "\u202e", "ü" * 257, '"unterminated', "a AND OR NOT", "*", "x" * 5000,
            "repo:acme/app", "in:#general", "drive:abc", "a..b", "owner.team")
BASE_URLS = ("https://127.0.0.1", "https://10.1.2.3/api", "https://[::1]:8443", "http://a.b",
             "https://user:pw@example.test", "https://2130706433", "ftp://x", "https://",
             "https://169.254.169.254/latest", "https://localhost", "https://[::ffff:10.0.0.1]")


@dataclass
class Pools:
    """Real values from the seeded world (alice's and bob's), for strategies to reuse."""

    project_ids: list[int] = field(default_factory=list)
    account_ids: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)


@dataclass
class FuzzWorld:
    """The running server's target and the pools."""

    target: str
    pools: Pools


def _bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


async def _tokens(channel: grpc.aio.Channel, ids: list[int], token: str) -> list[str]:
    meta = _bearer(token)
    index = index_pb2_grpc.IndexServiceStub(channel)
    found = [(await index.ListProjects(index_pb2.ListProjectsRequest(page_size=1),
                                       metadata=meta)).next_page_token]
    request = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(project_ids=ids), text="nebula",
                                        page_size=2, mode=ppb.SEARCH_MODE_HYBRID)
    found += [m.page.next_page_token async for m in pgrpc.ProjectSearchServiceStub(channel)
              .SearchProjects(request, metadata=meta)]
    query = wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="deploy")
    search = wgrpc.WorkspaceSearchServiceStub(channel).SearchWorkspace(
        wpb.SearchWorkspaceRequest(queries=[query], top_k=2), metadata=meta
    )
    async for message in search:
        found.append(message.page.next_page_token or message.query_status.next_cursor)
    return [t for t in found if t]


async def serve_world(
    fake_servers: FakeProviders,
    tmp_path_factory: pytest.TempPathFactory,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[FuzzWorld]:
    """A server with two tenants' projects, documents, accounts and page tokens (on the
    store `extra_env` names, SQLite by default)."""
    fake_servers.reset()
    seed(fake_servers)
    env = server_env(fake_servers) | {"SEARCH_AUTH_TOKENS": AUTH,
                                      "SEARCH_PROVIDER_REQUEST_TIMEOUT": "1.0"} | (extra_env or {})
    async with running_server(tmp_path_factory.mktemp("fuzz"), env) as app:
        pools = Pools()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            accounts = accounts_pb2_grpc.AccountServiceStub(channel)
            for token in (ALICE, BOB):
                meta = _bearer(token)
                pools.account_ids += (await connect_all(accounts, fake_servers, meta)).values()
                ids = await seed_corpus(channel, projects=2, documents=12, metadata=meta)
                pools.project_ids += ids
                pools.tokens += await _tokens(channel, ids, token)
        yield FuzzWorld(f"127.0.0.1:{app.port}", pools)
    fake_servers.reset()


world = pytest_asyncio.fixture(scope="module", name="world")(serve_world)


# ---- strategies ----------------------------------------------------------------------------

def _mutations(tokens: list[str]) -> st.SearchStrategy[str]:
    @st.composite
    def mutate(draw: st.DrawFn) -> str:
        token = draw(st.sampled_from(tokens))
        position = draw(st.integers(0, len(token) - 1))
        how = draw(st.sampled_from(("replace", "delete", "truncate", "append", "swap")))
        if how == "replace":
            return token[:position] + draw(st.characters(codec="ascii")) + token[position + 1:]
        if how == "delete":
            return token[:position] + token[position + 1:]
        if how == "truncate":
            return token[:position]
        if how == "append":
            return token + draw(st.text(max_size=8))
        other = draw(st.sampled_from(tokens))
        return token.partition(".")[0] + "." + other.partition(".")[2]

    return mutate()


def _strings(name: str, pools: Pools) -> st.SearchStrategy[str]:
    plain = st.text(max_size=40) | st.sampled_from(ODD_TEXT)
    if name in ("page_token", "cursor"):
        forged = st.builds(lambda raw: base64.urlsafe_b64encode(raw).decode() + ".AAAA",
                           st.binary(max_size=80))
        return st.sampled_from(pools.tokens) | _mutations(pools.tokens) | forged | plain
    if name == "account_id":
        return st.sampled_from(pools.account_ids) | plain
    if name == "base_url":
        return st.sampled_from(BASE_URLS) | plain
    if name == "body":
        return plain | st.sampled_from(("b" * ((1 << 20) + 1), "## h\n\n" * 3000))
    return plain


def _ints(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy[int]:
    low, high = INT_BOUNDS.get(f.type, (-(2**63), 2**63 - 1))
    numbers = st.integers(low, high) | st.sampled_from(
        [n for n in EDGE_INTS if low <= n <= high]
    )
    if f.name in ("project_id", "project_ids"):
        return st.sampled_from(pools.project_ids) | numbers
    return numbers


def _timestamps() -> st.SearchStrategy[timestamp_pb2.Timestamp]:
    seconds = st.integers(-(2**40), 2**40) | st.sampled_from((0, -62135596801, 253402300800))
    return st.builds(lambda s, n: timestamp_pb2.Timestamp(seconds=s, nanos=n), seconds,
                     st.integers(-5, 10**9 + 5) | st.just(0))


def _json() -> st.SearchStrategy[Any]:
    scalars = (st.none() | st.booleans() | st.floats() | st.sampled_from(EDGE_FLOATS)
               | st.text(max_size=20) | st.integers(-(2**60), 2**60))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    holder = struct_pb2.Struct()
    holder.update(data)
    return holder


def _field(f: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy[Any]:
    if f.message_type is not None:
        name = f.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return _timestamps()
        if name == "google.protobuf.Struct":
            return st.dictionaries(st.text(max_size=12), _json(), max_size=4).map(_struct)
        if name == "google.protobuf.Value":
            return _json().map(lambda data: _struct({"v": data}).fields["v"])
        return messages(f.message_type, pools, depth + 1)
    if f.type == FieldDescriptor.TYPE_STRING:
        return _strings(f.name, pools)
    if f.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if f.type == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32) | st.sampled_from(EDGE_FLOATS)
    if f.type == FieldDescriptor.TYPE_DOUBLE:
        return st.floats() | st.sampled_from(EDGE_FLOATS)
    if f.type == FieldDescriptor.TYPE_ENUM:
        return st.integers(-3, 12)
    return _ints(f, pools)


def _nested(f: Any) -> bool:
    """A field holding one of the contract's own messages (not a well-known type)."""
    return f.message_type is not None and not f.message_type.full_name.startswith(
        "google.protobuf."
    )


# Request limits sit at 20 (metadata conditions, workspace queries: 32) and 100 (values of
# one condition, scope projects): one repeated field in ten is drawn around them, so every
# limit is met from both sides (the fuzzers once drew at most 6 and never reached the
# SQLite statement that failed past SQLite's expansion limit at 20 conditions).
LONG_LISTS = ((18, 22), (30, 34), (98, 102))


def _fill(draw: st.DrawFn, msg: Message, f: FieldDescriptor, pools: Pools, depth: int) -> None:
    """Give field `f` of `msg` a random value (repeated fields: 0..6 of them, sometimes
    as many as a request limit, give or take two)."""
    strategy = _field(f, pools, depth)
    if f.is_repeated:
        size = (0, 6)
        if draw(st.integers(0, 9)) == 0:
            size = draw(st.sampled_from(LONG_LISTS[:2] if _nested(f) else LONG_LISTS))
        items = st.lists(strategy, min_size=size[0], max_size=size[1])
        getattr(msg, f.name).extend(draw(items))
    elif f.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(msg, f.name).CopyFrom(draw(strategy))
    else:
        setattr(msg, f.name, draw(strategy))


def messages(descriptor: Descriptor, pools: Pools, depth: int = 0) -> st.SearchStrategy[Message]:
    """Random instances of a message: each field set or not."""
    cls = message_factory.GetMessageClass(descriptor)
    if depth > 4:
        return st.just(cls())

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        msg = cls()
        for f in descriptor.fields:
            if draw(st.booleans()):
                _fill(draw, msg, f, pools, depth)
        return msg

    return build()


def near(template: Message, pools: Pools) -> st.SearchStrategy[Message]:
    """A valid request with some fields (at any depth) cleared or replaced by random ones."""

    def mutate(draw: st.DrawFn, msg: Message, depth: int) -> None:
        fields: list[Any] = list(msg.DESCRIPTOR.fields)
        for f in fields:
            roll = draw(st.integers(0, 19))  # about one field in ten is damaged
            nested = _nested(f)
            if roll == 0:
                msg.ClearField(f.name)
            elif roll == 1:
                msg.ClearField(f.name)
                _fill(draw, msg, f, pools, depth)
            elif nested and f.is_repeated:
                for item in getattr(msg, f.name):
                    mutate(draw, item, depth + 1)
            elif nested and msg.HasField(f.name):
                mutate(draw, getattr(msg, f.name), depth + 1)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        msg = type(template)()
        msg.CopyFrom(template)
        mutate(draw, msg, 0)
        return msg

    return build()


def templates(pools: Pools) -> dict[str, list[Message]]:
    """Valid requests per method, built from the seeded world (alice's side)."""
    mine = pools.project_ids[:2]
    meta = struct_pb2.Struct()
    meta.update({"status": "open", "n": 3})
    doc = index_pb2.Document(kind="note", row_id="f1", title="t", path="a/b.md", body="nebula",
                             metadata=meta, create_time=timestamp_pb2.Timestamp(seconds=10**9))
    slack = [wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text=w) for w in ("deploy", "budget")]
    gh = wpb.NativeQuery(provider=cpb.PROVIDER_GITHUB, text="deploy", kind=wpb.QUERY_KIND_ISSUES)
    window = wpb.NativeQuery(provider=cpb.PROVIDER_GMAIL, text="budget", time_range=cpb.TimeRange(
        start_time=timestamp_pb2.Timestamp(seconds=0)))
    filters = ppb.ProjectSearchFilters(kinds=["note"], directory_prefix="notes", metadata=[
        ppb.MetadataFilter(path="status", operator=ppb.METADATA_OPERATOR_EQ,
                           values=[struct_pb2.Value(string_value="open")])])
    return {
        "SearchProjects": [ppb.SearchProjectsRequest(
            scope=ppb.ProjectScope(project_ids=mine), text="nebula orbit", mode=mode,
            filters=filters, page_size=3, max_pages=2, include_chunks=True)
            for mode in (ppb.SEARCH_MODE_FTS, ppb.SEARCH_MODE_VECTOR, ppb.SEARCH_MODE_HYBRID)],
        "SearchWorkspace": [wpb.SearchWorkspaceRequest(queries=[*slack, gh, window], top_k=5,
                                                       max_pages=2)],
        "UpsertDocuments": [index_pb2.UpsertDocumentsRequest(project_id=mine[0], documents=[doc])],
        "DeleteDocuments": [index_pb2.DeleteDocumentsRequest(
            project_id=mine[0], keys=[index_pb2.DocumentKey(kind="note", row_id="f1")])],
        "GetIndexStatus": [index_pb2.GetIndexStatusRequest(project_ids=mine)],
        "ListProjects": [index_pb2.ListProjectsRequest(page_size=1, page_token=pools.tokens[0])],
        "CreateProject": [index_pb2.CreateProjectRequest(external_id="fz", name="fz")],
        "ConnectAccount": [accounts_pb2.ConnectAccountRequest(
            provider=provider, display_name="gh", base_url=url,
            credentials=accounts_pb2.Credentials(token="tok-x", username="u"))
            for provider, url in ((cpb.PROVIDER_GITHUB, "https://127.0.0.1"),
                                  (cpb.PROVIDER_SLACK, ""), (cpb.PROVIDER_JIRA, ""))],
        "UpdateAccountCredentials": [accounts_pb2.UpdateAccountCredentialsRequest(
            account_id=pools.account_ids[0], credentials=accounts_pb2.Credentials(
                token="tok-x", scopes=["search:read.public"], refresh_token="ref-x",
                expire_time=timestamp_pb2.Timestamp(seconds=2 * 10**9)))],
        "ListAccounts": [wpb.ListAccountsRequest(provider=cpb.PROVIDER_SLACK)],
        "DeleteProject": [index_pb2.DeleteProjectRequest(project_id=mine[-1])],
        "DisconnectAccount": [accounts_pb2.DisconnectAccountRequest(
            account_id=pools.account_ids[0])],
    }


def requests(method: MethodDescriptor, pools: Pools) -> st.SearchStrategy[Any]:
    """Fully random messages, and valid templates with random damage."""
    single = messages(method.input_type, pools) | st.sampled_from(
        templates(pools)[method.name]
    ).flatmap(lambda t: near(t, pools))
    return st.lists(single, min_size=1, max_size=3) if method.client_streaming else single


# ---- calls ---------------------------------------------------------------------------------

DESTRUCTIVE = ("DeleteProject", "DisconnectAccount")  # run last: they erase seeded data


def all_methods() -> list[MethodDescriptor]:
    """Every RPC of the search.v1 contract (destructive ones last)."""
    pool = descriptor_pool.Default()
    found = [m for name in SERVICES for m in pool.FindServiceByName(name).methods]
    return sorted(found, key=lambda m: m.name in DESTRUCTIVE)


def invoke(
    channel: grpc.Channel, method: MethodDescriptor, request: Message | list[Message],
    token: str = ALICE,
) -> grpc.RpcError | None:
    """Call any method with a request (a list of them for client streaming); the error."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    reply = message_factory.GetMessageClass(method.output_type)
    options: dict[str, Any] = {"timeout": 30, "metadata": _bearer(token)}
    serialize = message_factory.GetMessageClass(method.input_type).SerializeToString
    try:
        if isinstance(request, list):
            channel.stream_unary(path, serialize, reply.FromString)(iter(request), **options)
        elif method.server_streaming:
            for _ in channel.unary_stream(path, serialize, reply.FromString)(request, **options):
                pass
        else:
            channel.unary_unary(path, serialize, reply.FromString)(request, **options)
    except grpc.RpcError as error:
        return error
    return None


def check_outcome(method: MethodDescriptor, error: grpc.RpcError | None) -> None:
    """Only documented client errors, each with an ErrorInfo of this service."""
    if error is None:
        event("OK")
        return
    code = error.code()
    event(code.name)
    allowed = BASE_ALLOWED | EXTRA_ALLOWED.get(method.name, set())
    assert code in allowed, f"{method.name}: {code.name} {error.details()}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (
        error.details() or ""
    ):
        return  # the transport's own message size check: no service details to carry
    decoded = decode(error)
    assert decoded.info is not None, decoded
    assert decoded.info.domain == "search.v1", decoded
    # Far from the 8 KiB where gRPC clients start refusing trailers (docs/contract.md, Errors).
    trailers = error.trailing_metadata() or ()
    assert sum(len(item.key) + len(item.value) for item in trailers) < TRAILER_BYTES, decoded


def _fuzz(world: FuzzWorld, method: MethodDescriptor) -> None:
    strategy = requests(method, world.pools)
    with grpc.insecure_channel(world.target) as channel:

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def property_(request: Message | list[Message]) -> None:
            check_outcome(method, invoke(channel, method, request))

        property_()


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
async def test_random_requests_get_only_client_errors(
    world: FuzzWorld, method: MethodDescriptor
) -> None:
    await asyncio.to_thread(_fuzz, world, method)
    async with grpc.aio.insecure_channel(world.target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=method.containing_service.full_name)
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
