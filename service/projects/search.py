"""Project search: validate, resolve the scope, embed once, one statement per page."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from service import context as request_context
from service.embeddings.base import Embedder, EmbeddingError
from service.errors import (
    NotFound,
    SemanticUnavailable,
    Unavailable,
    UnsupportedVectorAdapter,
)
from service.projects.embed_queue import EmbedQueue
from service.projects.lexical import compile_query
from service.projects.query_budget import QueryBudget, check_query_cost
from service.projects.request import ProjectSearchRequest, ValidRequest, validate
from service.ranking.tokens import TokenSigner, fingerprint
from service.store.base import (
    BM25_B,
    BM25_K1,
    Fusion,
    Mode,
    ProjectRecord,
    SearchHit,
    SearchPage,
    SearchPlan,
    Store,
)

SUPPORTED_VECTOR_ADAPTERS = frozenset({"sqlite-vec", "pgvector"})
_PAGE_KIND = "project-search"
_MAX_OFFSET = 10_000_000_000
# How many bytes one hit takes in a response (the servicer measures its encoding).
HitSize = Callable[[SearchHit], int]


def score_version(mode: Mode, fusion: Fusion, rrf_k: int, k1: float, b: float) -> str:
    """The name of the formula behind `score` for this mode and these parameters."""
    if mode is Mode.VECTOR:
        return "cosine/v1"
    bm25 = f"bm25(k1={k1:g},b={b:g})"
    if mode is Mode.FTS:
        return f"{bm25}/v2"
    if fusion is Fusion.SUM:
        return f"sum(f,v/max(v)):cosine+{bm25}/v1"
    if fusion is Fusion.RRF:
        return f"rrf(k={rrf_k}):cosine+{bm25}/v1"
    return f"max+0.3*min:cosine+{bm25}/v2"


@dataclass(frozen=True)
class ResultPage:
    """One page of results with its place in the whole list."""

    page: SearchPage
    page_number: int
    next_page_token: str
    mode: Mode
    projects: dict[int, ProjectRecord]
    score_version: str = ""


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
        bm25_k1: float = BM25_K1,
        bm25_b: float = BM25_B,
        embed_concurrency: int = 1,
        query_budget: QueryBudget | None = None,
    ) -> None:
        self._query_budget = query_budget or QueryBudget()
        self._bm25 = (bm25_k1, bm25_b)
        self._statement_timeout = statement_timeout
        self._store = store
        self._embedder = embedder
        self._queries = (
            EmbedQueue(embedder, concurrency=embed_concurrency) if embedder is not None else None
        )
        self._signer = signer
        self._exact_scan_limit = exact_scan_limit

    async def pages(
        self,
        tenant: str,
        request: ProjectSearchRequest,
        hit_size: HitSize | None = None,
        max_page_bytes: int = 0,
    ) -> AsyncIterator[ResultPage]:
        """Yield up to `max_pages` pages; the first embedding happens at most once.

        With `hit_size`, a page whose hits would take more than `max_page_bytes` ends
        before the first hit that does not fit: `has_more` and its token continue at
        that hit, so nothing is skipped (see docs/semantics.md)."""
        valid = validate(request)
        check_query_cost(valid.text, self._query_budget)
        binding = _binding(tenant, valid)
        page_number, offset = 1, 0
        if valid.page_token:
            state = self._signer.verify(valid.page_token, _PAGE_KIND, binding, field="page_token")
            page_number = _page_from_state(state)
            offset = _offset_from_state(state, page_number, valid.page_size)
        version = score_version(valid.mode, valid.fusion, valid.rrf_k, *self._bm25)
        if not valid.scope:
            yield ResultPage(_empty(valid.mode), page_number, "", valid.mode, {}, version)
            return
        projects = await self._resolve_scope(tenant, valid.scope)
        query_vector = (
            await self._embed_query(tenant, valid) if valid.mode is not Mode.FTS else None
        )
        plan = SearchPlan(
            tenant=tenant,
            project_ids=valid.scope,
            mode=valid.mode,
            lexical=compile_query(valid.text) if valid.text.strip() else None,
            query_vector=query_vector,
            identity=self._embedder.identity if self._embedder else None,
            filters=valid.filters,
            limit=valid.page_size,
            offset=offset,
            include_chunks=valid.include_chunks,
            min_similarity=valid.min_similarity,
            exact_scan_limit=self._exact_scan_limit,
            fusion=valid.fusion,
            rrf_k=valid.rrf_k,
            bm25_k1=self._bm25[0],
            bm25_b=self._bm25[1],
        )
        for _ in range(valid.max_pages):
            # Statement timeouts follow the call's deadline, and never exceed the server's.
            remaining = request_context.current().time_remaining()
            limit = self._statement_timeout
            timeout = limit if remaining is None else min(remaining, limit)
            plan = dataclasses.replace(plan, timeout=timeout)
            page = await self._store.search(plan)
            if hit_size is not None:
                page = _fit(page, hit_size, max_page_bytes)
            token = ""
            following = plan.offset + len(page.hits)
            more = page.has_more
            if more:
                resume: dict[str, object] = {"p": page_number + 1}
                if following != page_number * valid.page_size:
                    resume["o"] = following  # a page cut by bytes: resume at its first cut hit
                token = self._signer.sign(_PAGE_KIND, binding, resume)
            # Not bound across the yield: a stream whose client stops reading must not keep
            # its last page alive while it waits.
            ready = [ResultPage(page, page_number, token, valid.mode, projects, version)]
            del page
            yield ready.pop()
            if not more:
                return
            page_number += 1
            plan = dataclasses.replace(plan, offset=following)

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

    async def _embed_query(self, tenant: str, valid: ValidRequest) -> tuple[float, ...]:
        capabilities = self._store.capabilities
        if capabilities.vector_adapter not in SUPPORTED_VECTOR_ADAPTERS:
            raise UnsupportedVectorAdapter(
                f"multi-project vector and hybrid search does not support the vector adapter "
                f"{capabilities.vector_adapter!r}; use pgvector or sqlite-vec, or request FTS",
                metadata={"adapter": capabilities.vector_adapter},
            )
        if self._queries is None:
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
        # Without a client deadline the call may wait as long as one statement may run.
        remaining = request_context.current().time_remaining()
        budget = self._statement_timeout if remaining is None else remaining
        try:
            vectors = await self._queries.embed(tenant, [valid.text], budget)
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
        # Fusion shapes only HYBRID's ranking; a token stays valid across it in other modes.
        *((valid.fusion.value, valid.rrf_k) if valid.mode is Mode.HYBRID else ()),
    )


def _page_from_state(state: dict[str, object]) -> int:
    page = state.get("p")
    if not isinstance(page, int) or page < 1 or page > 10_000_000:
        from service.errors import InvalidPageToken

        raise InvalidPageToken.field("page_token", "token is malformed")
    return page


def _offset_from_state(state: dict[str, object], page_number: int, page_size: int) -> int:
    offset = state.get("o", (page_number - 1) * page_size)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= _MAX_OFFSET:
        from service.errors import InvalidPageToken

        raise InvalidPageToken.field("page_token", "token is malformed")
    return offset


def _fit(page: SearchPage, hit_size: HitSize, max_bytes: int) -> SearchPage:
    """The leading hits that fit in `max_bytes` (at least one: a single hit too large for
    any message is refused when it is sent, with ErrorInfo)."""
    used = 0
    for index, hit in enumerate(page.hits):
        used += hit_size(hit)
        if used > max_bytes and index > 0:
            return dataclasses.replace(page, hits=page.hits[:index], has_more=True)
    return page


def _empty(mode: Mode) -> SearchPage:
    return SearchPage(
        hits=(),
        total=0 if mode is Mode.FTS else None,
        has_more=False,
        relaxed=False,
        ranking_is_exact=True,
    )
