"""Bad input below the message level: raw bytes, invalid UTF-8 in every string field, forged
and mutated page tokens and cursors, through the real server (see test_fuzz_requests).

Raw bytes go through a generic channel call with no serializer, as a broken or hostile client
would send them. Invalid UTF-8 is planted in each string field of each request message (at
any depth, behind repeated fields too): unary and server-streaming calls answer
INVALID_ARGUMENT (MALFORMED_REQUEST) naming the field; the UpsertDocuments stream rejects
that message in its summary and keeps the rest of the stream.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from tests.integration.test_fuzz_requests import (
    ALICE,
    EXAMPLES,
    FuzzWorld,
    _bearer,
    _mutations,
    all_methods,
    check_outcome,
    invoke,
    serve_world,
)
from tests.support.status import decode

INVALID_UTF8 = b"ok\xff\xfe\xc3("
wire_world = pytest_asyncio.fixture(scope="module", name="wire_world")(serve_world)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def string_paths(
    descriptor: Descriptor, prefix: str = "", depth: int = 0
) -> Iterator[tuple[str, list[FieldDescriptor]]]:
    """(field path as the service names it, fields from the top) of every string field."""
    for f in descriptor.fields:
        name = prefix + f.name + ("[0]" if f.is_repeated else "")
        if f.type == FieldDescriptor.TYPE_STRING:
            yield name, [f]
        elif (f.message_type is not None and depth < 3
              and not f.message_type.full_name.startswith("google.protobuf.")):
            for path, chain in string_paths(f.message_type, name + ".", depth + 1):
                yield path, [f, *chain]


def planted(chain: list[FieldDescriptor]) -> bytes:
    """A serialized message whose field at the end of `chain` holds invalid UTF-8."""
    payload = _delimited(chain[-1].number, INVALID_UTF8)
    for f in reversed(chain[:-1]):
        payload = _delimited(f.number, payload)
    return payload


CASES = [
    pytest.param(method, path, chain, id=f"{method.name}:{path}")
    for method in all_methods()
    for path, chain in string_paths(method.input_type)
]


def raw_call(
    channel: grpc.Channel, method: MethodDescriptor, data: bytes | list[bytes]
) -> tuple[grpc.RpcError | None, bytes]:
    """Send bytes as the request (a list of messages for client streaming)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    options: dict[str, Any] = {"timeout": 30, "metadata": _bearer(ALICE)}
    raw: Any = channel  # no serializers: requests and replies are bytes
    try:
        if isinstance(data, list):
            return None, bytes(raw.stream_unary(path)(iter(data), **options))
        if method.server_streaming:
            return None, b"".join(raw.unary_stream(path)(data, **options))
        return None, bytes(raw.unary_unary(path)(data, **options))
    except grpc.RpcError as error:
        return error, b""


@pytest.mark.parametrize(("method", "path", "chain"), CASES)
async def test_invalid_utf8_names_the_field(
    wire_world: FuzzWorld, method: MethodDescriptor, path: str, chain: list[FieldDescriptor]
) -> None:
    def run() -> tuple[grpc.RpcError | None, bytes]:
        with grpc.insecure_channel(wire_world.target) as channel:
            data = planted(chain)
            return raw_call(channel, method, [data, b""] if method.client_streaming else data)

    error, reply = await asyncio.to_thread(run)
    if method.client_streaming:
        summary = index_pb2.UpsertDocumentsResponse.FromString(reply)
        assert error is None
        assert [(r.outcome, r.field) for r in summary.results] == [
            (index_pb2.DOCUMENT_OUTCOME_REJECTED, f"messages[0].{path}")
        ]
        return
    assert error is not None
    decoded = decode(error)
    assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
    assert decoded.info is not None
    assert decoded.info.reason == "MALFORMED_REQUEST"
    assert [field for field, _ in decoded.violations] == [path]


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
async def test_random_bytes_get_only_client_errors(
    wire_world: FuzzWorld, method: MethodDescriptor
) -> None:
    frames = st.binary(max_size=300) | st.lists(
        st.tuples(st.integers(1, 40), st.binary(max_size=40)), max_size=6
    ).map(lambda parts: b"".join(_delimited(n, p) for n, p in parts))

    def run() -> None:
        with grpc.insecure_channel(wire_world.target) as channel:

            @settings(max_examples=EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(st.lists(frames, min_size=1, max_size=3) if method.client_streaming else frames)
            def property_(data: bytes | list[bytes]) -> None:
                check_outcome(method, raw_call(channel, method, data)[0])

            property_()

    await asyncio.to_thread(run)
    async with grpc.aio.insecure_channel(wire_world.target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


TOKEN_FIELDS: list[tuple[str, Callable[[str], Message]]] = [
    ("ListProjects", lambda t: index_pb2.ListProjectsRequest(page_token=t)),
    ("SearchProjects", lambda t: ppb.SearchProjectsRequest(
        scope=ppb.ProjectScope(), text="nebula", page_token=t)),
    ("SearchWorkspace", lambda t: wpb.SearchWorkspaceRequest(
        queries=[wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="deploy")], page_token=t)),
    ("SearchWorkspace", lambda t: wpb.SearchWorkspaceRequest(
        queries=[wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="deploy", cursor=t)])),
]


