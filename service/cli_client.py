"""Client commands of the CLI (`index`, `status`, `demo`), run against a running server."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as search_pb2
from search_client.pb.search.v1 import project_search_pb2_grpc as search_pb2_grpc

SUFFIXES = (".md", ".txt")
BATCH_DOCUMENTS = 20
BATCH_BYTES = 4 * 1024 * 1024
CONNECT_TIMEOUT = 5.0
CALL_TIMEOUT = 600.0
DEMO_PROJECT = "demo"
DEMO_SEARCHES = (
    ("FTS", '"dark matter"'),
    ("FTS", "pulsar OR magnetar"),
    ("VECTOR", "where do new stars come from"),
    ("HYBRID", "how do astronomers find planets around other stars"),
    ("HYBRID", "telescope mirror"),
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


@dataclass(frozen=True)
class SourceFile:
    """A text file to index: `path` is relative to the folder, with `/` separators."""

    path: str
    title: str
    body: str


@dataclass(frozen=True)
class Connection:
    """Stubs on a channel to the server, and the metadata every call sends."""

    index: index_pb2_grpc.IndexServiceAsyncStub
    search: search_pb2_grpc.ProjectSearchServiceAsyncStub
    metadata: tuple[tuple[str, str], ...]


class CommandError(Exception):
    """A failure already explained to the user; the exit code is 1."""


async def run_client_command(args: argparse.Namespace) -> int:
    """Run `args.client_command` against `args.target`; returns the exit code."""
    commands = {"index": _index_command, "status": _status_command, "demo": _demo_command}
    try:
        async with connect(args.target, args.token) as conn:
            await commands[args.client_command](conn, args)
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except grpc.aio.AioRpcError as error:
        print(f"error: {describe_rpc_error(error)}", file=sys.stderr)
        return 1
    return 0


@asynccontextmanager
async def connect(target: str, token: str = "") -> AsyncIterator[Connection]:
    """A ready channel to `target`, or CommandError when nothing answers there."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), CONNECT_TIMEOUT)
        except TimeoutError:
            raise CommandError(
                f"no search service answers at {target}; start one with `scripts/serve` "
                "(or pass --target HOST:PORT)"
            ) from None
        yield Connection(
            index_pb2_grpc.IndexServiceStub(channel),
            search_pb2_grpc.ProjectSearchServiceStub(channel),
            metadata,
        )


def describe_rpc_error(error: grpc.aio.AioRpcError) -> str:
    """`CODE REASON: message` plus field violations, from the rich status details."""
    code = error.code().name if error.code() else "UNKNOWN"
    reason, violations = "", []
    status = rpc_status.from_call(error)
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = f" {info.reason}"
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations = [f"{v.field}: {v.description}" for v in bad.field_violations]
    lines = [f"{code}{reason}: {error.details()}", *(f"  {v}" for v in violations)]
    return "\n".join(lines)


# ---- reading files --------------------------------------------------------------------------


def title_of(body: str, fallback: str) -> str:
    """The first Markdown heading of `body`, else `fallback` (the file name)."""
    for line in body.splitlines():
        match = _HEADING.match(line)
        if match:
            return match.group(1)
    return fallback


def collect_folder(folder: Path) -> tuple[list[SourceFile], list[str]]:
    """*.md and *.txt files under `folder` (hidden ones skipped), and what was skipped why."""
    if not folder.is_dir():
        raise CommandError(f"{folder} is not a folder")
    files, skipped = [], []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if not path.is_file() or path.suffix.lower() not in SUFFIXES:
            continue
        try:
            body = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(f"{relative.as_posix()}: not UTF-8 text")
            continue
        files.append(SourceFile(relative.as_posix(), title_of(body, path.name), body))
    return files, skipped


def demo_corpus() -> list[SourceFile]:
    """The Markdown notes bundled in `service.demo_corpus`."""
    root = resources.files("service.demo_corpus")
    entries = sorted((e for e in root.iterdir() if e.name.endswith(".md")), key=lambda e: e.name)
    return [
        SourceFile(e.name, title_of(e.read_text("utf-8"), e.name), e.read_text("utf-8"))
        for e in entries
    ]


# ---- projects and upserts -------------------------------------------------------------------


