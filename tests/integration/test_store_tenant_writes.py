"""Tenant isolation on the store's write path, both backends: the tenant is checked inside each
statement, and a statement that finds another tenant's project touches nothing (NotFound,
worded exactly like an id that exists nowhere)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service import errors
from service.store.base import Mode, ProjectRecord, Store
from tests.integration.conftest import Corpus, Doc, sha256

MISSING = 10**12
# Transaction control and COPY (rows whose foreign keys point at the documents a
# tenant-checked insert just wrote, in the same transaction) carry no tenant by design.
UNKEYED = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "COPY ")

Attempt = Callable[[Store, int], Awaitable[Any]]


async def _attempts(corpus: Corpus) -> list[tuple[str, Attempt]]:
    overwrite = await corpus.document_write(Doc("note", "1", "overwritten by acme"))
    inject = await corpus.document_write(Doc("note", "2", "injected by acme"))
    identity = corpus.identity
    return [
        ("write", lambda s, pid: s.write_documents("acme", pid, [overwrite, inject])),
        ("delete", lambda s, pid: s.delete_documents("acme", pid, [("note", "1")])),
        ("delete none", lambda s, pid: s.delete_documents("acme", pid, [])),
        ("hashes", lambda s, pid: s.document_hashes("acme", pid, [("note", "1")])),
        ("hashes none", lambda s, pid: s.document_hashes("acme", pid, [])),
        ("vectors", lambda s, pid: s.ready_vectors("acme", pid, [sha256("globex")], identity)),
    ]


async def _theirs(corpus: Corpus) -> ProjectRecord:
    theirs = await corpus.project("theirs", tenant="globex")
    await corpus.write(theirs.project_id, [Doc("note", "1", "globex\n\nsecret plans")])
    return theirs


async def test_cross_tenant_writes_touch_nothing_and_are_not_found(
    corpus: Corpus, store: Store
) -> None:
    theirs = await _theirs(corpus)
    before = await store.index_status("globex", [theirs.project_id], corpus.identity)
    for name, attempt in await _attempts(corpus):
        with pytest.raises(errors.NotFound) as caught:
            await attempt(store, theirs.project_id)
        with pytest.raises(errors.NotFound) as missing:
            await attempt(store, MISSING)
        assert caught.value.reason == missing.value.reason == "PROJECT_NOT_FOUND", name
        assert caught.value.message.replace(str(theirs.project_id), "#") == (
            missing.value.message.replace(str(MISSING), "#")
        ), name
    assert await store.index_status("acme", [theirs.project_id], corpus.identity) == []
    assert await store.delete_project("acme", theirs.project_id) is None
    assert await store.index_status("globex", [theirs.project_id], corpus.identity) == before
    wanted = [("note", "1"), ("note", "2")]
    hashes = await store.document_hashes("globex", theirs.project_id, wanted)
    assert list(hashes) == [("note", "1")]
    page = await corpus.search([theirs.project_id], Mode.FTS, "", tenant="globex")
    assert [(h.row_id, h.snippet) for h in page.hits] == [("1", "globex\n\nsecret plans")]


async def test_every_project_keyed_statement_carries_the_tenant(
    corpus: Corpus, store: Store
) -> None:
    theirs = await _theirs(corpus)
    (mine,) = await corpus.projects(1)
    corpus.statements.clear()
    await corpus.write(mine.project_id, [Doc("note", "1", "alpha\n\nbeta")])
    await corpus.write(mine.project_id, [Doc("note", "1", "alpha\n\ngamma")])
    await store.document_hashes("acme", mine.project_id, [("note", "1")])
    await store.ready_vectors("acme", mine.project_id, [sha256("alpha")], corpus.identity)
    await store.index_status("acme", [mine.project_id, theirs.project_id], corpus.identity)
    await store.delete_documents("acme", mine.project_id, [("note", "1")])
    for _, attempt in await _attempts(corpus):
        with pytest.raises(errors.NotFound):
            await attempt(store, theirs.project_id)
    assert await store.delete_project("acme", mine.project_id) == 0
    ran = [" ".join(s.split()) for s in corpus.statements]
    assert ran, "the statement hook saw nothing"
    untenanted = [s for s in ran if "tenant" not in s and not s.upper().startswith(UNKEYED)]
    assert untenanted == []
