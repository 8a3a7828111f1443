"""Typed client for the search.v1 gRPC service (project search, workspace search, indexing).

    from search_client import SearchClient, SearchMode

    with SearchClient("127.0.0.1:50051") as client:
        project = client.create_project("handbook", "Handbook")
        for result in client.iter_project_results([project.project_id], "nebula",
                                                  mode=SearchMode.HYBRID, limit=20):
            print(result.title, result.scores.score)

Results are frozen dataclasses; failures raise `SearchError` subclasses carrying the
`ErrorInfo` reason, metadata and field violations. `AsyncSearchClient` has the same methods
for asyncio.
"""

from search_client._async_client import AsyncSearchClient
from search_client._enums import (
    AccountState,
    DocumentOutcome,
    HybridFusion,
    MetadataOperator,
    Provider,
    QueryKind,
    QueryState,
    SearchMode,
)
from search_client._errors import (
    AlreadyExistsError,
    CallCancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    SearchError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from search_client._models_index import (
    Document,
    DocumentKey,
    DocumentResult,
    EmbeddingIdentity,
    EmbeddingStatus,
    IndexStatus,
    Project,
    ProjectIndexStatus,
    ProjectList,
    SuppliedChunk,
    SuppliedVectors,
    UpsertSummary,
)
from search_client._models_search import (
    MatchedChunk,
    MetadataFilter,
    MetadataValue,
    ProjectSearchFilters,
    ProjectSearchPage,
    ProjectSearchResult,
    ScoreBreakdown,
    TimeRange,
)
from search_client._models_workspace import (
    Account,
    AccountList,
    Contribution,
    FusedPage,
    FusedResult,
    Guidance,
    NativeQuery,
    QueryCard,
    QueryStatus,
)
from search_client._options import RetryPolicy
from search_client._sync_client import SearchClient

__version__ = "0.1.0"

__all__ = [
    "Account",
    "AccountList",
    "AccountState",
    "AlreadyExistsError",
    "AsyncSearchClient",
    "CallCancelledError",
    "Contribution",
    "DeadlineExceededError",
    "Document",
    "DocumentKey",
    "DocumentOutcome",
    "DocumentResult",
    "EmbeddingIdentity",
    "EmbeddingStatus",
    "FailedPreconditionError",
    "FieldViolation",
    "FusedPage",
    "FusedResult",
    "Guidance",
    "HybridFusion",
    "IndexStatus",
    "InternalError",
    "InvalidArgumentError",
    "MatchedChunk",
    "MetadataFilter",
    "MetadataOperator",
    "MetadataValue",
    "NativeQuery",
    "NotFoundError",
    "PermissionDeniedError",
    "Project",
    "ProjectIndexStatus",
    "ProjectList",
    "ProjectSearchFilters",
    "ProjectSearchPage",
    "ProjectSearchResult",
    "Provider",
    "QueryCard",
    "QueryKind",
    "QueryState",
    "QueryStatus",
    "ResourceExhaustedError",
    "RetryPolicy",
    "ScoreBreakdown",
    "SearchClient",
    "SearchError",
    "SearchMode",
    "SuppliedChunk",
    "SuppliedVectors",
    "TimeRange",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UpsertSummary",
    "__version__",
]

# Public classes report the package, not the private module they live in (as httpx does).
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = "search_client"
del _name, _value