async def ensure_project(conn: Connection, external_id: str, name: str = "") -> index_pb2.Project:
    """The caller's project with `external_id`, created when missing."""
    request = index_pb2.CreateProjectRequest(external_id=external_id, name=name or external_id)
    try:
        reply = await conn.index.CreateProject(request, metadata=conn.metadata, timeout=30)
        return reply.project
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.ALREADY_EXISTS:
            raise
    token = ""
    while True:
        request_page = index_pb2.ListProjectsRequest(page_size=1000, page_token=token)
        page = await conn.index.ListProjects(request_page, metadata=conn.metadata, timeout=30)
        for project in page.projects:
            if project.external_id == external_id:
                return project
        token = page.next_page_token
        if not token:
            raise CommandError(f"project {external_id!r} exists but could not be listed")


class Progress:
    """A plain-text progress bar on a stream (one line per update when not a terminal)."""

    def __init__(self, total: int, stream: TextIO, label: str = "indexing") -> None:
        self.total, self.stream, self.label = total, stream, label
        self.done = 0
        self._tty = stream.isatty()

    def advance(self, count: int) -> None:
        """Count `count` more items and redraw."""
        if count <= 0:
            return
        self.done += count
        width = 30
        filled = width * self.done // self.total if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        line = f"{self.label} [{bar}] {self.done}/{self.total} files"
        if self._tty:
            end = "\n" if self.done >= self.total else ""
            print(f"\r{line}", end=end, file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


def batches(
    files: Sequence[SourceFile], size: int = BATCH_DOCUMENTS
) -> list[list[index_pb2.Document]]:
    """Documents grouped into messages of at most `size` documents / ~BATCH_BYTES."""
    out: list[list[index_pb2.Document]] = [[]]
    total = 0
    for f in files:
        document = index_pb2.Document(
            kind="note", row_id=f.path, title=f.title, path=f.path, body=f.body
        )
        if out[-1] and (len(out[-1]) >= size or total + len(f.body) > BATCH_BYTES):
            out.append([])
            total = 0
        out[-1].append(document)
        total += len(f.body)
    return [b for b in out if b]


async def upload(
    conn: Connection, project_id: int, files: Sequence[SourceFile], progress: Progress,
    batch_size: int = BATCH_DOCUMENTS,
) -> index_pb2.UpsertDocumentsResponse:
    """Stream `files` as documents of kind "note", advancing `progress` per batch sent."""

    async def requests() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        pending = 0
        for batch in batches(files, batch_size):
            # The server reads the next message only after storing the previous one.
            progress.advance(pending)
            pending = len(batch)
            yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=batch)
        progress.advance(pending)

    return await conn.index.UpsertDocuments(
        requests(), metadata=conn.metadata, timeout=CALL_TIMEOUT
    )


def summary_lines(
    external_id: str, project_id: int, reply: index_pb2.UpsertDocumentsResponse, seconds: float
) -> list[str]:
    """The human summary of an upsert."""
    rate = reply.chunks_written / seconds if seconds > 0 else 0.0
    lines = [
        f"project {external_id} (id {project_id}): {reply.documents_received} documents "
        f"in {seconds:.2f} s",
        f"  documents: {reply.documents_created} created, {reply.documents_updated} updated, "
        f"{reply.documents_unchanged} unchanged, {reply.documents_rejected} rejected",
        f"  chunks: {reply.chunks_written} written, {reply.chunks_embedded} embedded "
        f"({rate:.0f} chunks/s)",
    ]
    for r in reply.results:
        if r.outcome == index_pb2.DOCUMENT_OUTCOME_REJECTED:
            lines.append(f"  rejected {r.row_id}: {r.field}: {r.message}")
    return lines


async def index_files(
    conn: Connection, external_id: str, files: Sequence[SourceFile], name: str = "",
    batch_size: int = BATCH_DOCUMENTS,
) -> tuple[index_pb2.Project, index_pb2.UpsertDocumentsResponse]:
    """Create the project if needed, upload `files` with progress, print the summary."""
    project = await ensure_project(conn, external_id, name)
    started = time.perf_counter()
    progress = Progress(len(files), sys.stderr)
    reply = await upload(conn, project.project_id, files, progress, batch_size)
    seconds = time.perf_counter() - started
    print("\n".join(summary_lines(external_id, project.project_id, reply, seconds)))
    return project, reply


