"""The async client against the real server: indexing, project search, paging, errors."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from search_client import (
    AlreadyExistsError,
    AsyncSearchClient,
    Document,
    DocumentKey,
    DocumentOutcome,
    HybridFusion,
    InvalidArgumentError,
    MatchedChunk,
    MetadataFilter,
    MetadataOperator,
    NotFoundError,
    PermissionDeniedError,
    ProjectSearchFilters,
    RetryPolicy,
    SearchMode,
    UnauthenticatedError,
)
from tests.support.server import running_server

TOPICS = {
    "nebulae": "A nebula is a cloud of gas where new stars are born from collapsing dust.",
    "pulsars": "A pulsar is a rotating neutron star; its radio beams sweep past like a lighthouse.",
    "supernovae": "A supernova is the explosion of a massive star at the end of its life.",
    "comets": "A comet is a body of ice and dust with a coma and two tails near the Sun.",
    "galaxies": "A galaxy holds billions of stars, gas and dark matter bound by gravity.",
    "moon": "The Moon shows phases as we see different parts of its sunlit half.",
    "telescopes": "A reflecting telescope gathers starlight with a curved mirror.",
}
CORPUS = [
    Document(
        "note", f"{name}.md", title=name.capitalize(),
        path=f"{'stars' if 'star' in body else 'sky'}/{name}.md", body=f"# {name}\n\n{body}",
        metadata={"topic": name, "words": len(body.split())},
        create_time=datetime(2024, 1, 1, tzinfo=UTC),
    )
    for name, body in TOPICS.items()
]
STAR_ROWS = {d.row_id for d in CORPUS if "star" in d.body.lower()}
NO_RETRY = RetryPolicy(max_attempts=1)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncSearchClient]:
    async with (
        running_server(tmp_path) as app,
        AsyncSearchClient(f"127.0.0.1:{app.port}", retry=NO_RETRY) as c,
    ):
        yield c


async def test_index_status_and_idempotent_upsert(client: AsyncSearchClient) -> None:
    project = await client.create_project("handbook", "Handbook")
    assert project.project_id > 0
    assert project.external_id == "handbook"
    assert project.create_time is not None
    assert project.create_time.tzinfo is not None

    first = await client.upsert_documents(project.project_id, CORPUS, batch_size=3)
    assert first.documents_received == first.documents_created == len(CORPUS)
    assert first.chunks_written >= len(CORPUS)
    assert [r.outcome for r in first.results] == [DocumentOutcome.CREATED] * len(CORPUS)
    assert [r.row_id for r in first.results] == [d.row_id for d in CORPUS]

    again = await client.upsert_documents(project.project_id, iter(CORPUS))
    assert again.documents_unchanged == len(CORPUS)
    assert again.chunks_embedded == 0

    status = await client.get_index_status([project.project_id])
    (row,) = status.projects
    assert (row.project_id, row.external_id, row.documents) == (
        project.project_id, "handbook", len(CORPUS)
    )
    assert status.configured_embedding is not None
    assert status.configured_embedding.dimensions > 0
    assert any(e.configured for e in row.embeddings)

    listed = [p.external_id async for p in client.iter_projects(page_size=1)]
    assert listed == ["handbook"]


async def test_rejected_documents_are_reported_not_raised(client: AsyncSearchClient) -> None:
    project = await client.create_project("rejects")
    summary = await client.upsert_documents(
        project.project_id, [Document("note", "ok", body="fine"), Document("", "bad", body="x")]
    )
    assert summary.documents_created == 1
    assert summary.documents_rejected == 1
    (rejected,) = summary.rejected
    assert rejected.row_id == "bad"
    assert "kind" in rejected.field


async def test_paging_across_calls_equals_one_big_page(client: AsyncSearchClient) -> None:
    project = await client.create_project("paging")
    await client.upsert_documents(project.project_id, CORPUS)
    ids = [project.project_id]

    whole = [r.row_id async for r in client.iter_project_results(ids, "star*", page_size=100)]
    assert set(whole) == STAR_ROWS
    paged = [r.row_id async for r in client.iter_project_results(ids, "star*", page_size=2)]
    assert paged == whole
    limited = [r.row_id async for r in client.iter_project_results(
        ids, "star*", page_size=2, pages_per_call=2, limit=3
    )]
    assert limited == whole[:3]

    pages = [p async for p in client.search_projects(ids, "star*", page_size=2, max_pages=10)]
    assert [p.page_number for p in pages] == list(range(1, len(pages) + 1))
    assert [r.row_id for p in pages for r in p.results] == whole
    assert all(p.next_page_token for p in pages[:-1])
    assert not pages[-1].next_page_token
    assert all(p.total_is_exact and p.total == len(whole) for p in pages)
    assert pages[0].mode is SearchMode.FTS

    resumed = [p async for p in client.search_projects(
        ids, "star*", page_size=2, page_token=pages[0].next_page_token
    )]
    assert resumed[0].page_number == 2
    assert resumed[0].results == pages[1].results


async def test_hybrid_fusion_and_rrf_k_reach_the_server(client: AsyncSearchClient) -> None:
    project = await client.create_project("fusion")
    await client.upsert_documents(project.project_id, CORPUS)
    ids, text = [project.project_id], "where are stars born"

    async def top(**options: object) -> tuple[str, float]:
        page = await anext(client.search_projects(
            ids, text, mode=SearchMode.HYBRID, page_size=3, **options  # type: ignore[arg-type]
        ))
        return page.score_version, page.results[0].scores.score

    default_version, default_score = await top()
    sum_version, sum_score = await top(fusion=HybridFusion.SUM)
    assert (sum_version, sum_score) == (default_version, default_score)
    assert default_version.startswith("sum(")
    assert 0 < default_score <= 2 + 1e-12  # two channels, each relative to its best
    rrf_version, rrf_score = await top(fusion=HybridFusion.RRF)
    assert rrf_version.startswith("rrf(k=60):")
    assert rrf_score <= 2 / 61 + 1e-12  # sum of 1 / (60 + rank) over two channels
    _, sharp = await top(fusion=HybridFusion.RRF, rrf_k=1)
    assert sharp > 2 / 61
    max_min_version, _ = await top(fusion=HybridFusion.MAX_MIN)
    assert len({max_min_version, rrf_version, default_version}) == 3
    with pytest.raises(InvalidArgumentError) as caught:
        await top(rrf_k=10_001)
    assert [v.field for v in caught.value.field_violations] == ["rrf_k"]


async def test_hybrid_results_are_typed_and_filters_apply(client: AsyncSearchClient) -> None:
    project = await client.create_project("hybrid")
    await client.upsert_documents(project.project_id, CORPUS)
    ids = [project.project_id]

    page = await anext(client.search_projects(
        ids, "where are stars born", mode=SearchMode.HYBRID, page_size=3, include_chunks=True
    ))
    assert page.mode is SearchMode.HYBRID
    assert not page.total_is_exact
    top = page.results[0]
    assert top.project_external_id == "hybrid"
    assert top.kind == "note"
    assert 0 <= top.scores.vector_score <= 1
    assert top.scores.score > 0
    assert all(isinstance(c, MatchedChunk) for c in top.chunks)
    assert top.metadata["topic"] == top.row_id.removesuffix(".md")
    assert top.create_time == datetime(2024, 1, 1, tzinfo=UTC)

    in_stars = ProjectSearchFilters(directory_prefix="stars")
    rows = [r async for r in client.iter_project_results(ids, "", filters=in_stars)]
    assert rows
    assert all(r.path.startswith("stars/") for r in rows)

    only_comets = ProjectSearchFilters(
        metadata=(MetadataFilter("topic", MetadataOperator.EQ, ("comets",)),)
    )
    rows = [r async for r in client.iter_project_results(
        ids, "comet", mode=SearchMode.HYBRID, filters=only_comets
    )]
    assert [r.row_id for r in rows] == ["comets.md"]

    deleted = await client.delete_documents(
        project.project_id, [("note", "comets.md"), DocumentKey("note", "missing.md")]
    )
    assert deleted == 1
    assert await client.delete_project(project.project_id) == len(CORPUS) - 1


async def test_errors_carry_reason_metadata_and_violations(client: AsyncSearchClient) -> None:
    await client.create_project("taken")
    with pytest.raises(AlreadyExistsError) as exists:
        await client.create_project("taken")
    assert exists.value.code is grpc.StatusCode.ALREADY_EXISTS

    with pytest.raises(NotFoundError) as missing:
        await anext(client.search_projects([987654], "x", request_id="rid-missing"))
    assert missing.value.reason == "PROJECT_NOT_FOUND"
    assert missing.value.domain == "search.v1"
    assert missing.value.metadata == {"projectId": "987654"}
    assert missing.value.request_id == "rid-missing"

    with pytest.raises(InvalidArgumentError) as bad:
        await anext(client.search_projects([], "x", page_size=5000, max_pages=99))
    assert {v.field for v in bad.value.field_violations} >= {"page_size", "max_pages"}

    with pytest.raises(InvalidArgumentError) as token:
        await anext(client.search_projects([1], "x", page_token="forged"))
    assert token.value.reason == "PAGE_TOKEN_INVALID"

    empty = await anext(client.search_projects([], "anything"))
    assert empty.results == ()
    assert not empty.next_page_token


async def test_bearer_tokens_and_roles(tmp_path: Path) -> None:
    def entry(token: str, role: str) -> str:
        return f"{hashlib.sha256(token.encode()).hexdigest()}:acme:{role}"

    env = {"SEARCH_AUTH_TOKENS": f"{entry('reader', 'read')},{entry('writer', 'write')}"}
    async with running_server(tmp_path, env=env) as app:
        target = f"127.0.0.1:{app.port}"
        async with AsyncSearchClient(target, retry=NO_RETRY) as anonymous:
            with pytest.raises(UnauthenticatedError):
                await anonymous.list_projects()
        async with AsyncSearchClient(target, token="reader", retry=NO_RETRY) as reader:
            with pytest.raises(PermissionDeniedError) as denied:
                await reader.create_project("x")
            assert denied.value.metadata.get("requiredRole") == "write"
        async with AsyncSearchClient(target, token="writer", retry=NO_RETRY) as writer:
            project = await writer.create_project("x")
        async with AsyncSearchClient(target, token="reader", retry=NO_RETRY) as reader:
            assert [p.project_id async for p in reader.iter_projects()] == [project.project_id]
