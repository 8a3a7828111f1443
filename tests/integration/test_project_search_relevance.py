"""Issue 16 through the real server and channel, on both stores: natural-language text never
gives an empty full-text list, BM25 is Lucene's over the scope, and HYBRID fuses by rank."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import common_pb2, index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.integration.conftest import HAVE_PG_SUPPORT
from tests.support.server import channel_to, running_server
from tests.support.status import decode

if HAVE_PG_SUPPORT:
    from tests.support.pg import fresh_database

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# A sentence with a quoted phrase, an incident number, an identifier: each natural language.
CORPUS = {
    "wysiwyg": "Word processors show what you see is what you get layouts while typing.",
    "editors": "Programmers choose text editors with syntax colouring and macros.",
    "incident": "Incident 70803 stopped the el/1 line for an hour.",
    "deploys": "We deploy on weekdays; a deploy freeze starts each Friday at noon.",
    "coffee": "Coffee brewing notes: grind size, water temperature, steep time.",
    "planning": "Quarterly planning of the platform roadmap and hiring.",
}
# Short bodies whose exact Lucene BM25 values are checked by hand.
PAIR = {"dense": "star star star", "sky": "star map night sky"}


@asynccontextmanager
async def _server(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[grpc.aio.Channel]:
    env = {"SEARCH_EMBEDDER": "deterministic"}
    if store == "sqlite":
        async with running_server(tmp_path / store, env) as app, channel_to(app) as channel:
            yield channel
        return
    async with fresh_database(request.getfixturevalue("pg_dsn")) as dsn:
        env["SEARCH_DATABASE_URL"] = dsn
        async with running_server(tmp_path / store, env) as app, channel_to(app) as channel:
            yield channel


async def _project(
    channel: grpc.aio.Channel, name: str, docs: dict[str, str], vectorless: Sequence[str] = ()
) -> int:
    """A project holding `docs` (row id -> body); `vectorless` ones get vectors of another
    model, which search never uses."""
    index = index_pb2_grpc.IndexServiceStub(channel)
    project = (await index.CreateProject(index_pb2.CreateProjectRequest(external_id=name))).project
    documents = []
    for row_id, body in docs.items():
        doc = index_pb2.Document(kind="note", row_id=row_id, body=body)
        if row_id in vectorless:
            doc.supplied_vectors.CopyFrom(
                index_pb2.SuppliedVectors(
                    identity=common_pb2.EmbeddingIdentity(model="elsewhere", dimensions=2),
                    chunks=[index_pb2.SuppliedChunk(text=body, vector=[1.0, 0.0])],
                )
            )
        documents.append(doc)

    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        yield index_pb2.UpsertDocumentsRequest(project_id=project.project_id, documents=documents)

    await index.UpsertDocuments(messages())
    return int(project.project_id)


async def _search(
    channel: grpc.aio.Channel,
    project: int,
    text: str,
    mode: ps.SearchMode = ps.SEARCH_MODE_FTS,
    *,
    fusion: int = ps.HYBRID_FUSION_UNSPECIFIED,
    rrf_k: int = 0,
) -> ps.ProjectSearchPage:
    stub = ps_grpc.ProjectSearchServiceStub(channel)
    request = ps.SearchProjectsRequest(
        scope=ps.ProjectScope(project_ids=[project]), text=text, mode=mode, page_size=50
    )
    # Set after construction: an unknown enum number is what a newer client could send.
    request.fusion = fusion  # type: ignore[assignment]  # test sends unknown values too
    request.rrf_k = rrf_k
    pages = [m.page async for m in stub.SearchProjects(request)]
    assert len(pages) == 1
    return pages[0]


def _ids(page: ps.ProjectSearchPage) -> list[str]:
    return [r.row_id for r in page.results]


def _lucene(tf: int, dl: int, avgdl: float, n: int, df: int) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl))


@pytest.mark.parametrize("store", STORES)
async def test_natural_language_text_never_empties_the_full_text_list(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _server(store, tmp_path, request) as channel:
        project = await _project(channel, "corpus", CORPUS)

        # A quoted phrase inside a sentence is a phrase, not an AND of every word.
        quoted = await _search(channel, project, 'which tools give "what you see is what you get"')
        assert _ids(quoted)[0] == "wysiwyg"
        # Numbers and identifiers such as el/1 are terms like any other.
        numeric = await _search(channel, project, "outage report 70803 el/1")
        assert _ids(numeric)[0] == "incident"
        # Two words relax too: one of them is enough, after the documents holding both.
        two = await _search(channel, project, "deploy tomorrow")
        assert (_ids(two), two.relaxed, two.total) == (["deploys"], True, 1)
        both = await _search(channel, project, "coffee planning")
        assert sorted(_ids(both)) == ["coffee", "planning"]

        # Explicit syntax keeps its strict meaning: a lone phrase, AND, prefix*.
        for strict in ('"what you get tomorrow"', "deploy AND tomorrow", "deploy* tomorrow"):
            page = await _search(channel, project, strict)
            assert (_ids(page), page.relaxed) == ([], False), strict
        # Malformed syntax keeps its documented meaning (the AND of its words, never relaxed).
        broken = await _search(channel, project, "(deploy AND tomorrow")
        assert (_ids(broken), broken.relaxed) == ([], False)


@pytest.mark.parametrize("store", STORES)
async def test_a_term_in_every_document_keeps_its_bm25_and_hybrid_ranks_by_rank(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _server(store, tmp_path, request) as channel:
        project = await _project(channel, "pair", PAIR, vectorless=["dense"])

        fts = await _search(channel, project, "star")
        assert fts.score_version == "bm25(k1=1.2,b=0.75)/v2"
        scores = {r.row_id: r.scores.fts_score for r in fts.results}
        # Lucene idf over the two-document scope: ln(1 + 0.5 / 2.5), never clamped to ~0.
        assert scores["dense"] == pytest.approx(_lucene(3, 3, 3.5, 2, 2), rel=1e-9)
        assert scores["sky"] == pytest.approx(_lucene(1, 4, 3.5, 2, 2), rel=1e-9)

        # SUM (the default): the vector-less document, first in FTS, does not come first.
        summed = await _search(channel, project, "star", ps.SEARCH_MODE_HYBRID)
        assert summed.score_version == "sum(f,v/max(v)):cosine+bm25(k1=1.2,b=0.75)/v1"
        assert _ids(summed) == ["sky", "dense"]
        best_v = max(r.scores.vector_score for r in summed.results)
        for result in summed.results:
            v, f = result.scores.vector_score, result.scores.fts_normalized
            assert result.scores.score == pytest.approx(f + v / best_v)
        assert summed.results[1].scores.score == pytest.approx(1.0)  # f = 1, no vector

        # RRF: the same order, by rank.
        hybrid = await _search(
            channel, project, "star", ps.SEARCH_MODE_HYBRID, fusion=ps.HYBRID_FUSION_RRF
        )
        assert hybrid.score_version == "rrf(k=60):cosine+bm25(k1=1.2,b=0.75)/v1"
        assert _ids(hybrid) == ["sky", "dense"]
        first, second = hybrid.results
        assert first.scores.vector_score > 0
        assert second.scores.vector_score == 0
        assert first.scores.score == pytest.approx(1 / 61 + 1 / 62)
        assert second.scores.score == pytest.approx(1 / 61)
        custom = await _search(
            channel, project, "star", ps.SEARCH_MODE_HYBRID, fusion=ps.HYBRID_FUSION_RRF, rrf_k=1
        )
        assert custom.results[0].scores.score == pytest.approx(1 / 2 + 1 / 3)
        assert custom.score_version.startswith("rrf(k=1):")

        # MAX_MIN is still offered, with its own version.
        max_min = await _search(
            channel, project, "star", ps.SEARCH_MODE_HYBRID, fusion=ps.HYBRID_FUSION_MAX_MIN
        )
        assert max_min.score_version == "max+0.3*min:cosine+bm25(k1=1.2,b=0.75)/v2"
        for result in max_min.results:
            v, f = result.scores.vector_score, result.scores.fts_normalized
            assert result.scores.score == pytest.approx(max(v, f) + 0.3 * min(v, f))


@pytest.mark.parametrize("store", STORES)
async def test_bad_fusion_values_name_the_field(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _server(store, tmp_path, request) as channel:
        project = await _project(channel, "pair", PAIR)
        for field, fusion, rrf_k in (("rrf_k", 0, -1), ("rrf_k", 0, 10_001), ("fusion", 9, 0)):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _search(
                    channel, project, "star", ps.SEARCH_MODE_HYBRID, fusion=fusion, rrf_k=rrf_k
                )
            decoded = decode(caught.value)
            assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
            assert [name for name, _ in decoded.violations] == [field]


@pytest.mark.postgres
@pytest.mark.skipif(not HAVE_PG_SUPPORT, reason="tests/support/pg.py is missing")
async def test_both_stores_give_the_same_full_text_order(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    queries = [
        "deploy freeze friday",
        "text editors for programmers",
        'which tools give "what you see is what you get"',
        "coffee planning roadmap",
        "incident 70803",
        "platform",
    ]
    lists: dict[str, list[list[tuple[str, float]]]] = {}
    for store in ("sqlite", "postgres"):
        async with _server(store, tmp_path, request) as channel:
            project = await _project(channel, "corpus", CORPUS)
            pages = [await _search(channel, project, text) for text in queries]
            lists[store] = [[(r.row_id, r.scores.fts_score) for r in p.results] for p in pages]
    for text, lite, pg in zip(queries, lists["sqlite"], lists["postgres"], strict=True):
        assert lite, text
        assert [row for row, _ in lite] == [row for row, _ in pg], text
        # The same formula over the same stored document lengths: the same scores.
        assert all(score > 0 for _, score in lite + pg), text
        assert [score for _, score in lite] == pytest.approx([score for _, score in pg]), text
