"""The asyncio client (grpc.aio)."""

# ruff: noqa: ASYNC109 - `timeout` is the gRPC deadline sent with each call, as in grpc.aio

# clients/python/generate_sync.py writes _sync_client.py from this module; edit this one.

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import grpc

from search_client import _async_calls as calls
from search_client import _convert_index as ci
from search_client import _convert_search as cs
from search_client import _convert_workspace as cw
from search_client._batches import async_requests
from search_client._enums import HybridFusion, Provider, SearchMode
from search_client._models_index import (
    Document,
    DocumentKey,
    IndexStatus,
    Project,
    ProjectList,
    UpsertSummary,
)
from search_client._models_search import (
    ProjectSearchFilters,
    ProjectSearchPage,
    ProjectSearchResult,
)
from search_client._models_workspace import (
    Account,
    AccountList,
    FusedPage,
    FusedResult,
    NativeQuery,
    QueryStatus,
)
from search_client._options import (
    DEFAULT_TIMEOUT,
    CallSpec,
    RetryPolicy,
    call_spec,
    channel_options,
)
from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import (
    accounts_pb2_grpc,
    index_pb2_grpc,
    project_search_pb2_grpc,
    workspace_search_pb2_grpc,
)
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb

__all__ = ["AsyncSearchClient"]

Metadata = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class _Stubs:
    channel: grpc.aio.Channel
    index: index_pb2_grpc.IndexServiceAsyncStub
    projects: project_search_pb2_grpc.ProjectSearchServiceAsyncStub
    workspace: workspace_search_pb2_grpc.WorkspaceSearchServiceAsyncStub
    accounts: accounts_pb2_grpc.AccountServiceAsyncStub


