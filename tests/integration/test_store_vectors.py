"""Vector validity, exactness (exact scan vs KNN index) and index status per identity."""

from __future__ import annotations

import pytest

from service.embeddings.base import EmbeddingIdentity
from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Fusion, Mode, ProjectRecord
from tests.integration.conftest import SEMANTIC, Backend, Corpus, Doc, keys

STALE = "UPDATE vectors SET source_hash = 'stale' WHERE project_id = ?"


async def _stale_corpus(corpus: Corpus, backend: Backend) -> list[ProjectRecord]:
    projects = await corpus.projects(5)
    states = ["pending", "other-model", "ready", "other-dimensions", "none"]
    for project, state in zip(projects, states, strict=True):
        await corpus.write(
            project.project_id,
            [
                Doc(kind, "500", f"stale nebula {kind}", vectors=state)
                for kind in ("note", "relation")
            ],
        )
    # The third project's vectors no longer match their chunks' source hash.
    await backend.execute(STALE, projects[2].project_id)
    return projects


@pytest.mark.parametrize("exact_scan_limit", [50_000, 0])
async def test_stale_vectors_are_never_served(
    corpus: Corpus, backend: Backend, exact_scan_limit: int
) -> None:
    projects = await _stale_corpus(corpus, backend)
    scope = [p.project_id for p in projects]

    vector = await corpus.search(
        scope, Mode.VECTOR, "stale nebula", exact_scan_limit=exact_scan_limit, min_similarity=-1.0
    )
    assert vector.hits == ()

    hybrid = await corpus.search(
        scope,
        Mode.HYBRID,
        "stale nebula",
        exact_scan_limit=exact_scan_limit,
        include_chunks=True,
        min_similarity=-1.0,
    )
    assert len(hybrid.hits) == 10
    assert all(h.vector_score == 0 and h.chunks == () for h in hybrid.hits)


async def test_index_status_counts_ready_and_pending(corpus: Corpus, backend: Backend) -> None:
    projects = await _stale_corpus(corpus, backend)
    statuses = {
        s.project.project_id: s
        for s in await corpus.store.index_status("acme", [], corpus.identity)
    }
    assert set(statuses) == {p.project_id for p in projects}
    pending, other, stale, other_dims, none = (statuses[p.project_id] for p in projects)
    for status in statuses.values():
        assert (status.documents, status.chunks) == (2, 2)
        assert status.embeddings[0].identity == corpus.identity
        assert status.chunks_needing_embedding == 2
    assert [(e.ready, e.pending) for e in pending.embeddings] == [(0, 2)]
    assert [(e.identity.model, e.ready, e.pending) for e in other.embeddings] == [
        (corpus.identity.model, 0, 2),
        ("other-model", 2, 0),
    ]
    assert [(e.ready, e.pending) for e in stale.embeddings] == [(0, 2)]
    assert [(e.identity.dimensions, e.ready) for e in other_dims.embeddings] == [
        (corpus.identity.dimensions, 0),
        (8, 2),
    ]
    assert [(e.ready, e.pending) for e in none.embeddings] == [(0, 2)]


async def test_identity_change_makes_old_vectors_stale(
    corpus: Corpus, backend: Backend, embedder: DeterministicEmbedder
) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(project.project_id, [Doc("note", str(i), f"comet {i}") for i in range(3)])
    newer = DeterministicEmbedder(64)
    async with backend.opened(newer.identity) as reopened:
        (status,) = await reopened.index_status("acme", [project.project_id], newer.identity)
        assert status.chunks == 3
        assert status.chunks_needing_embedding == 3
        assert [(e.identity, e.ready, e.pending) for e in status.embeddings] == [
            (newer.identity, 0, 3),
            (embedder.identity, 3, 0),
        ]
        reader = Corpus(reopened, newer, "acme")
        for limit in (50_000, 0):
            page = await reader.search(
                [project.project_id],
                Mode.VECTOR,
                "comet",
                exact_scan_limit=limit,
                min_similarity=-1.0,
            )
            assert page.hits == ()
        fts = await reader.search([project.project_id], Mode.FTS, "comet")
        assert fts.total == 3


async def test_other_identity_in_plan_finds_nothing(corpus: Corpus) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(project.project_id, [Doc("note", "1", "comet tail")])
    plan = await corpus.plan([project.project_id], Mode.VECTOR, "comet tail")
    other = EmbeddingIdentity("other-model", corpus.identity.dimensions)
    from dataclasses import replace

    page = await corpus.store.search(replace(plan, identity=other, min_similarity=-1.0))
    assert page.hits == ()


@pytest.mark.parametrize("mode", SEMANTIC)
async def test_knn_path_is_flagged_and_sensible(corpus: Corpus, mode: Mode) -> None:
    projects = await corpus.projects(2)
    for n, project in enumerate(projects):
        await corpus.write(
            project.project_id,
            [
                Doc("note", str(i), f"galaxy cluster {i} {'redshift ' * (i % 3)}{n}")
                for i in range(12)
            ],
        )
    scope = [p.project_id for p in projects]
    exact = await corpus.search(scope, mode, "galaxy redshift", limit=10)
    approximate = await corpus.search(scope, mode, "galaxy redshift", limit=10, exact_scan_limit=1)

    assert exact.ranking_is_exact is True
    assert approximate.ranking_is_exact is False
    # The KNN search over-fetches, so on a corpus this small it finds the same rows.
    assert keys(approximate.hits) == keys(exact.hits)
    for a, b in zip(approximate.hits, exact.hits, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-5)
    assert approximate.has_more is True


async def test_fts_ranking_is_always_exact(corpus: Corpus) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(project.project_id, [Doc("note", "1", "galaxy")])
    page = await corpus.search([project.project_id], Mode.FTS, "galaxy", exact_scan_limit=0)
    assert page.ranking_is_exact is True


@pytest.mark.parametrize("mode", SEMANTIC)
async def test_min_similarity_threshold(corpus: Corpus, mode: Mode) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id,
        [
            Doc("note", "exact", "supernova remnant expansion"),
            Doc("note", "near", "supernova remnant"),
            Doc("note", "far", "supernova", vectors="pending"),
        ],
    )
    page = await corpus.search(
        [project.project_id],
        mode,
        "supernova remnant expansion",
        min_similarity=0.99,
        fusion=Fusion.MAX_MIN,
    )
    hits = {h.row_id: h for h in page.hits}
    assert hits["exact"].vector_score == pytest.approx(1.0, abs=1e-5)
    if mode is Mode.VECTOR:
        assert list(hits) == ["exact"]
    else:
        # FTS-only rows keep their lexical score; the dual-channel row fuses above 1.
        assert hits["exact"].score > 1.0
        assert all(h.vector_score == 0 and h.score <= 1.0 for k, h in hits.items() if k != "exact")
