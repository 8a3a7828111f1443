"""Several server processes over one database: shared key, a corpus, and paging across them.

`start_servers` starts server children together; each is stopped when the exit stack closes,
even when another one failed to start. `fetch_pages` reads the pages of one call and checks
that they are complete. `RoundRobin.paginate` walks every page of a search, sending each
call to the server after the one that answered the call before (page tokens cross servers)
and moving on to the next server when one answers UNAVAILABLE. `upsert_with_lsn` writes one note and
returns the `x-search-lsn` trailer (read-your-writes).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from search_client import (
    AsyncSearchClient,
    Document,
    ProjectSearchResult,
    SearchMode,
    UnavailableError,
)
from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from service.store.postgres.replicas import parse_lsn
from tests.support.reliability.process import ServerProcess, start_server

KEY = base64.b64encode(b"scale-out-shared-page-token-key!").decode()  # SEARCH_PAGE_TOKEN_KEY
WORDS = ("replica", "shard", "primary", "standby", "partition", "lag", "token", "page")

MIN_TRIES = 3  # calls per page before giving up
Key = tuple[int, str, str, float]  # project, kind, row id, score: a result's identity and rank


def corpus(count: int = 48) -> list[Document]:
    """Notes that all contain "replica", with varied lengths and term mixes."""
    docs = []
    for i in range(count):
        words = [WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 5)]
        body = " ".join(["replica", *words, f"note number {i}"] * (1 + i % 3))
        docs.append(Document("note", f"n{i:02d}", title=f"Note {i}", body=body))
    return docs


def keys(results: Iterable[ProjectSearchResult]) -> list[Key]:
    """What a page returned, comparable across calls and servers."""
    return [(r.project_id, r.kind, r.row_id, round(r.scores.score, 9)) for r in results]


@dataclass(frozen=True)
class Page:
    """One page: its results, the next token, its number, and the call and server it came from."""

    keys: list[Key]
    next_token: str
    number: int
    server: int = 0
    call: int = 0


async def fetch_pages(
    client: AsyncSearchClient, project: int, mode: SearchMode, text: str, token: str,
    size: int, pages_per_call: int = 1, metadata: Sequence[tuple[str, str]] = (),
) -> list[Page]:
    """The pages one call streams; every page but the last of the search must be full."""
    pages = [
        p async for p in client.search_projects(
            [project], text, mode=mode, page_size=size, page_token=token,
            max_pages=pages_per_call, metadata=metadata,
        )
    ]
    assert pages
    for page in pages:
        assert page.has_more == bool(page.next_page_token)
        if page.has_more:
            assert len(page.results) == size
    # The call streams all it was asked for, unless the search ends first.
    assert all(p.has_more for p in pages[:-1])
    assert len(pages) == pages_per_call or not pages[-1].has_more
    return [Page(keys(p.results), p.next_page_token, p.page_number) for p in pages]


async def fetch_page(
    client: AsyncSearchClient, project: int, mode: SearchMode, text: str, token: str,
    size: int, metadata: Sequence[tuple[str, str]] = (),
) -> Page:
    """One page (one call)."""
    (page,) = await fetch_pages(client, project, mode, text, token, size, 1, metadata)
    return page


def flatten(pages: Iterable[Page]) -> list[Key]:
    """The results of `pages`, in order."""
    return [key for page in pages for key in page.keys]


@dataclass
class RoundRobin:
    """Calls spread over several clients (one per server); counts the pages each one served."""

    clients: Sequence[AsyncSearchClient]
    pages_per_call: int = 1
    served: list[int] = field(default_factory=list)  # pages per client
    failovers: int = 0  # UNAVAILABLE answers passed on to the next server

    def __post_init__(self) -> None:
        self.served = [0] * len(self.clients)

    async def call(
        self, after: int, project: int, mode: SearchMode, text: str, token: str, size: int
    ) -> list[Page]:
        """The pages of one call to the first server after `after` not answering UNAVAILABLE.

        A call that broke after some pages (the server died before the status) raises
        UNAVAILABLE without a retry in the client: it is made again from the same token, at
        least MIN_TRIES times in all (a single balanced channel picks another server itself).
        """
        count = len(self.clients)
        errors: list[UnavailableError] = []
        for step in range(1, max(count, MIN_TRIES) + 1):
            index = (after + step) % count
            try:
                pages = await fetch_pages(
                    self.clients[index], project, mode, text, token, size, self.pages_per_call
                )
            except UnavailableError as error:
                self.failovers += 1
                errors.append(error)
                continue
            self.served[index] += len(pages)
            return [Page(p.keys, p.next_token, p.number, index) for p in pages]
        raise AssertionError(f"every server answered UNAVAILABLE: {errors}") from errors[-1]

    async def paginate(
        self, project: int, mode: SearchMode, text: str, size: int, start: int = 0,
        on_page: Callable[[], None] | None = None,
    ) -> list[Page]:
        """Every page of a search; the first call goes to client `start`, each next one to
        the client after the one that answered the call before."""
        pages: list[Page] = []
        token, server, calls = "", start - 1, 0
        while True:
            for page in await self.call(server, project, mode, text, token, size):
                assert page.number == len(pages) + 1
                pages.append(Page(page.keys, page.next_token, page.number, page.server, calls))
                if on_page is not None:
                    on_page()
            calls += 1
            token, server = pages[-1].next_token, pages[-1].server
            if not token:
                return pages


async def start_servers(
    stack: AsyncExitStack, data_dirs: Sequence[Path], env: Mapping[str, str]
) -> list[ServerProcess]:
    """Server children started together (migrations serialise on the advisory lock)."""

    async def one(data_dir: Path) -> ServerProcess:
        server = await start_server(data_dir, env)
        stack.push_async_callback(server.stop)
        return server

    started = await asyncio.gather(*(one(d) for d in data_dirs), return_exceptions=True)
    servers = []
    for outcome in started:
        if isinstance(outcome, BaseException):
            raise outcome
        servers.append(outcome)
    return servers


async def upsert_with_lsn(channel: grpc.aio.Channel, project: int, row_id: str, body: str) -> str:
    """Upsert one note through the raw stub; returns its `x-search-lsn` trailer."""
    stub = index_pb2_grpc.IndexServiceStub(channel)
    document = index_pb2.Document(kind="note", row_id=row_id, title=row_id, body=body)
    call = stub.UpsertDocuments(
        iter([index_pb2.UpsertDocumentsRequest(project_id=project, documents=[document])])
    )
    reply = await call
    assert reply.documents_rejected == 0
    trailers = dict(await call.trailing_metadata() or ())
    lsn = str(trailers["x-search-lsn"])
    assert parse_lsn(lsn) is not None
    return lsn
