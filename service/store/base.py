"""The Store protocol both backends implement, and the plain records it speaks."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from service import errors
from service.embeddings.base import EmbeddingIdentity
from service.projects.lexical import LexicalQuery
from service.timerange import TimeRange

if TYPE_CHECKING:
    from service.store.lexical_index import LexicalCacheStats

FUSION_BONUS = 0.3
BM25_K1 = 1.2  # Lucene's defaults (SEARCH_BM25_K1, SEARCH_BM25_B)
BM25_B = 0.75
RRF_K = 60  # as in the RRF paper and workspace search
MAX_MATCHED_CHUNKS = 5
SNIPPET_CHARS = 300

DocKey = tuple[str, str]  # (kind, row_id); with project_id the identity of a document


class Mode(enum.StrEnum):
    """Retrieval mode of a project search."""

    FTS = "fts"
    VECTOR = "vector"
    HYBRID = "hybrid"


class Fusion(enum.StrEnum):
    """How HYBRID combines its vector and lexical channels."""

    SUM = "sum"  # f + v / v_max: each channel's score relative to its best, summed
    RRF = "rrf"  # sum of 1 / (k + rank) over the channels' whole lists
    MAX_MIN = "max_min"  # max(v, f) + 0.3 * min(v, f), f globally normalised BM25


DEFAULT_FUSION = Fusion.SUM  # measured best on vaswani-npl, both stores (docs/semantics.md)


class Outcome(enum.StrEnum):
    """What an upsert did to one document."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Capabilities:
    """What a store can do; `vector_reason` says what to install when vectors are off."""

    backend: str  # "sqlite" | "postgres"
    vector_search: bool
    vector_adapter: str  # "sqlite-vec" | "pgvector"
    vector_reason: str = ""


@dataclass(frozen=True)
class ProjectRecord:
    """A project row."""

    project_id: int
    tenant: str
    external_id: str
    name: str
    created_at: datetime


@dataclass(frozen=True)
class DocumentInput:
    """A validated document ready to store; `content_hash` covers every stored field."""

    kind: str
    row_id: str
    title: str
    path: str
    body: str
    category: str
    note_type: str
    metadata: Mapping[str, Any]
    created_at: datetime | None
    updated_at: datetime | None
    content_hash: str
    ngrams: str  # script n-grams of title + body for the lexical channel (CJK etc.)

    @property
    def key(self) -> DocKey:
        """(kind, row_id)."""
        return (self.kind, self.row_id)


@dataclass(frozen=True)
class ChunkInput:
    """One chunk of a document and, when known, its vector of `identity`."""

    index: int
    text: str
    source_hash: str  # sha256 hex of text
    vector: Sequence[float] | None = None
    identity: EmbeddingIdentity | None = None


@dataclass(frozen=True)
class DocumentWrite:
    """A document with its complete chunk list (replaces the stored version atomically)."""

    document: DocumentInput
    chunks: Sequence[ChunkInput]


@dataclass(frozen=True)
class EmbeddingCounts:
    """Vectors of one identity in one project."""

    identity: EmbeddingIdentity
    ready: int
    pending: int


@dataclass(frozen=True)
class ProjectStatus:
    """Index status of one project."""

    project: ProjectRecord
    documents: int
    chunks: int
    embeddings: tuple[EmbeddingCounts, ...]
    chunks_needing_embedding: int  # chunks without a ready, current vector of the configured id


@dataclass(frozen=True)
class VectorCacheStats:
    """A store's in-process KNN matrices (service.store.sqlite.vector_cache,
    service.store.postgres.vector_cache)."""

    projects: int
    bytes: int
    budget_bytes: int
    loads: int  # project matrices read from the database (first use, or after a change)
    evictions: int  # projects dropped to stay within the budget
    fallbacks: int  # KNN searches the matrices did not answer (too large; PG: or stale)


@dataclass(frozen=True)
class StoreStats:
    """What the metrics endpoint reads at scrape time (cheap, in memory, no statement)."""

    connections_in_use: int
    connections: int
    reads: Mapping[str, int]  # searches served, by backend: "primary" | "replica"
    vector_cache: VectorCacheStats | None = None
    lexical_cache: LexicalCacheStats | None = None