def _decoded_parts(token: str) -> tuple[bytes, bytes] | None:
    body, dot, mac = token.partition(".")
    try:
        return (base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)),
                base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))) if dot else None
    except ValueError:
        return None


@pytest.mark.parametrize(("name", "build"), TOKEN_FIELDS, ids=["list", "search", "page", "cursor"])
async def test_mutated_tokens_are_refused_as_invalid(
    wire_world: FuzzWorld, name: str, build: Callable[[str], Message]
) -> None:
    method = next(m for m in all_methods() if m.name == name)
    tokens = wire_world.pools.tokens
    originals = {_decoded_parts(t) for t in tokens}

    def run() -> None:
        with grpc.insecure_channel(wire_world.target) as channel:

            @settings(max_examples=EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(_mutations(tokens))
            def property_(token: str) -> None:
                error = invoke(channel, method, build(token))
                if error is None:  # no token, or one that still decodes to a real one
                    assert not token or _decoded_parts(token) in originals, token
                    return
                decoded = decode(error)
                assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT, decoded
                assert decoded.info is not None
                assert decoded.info.reason in ("PAGE_TOKEN_INVALID", "INVALID_ARGUMENT"), decoded

            property_()

    await asyncio.to_thread(run)


@pytest.mark.parametrize(
    "vector",
    [[float("nan")] * 384, [float("inf")] * 384, [0.0] * 384, [1e-38] * 384, [1e30] * 384],
    ids=["nan", "inf", "zero", "vanishing", "overflowing"],
)
async def test_degenerate_supplied_vectors_are_rejected_per_document(
    wire_world: FuzzWorld, vector: list[float]
) -> None:
    """A vector without a usable norm would score NaN (ranked first by PostgreSQL)."""
    supplied = index_pb2.SuppliedVectors(
        identity=cpb.EmbeddingIdentity(model="deterministic-hash-v1", dimensions=384),
        chunks=[index_pb2.SuppliedChunk(text="hello", vector=vector)],
    )
    docs = [index_pb2.Document(kind="note", row_id="bad", body="b", supplied_vectors=supplied),
            index_pb2.Document(kind="note", row_id="good", body="nebula")]
    request = index_pb2.UpsertDocumentsRequest(project_id=wire_world.pools.project_ids[0],
                                               documents=docs)
    method = next(m for m in all_methods() if m.name == "UpsertDocuments")

    def run() -> tuple[grpc.RpcError | None, bytes]:
        with grpc.insecure_channel(wire_world.target) as channel:
            return raw_call(channel, method, [request.SerializeToString()])

    error, reply = await asyncio.to_thread(run)
    assert error is None
    summary = index_pb2.UpsertDocumentsResponse.FromString(reply)
    bad, good = summary.results
    assert (bad.row_id, bad.outcome, bad.field) == (
        "bad", index_pb2.DOCUMENT_OUTCOME_REJECTED,
        "messages[0].documents[0].supplied_vectors.chunks[0].vector",
    )
    assert good.outcome != index_pb2.DOCUMENT_OUTCOME_REJECTED  # the stream goes on