class AsyncSearchClient:
    """Async client for every search.v1 service; use as `async with AsyncSearchClient(...)`.

    `timeout` is per call in seconds (None: `default_timeout`); a streamed call's deadline
    covers its whole stream. `request_id` is sent as `x-request-id` (generated when omitted)
    and comes back on errors. UNAVAILABLE is retried per `retry`; every other failure raises
    a `SearchError` subclass.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        default_timeout: float | None = DEFAULT_TIMEOUT,
        credentials: grpc.ChannelCredentials | None = None,
        retry: RetryPolicy | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._target = target
        self._token = token
        self._default_timeout = default_timeout
        self._credentials = credentials
        self._retry = retry or RetryPolicy()
        self._options = channel_options(options)
        self._stubs: _Stubs | None = None

    def _open(self) -> _Stubs:
        # Created lazily so that the channel binds to the event loop that first uses it.
        if self._stubs is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(self._target, options=self._options)
            else:
                channel = grpc.aio.secure_channel(
                    self._target, self._credentials, options=self._options
                )
            self._stubs = _Stubs(
                channel,
                index_pb2_grpc.IndexServiceStub(channel),
                project_search_pb2_grpc.ProjectSearchServiceStub(channel),
                workspace_search_pb2_grpc.WorkspaceSearchServiceStub(channel),
                accounts_pb2_grpc.AccountServiceStub(channel),
            )
        return self._stubs

    async def close(self) -> None:
        """Close the channel; open calls are cancelled."""
        if self._stubs is not None:
            channel, self._stubs = self._stubs.channel, None
            await channel.close()

    async def __aenter__(self) -> AsyncSearchClient:
        self._open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _spec(self, timeout: float | None, request_id: str | None, metadata: Metadata) -> CallSpec:
        return call_spec(self._token, self._default_timeout, timeout, request_id, metadata)

    # ---- IndexService -------------------------------------------------------------------

    async def create_project(
        self, external_id: str = "", name: str = "", *, timeout: float | None = None,
        request_id: str | None = None, metadata: Metadata = (),
    ) -> Project:
        """Create a project (empty `external_id`: a new UUID); AlreadyExistsError if taken."""
        request = ipb.CreateProjectRequest(external_id=external_id, name=name)
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().index.CreateProject, request, spec, self._retry)
        return ci.project_from_pb(reply.project)

    async def list_projects(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None,
        request_id: str | None = None, metadata: Metadata = (),
    ) -> ProjectList:
        """One page of the caller's projects, ordered by project id."""
        request = ipb.ListProjectsRequest(page_size=page_size, page_token=page_token)
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().index.ListProjects, request, spec, self._retry)
        return ProjectList(
            tuple(ci.project_from_pb(p) for p in reply.projects), reply.next_page_token
        )

    async def iter_projects(
        self, *, page_size: int = 0, timeout: float | None = None, metadata: Metadata = ()
    ) -> AsyncIterator[Project]:
        """Every project of the caller's tenant, following page tokens."""
        token = ""
        while True:
            page = await self.list_projects(
                page_size=page_size, page_token=token, timeout=timeout, metadata=metadata
            )
            for project in page.projects:
                yield project
            token = page.next_page_token
            if not token:
                return

    async def delete_project(
        self, project_id: int, *, timeout: float | None = None, request_id: str | None = None,
        metadata: Metadata = (),
    ) -> int:
        """Delete a project with its documents; returns how many documents went with it."""
        request = ipb.DeleteProjectRequest(project_id=project_id)
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().index.DeleteProject, request, spec, self._retry)
        return reply.documents_deleted

    async def upsert_documents(
        self, project_id: int, documents: Iterable[Document] | AsyncIterable[Document], *,
        batch_size: int = 100, timeout: float | None = None, request_id: str | None = None,
        metadata: Metadata = (),
    ) -> UpsertSummary:
        """Stream documents in batches; see `UpsertSummary.rejected` for refused ones.

        Upserts are idempotent, so a list or tuple is re-sent on UNAVAILABLE; other
        iterables are read once and not retried.
        """
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.stream_unary(
            self._open().index.UpsertDocuments,
            lambda: async_requests(project_id, documents, batch_size),
            isinstance(documents, Sequence),
            spec,
            self._retry,
        )
        return ci.upsert_summary_from_pb(reply)

    async def delete_documents(
        self, project_id: int, keys: Iterable[DocumentKey | tuple[str, str]], *,
        timeout: float | None = None, request_id: str | None = None, metadata: Metadata = (),
    ) -> int:
        """Delete documents by (kind, row_id); unknown keys are ignored. Returns the count."""
        request = ipb.DeleteDocumentsRequest(project_id=project_id, keys=ci.keys_to_pb(keys))
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().index.DeleteDocuments, request, spec, self._retry)
        return reply.documents_deleted

    async def get_index_status(
        self, project_ids: Iterable[int] = (), *, timeout: float | None = None,
        request_id: str | None = None, metadata: Metadata = (),
    ) -> IndexStatus:
        """Documents and chunk vectors per project (no ids: every project of the tenant)."""
        request = ipb.GetIndexStatusRequest(project_ids=list(project_ids))
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().index.GetIndexStatus, request, spec, self._retry)
        return ci.index_status_from_pb(reply)

    # ---- ProjectSearchService -----------------------------------------------------------

    async def search_projects(
        self, project_ids: Iterable[int], text: str = "", *, mode: SearchMode = SearchMode.FTS,
        filters: ProjectSearchFilters | None = None, page_size: int = 0, page_token: str = "",
        max_pages: int = 1, include_chunks: bool = False, min_similarity: float = 0.0,
        fusion: HybridFusion | None = None, rrf_k: int = 0,
        timeout: float | None = None, request_id: str | None = None, metadata: Metadata = (),
    ) -> AsyncIterator[ProjectSearchPage]:
        """The pages of one SearchProjects call (up to `max_pages`) as they stream in.

        Cut by UNAVAILABLE after some pages, the call resumes from the last page token for
        the pages still owed; no page is delivered twice.
        """
        args = cs.SearchArgs(
            tuple(project_ids), text, mode, filters, page_size, max_pages, include_chunks,
            min_similarity, fusion, rrf_k,
        )
        async for response in calls.server_stream(
            self._open().projects.SearchProjects,
            lambda token, done: cs.search_request(
                dataclasses.replace(args, max_pages=max(1, args.max_pages - done)), token
            ),
            page_token,
            lambda response: response.page.next_page_token,
            False,
            lambda: self._spec(timeout, request_id, metadata),
            self._retry,
            pages=args.max_pages,
        ):
            yield cs.page_from_pb(response.page)

    async def iter_project_pages(
        self, project_ids: Iterable[int], text: str = "", *, mode: SearchMode = SearchMode.FTS,
        filters: ProjectSearchFilters | None = None, page_size: int = 0, page_token: str = "",
        pages_per_call: int = 1, include_chunks: bool = False, min_similarity: float = 0.0,
        fusion: HybridFusion | None = None, rrf_k: int = 0,
        timeout: float | None = None, metadata: Metadata = (),
    ) -> AsyncIterator[ProjectSearchPage]:
        """Every page, calling again with `next_page_token` until the results run out.

        Each call streams `pages_per_call` pages under its own deadline; an UNAVAILABLE call
        resumes after the last page received.
        """
        args = cs.SearchArgs(
            tuple(project_ids), text, mode, filters, page_size, pages_per_call, include_chunks,
            min_similarity, fusion, rrf_k,
        )
        async for response in calls.server_stream(
            self._open().projects.SearchProjects,
            lambda token, _done: cs.search_request(args, token),
            page_token,
            lambda response: response.page.next_page_token,
            True,
            lambda: self._spec(timeout, None, metadata),
            self._retry,
        ):
            yield cs.page_from_pb(response.page)

    def iter_project_results(
        self, project_ids: Iterable[int], text: str = "", *, mode: SearchMode = SearchMode.FTS,
        filters: ProjectSearchFilters | None = None, page_size: int = 0,
        pages_per_call: int = 1, include_chunks: bool = False, min_similarity: float = 0.0,
        fusion: HybridFusion | None = None, rrf_k: int = 0,
        limit: int | None = None, timeout: float | None = None, metadata: Metadata = (),
    ) -> AsyncIterator[ProjectSearchResult]:
        """Ranked results across every page, best first; stops after `limit` results."""
        pages = self.iter_project_pages(
            project_ids, text, mode=mode, filters=filters, page_size=page_size,
            pages_per_call=pages_per_call, include_chunks=include_chunks,
            min_similarity=min_similarity, fusion=fusion, rrf_k=rrf_k, timeout=timeout,
            metadata=metadata,
        )
        return calls.flatten(pages, lambda page: page.results, limit)

    # ---- WorkspaceSearchService ---------------------------------------------------------

    async def list_accounts(
        self, provider: Provider | None = None, *, timeout: float | None = None,
        request_id: str | None = None, metadata: Metadata = (),
    ) -> AccountList:
        """The caller's accounts and the query guidance for their providers."""
        request = wpb.ListAccountsRequest(
            provider=cw.provider_name(provider or Provider.UNSPECIFIED)
        )
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().workspace.ListAccounts, request, spec, self._retry)
        return cw.account_list_from_pb(reply)

    async def search_workspace(
        self, queries: Sequence[NativeQuery], *, top_k: int = 0, page_token: str = "",
        max_pages: int = 1, timeout: float | None = None, request_id: str | None = None,
        metadata: Metadata = (),
    ) -> AsyncIterator[QueryStatus | FusedPage]:
        """One SearchWorkspace call: each QueryStatus as it settles, then each fused page."""
        assembler = cw.PageAssembler()
        async for response in self._workspace_stream(
            queries, top_k, max_pages, page_token, False, lambda: self._spec(
                timeout, request_id, metadata
            ),
        ):
            if response.HasField("page"):
                for message in response.page.statuses:  # the statuses sent inside the page
                    yield assembler.status(message)
                yield assembler.page(response.page)
            else:
                yield assembler.status(response.query_status)

    async def iter_workspace_pages(
        self, queries: Sequence[NativeQuery], *, top_k: int = 0, page_token: str = "",
        pages_per_call: int = 1, max_pages: int | None = None, timeout: float | None = None,
        metadata: Metadata = (),
    ) -> AsyncIterator[FusedPage]:
        """Fused pages across calls, each carrying its query statuses; at most `max_pages`.

        A call whose last page is empty but has a token, after a status of that call with
        `retry_after` (a provider's rate limit is all that is left), is followed only once
        the largest such wait is over (at most 60 s; not counted in any call's `timeout`).
        """
        if max_pages is not None and max_pages <= 0:
            return
        assembler = cw.PageAssembler()
        count = 0
        async for response in self._workspace_stream(
            queries, top_k, pages_per_call, page_token, True,
            lambda: self._spec(timeout, None, metadata), cw.RateLimitPause,
        ):
            if not response.HasField("page"):
                assembler.status(response.query_status)
                continue
            for message in response.page.statuses:
                assembler.status(message)
            yield assembler.page(response.page)
            count += 1
            if max_pages is not None and count >= max_pages:
                return

    def iter_workspace_results(
        self, queries: Sequence[NativeQuery], *, top_k: int = 0, pages_per_call: int = 1,
        limit: int | None = None, timeout: float | None = None, metadata: Metadata = (),
    ) -> AsyncIterator[FusedResult]:
        """Fused results across pages, best first; stops after `limit` results.

        Waits out a provider's rate limit between calls as `iter_workspace_pages` does.
        """
        pages = self.iter_workspace_pages(
            queries, top_k=top_k, pages_per_call=pages_per_call, timeout=timeout,
            metadata=metadata,
        )
        return calls.flatten(pages, lambda page: page.results, limit)

    def _workspace_stream(
        self, queries: Sequence[NativeQuery], top_k: int, max_pages: int, page_token: str,
        follow: bool, new_spec: Callable[[], CallSpec],
        new_pause: Callable[[], Callable[[wpb.SearchWorkspaceResponse], float]] | None = None,
    ) -> AsyncIterator[wpb.SearchWorkspaceResponse]:
        frozen = tuple(queries)
        return calls.server_stream(
            self._open().workspace.SearchWorkspace,
            lambda token, _done: cw.search_request(frozen, top_k, max_pages, token),
            page_token,
            lambda response: response.page.next_page_token if response.HasField("page") else None,
            follow,
            new_spec,
            self._retry,
            new_pause=new_pause,
        )

    # ---- AccountService -----------------------------------------------------------------

    async def connect_account(
        self, provider: Provider, display_name: str, token: str, *, username: str = "",
        base_url: str = "", scopes: Sequence[str] = (), refresh_token: str = "",
        expire_time: datetime | None = None, timeout: float | None = None,
        request_id: str | None = None, metadata: Metadata = (),
    ) -> Account:
        """Connect a provider account; its credentials are stored encrypted, never returned.

        `scopes`: the OAuth scopes granted to `token`, when known (Slack: which channel
        types are searched, and `search:read.files` adds files). `refresh_token` and
        `expire_time` (absolute; naive is UTC) let the service renew an expiring token.
        """
        request = apb.ConnectAccountRequest(
            provider=cw.provider_name(provider),
            display_name=display_name,
            base_url=base_url,
            credentials=cw.credentials(token, username, scopes, refresh_token, expire_time),
        )
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(self._open().accounts.ConnectAccount, request, spec, self._retry)
        return cw.account_from_pb(reply.account)

    async def update_account_credentials(
        self, account_id: str, token: str, *, username: str = "", scopes: Sequence[str] = (),
        refresh_token: str = "", expire_time: datetime | None = None,
        timeout: float | None = None, request_id: str | None = None, metadata: Metadata = (),
    ) -> Account:
        """Replace an account's credentials in place: same id, CONNECTED again.

        Every stored field is replaced (what is not passed is erased), as in `connect_account`.
        """
        request = apb.UpdateAccountCredentialsRequest(
            account_id=account_id,
            credentials=cw.credentials(token, username, scopes, refresh_token, expire_time),
        )
        spec = self._spec(timeout, request_id, metadata)
        reply = await calls.unary(
            self._open().accounts.UpdateAccountCredentials, request, spec, self._retry
        )
        return cw.account_from_pb(reply.account)

    async def disconnect_account(
        self, account_id: str, *, timeout: float | None = None, request_id: str | None = None,
        metadata: Metadata = (),
    ) -> None:
        """Disconnect an account and erase its credentials."""
        request = apb.DisconnectAccountRequest(account_id=account_id)
        spec = self._spec(timeout, request_id, metadata)
        await calls.unary(self._open().accounts.DisconnectAccount, request, spec, self._retry)
