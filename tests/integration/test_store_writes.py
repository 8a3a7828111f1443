"""Writes: outcomes, replacement, vector reuse, atomicity, deletes and cascades."""

from __future__ import annotations

import pytest

from service import errors
from service.store.base import ChunkInput, DocumentWrite, Mode, Store
from tests.integration.conftest import Corpus, Doc, at, sha256


async def test_write_is_idempotent_and_replaces_chunks(corpus: Corpus, store: Store) -> None:
    (project,) = await corpus.projects(1)
    doc = Doc("note", "1", "first paragraph\n\nsecond paragraph\n\nthird paragraph")
    assert await corpus.write(project.project_id, [doc]) == ["created"]
    assert await corpus.write(project.project_id, [doc]) == ["updated"]
    (status,) = await store.index_status("acme", [project.project_id], corpus.identity)
    assert (status.documents, status.chunks, status.embeddings[0].ready) == (1, 3, 3)

    shorter = Doc("note", "1", "only paragraph")
    assert await corpus.write(project.project_id, [shorter]) == ["updated"]
    (status,) = await store.index_status("acme", [project.project_id], corpus.identity)
    assert (status.documents, status.chunks, status.embeddings[0].ready) == (1, 1, 1)
    page = await corpus.search([project.project_id], Mode.FTS, "second")
    assert page.total == 0
    page = await corpus.search(
        [project.project_id], Mode.VECTOR, "only paragraph", include_chunks=True
    )
    assert [c.text for c in page.hits[0].chunks] == ["only paragraph"]


async def test_hashes_and_ready_vectors_for_reuse(corpus: Corpus, store: Store) -> None:
    (project,) = await corpus.projects(1)
    write = await corpus.document_write(Doc("note", "1", "alpha\n\nbeta"))
    await store.write_documents("acme", project.project_id, [write])

    hashes = await store.document_hashes(
        "acme", project.project_id, [("note", "1"), ("note", "2")]
    )
    assert hashes == {("note", "1"): write.document.content_hash}

    vectors = await store.ready_vectors(
        "acme",
        project.project_id, [sha256("alpha"), sha256("beta"), sha256("gamma")], corpus.identity
    )
    assert set(vectors) == {sha256("alpha"), sha256("beta")}
    expected = (await corpus.embedder.embed(["alpha"]))[0]
    assert vectors[sha256("alpha")] == pytest.approx(expected, abs=1e-6)
    other = await corpus.store.ready_vectors(
        "acme",
        project.project_id, [sha256("alpha")], type(corpus.identity)("other", 384)
    )
    assert other == {}


async def test_dates_are_kept_and_defaulted(corpus: Corpus, store: Store) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id, [Doc("note", "1", "dated", created_at=at(5), updated_at=at(6))]
    )
    await corpus.write(project.project_id, [Doc("note", "2", "undated")])
    page = await corpus.search([project.project_id], Mode.FTS, "")
    hits = {h.row_id: h for h in page.hits}
    assert (hits["1"].created_at, hits["1"].updated_at) == (at(5), at(6))
    assert hits["2"].created_at.tzinfo is not None
    assert hits["2"].updated_at >= hits["2"].created_at


async def test_bad_vector_rejects_the_batch_atomically(corpus: Corpus, store: Store) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(project.project_id, [Doc("note", "1", "old text")])
    good = await corpus.document_write(Doc("note", "2", "new text"))
    bad = await corpus.document_write(Doc("note", "1", "replacement text"))
    broken = DocumentWrite(
        bad.document,
        [
            ChunkInput(
                0, "replacement text", sha256("replacement text"), [0.5, 0.5], corpus.identity
            )
        ],
    )
    with pytest.raises(errors.ServiceError):
        await store.write_documents("acme", project.project_id, [good, broken])
    page = await corpus.search([project.project_id], Mode.FTS, "")
    assert [(h.row_id, h.snippet) for h in page.hits] == [("1", "old text")]


async def test_write_to_unknown_project_is_not_found(corpus: Corpus, store: Store) -> None:
    write = await corpus.document_write(Doc("note", "1", "orphan"))
    with pytest.raises(errors.NotFound):
        await store.write_documents("acme", 987_654, [write])


async def test_delete_documents_and_project_cascade(corpus: Corpus, store: Store) -> None:
    keep, drop = await corpus.projects(2)
    for project in (keep, drop):
        await corpus.write(
            project.project_id, [Doc("note", str(i), f"cascade text {i}") for i in range(3)]
        )
    wanted = [("note", "0"), ("note", "9")]
    assert await store.delete_documents("acme", keep.project_id, wanted) == 1
    assert await store.delete_project("acme", drop.project_id) == 3
    assert await store.delete_project("acme", drop.project_id) is None

    statuses = await store.index_status("acme", [], corpus.identity)
    assert [(s.project.project_id, s.documents, s.chunks) for s in statuses] == [
        (keep.project_id, 2, 2)
    ]
    for mode in Mode:
        page = await corpus.search([keep.project_id, drop.project_id], mode, "cascade text")
        assert sorted(h.row_id for h in page.hits) == ["1", "2"]
    assert await store.get_projects("acme", [drop.project_id]) == []
    again = await corpus.project("p1")
    assert again.project_id != drop.project_id


async def test_projects_create_list_and_conflicts(store: Store) -> None:
    first = await store.create_project("acme", "ext-1", "One")
    second = await store.create_project("acme", "ext-2", "Two")
    other = await store.create_project("globex", "ext-1", "Theirs")
    with pytest.raises(errors.AlreadyExists):
        await store.create_project("acme", "ext-1", "Again")
    assert first.created_at.tzinfo is not None
    assert await store.list_projects("acme", 0, 10) == [first, second]
    assert await store.list_projects("acme", first.project_id, 10) == [second]
    assert await store.list_projects("acme", 0, 1) == [first]
    assert await store.list_projects("globex", 0, 10) == [other]


async def test_a_duplicate_external_id_has_one_reason_on_both_stores(store: Store) -> None:
    """README's error table: PROJECT_ALREADY_EXISTS (PostgreSQL used to say ALREADY_EXISTS)."""
    await store.create_project("acme", "notes", "Notes")
    with pytest.raises(errors.AlreadyExists) as caught:
        await store.create_project("acme", "notes", "Notes again")
    assert caught.value.reason == "PROJECT_ALREADY_EXISTS"
    assert caught.value.metadata == {"externalId": "notes"}
