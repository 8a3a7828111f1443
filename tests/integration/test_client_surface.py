"""The client package's public surface: exactly `__all__`, typed values, enums in sync."""

from __future__ import annotations

import dataclasses
import enum
import inspect

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

import search_client
from search_client import _convert_common
from search_client._errors import error_from_call
from search_client.pb.search.v1 import (
    common_pb2,
    index_pb2,
    project_search_pb2,
    workspace_search_pb2,
)

ENUMS = [
    (search_client.SearchMode, project_search_pb2.SearchMode, "SEARCH_MODE_"),
    (search_client.MetadataOperator, project_search_pb2.MetadataOperator, "METADATA_OPERATOR_"),
    (search_client.Provider, common_pb2.Provider, "PROVIDER_"),
    (search_client.QueryKind, workspace_search_pb2.QueryKind, "QUERY_KIND_"),
    (search_client.AccountState, workspace_search_pb2.AccountState, "ACCOUNT_STATE_"),
    (search_client.QueryState, workspace_search_pb2.QueryState, "QUERY_STATE_"),
    (search_client.DocumentOutcome, index_pb2.DocumentOutcome, "DOCUMENT_OUTCOME_"),
]


def test_public_names_are_exactly_all() -> None:
    # Subpackages are not names of the API: `search_client.pb` holds the generated stubs.
    public = {
        name for name, value in vars(search_client).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(search_client.__all__) - {"__version__"}
    assert sorted(search_client.__all__) == list(search_client.__all__)


def test_every_public_name_is_documented_and_reports_the_package() -> None:
    for name in search_client.__all__:
        value = getattr(search_client, name)
        if isinstance(value, type):
            assert value.__module__ == "search_client", name
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"


def test_values_are_frozen_dataclasses_without_protobuf() -> None:
    for name in search_client.__all__:
        value = getattr(search_client, name)
        if not (isinstance(value, type) and dataclasses.is_dataclass(value)):
            continue
        assert value.__dataclass_params__.frozen, name  # type: ignore[attr-defined]
        for field in dataclasses.fields(value):
            assert "pb2" not in str(field.type), f"{name}.{field.name} exposes protobuf"


def test_public_methods_return_no_protobuf() -> None:
    for client in (search_client.SearchClient, search_client.AsyncSearchClient):
        for name, method in inspect.getmembers(client, inspect.isfunction):
            if name.startswith("_"):
                continue
            assert "pb2" not in str(inspect.signature(method)), f"{client.__name__}.{name}"
            assert (method.__doc__ or "").strip(), f"{client.__name__}.{name} has no docstring"


def test_sync_and_async_clients_offer_the_same_methods() -> None:
    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")
        }

    assert public(search_client.SearchClient) == public(search_client.AsyncSearchClient)


@pytest.mark.parametrize(("py_enum", "pb_enum", "prefix"), ENUMS)
def test_enums_match_the_proto(py_enum: type[enum.Enum], pb_enum: object, prefix: str) -> None:
    descriptor = pb_enum.DESCRIPTOR  # type: ignore[attr-defined]
    proto_names = {v.name.removeprefix(prefix) for v in descriptor.values}
    python_names = {m.name for m in py_enum}
    # A Python enum may omit UNSPECIFIED where the client never sends or receives it.
    assert python_names <= proto_names
    assert proto_names - python_names <= {"UNSPECIFIED"}
    for member in py_enum:
        number = pb_enum.Value(prefix + member.name)  # type: ignore[attr-defined]
        assert _convert_common.enum_member(py_enum, pb_enum, prefix, number, None) is member  # type: ignore[arg-type]


def test_unknown_enum_numbers_fall_back_to_the_default() -> None:
    got = _convert_common.enum_member(
        search_client.QueryState, workspace_search_pb2.QueryState, "QUERY_STATE_", 99,
        search_client.QueryState.UNSPECIFIED,
    )
    assert got is search_client.QueryState.UNSPECIFIED


class _FailedCall:
    """A finished call as grpc reports it (the shape `error_from_call` reads)."""

    def __init__(self, status: status_pb2.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return next(c for c in grpc.StatusCode if c.value[0] == self._status.code)

    def details(self) -> str:
        return str(self._status.message)

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return (("grpc-status-details-bin", self._status.SerializeToString()),)


def _packed(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def test_rich_status_details_are_decoded() -> None:
    delay = duration_pb2.Duration(seconds=2)
    status = status_pb2.Status(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
        message="too many concurrent calls",
        details=[
            _packed(error_details_pb2.ErrorInfo(
                reason="CONCURRENT_CALLS_LIMIT", domain="search.v1", metadata={"limit": "256"},
            )),
            _packed(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="top_k", description="1..50"),
            ])),
            _packed(error_details_pb2.RetryInfo(retry_delay=delay)),
        ],
    )
    error = error_from_call(_FailedCall(status), "rid-1")
    assert isinstance(error, search_client.ResourceExhaustedError)
    assert isinstance(error, search_client.SearchError)
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (error.reason, error.domain, dict(error.metadata)) == (
        "CONCURRENT_CALLS_LIMIT", "search.v1", {"limit": "256"}
    )
    assert error.field_violations == (search_client.FieldViolation("top_k", "1..50"),)
    assert error.retry_delay == 2.0
    assert error.request_id == "rid-1"
    assert not error.retryable
    assert str(error) == (
        "RESOURCE_EXHAUSTED CONCURRENT_CALLS_LIMIT: too many concurrent calls (request id rid-1)"
    )


def test_retry_policy_is_bounded_and_only_for_unavailable() -> None:
    policy = search_client.RetryPolicy(max_attempts=3, initial_backoff=0.5, max_backoff=1.0)
    unavailable = search_client.UnavailableError("down", retry_delay=30.0)
    delays = [policy.next_delay(unavailable, retry) for retry in (1, 2, 3)]
    assert delays[2] is None
    assert all(d is not None and 0 <= d <= 1.0 for d in delays[:2])
    assert policy.next_delay(search_client.InvalidArgumentError("bad"), 1) is None
    for retry in range(1, 10):
        assert 0 <= policy.backoff(retry) <= 1.0
    with pytest.raises(ValueError, match="max_attempts"):
        search_client.RetryPolicy(max_attempts=0)
