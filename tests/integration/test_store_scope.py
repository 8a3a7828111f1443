"""Scope, identity and tenant rules of Store.search (reference tests 1, 3 and 8-style)."""

from __future__ import annotations

import pytest

from service.store.base import Mode, Store
from tests.integration.conftest import SEMANTIC, WRITE_WORDS, Corpus, Doc, keys, shared_nebula


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("scope_size", [1, 2, 3])
async def test_scope_one_statement_and_read_only(
    corpus: Corpus, mode: Mode, scope_size: int
) -> None:
    projects = await shared_nebula(corpus)
    scope = [p.project_id for p in projects[:scope_size]]
    plan = await corpus.plan(scope, mode, "shared nebula", include_chunks=True)
    # A first search fills the PostgreSQL lexical cache (one read per project it has not
    # held yet); every page after that is one statement.
    await corpus.store.search(plan)

    page, statements = await corpus.counted(plan)

    assert len(page.hits) == 3 * scope_size
    assert {h.project_id for h in page.hits} == set(scope)
    assert len(set(keys(page.hits))) == len(page.hits)
    assert len(statements) == 1, statements
    assert not any(word in statements[0].upper().split() for word in WRITE_WORDS)
    if mode is Mode.FTS:
        assert page.total == 3 * scope_size
        assert page.hits[0].chunks == ()
    else:
        assert page.total is None
        assert all(h.chunks and h.vector_score > 0 for h in page.hits)
    assert page.has_more is False


async def test_ids_collide_across_projects_and_kinds(corpus: Corpus) -> None:
    projects = await shared_nebula(corpus)
    by_external = {p.project_id: p.external_id for p in projects}

    page = await corpus.search([p.project_id for p in projects], Mode.HYBRID, "shared nebula")

    assert sorted(keys(page.hits)) == sorted(
        (p.project_id, kind, "500")
        for p in projects
        for kind in ("note", "observation", "relation")
    )
    for hit in page.hits:
        index = [p.project_id for p in projects].index(hit.project_id)
        assert hit.snippet == f"shared nebula project {index} {hit.kind}"
        assert hit.project_external_id == by_external[hit.project_id]
        assert hit.title == f"shared nebula {hit.kind}"


async def test_mixed_kinds_hydrate_their_own_fields(corpus: Corpus) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id,
        [
            Doc("note", "1", "comet tail", category="", note_type="Spec", metadata={"a": 1}),
            Doc("observation", "1", "comet dust", category="fact", metadata={"b": [1, 2]}),
            Doc("relation", "1", "comet orbit", category="link", path="rel/x.md"),
        ],
    )
    page = await corpus.search([project.project_id], Mode.FTS, "comet")
    by_kind = {h.kind: h for h in page.hits}
    assert set(by_kind) == {"note", "observation", "relation"}
    assert by_kind["note"].note_type == "Spec"
    assert dict(by_kind["note"].metadata) == {"a": 1}
    assert by_kind["observation"].category == "fact"
    assert dict(by_kind["observation"].metadata) == {"b": [1, 2]}
    assert by_kind["relation"].path == "rel/x.md"


@pytest.mark.parametrize("mode", list(Mode))
async def test_other_tenants_project_is_never_returned(corpus: Corpus, mode: Mode) -> None:
    mine = await corpus.project("mine")
    theirs = await corpus.project("theirs", tenant="globex")
    for project in (mine, theirs):
        await corpus.write(project.project_id, [Doc("note", "1", "secret nebula plans")])

    page = await corpus.search([mine.project_id, theirs.project_id], mode, "secret nebula")
    assert {h.project_id for h in page.hits} == {mine.project_id}
    if mode is Mode.FTS:
        assert page.total == 1

    only_theirs = await corpus.search([theirs.project_id], mode, "secret nebula")
    assert only_theirs.hits == ()


async def test_project_reads_are_tenant_scoped(corpus: Corpus, store: Store) -> None:
    mine = await corpus.project("mine")
    theirs = await corpus.project("theirs", tenant="globex")

    owned = await store.get_projects("acme", [mine.project_id, theirs.project_id])
    assert [p.project_id for p in owned] == [mine.project_id]
    assert await store.delete_project("acme", theirs.project_id) is None
    assert [p.project_id for p in await store.get_projects("globex", [theirs.project_id])] == [
        theirs.project_id
    ]
    statuses = await store.index_status("acme", [], corpus.identity)
    assert [s.project.project_id for s in statuses] == [mine.project_id]


@pytest.mark.parametrize("mode", SEMANTIC)
async def test_semantic_hits_carry_top_chunks(corpus: Corpus, mode: Mode) -> None:
    (project,) = await corpus.projects(1)
    body = "\n\n".join(f"paragraph {i} about the quasar jet" for i in range(8))
    await corpus.write(project.project_id, [Doc("note", "long", body)])

    page = await corpus.search([project.project_id], mode, "quasar jet", include_chunks=True)

    (hit,) = page.hits
    assert len(hit.chunks) == 5
    sims = [c.similarity for c in hit.chunks]
    assert sims == sorted(sims, reverse=True)
    assert hit.vector_score == pytest.approx(sims[0], abs=1e-6)
    assert all(c.text.startswith("paragraph") for c in hit.chunks)
