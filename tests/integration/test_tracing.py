"""OpenTelemetry tracing (SEARCH_OTEL_ENABLED) through a real server and channel: the span
tree of a project and a workspace search, W3C traceparent propagation, no secrets or query
text in any span, and nothing installed when tracing is off."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as agrpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as igrpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service import tracing
from service.fakes.suite import FakeProviders
from service.settings import Settings, SettingsError
from tests.support.reliability.world import server_env
from tests.support.server import running_server

BEARER = "tracing-bearer-s3cret"
AUTH = f"{hashlib.sha256(BEARER.encode()).hexdigest()}:acme:admin"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
PROJECT_TEXT = "zanzibar nebula"
WORKSPACE_TEXT = "quasar deploy"
META = (("authorization", f"Bearer {BEARER}"),)
TRACED = (*META, ("traceparent", TRACEPARENT), ("x-request-id", "req-tracing-1"))


def _env(fakes: FakeProviders) -> dict[str, str]:
    return server_env(fakes) | {
        "SEARCH_AUTH_TOKENS": AUTH,
        "SEARCH_OTEL_ENABLED": "true",
        "SEARCH_OTEL_EXPORTER": "none",
    }


async def _upsert(index: igrpc.IndexServiceAsyncStub, project_id: int) -> None:
    async def stream() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
        yield ipb.UpsertDocumentsRequest(
            project_id=project_id,
            documents=[
                ipb.Document(kind="note", row_id=str(i), title=f"n{i}", body=f"{PROJECT_TEXT} {i}")
                for i in range(3)
            ],
        )

    await index.UpsertDocuments(stream(), metadata=META)


async def _exercise(channel: grpc.aio.Channel, fakes: FakeProviders, exporter: (
    InMemorySpanExporter
)) -> None:
    index = igrpc.IndexServiceStub(channel)
    created = await index.CreateProject(ipb.CreateProjectRequest(external_id="t"), metadata=META)
    await _upsert(index, created.project.project_id)
    await agrpc.AccountServiceStub(channel).ConnectAccount(
        apb.ConnectAccountRequest(provider=cpb.PROVIDER_SLACK, display_name="s",
                                  credentials=apb.Credentials(token=fakes.slack.token)),
        metadata=META,
    )
    upsert = _rpc(exporter.get_finished_spans(), "search.v1.IndexService/UpsertDocuments")
    assert {"embed", "write_documents sqlite"} <= {
        s.name for s in _children(exporter.get_finished_spans(), upsert)
    }
    exporter.clear()
    search = pgrpc.ProjectSearchServiceStub(channel)
    request = ppb.SearchProjectsRequest(
        scope=ppb.ProjectScope(project_ids=[created.project.project_id]), text=PROJECT_TEXT,
        mode=ppb.SEARCH_MODE_HYBRID,
    )
    pages = [m async for m in search.SearchProjects(request, metadata=TRACED)]
    assert pages[0].page.results
    missing = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(project_ids=[10**12]), text="x")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        _ = [m async for m in search.SearchProjects(missing, metadata=META)]
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    fakes.slack.fail_status(500, times=1)
    workspace = wgrpc.WorkspaceSearchServiceStub(channel)
    ws = wpb.SearchWorkspaceRequest(queries=[
        wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="nothing here"),
        wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text=WORKSPACE_TEXT),
    ])
    messages = [m async for m in workspace.SearchWorkspace(ws, metadata=META)]
    assert any(m.HasField("page") for m in messages)


def _rpc(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.kind is SpanKind.SERVER and s.name == name]
    return found[0]


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    parent_id = parent.context.span_id if parent.context else None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent_id]


async def test_span_tree_propagation_and_no_secrets(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    fakes.slack.add_message("C1", "general", "100.000000", f"{WORKSPACE_TEXT} step")
    exporter = InMemorySpanExporter()
    async with running_server(tmp_path, _env(fakes), span_exporter=exporter) as app, (
        grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
    ) as channel:
        assert tracing.enabled()
        await _exercise(channel, fakes, exporter)
    assert not tracing.enabled()  # the app's shutdown ends tracing
    spans = exporter.get_finished_spans()

    project = _rpc(spans, "search.v1.ProjectSearchService/SearchProjects")
    assert project.context is not None
    assert project.parent is not None
    assert f"{project.context.trace_id:032x}" == TRACE_ID  # continued the caller's trace
    assert f"{project.parent.span_id:016x}" == PARENT_ID
    attributes = dict(project.attributes or {})
    assert attributes["search.tenant"] == "acme"
    assert attributes["search.request_id"] == "req-tracing-1"
    assert attributes["rpc.grpc.status_code"] == 0
    below = {s.name: s for s in _children(spans, project)}
    assert {"embed", "search sqlite"} <= set(below)
    assert dict(below["search sqlite"].attributes or {})["db.system"] == "sqlite"
    assert dict(below["embed"].attributes or {})["search.embedding.chars"] == len(PROJECT_TEXT)

    workspace = _rpc(spans, "search.v1.WorkspaceSearchService/SearchWorkspace")
    assert workspace.context is not None
    assert f"{workspace.context.trace_id:032x}" != TRACE_ID  # no traceparent: a new trace
    providers = [s for s in spans if s.name == "provider slack"]
    assert providers
    assert all(s.context and s.context.trace_id == workspace.context.trace_id for s in providers)
    assert all(s.kind is SpanKind.CLIENT for s in providers)
    assert all(s.parent and s.parent.span_id == workspace.context.span_id for s in providers)
    seen = [dict(s.attributes or {}) for s in providers]
    assert {a["search.query_index"] for a in seen} == {0, 1}
    assert {a["search.query_state"] for a in seen} == {"ok", "failed"}  # one got the 500

    (refused,) = [s for s in spans if s.kind is SpanKind.SERVER and s is not project
                  and s.name == project.name]
    assert dict(refused.attributes or {})["rpc.grpc.status"] == "NOT_FOUND"
    assert refused.parent is None  # sent no traceparent

    secrets = [BEARER, fakes.slack.token, AUTH.split(":")[0], PROJECT_TEXT, WORKSPACE_TEXT,
               "zanzibar", "quasar"]
    for recorded in spans:
        for key, value in dict(recorded.attributes or {}).items():
            for secret in secrets:
                assert secret not in str(value), (recorded.name, key)
        assert not recorded.events, recorded.name  # no exception events with messages


async def test_off_installs_nothing(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app:
        assert "tracing" not in app.components
        assert not tracing.enabled()
        with tracing.span("x") as first, tracing.db_span("sqlite", "search") as second:
            assert first is second  # the one shared no-op
        shared: object = tracing.span("y")
        assert tracing.provider_request("slack", "GET") is shared  # the same no-op, async too


def test_enabled_without_the_packages_is_a_clear_startup_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import fails
    settings = Settings.from_mapping({"SEARCH_OTEL_ENABLED": "true"})
    with pytest.raises(SettingsError, match="search-service\\[tracing\\]"):
        tracing.configure(settings)
    assert not tracing.enabled()


async def test_otlp_without_its_exporter_package_falls_back_to_the_console(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    if importlib.util.find_spec("opentelemetry.exporter") is not None:
        pytest.skip("the OTLP exporter is installed here")
    configured = tracing.configure(Settings.from_mapping({"SEARCH_OTEL_ENABLED": "true"}))
    with tracing.span("probe", **{"search.tenant": "acme"}):
        pass
    await configured.shutdown()
    assert "spans go to the console" in caplog.text
    assert "\"name\": \"probe\"" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("key", "value"),
    [("SEARCH_OTEL_EXPORTER", "jaeger"), ("SEARCH_OTEL_SAMPLE_RATIO", "1.5"),
     ("SEARCH_OTEL_SERVICE_NAME", " ")],
)
def test_bad_tracing_settings_are_refused(key: str, value: str) -> None:
    with pytest.raises(SettingsError, match=key):
        Settings.from_mapping({key: value})
