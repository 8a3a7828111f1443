"""Project search: validate, resolve the scope, embed once, one statement per page."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

from service import context as request_context
from service.embeddings.base import Embedder, EmbeddingError
from service.errors import (
    NotFound,
    SemanticUnavailable,
    Unavailable,
    UnsupportedVectorAdapter,
)
from service.projects.lexical import compile_query
from service.projects.request import ProjectSearchRequest, ValidRequest, validate
from service.ranking.tokens import TokenSigner, fingerprint
from service.store.base import Mode, ProjectRecord, SearchPage, SearchPlan, Store

SUPPORTED_VECTOR_ADAPTERS = frozenset({"sqlite-vec", "pgvector"})
_PAGE_KIND = "project-search"


@dataclass(frozen=True)
class ResultPage:
    """One page of results with its place in the whole list."""

    page: SearchPage
    page_number: int
    next_page_token: str
    mode: Mode
    projects: dict[int, ProjectRecord]


class ProjectSearch:
    """Runs SearchProjects requests against a store."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        signer: TokenSigner,
        *,
        exact_scan_limit: int = 50_000,
        statement_timeout: float = 30.0,
    ) -> None:
        self._statement_timeout = statement_timeout
        self._store = store
        self._embedder = embedder
        self._signer = signer
        self._exact_scan_limit = exact_scan_limit

    async def pages(self, tenant: str, request: ProjectSearchRequest) -> AsyncIterator[ResultPage]:
        """Yield up to `max_pages` pages; the first embedding happens at most once."""
        valid = validate(request)
        binding = _binding(tenant, valid)
        page_number = 1
        if valid.page_token:
            state = self._signer.verify(valid.page_token, _PAGE_KIND, binding, field="page_token")
            page_number = _page_from_state(state)
        if not valid.scope:
            yield ResultPage(_empty(valid.mode), page_number, "", valid.mode, {})
            return
        projects = await self._resolve_scope(tenant, valid.scope)
        query_vector = await self._embed_query(valid) if valid.mode is not Mode.FTS else None
        plan = SearchPlan(
            tenant=tenant,
            project_ids=valid.scope,
            mode=valid.mode,
            lexical=compile_query(valid.text) if valid.text.strip() else None,
            query_vector=query_vector,
            identity=self._embedder.identity if self._embedder else None,
            filters=valid.filters,
            limit=valid.page_size,
            offset=(page_number - 1) * valid.page_size,
            include_chunks=valid.include_chunks,
            min_similarity=valid.min_similarity,
            exact_scan_limit=self._exact_scan_limit,
        )
        for _ in range(valid.max_pages):
            # Statement timeouts follow the call's deadline, and never exceed the server's.
            remaining = request_context.current().time_remaining()
            limit = self._statement_timeout
            timeout = limit if remaining is None else min(remaining, limit)
            plan = dataclasses.replace(plan, timeout=timeout)
            page = await self._store.search(plan)
            token = ""
            if page.has_more:
                token = self._signer.sign(_PAGE_KIND, binding, {"p": page_number + 1})
            yield ResultPage(page, page_number, token, valid.mode, projects)
            if not page.has_more:
                return
            page_number += 1
            plan = dataclasses.replace(plan, offset=plan.offset + plan.limit)

    async def _resolve_scope(self, tenant: str, scope: tuple[int, ...]) -> dict[int, ProjectRecord]:
        owned = {p.project_id: p for p in await self._store.get_projects(tenant, scope)}
        missing = [pid for pid in scope if pid not in owned]
        if missing:
            raise NotFound(
                f"project {missing[0]} not found",
                reason="PROJECT_NOT_FOUND",
                metadata={"projectId": str(missing[0])},
            )
        return owned

    async def _embed_query(self, valid: ValidRequest) -> tuple[float, ...]:
        capabilities = self._store.capabilities
        if capabilities.vector_adapter not in SUPPORTED_VECTOR_ADAPTERS:
            raise UnsupportedVectorAdapter(
                f"multi-project vector and hybrid search does not support the vector adapter "
                f"{capabilities.vector_adapter!r}; use pgvector or sqlite-vec, or request FTS",
                metadata={"adapter": capabilities.vector_adapter},
            )
        if self._embedder is None:
            raise SemanticUnavailable(
                "semantic search is off: no embedding model is configured; set SEARCH_EMBEDDER "
                "to local or openai, or request FTS",
                metadata={"setting": "SEARCH_EMBEDDER"},
            )
        if not capabilities.vector_search:
            raise SemanticUnavailable(
                capabilities.vector_reason or "the store cannot run vector search; request FTS",
                metadata={"backend": capabilities.backend},
            )
        try:
            vectors = await self._embedder.embed([valid.text])
        except EmbeddingError as error:
            raise Unavailable(f"embedding the query failed: {error}", retry_after=1.0) from error
        return tuple(vectors[0])


def _binding(tenant: str, valid: ValidRequest) -> str:
    return fingerprint(
        tenant,
        valid.scope,
        valid.text,
        valid.mode.value,
        repr(valid.filters),
        valid.page_size,
        valid.include_chunks,
        valid.min_similarity,
    )


def _page_from_state(state: dict[str, object]) -> int:
    page = state.get("p")
    if not isinstance(page, int) or page < 1 or page > 10_000_000:
        from service.errors import InvalidPageToken

        raise InvalidPageToken.field("page_token", "token is malformed")
    return page


def _empty(mode: Mode) -> SearchPage:
    return SearchPage(
        hits=(),
        total=0 if mode is Mode.FTS else None,
        has_more=False,
        relaxed=False,
        ranking_is_exact=True,
    )