@dataclass(frozen=True)
class MetadataCondition:
    """One metadata filter: `op` in eq|contains_all|in|gt|gte|lt|lte|between|is_null."""

    path: tuple[str, ...]
    op: str
    values: tuple[str | float | bool, ...] = ()


@dataclass(frozen=True)
class Filters:
    """Restrictions applied to the eligible set before any ranking."""

    kinds: tuple[str, ...] = ()
    metadata: tuple[MetadataCondition, ...] = ()
    note_types: tuple[str, ...] = ()  # lower-cased; compared with LOWER(note_type)
    directory_prefix: str = ""  # normalised, no leading "./" or surrounding "/"
    categories: tuple[str, ...] = ()
    created: TimeRange = TimeRange()
    updated: TimeRange = TimeRange()


@dataclass(frozen=True)
class SearchPlan:
    """Everything one retrieval statement needs. The scope is validated and tenant-owned."""

    tenant: str
    project_ids: tuple[int, ...]  # non-empty, positive, de-duplicated, sorted
    mode: Mode
    lexical: LexicalQuery | None  # None: no lexical channel (blank text)
    query_vector: tuple[float, ...] | None  # set for VECTOR and HYBRID
    identity: EmbeddingIdentity | None  # the configured embedding (vectors must match it)
    filters: Filters
    limit: int  # page size
    offset: int
    include_chunks: bool = False
    min_similarity: float = 0.0
    exact_scan_limit: int = 50_000  # eligible chunks above this use the ANN index
    timeout: float | None = None  # seconds; the statement is cancelled past it
    fusion: Fusion = DEFAULT_FUSION  # HYBRID only
    rrf_k: int = RRF_K
    bm25_k1: float = BM25_K1
    bm25_b: float = BM25_B


@dataclass(frozen=True)
class MatchedChunk:
    """A chunk that matched the query vector."""

    index: int
    text: str
    similarity: float


@dataclass(frozen=True)
class SearchHit:
    """One ranked document."""

    project_id: int
    project_external_id: str
    kind: str
    row_id: str
    title: str
    path: str
    category: str
    note_type: str
    metadata: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float
    vector_score: float
    fts_score: float  # raw BM25, higher is better
    fts_normalized: float
    snippet: str
    chunks: tuple[MatchedChunk, ...] = ()


@dataclass(frozen=True)
class SearchPage:
    """One page of results. `total` is exact for FTS and None for semantic modes."""

    hits: tuple[SearchHit, ...]
    total: int | None
    has_more: bool
    relaxed: bool
    ranking_is_exact: bool


@dataclass(frozen=True)
class AccountRecord:
    """A stored provider account; `sealed_credentials` is ciphertext the store never reads."""

    account_id: str
    tenant: str
    provider: str
    display_name: str
    base_url: str
    sealed_credentials: bytes = field(repr=False)
    created_at: datetime
    needs_reconnect: bool = False


StatementHook = Callable[[str], None]


def plan_span_attributes(plan: SearchPlan) -> dict[str, str | int]:
    """What a retrieval span may say about its plan: no text, no vector, no filter values."""
    return {
        "search.mode": plan.mode.value,
        "search.projects": len(plan.project_ids),
        "search.limit": plan.limit,
        "search.offset": plan.offset,
    }


def project_not_found(project_id: int) -> errors.NotFound:
    """The one NotFound for a project id that is missing or another tenant's (same text)."""
    return errors.NotFound(
        f"project {project_id} not found",
        reason="PROJECT_NOT_FOUND",
        metadata={"projectId": str(project_id)},
    )


