"""The composition root: settings -> keys -> store -> embedder -> engines -> grpc.aio server."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import (
    accounts_pb2,
    accounts_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
    project_search_pb2,
    project_search_pb2_grpc,
    workspace_search_pb2,
    workspace_search_pb2_grpc,
)
from service.api.interceptor import CallObserver, ServiceInterceptor
from service.api.reflection import enable_reflection
from service.api.stream_budget import ResponseLimits
from service.api.unimplemented import unimplemented_servicer
from service.auth import Authenticator
from service.embeddings.base import Embedder
from service.keys import page_token_signer
from service.memory import cache_budget
from service.ratelimit import TenantRateLimiter
from service.runtime import tune_collector
from service.settings import Settings, SettingsError, replica_urls

log = logging.getLogger("search.server")

SERVICES: dict[str, tuple[Any, Any, Callable[[Any, grpc.aio.Server], None]]] = {
    "search.v1.ProjectSearchService": (
        project_search_pb2,
        project_search_pb2_grpc.ProjectSearchServiceServicer,
        project_search_pb2_grpc.add_ProjectSearchServiceServicer_to_server,
    ),
    "search.v1.IndexService": (
        index_pb2,
        index_pb2_grpc.IndexServiceServicer,
        index_pb2_grpc.add_IndexServiceServicer_to_server,
    ),
    "search.v1.WorkspaceSearchService": (
        workspace_search_pb2,
        workspace_search_pb2_grpc.WorkspaceSearchServiceServicer,
        workspace_search_pb2_grpc.add_WorkspaceSearchServiceServicer_to_server,
    ),
    "search.v1.AccountService": (
        accounts_pb2,
        accounts_pb2_grpc.AccountServiceServicer,
        accounts_pb2_grpc.add_AccountServiceServicer_to_server,
    ),
}
HEALTH_NAMES = ("", *SERVICES)


def is_loopback(host: str) -> bool:
    """True for loopback addresses and `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_options(settings: Settings) -> list[tuple[str, Any]]:
    """Explicit message sizes and keepalive."""
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.response_limit[0]),
        # Above the service's own limit: calls beyond it get RESOURCE_EXHAUSTED with its
        # ErrorInfo (not a queue on the connection), and a busy connection near the limit is
        # not refused at the HTTP/2 level (REFUSED_STREAM) while finished streams are reaped.
        ("grpc.max_concurrent_streams", 2 * settings.max_concurrent_streams),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]


@dataclass
class App:
    """A built server and what must be closed after it."""

    settings: Settings
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int = 0
    metrics_port: int = -1
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    components: dict[str, Any] = field(default_factory=dict)
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)
    _probe_task: asyncio.Task[None] | None = None
    _backlog_task: asyncio.Task[None] | None = None
    _warmup_task: asyncio.Task[None] | None = None
    _model_loaded: bool = False

    @property
    def address(self) -> str:
        """host:port the server listens on."""
        host = self.settings.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        """Start serving; "" is liveness, the service names follow readiness."""
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        if self.components.get("embedder") is not None:
            self._warmup_task = asyncio.create_task(self._warm_up())
            # A quick load is ready at once; a slow one turns ready when it finishes.
            await asyncio.wait({self._warmup_task}, timeout=self.settings.readiness_interval)
        await self._probe_once()
        self._probe_task = asyncio.create_task(self._probe_forever())
        if "metrics" in self.components and "store" in self.components:
            self._backlog_task = asyncio.create_task(self._count_backlog_forever())

    async def _warm_up(self) -> None:
        """Load the embedding model; readiness waits for it (liveness does not)."""
        try:
            await self.components["embedder"].warmup()
        except Exception:
            log.exception("the embedding model could not load: not ready (retried each probe)")
            return
        self._model_loaded = True
        if self._probe_task is not None and not self._stopped.is_set():
            # Loaded after start() stopped waiting: say so now, not at the next probe.
            await self._probe_once()

    def _model_ready(self) -> bool:
        task = self._warmup_task
        if task is None or self._model_loaded:
            return True
        if task.done():  # the load failed: try again, ready once it succeeds
            self._warmup_task = asyncio.create_task(self._warm_up())
        return False

    async def _probe_once(self) -> None:
        store = self.components.get("store")
        ready = self._model_ready()
        if ready and store is not None:
            try:
                await asyncio.wait_for(store.ping(), timeout=self.settings.readiness_interval)
            except Exception:
                ready = False
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in SERVICES:
            await self.health.set(name, status)

    async def _probe_forever(self) -> None:
        while not self._stopped.is_set():
            await asyncio.sleep(self.settings.readiness_interval)
            if not self._stopped.is_set():
                await self._probe_once()

    async def _count_backlog_forever(self) -> None:
        """Refresh the index-backlog gauge (a count over every tenant, so not per scrape)."""
        metrics, store = self.components["metrics"], self.components["store"]
        while not self._stopped.is_set():
            try:
                metrics.index_backlog.set(await store.pending_chunks())
            except Exception:  # the database is down: readiness says so; keep the last value
                log.debug("index backlog count failed", exc_info=True)
            await asyncio.sleep(self.settings.metrics_backlog_interval)

    async def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING, drain open calls within the grace period, close pools."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        for task in (self._probe_task, self._backlog_task, self._warmup_task):
            if task is not None:
                task.cancel()
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.settings.grace_period if grace is None else grace)
        for close in reversed(self.closers):
            try:
                await close()
            except Exception:
                log.exception("error while closing a component")

    async def wait_for_termination(self) -> None:
        """Block until the server stops."""
        await self.server.wait_for_termination()


async def build_app(settings: Settings, **overrides: Any) -> App:
    """Build (not start) the server; `overrides` replace components (tests)."""
    authenticator = Authenticator(settings.auth_tokens.reveal())
    if not authenticator.enabled and not is_loopback(settings.host):
        raise SettingsError(
            f"refusing to bind {settings.host}: without SEARCH_AUTH_TOKENS the server "
            "only binds loopback addresses (127.0.0.1, ::1, localhost)"
        )
    observer: CallObserver | None = overrides.get("observer")
    metrics = None
    if observer is None and settings.metrics_port >= 0:
        from service.metrics import Metrics

        metrics = Metrics()
        observer = metrics
    limiter = TenantRateLimiter(settings.search_rate_per_tenant, settings.search_burst_per_tenant)
    response_bytes, response_setting = settings.response_limit
    limits = ResponseLimits(
        max_message_bytes=response_bytes, message_setting=response_setting,
        write_timeout=settings.stream_write_timeout,
        stalled_bytes_per_tenant=settings.stalled_stream_bytes,
        messages_per_tenant=settings.stream_messages_per_tenant,
    )
    interceptor = ServiceInterceptor(
        authenticator, settings.max_concurrent_streams, observer, limiter, limits
    )
    interceptors: list[grpc.aio.ServerInterceptor] = [interceptor]
    traced = _start_tracing(settings, overrides)
    if traced is not None:
        from service.tracing import TracingInterceptor

        # After the service interceptor, so inside it: the caller is authenticated and the
        # tenant and request id are bound when the RPC span starts.
        interceptors.append(TracingInterceptor())
    if replica_urls(settings):
        from service.api.replica_lsn import ReadYourWritesInterceptor

        interceptors.append(ReadYourWritesInterceptor())
    server = grpc.aio.server(interceptors=interceptors, options=server_options(settings))
    health_servicer = health.aio.HealthServicer()
    app = App(settings=settings, server=server, health=health_servicer)
    if traced is not None:
        app.components["tracing"] = traced
        app.closers.append(traced.shutdown)  # first in, so closed last: spans of the shutdown
    if metrics is not None:
        app.components["metrics"] = metrics
        app.metrics_port = _serve_metrics(metrics, settings)
        app.closers.append(metrics.close)
    servicers = await _build_servicers(settings, app, overrides)
    for name, (_, base, add) in SERVICES.items():
        servicer = servicers.get(name)
        if servicer is None:
            module = SERVICES[name][0]
            descriptor = module.DESCRIPTOR.services_by_name[name.rsplit(".", 1)[1]]
            servicer = unimplemented_servicer(base, descriptor)
        add(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    # Descriptors as the protos say (json_name, comments), not the stubs' runtime copies.
    enable_reflection(
        server, (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
    )
    try:
        app.port = _bind(server, settings)
    except SettingsError:
        for close in reversed(app.closers):  # the store and pools opened above
            await close()
        raise
    if app.port == 0:
        raise SettingsError(f"could not bind {settings.host}:{settings.port}")
    return app


def _serve_metrics(metrics: Any, settings: Settings) -> int:
    try:
        port: int = metrics.serve(settings.host, settings.metrics_port)
    except OSError as error:
        raise SettingsError(
            f"cannot serve metrics on {settings.host}:{settings.metrics_port}: "
            f"{error.strerror or error} (set SEARCH_METRICS_PORT)"
        ) from error
    return port


def _start_tracing(settings: Settings, overrides: dict[str, Any]) -> Any:
    """The configured tracing (SEARCH_OTEL_ENABLED), or None: then nothing is installed."""
    if not settings.otel_enabled:
        return None
    from service import tracing

    return tracing.configure(settings, overrides.get("span_exporter"))


def _bind(server: grpc.aio.Server, settings: Settings) -> int:
    address = f"{_bind_host(settings.host)}:{settings.port}"
    try:
        return _add_port(server, settings, address)
    except RuntimeError as error:  # grpc: "Failed to bind to address ..."
        raise SettingsError(
            f"cannot listen on {address}: the port is in use or the address is not on this "
            "machine (set SEARCH_PORT / SEARCH_HOST, or --port / --host)"
        ) from error


def _add_port(server: grpc.aio.Server, settings: Settings, address: str) -> int:
    if not settings.tls_cert_file:
        return server.add_insecure_port(address)
    try:
        key = Path(settings.tls_key_file).read_bytes()
        cert = Path(settings.tls_cert_file).read_bytes()
        ca = Path(settings.tls_client_ca_file).read_bytes() if settings.tls_client_ca_file else None
    except OSError as error:
        raise SettingsError(f"cannot read TLS file: {error}") from error
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )
    return server.add_secure_port(address, credentials)


def _bind_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _build_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    from service.embeddings import build_embedder

    options: dict[str, Any] = {}
    if settings.embedder == "local" and settings.embedding_model_dir:
        options["model_dir"] = Path(settings.embedding_model_dir)
    if settings.embedder == "openai":
        options.update(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key.reveal(),
            model=settings.openai_model,
            dimensions=settings.openai_dimensions,
        )
    return build_embedder(settings.embedder, **options)


async def _build_servicers(
    settings: Settings, app: App, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Servicers keyed by full service name; missing ones answer UNIMPLEMENTED."""
    from service.api.index import IndexServicer
    from service.api.projects import ProjectSearchServicer
    from service.indexing.pipeline import Indexer
    from service.projects.query_budget import QueryBudget
    from service.projects.search import ProjectSearch
    from service.store import open_store

    embedder = overrides["embedder"] if "embedder" in overrides else _build_embedder(settings)
    if embedder is not None:
        app.closers.append(embedder.aclose)
    identity = embedder.identity if embedder is not None else None
    store = overrides.get("store")
    if store is None:
        try:
            store = await open_store(
                settings.database_url.reveal(), settings.data_dir, identity,
                pool_size=settings.db_pool_size,
                replica_urls=replica_urls(settings),
                replica_max_lag=settings.replica_max_lag_seconds,
                replica_check_interval=settings.replica_check_interval,
                partitions=settings.pg_partitions,
                sqlite_vector_cache_bytes=cache_budget(settings.sqlite_vector_cache_mb),
                sqlite_lexical_cache_bytes=cache_budget(settings.sqlite_lexical_cache_mb),
                pg_vector_cache_bytes=cache_budget(settings.pg_vector_cache_mb),
                pg_lexical_cache_bytes=cache_budget(settings.pg_lexical_cache_mb),
                vector_cache_refresh=settings.vector_cache_refresh_seconds,
            )
        except ValueError as error:
            raise SettingsError(f"SEARCH_DATABASE_URL: {error}") from error
    app.closers.append(store.close)
    signer = page_token_signer(settings)
    app.components.update(store=store, embedder=embedder, signer=signer)
    if "metrics" in app.components:
        app.components["metrics"].track_store(store.stats)
    if embedder is not None and settings.otel_enabled:
        from service.tracing import TracedEmbedder

        embedder = TracedEmbedder(embedder)
    search = ProjectSearch(
        store, embedder, signer, exact_scan_limit=settings.exact_scan_limit,
        bm25_k1=settings.bm25_k1, bm25_b=settings.bm25_b,
        statement_timeout=settings.project_search_timeout,
        embed_concurrency=settings.embed_query_concurrency
        or (1 if settings.embedder == "local" else 8),
        query_budget=QueryBudget(settings.query_max_terms, settings.query_max_prefixes),
    )
    indexer = Indexer(store, embedder)
    servicers: dict[str, Any] = {
        "search.v1.ProjectSearchService": ProjectSearchServicer(
            search, settings.response_limit[0]
        ),
        "search.v1.IndexService": IndexServicer(
            store, indexer, signer, identity, settings.response_limit[0]
        ),
    }
    servicers.update(await _workspace_servicers(settings, app, store, overrides))
    return servicers


async def _workspace_servicers(
    settings: Settings, app: App, store: Any, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Workspace search and accounts (built by service.workspace); a `resolver` override
    replaces the system resolver ConnectAccount checks base URLs with (tests)."""
    from service.api.workspace_wiring import build_workspace_servicers, parse_base_urls

    metrics = app.components.get("metrics")
    return build_workspace_servicers(
        settings,
        store,
        app.components["signer"],
        allow_insecure_http=settings.allow_insecure_provider_http,
        base_url_overrides=parse_base_urls(settings.provider_base_urls),
        max_rounds_per_page=settings.workspace_max_rounds_per_page,
        default_timeout=settings.workspace_timeout,
        on_query=metrics.provider_query if metrics is not None else None,
        on_refresh=metrics.token_refresh if metrics is not None else None,
        closers=app.closers,
        resolver=overrides.get("resolver"),
    )


async def serve(settings: Settings, *, ready: Callable[[App], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT, then drain and exit 0."""
    app = await build_app(settings)
    await app.start()
    tune_collector()  # what start-up built is kept for the process's life
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    if ready is not None:
        ready(app)
    await stopping.wait()
    log.info("signal received: draining for up to %.1f s", settings.grace_period)
    await app.stop()
    return 0
