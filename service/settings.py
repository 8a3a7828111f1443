"""Settings: one frozen object built from a mapping (the environment, or a dict in tests).

Every key is `SEARCH_` + the upper-cased field name. Bad values raise SettingsError naming
the key and the value; secrets are masked in `repr`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from service.secret import Secret

PREFIX = "SEARCH_"
# Read by the command-line client (`SEARCH_CLIENT_TOKEN`), not by the server: an operator
# who exports them in the server's shell must not be refused.
CLIENT_PREFIX = "SEARCH_CLIENT_"


# Authorization servers whose OAuth clients are configured by `SEARCH_OAUTH_<FAMILY>_*`.
OAUTH_FAMILIES = ("google", "slack", "github", "gitlab", "atlassian")


class SettingsError(ValueError):
    """A setting is missing or malformed."""


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class Settings:
    """Service configuration; see the README's configuration table (generated from here)."""

    host: str = field(default="127.0.0.1", metadata=_doc("Address to bind."))
    port: int = field(default=50051, metadata=_doc("gRPC port; 0 picks a free port."))
    data_dir: Path = field(
        default=Path("data"), metadata=_doc("Directory for the SQLite file and keys.")
    )
    database_url: Secret = field(
        default=Secret(""),
        metadata=_doc("Empty: SQLite in data_dir; `postgresql://...` for PostgreSQL."),
    )
    db_pool_size: int = field(default=10, metadata=_doc("PostgreSQL pool size."))
    database_replica_urls: Secret = field(
        default=Secret(""),
        metadata=_doc("Comma list of PostgreSQL streaming-replica URLs; searches read there."),
    )
    replica_max_lag_seconds: float = field(
        default=10.0, metadata=_doc("Replicas further behind the primary are skipped.")
    )
    replica_check_interval: float = field(
        default=1.0, metadata=_doc("Seconds between replica health and lag checks.")
    )
    pg_partitions: int = field(
        default=0,
        metadata=_doc("Hash partitions by project of the PostgreSQL content tables; 0 = none."),
    )
    embedder: str = field(
        default="local", metadata=_doc("local (all-MiniLM-L6-v2) | openai | deterministic | none")
    )
    embedding_model_dir: str = field(default="", metadata=_doc("Override the local model dir."))
    openai_base_url: str = field(
        default="https://api.openai.com/v1", metadata=_doc("OpenAI-compatible embeddings API.")
    )
    openai_api_key: Secret = field(default=Secret(""), metadata=_doc("API key for openai."))
    openai_model: str = field(default="text-embedding-3-small", metadata=_doc("Model name."))
    openai_dimensions: int = field(default=1536, metadata=_doc("Vector length of the model."))
    exact_scan_limit: int = field(
        default=10_000, metadata=_doc("Eligible chunks above this use the ANN index.")
    )
    sqlite_vector_cache_mb: int = field(
        default=-1,
        metadata=_doc("SQLite: memory for in-process KNN matrices (per project, least "
                      "recently used out); -1 = an eighth of the memory the process may use "
                      "(cgroup limit, else RAM), at least 256; larger scopes: vec0; 0 = vec0."),
    )
    pg_vector_cache_mb: int = field(
        default=-1,
        metadata=_doc("PostgreSQL: memory for in-process KNN matrices that answer a vector "
                      "scope past exact_scan_limit instead of the HNSW index (per project, "
                      "checked against the database's vector generations by each search, "
                      "least recently used out); -1 = an eighth of the memory the process "
                      "may use (cgroup limit, else RAM), at least 256; scopes that do not "
                      "fit use the index; 0 = always the index."),
    )
    pg_lexical_cache_mb: int = field(
        default=-1,
        metadata=_doc("PostgreSQL: memory for in-process lexical postings that rank an "
                      "FTS search (unfiltered, or filtered by kind) or an unfiltered HYBRID "
                      "(SUM or RRF) search instead of the statement's SQL BM25 (per project, "
                      "checked against the database's generations and the query's parsed "
                      "terms by each search, least recently used out); -1 = an eighth of the "
                      "process's memory, at least 256; scopes that do not fit: SQL; 0 = SQL."),
    )
    sqlite_lexical_cache_mb: int = field(
        default=-1,
        metadata=_doc("SQLite: memory for in-process postings that rank an unfiltered FTS "
                      "or HYBRID (SUM or RRF) search (per project, LRU); -1 = an eighth of the "
                      "process's memory, at least 256; scopes that do not fit: SQL; 0 = SQL."),
    )
    vector_cache_refresh_seconds: float = field(
        default=2.0,
        metadata=_doc("Both stores: after this process's own writes, read the KNN matrices "
                      "they moved again once writes have been quiet this many seconds, in "
                      "the background (when every matrix fits the budget), so the next "
                      "searches need not; 0 = only when a search needs them."),
    )
    bm25_k1: float = field(
        default=1.2, metadata=_doc("Project search BM25 term-frequency saturation k1 (> 0).")
    )
    bm25_b: float = field(
        default=0.75, metadata=_doc("Project search BM25 length normalisation b, in [0, 1].")
    )
    query_max_terms: int = field(
        default=64,
        metadata=_doc("Words a project search text may hold (phrase and negated words "
                      "too); more is INVALID_ARGUMENT QUERY_TOO_COMPLEX."),
    )
    query_max_prefixes: int = field(
        default=16,
        metadata=_doc("`prefix*` terms a project search text may hold; more is "
                      "INVALID_ARGUMENT QUERY_TOO_COMPLEX."),
    )
    embed_query_concurrency: int = field(
        default=0,
        metadata=_doc("Query embeddings run at once (more queue, fairly by tenant, or are "
                      "shed); 0 = 1 for the local model, 8 otherwise."),
    )
    page_token_key: Secret = field(
        default=Secret(""),
        metadata=_doc("HMAC key for page tokens (share across replicas); empty: from data_dir."),
    )
    page_token_previous_keys: Secret = field(
        default=Secret(""),
        metadata=_doc("Comma-separated keys page tokens are still accepted from (not signed "
                      "with): rotate SEARCH_PAGE_TOKEN_KEY without failing tokens in flight."),
    )
    credentials_key: Secret = field(
        default=Secret(""),
        metadata=_doc("AES key (base64, 32 bytes) sealing account credentials; empty: data_dir."),
    )
    credentials_previous_keys: Secret = field(default=Secret(""), metadata=_doc(
        "Comma-separated keys stored credentials still open with (never sealed with): rotate "
        "SEARCH_CREDENTIALS_KEY; start-up re-seals what they sealed with the new key."))
    allow_private_base_urls: bool = field(
        default=False, metadata=_doc("Allow self-hosted base URLs on private/loopback addresses.")
    )
    rrf_k: int = field(default=60, metadata=_doc("Reciprocal rank fusion constant k."))
    query_request_budget: int = field(
        default=30, metadata=_doc("Provider HTTP requests allowed per native query.")
    )
    account_concurrency: int = field(default=8, metadata=_doc("Accounts searched at once."))
    provider_request_timeout: float = field(
        default=10.0, metadata=_doc("Seconds per provider HTTP request (capped by deadline).")
    )
    shared_provider_waits: bool = field(
        default=True,
        metadata=_doc("Keep a provider's rate-limit wait in the store for every caller and "
                      "replica (false: only the query and its page token wait)."),
    )
    grace_period: float = field(
        default=10.0, metadata=_doc("Seconds open calls may finish after SIGTERM.")
    )
    max_message_bytes: int = field(
        default=16 * 1024 * 1024,
        metadata=_doc("Max gRPC message size, both directions (responses: also "
                      "SEARCH_MAX_RESPONSE_BYTES)."),
    )
    max_response_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata=_doc("Max response message size (pages are cut to fit). 4 MiB is what gRPC "
                      "clients and grpcurl read unless told otherwise; raise it only with "
                      "every client's receive limit."),
    )
    max_concurrent_streams: int = field(
        default=256, metadata=_doc("Max concurrent calls; more get RESOURCE_EXHAUSTED.")
    )
    stream_write_timeout: float = field(
        default=30.0,
        metadata=_doc("Seconds a server stream waits for its client to take one message; "
                      "then DEADLINE_EXCEEDED (STREAM_WRITE_TIMEOUT) and its slot is freed."),
    )
    stalled_stream_bytes: int = field(
        default=128 * 1024 * 1024,
        metadata=_doc("Bytes a tenant's timed-out unread streams may hold in send buffers; "
                      "past it the tenant's new calls get RESOURCE_EXHAUSTED."),
    )
    stream_messages_per_tenant: int = field(
        default=16,
        metadata=_doc("SearchProjects pages one tenant may have in production or unread "
                      "at once (above any store's concurrency); more wait, at most the "
                      "write timeout."),
    )
    log_level: str = field(default="INFO", metadata=_doc("Logging level."))
    auth_tokens: Secret = field(
        default=Secret(""),
        metadata=_doc("Comma list of sha256hex:tenant:role (read|write|admin)."),
    )
    metrics_port: int = field(default=-1, metadata=_doc("Prometheus port; -1 off, 0 any."))
    metrics_backlog_interval: float = field(
        default=30.0,
        metadata=_doc("Seconds between counts of chunks awaiting a vector (metrics on)."),
    )
    tls_cert_file: str = field(default="", metadata=_doc("PEM server certificate: enables TLS."))
    tls_key_file: str = field(default="", metadata=_doc("PEM private key of the certificate."))
    tls_client_ca_file: str = field(
        default="", metadata=_doc("PEM CA bundle: require client certificates (mutual TLS).")
    )
    search_rate_per_tenant: float = field(
        default=0.0, metadata=_doc("Search calls per second per tenant; 0 = unlimited.")
    )
    search_burst_per_tenant: float = field(
        default=20.0, metadata=_doc("Burst size of the per-tenant search rate limit.")
    )
    workspace_max_rounds_per_page: int = field(
        default=3, metadata=_doc("Extra provider fetch rounds per fused page to make it exact.")
    )
    project_search_timeout: float = field(
        default=30.0,
        metadata=_doc("Seconds one project search page's statement may run, whatever the "
                      "client's deadline (none, or a longer one); then DEADLINE_EXCEEDED."),
    )
    workspace_timeout: float = field(
        default=20.0, metadata=_doc("Seconds a workspace search may take without a deadline.")
    )
    allow_insecure_provider_http: bool = field(
        default=False, metadata=_doc("Allow http:// provider base URLs (tests and demos).")
    )
    provider_base_urls: str = field(
        default="", metadata=_doc("Override provider origins: `slack=https://...,gmail=...`.")
    )
    readiness_interval: float = field(
        default=5.0, metadata=_doc("Seconds between readiness probes of the database.")
    )
    otel_enabled: bool = field(
        default=False,
        metadata=_doc("OpenTelemetry tracing (needs the `tracing` extra); off: no overhead."),
    )
    otel_exporter: str = field(
        default="otlp",
        metadata=_doc("otlp (OTLP/HTTP; console when its package is missing) | console | none."),
    )
    otel_endpoint: str = field(
        default="",
        metadata=_doc("OTLP/HTTP traces URL; empty: OTEL_EXPORTER_OTLP_* or localhost:4318."),
    )
    otel_service_name: str = field(
        default="search-service", metadata=_doc("service.name of the exported spans.")
    )
    otel_sample_ratio: float = field(
        default=1.0,
        metadata=_doc("Share of new traces sampled, 0..1 (a caller's sampled flag wins)."),
    )
    oauth_google_client_id: str = field(
        default="", metadata=_doc("Google OAuth client id (Drive, Gmail, Calendar token refresh).")
    )
    oauth_google_client_secret: Secret = field(
        default=Secret(""), metadata=_doc("Google OAuth client secret (or the _FILE setting).")
    )
    oauth_google_client_secret_file: str = field(
        default="", metadata=_doc("File holding the Google OAuth client secret.")
    )
    oauth_google_token_url: str = field(
        default="", metadata=_doc("Google token endpoint override (self-hosted, tests).")
    )
    oauth_slack_client_id: str = field(
        default="", metadata=_doc("Slack OAuth client id (access-token refresh).")
    )
    oauth_slack_client_secret: Secret = field(
        default=Secret(""), metadata=_doc("Slack OAuth client secret (or the _FILE setting).")
    )
    oauth_slack_client_secret_file: str = field(
        default="", metadata=_doc("File holding the Slack OAuth client secret.")
    )
    oauth_slack_token_url: str = field(
        default="", metadata=_doc("Slack token endpoint override (self-hosted, tests).")
    )
    oauth_github_client_id: str = field(
        default="", metadata=_doc("GitHub App OAuth client id (access-token refresh).")
    )
    oauth_github_client_secret: Secret = field(
        default=Secret(""), metadata=_doc("GitHub App OAuth client secret (or the _FILE setting).")
    )
    oauth_github_client_secret_file: str = field(
        default="", metadata=_doc("File holding the GitHub App OAuth client secret.")
    )
    oauth_github_token_url: str = field(
        default="", metadata=_doc("GitHub App token endpoint override (self-hosted, tests).")
    )
    oauth_gitlab_client_id: str = field(
        default="", metadata=_doc("GitLab OAuth client id (access-token refresh).")
    )
    oauth_gitlab_client_secret: Secret = field(
        default=Secret(""), metadata=_doc("GitLab OAuth client secret (or the _FILE setting).")
    )
    oauth_gitlab_client_secret_file: str = field(
        default="", metadata=_doc("File holding the GitLab OAuth client secret.")
    )
    oauth_gitlab_token_url: str = field(
        default="", metadata=_doc("GitLab token endpoint override (self-hosted, tests).")
    )
    oauth_gitlab_redirect_uri: str = field(
        default="", metadata=_doc("Redirect URI of the GitLab OAuth app (GitLab checks it).")
    )
    oauth_atlassian_client_id: str = field(
        default="", metadata=_doc("Atlassian OAuth client id (Jira, Confluence token refresh).")
    )
    oauth_atlassian_client_secret: Secret = field(
        default=Secret(""), metadata=_doc("Atlassian OAuth client secret (or the _FILE setting).")
    )
    oauth_atlassian_client_secret_file: str = field(
        default="", metadata=_doc("File holding the Atlassian OAuth client secret.")
    )
    oauth_atlassian_token_url: str = field(
        default="", metadata=_doc("Atlassian token endpoint override (self-hosted, tests).")
    )

    @property
    def response_limit(self) -> tuple[int, str]:
        """(bytes, setting): the largest response message, and the setting that sets it."""
        if self.max_response_bytes <= self.max_message_bytes:
            return self.max_response_bytes, "SEARCH_MAX_RESPONSE_BYTES"
        return self.max_message_bytes, "SEARCH_MAX_MESSAGE_BYTES"

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Settings:
        """Build from `SEARCH_*` keys; unknown `SEARCH_*` keys are rejected."""
        hints = get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(
            k for k in env
            if k.startswith(PREFIX) and not k.startswith(CLIENT_PREFIX)
            and k[len(PREFIX) :].lower() not in known
        )
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]}")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            key = PREFIX + f.name.upper()
            if key in env:
                values[f.name] = _parse(key, env[key], hints[f.name])
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Check ranges; raises SettingsError naming the key."""
        checks = [
            ("port", 0 <= self.port <= 65535),
            ("db_pool_size", 1 <= self.db_pool_size <= 1000),
            ("sqlite_vector_cache_mb", -1 <= self.sqlite_vector_cache_mb <= 1 << 20),
            ("pg_vector_cache_mb", -1 <= self.pg_vector_cache_mb <= 1 << 20),
            ("pg_lexical_cache_mb", -1 <= self.pg_lexical_cache_mb <= 1 << 20),
            ("sqlite_lexical_cache_mb", -1 <= self.sqlite_lexical_cache_mb <= 1 << 20),
            ("vector_cache_refresh_seconds", 0 <= self.vector_cache_refresh_seconds <= 3600),
            ("replica_max_lag_seconds", self.replica_max_lag_seconds >= 0),
            ("replica_check_interval", self.replica_check_interval > 0),
            ("pg_partitions", 0 <= self.pg_partitions <= 1024),
            ("embedder", self.embedder in {"local", "openai", "deterministic", "none"}),
            ("rrf_k", self.rrf_k >= 1),
            ("bm25_k1", 0 < self.bm25_k1 <= 100),
            ("bm25_b", 0 <= self.bm25_b <= 1),
            ("query_request_budget", 1 <= self.query_request_budget <= 1000),
            ("account_concurrency", 1 <= self.account_concurrency <= 256),
            ("provider_request_timeout", self.provider_request_timeout > 0),
            ("grace_period", self.grace_period >= 0),
            ("max_message_bytes", 1024 <= self.max_message_bytes <= 256 * 1024 * 1024),
            ("max_response_bytes", 1024 <= self.max_response_bytes <= 256 * 1024 * 1024),
            ("max_concurrent_streams", self.max_concurrent_streams >= 1),
            ("stream_write_timeout", self.stream_write_timeout > 0),
            ("stalled_stream_bytes", self.stalled_stream_bytes >= 1),
            ("stream_messages_per_tenant", 1 <= self.stream_messages_per_tenant <= 10_000),
            ("exact_scan_limit", self.exact_scan_limit >= 0),
            ("embed_query_concurrency", 0 <= self.embed_query_concurrency <= 1024),
            ("query_max_terms", 1 <= self.query_max_terms <= 100_000),
            ("query_max_prefixes", 0 <= self.query_max_prefixes <= 100_000),
            ("metrics_port", -1 <= self.metrics_port <= 65535),
            ("metrics_backlog_interval", self.metrics_backlog_interval > 0),
            ("openai_dimensions", self.openai_dimensions >= 1),
            ("tls_key_file", bool(self.tls_key_file) == bool(self.tls_cert_file)),
            ("tls_client_ca_file", not self.tls_client_ca_file or bool(self.tls_cert_file)),
            ("readiness_interval", self.readiness_interval > 0),
            ("search_rate_per_tenant", self.search_rate_per_tenant >= 0),
            ("workspace_max_rounds_per_page", 0 <= self.workspace_max_rounds_per_page <= 100),
            ("workspace_timeout", self.workspace_timeout > 0),
            ("project_search_timeout", self.project_search_timeout > 0),
            ("otel_exporter", self.otel_exporter in {"otlp", "console", "none"}),
            ("otel_service_name", bool(self.otel_service_name.strip())),
            ("otel_sample_ratio", 0.0 <= self.otel_sample_ratio <= 1.0),
        ]
        for family in OAUTH_FAMILIES:
            secret = getattr(self, f"oauth_{family}_client_secret")
            secret_file = getattr(self, f"oauth_{family}_client_secret_file")
            url = getattr(self, f"oauth_{family}_token_url")
            checks += [
                (f"oauth_{family}_client_secret_file", not (secret and secret_file)),
                (f"oauth_{family}_token_url", not url or url.startswith(("https://", "http://"))),
            ]
        for name, ok in checks:
            if not ok:
                raise SettingsError(f"{PREFIX}{name.upper()}={getattr(self, name)!r} is invalid")


def _parse(key: str, raw: str, hint: Any) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        hint = next(a for a in get_args(hint) if a is not type(None))
    try:
        if hint is bool:
            lowered = raw.strip().lower()
            if lowered not in {"1", "0", "true", "false", "yes", "no", "on", "off"}:
                raise ValueError(raw)
            return lowered in {"1", "true", "yes", "on"}
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if hint is Path:
            return Path(raw)
        if hint is Secret:
            return Secret(raw)
        return raw
    except ValueError:
        shown = "***" if hint is Secret else repr(raw)
        raise SettingsError(
            f"{key}={shown} is not a valid {getattr(hint, '__name__', hint)}"
        ) from None


def replica_urls(settings: Settings) -> list[str]:
    """The replica DSNs of SEARCH_DATABASE_REPLICA_URLS (blank entries dropped)."""
    urls = settings.database_replica_urls.reveal().split(",")
    return [url.strip() for url in urls if url.strip()]


def describe() -> list[tuple[str, str, str]]:
    """(key, default, description) rows for documentation."""
    rows = []
    for f in dataclasses.fields(Settings):
        default = f.default
        shown = "" if isinstance(default, Secret) else str(default)
        rows.append((PREFIX + f.name.upper(), shown, str(f.metadata.get("doc", ""))))
    return rows