async def _index_command(conn: Connection, args: argparse.Namespace) -> None:
    files, skipped = collect_folder(Path(args.folder))
    for line in skipped:
        print(f"skipped {line}", file=sys.stderr)
    if not files:
        raise CommandError(f"no *.md or *.txt files under {args.folder}")
    _, reply = await index_files(conn, args.project, files)
    if reply.documents_rejected:
        raise CommandError(f"{reply.documents_rejected} documents were rejected")


# ---- status ---------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; columns of numbers are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [bool(cells) and all(_NUMBER.match(r[i]) for r in cells) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def identity_text(identity: object) -> str:
    """`model (N d)` for an EmbeddingIdentity message."""
    model = getattr(identity, "model", "")
    return f"{model} ({getattr(identity, 'dimensions', 0)} d)" if model else "-"


def status_text(reply: index_pb2.GetIndexStatusResponse) -> str:
    """The status report: the configured embedding, then one row per project and embedding."""
    configured = "none (semantic search off)"
    if reply.HasField("configured_embedding"):
        configured = identity_text(reply.configured_embedding)
    vector = "available" if reply.vector_search_available else "unavailable"
    rows: list[list[object]] = []
    for p in reply.projects:
        base: list[object] = [p.project_id, p.external_id, p.documents, p.chunks]
        if not p.embeddings:
            rows.append([*base, "-", 0, p.chunks_needing_embedding])
        for e in p.embeddings:
            marker = " *" if e.configured else ""
            label = identity_text(e.identity) + marker
            rows.append([*base, label, e.chunks_ready, e.chunks_pending])
    headers = ["PROJECT", "EXTERNAL ID", "DOCUMENTS", "CHUNKS", "EMBEDDING", "READY", "PENDING"]
    body = table(headers, rows) if rows else "no projects yet"
    return (
        f"configured embedding: {configured}; vector search: {vector}\n{body}\n"
        "(* = the configured embedding, the one search uses)"
    )


async def _status_command(conn: Connection, args: argparse.Namespace) -> None:
    reply = await conn.index.GetIndexStatus(
        index_pb2.GetIndexStatusRequest(), metadata=conn.metadata, timeout=30
    )
    print(status_text(reply))


# ---- demo -----------------------------------------------------------------------------------


def results_table(page: search_pb2.ProjectSearchPage) -> str:
    """Ranked results as a table."""
    if not page.results:
        return "  (no results)"
    rows = [
        [rank, f"{r.scores.score:.3f}", f"{r.scores.vector_score:.3f}",
         f"{r.scores.fts_normalized:.3f}", r.title, r.path]
        for rank, r in enumerate(page.results, start=1)
    ]
    text = table(["RANK", "SCORE", "VECTOR", "FTS(norm)", "TITLE", "PATH"], rows)
    return "\n".join("  " + line for line in text.splitlines())


async def run_search(
    conn: Connection, project_id: int, mode: str, text: str, page_size: int = 5
) -> search_pb2.ProjectSearchPage:
    """The first page of one search."""
    request = search_pb2.SearchProjectsRequest(
        scope=search_pb2.ProjectScope(project_ids=[project_id]),
        text=text,
        mode=f"SEARCH_MODE_{mode}",
        page_size=page_size,
    )
    async for reply in conn.search.SearchProjects(request, metadata=conn.metadata, timeout=60):
        return reply.page
    return search_pb2.ProjectSearchPage()


async def _demo_command(conn: Connection, args: argparse.Namespace) -> None:
    files = demo_corpus()
    print(f"indexing {len(files)} bundled notes into project {DEMO_PROJECT!r}", file=sys.stderr)
    project, _ = await index_files(
        conn, DEMO_PROJECT, files, name="Demo: astronomy notes", batch_size=3
    )
    for mode, text in DEMO_SEARCHES:
        print(f"\n{mode} search: {text}")
        try:
            page = await run_search(conn, project.project_id, mode, text)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            print(f"  skipped: {describe_rpc_error(error)}")
            continue
        exact = "exact" if page.total_is_exact else "not counted"
        print(f"  total: {page.total} ({exact}); relaxed query: {page.relaxed}")
        print(results_table(page))
    print(
        f"\nTry it yourself (project id {project.project_id}):\n"
        f'  grpcurl -plaintext -d \'{{"scope": {{"projectIds": ["{project.project_id}"]}}, '
        f'"text": "comet tail", "mode": "SEARCH_MODE_HYBRID"}}\' \\\n'
        f"    {args.target} search.v1.ProjectSearchService/SearchProjects"
    )
