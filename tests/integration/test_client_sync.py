"""The blocking client against the real server (run in a thread beside the server's loop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from search_client import (
    Document,
    InvalidArgumentError,
    NotFoundError,
    ProjectSearchPage,
    SearchClient,
    SearchMode,
)
from tests.support.server import running_server

DOCS = [
    Document("note", f"n{i}", title=f"Note {i}", path=f"notes/n{i}.md",
             body=f"star note number {i} about orbits and light")
    for i in range(7)
]


async def test_sync_client_round_trip(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app:
        target = f"127.0.0.1:{app.port}"

        def run() -> tuple[list[str], list[str], list[ProjectSearchPage]]:
            with SearchClient(target, default_timeout=10) as client:
                project = client.create_project("sync", "Sync")
                summary = client.upsert_documents(project.project_id, DOCS, batch_size=2)
                assert summary.documents_created == len(DOCS)
                ids = [project.project_id]
                whole = [r.row_id for r in client.iter_project_results(ids, "star", page_size=50)]
                paged = [r.row_id for r in client.iter_project_results(ids, "star", page_size=3)]
                pages = list(client.iter_project_pages(
                    ids, "star orbits", mode=SearchMode.HYBRID, page_size=3, pages_per_call=2
                ))
                with pytest.raises(NotFoundError):
                    next(client.search_projects([424242], "star"))
                with pytest.raises(InvalidArgumentError) as bad:
                    client.list_projects(page_size=-1)
                assert bad.value.field_violations[0].field == "page_size"
                status = client.get_index_status()
                assert status.projects[0].documents == len(DOCS)
                return whole, paged, pages

        whole, paged, pages = await asyncio.to_thread(run)
    assert len(whole) == len(DOCS)
    assert paged == whole
    assert [p.page_number for p in pages] == list(range(1, len(pages) + 1))
    assert sum(len(p.results) for p in pages) == len(DOCS)