class Store(Protocol):
    """Persistence for projects, documents, chunks, vectors and accounts."""

    @property
    def capabilities(self) -> Capabilities:
        """What this store can do."""
        ...

    async def open(self) -> None:
        """Connect and apply migrations (idempotent; safe for concurrent replicas)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def ping(self) -> None:
        """Raise errors.Unavailable when the database cannot be reached."""
        ...

    def add_statement_hook(self, hook: StatementHook) -> None:
        """Call `hook(sql)` for every statement executed (tests count retrieval statements)."""
        ...

    def stats(self) -> StoreStats:
        """Connection usage and reads by backend, from memory (metrics scrape it)."""
        ...

    async def pending_chunks(self) -> int:
        """Chunks of every tenant without a ready vector of the configured embedding."""
        ...

    async def create_project(self, tenant: str, external_id: str, name: str) -> ProjectRecord:
        """Create a project; errors.AlreadyExists when the external id is taken."""
        ...

    async def list_projects(self, tenant: str, after_id: int, limit: int) -> list[ProjectRecord]:
        """Projects of `tenant` with id > after_id, by id."""
        ...

    async def get_projects(self, tenant: str, project_ids: Sequence[int]) -> list[ProjectRecord]:
        """The subset of `project_ids` owned by `tenant`."""
        ...

    async def delete_project(self, tenant: str, project_id: int) -> int | None:
        """Delete a project of `tenant`; documents deleted, or None when not found."""
        ...

    async def document_hashes(
        self, tenant: str, project_id: int, keys: Sequence[DocKey]
    ) -> dict[DocKey, str]:
        """Stored content hashes of the given documents (missing keys are absent).

        The statement checks the tenant; errors.NotFound when the project is not the
        tenant's (also for an empty `keys`, so callers learn ownership from this call).
        """
        ...

    async def ready_vectors(
        self,
        tenant: str,
        project_id: int,
        source_hashes: Sequence[str],
        identity: EmbeddingIdentity,
    ) -> dict[str, list[float]]:
        """Ready vectors of `identity` already stored in the project for these chunk texts.

        errors.NotFound when the project is not the tenant's (checked in the statement).
        """
        ...

    async def write_documents(
        self, tenant: str, project_id: int, writes: Sequence[DocumentWrite]
    ) -> list[Outcome]:
        """Replace each document with its chunks and vectors; each document is atomic.

        Every statement carries the tenant; errors.NotFound (nothing written) when the
        project is not the tenant's.
        """
        ...

    async def delete_documents(self, tenant: str, project_id: int, keys: Sequence[DocKey]) -> int:
        """Delete documents; returns how many existed.

        errors.NotFound (nothing deleted) when the project is not the tenant's.
        """
        ...

    async def index_status(
        self, tenant: str, project_ids: Sequence[int], identity: EmbeddingIdentity | None
    ) -> list[ProjectStatus]:
        """Status of the tenant's projects among `project_ids` (all of them when empty).

        Ids the tenant does not own are simply absent (every statement carries the tenant).
        """
        ...

    async def search(self, plan: SearchPlan) -> SearchPage:
        """Run one retrieval statement (plus an exact count for FTS) and hydrate the page."""
        ...

    async def create_account(self, record: AccountRecord) -> None:
        """Store an account."""
        ...

    async def list_accounts(self, tenant: str) -> list[AccountRecord]:
        """Accounts of `tenant`."""
        ...

    async def all_accounts(self, after: str = "", limit: int = 500) -> list[AccountRecord]:
        """Up to `limit` of every tenant's accounts whose id sorts after `after`, in id order
        (maintenance only, page by page: re-sealing credentials)."""
        ...

    async def delete_account(self, tenant: str, account_id: str) -> bool:
        """Delete an account of `tenant`; False when not found."""
        ...

    async def set_account_reconnect(
        self, tenant: str, account_id: str, needs: bool, *, sealed: bytes | None = None
    ) -> None:
        """Mark an account as needing reconnection (after a 401/403) or healthy again; with
        `sealed`, only while it holds those credentials (not ones a reconnect stored since)."""
        ...

    async def replace_account_credentials(
        self,
        tenant: str,
        account_id: str,
        sealed_credentials: bytes,
        *,
        needs_reconnect: bool | None = None,
    ) -> bool:
        """Replace an account's sealed credentials in place; False when `tenant` has none.

        `needs_reconnect` sets the flag too; None keeps it as it is.
        """
        ...

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        """Remember that the provider asked not to call `resource` of the account before
        `until` (unix seconds; the later wait wins); waits over by `now` are dropped."""
        ...

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        """The accounts' waits still running at `now`: account -> resource -> until (unix
        seconds); accounts without a running wait are absent. One read for a whole call."""
        ...

    async def refresh_account_credentials(
        self,
        tenant: str,
        account_id: str,
        refresh: Callable[[bytes], Awaitable[bytes | None]],
    ) -> bytes | None:
        """Run `refresh(stored sealed credentials)` holding a lock on the account that every
        replica sharing the database respects, and commit the blob it returns (None: keep)
        before releasing it. Returns the blob stored at the end; None for an unknown account.
        """
        ...
