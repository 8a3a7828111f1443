"""The fan-out benchmark's world: the eight fake providers (20 ms each) and the real server.

Real runs put the fakes and the server in two child processes, so the fakes' own CPU is not
charged to the service.

The server is the service's interceptor (with a timing observer) and the workspace
servicers built by the service's own wiring (`build_workspace_servicers`), with provider
base URLs pointed at the fakes, on a real gRPC port. Fusion time is measured by wrapping the
fusion entry points the pager calls (outermost call only, so nested calls count once).
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import grpc

from benchmarks.servers import TimingObserver
from service.fakes.atlassian import FakeConfluence, FakeJira
from service.fakes.github import FakeGitHub
from service.fakes.gitlab import FakeGitLab
from service.fakes.gmail import FakeGmail
from service.fakes.google_calendar import FakeCalendar
from service.fakes.google_drive import FakeDrive
from service.fakes.slack import FakeSlack
from service.fakes.suite import FakeProviders
from service.ranking import rrf

WORDS = ("deploy", "incident", "roadmap", "budget")
ITEMS_PER_WORD = 12
F = TypeVar("F", bound=Callable[..., Any])


class FusionClock:
    """Seconds the event-loop thread spent in fusion (outermost calls of the wrapped
    functions). Wall time of synchronous calls (perf_counter, read from the vDSO): on a VM a
    thread-CPU clock read is a system call of ~20 us, and two per call cost more server CPU
    than the fusion they measured."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._depth = 0

    def wrap(self, function: F) -> F:
        """`function`, timed."""

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - started

        return timed  # type: ignore[return-value]

    def install(self) -> None:
        """Wrap the RRF functions and the pager's Fusion methods."""
        from service.workspace import lists

        for name in ("ready_keys", "best_keys", "rank", "collect", "fuse"):
            setattr(rrf, name, self.wrap(getattr(rrf, name)))
        fusion = lists.Fusion
        for name, value in list(vars(fusion).items()):
            if callable(value) and not name.startswith("__"):
                setattr(fusion, name, self.wrap(value))

    def take(self) -> float:
        """Seconds since the last take."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seed(fakes: FakeProviders) -> None:
    """ITEMS_PER_WORD matching items per word in every provider."""
    now = datetime(2026, 6, 1, tzinfo=UTC)
    fakes.github.add_repo("acme/app", description="deploy incident roadmap budget")
    fakes.gitlab.add_project(1, "acme/app")
    fakes.google_calendar.add_calendar("primary")
    fakes.jira.add_site("cloud-1", "acme")
    fakes.confluence.add_site("cloud-1", "acme")
    for w, word in enumerate(WORDS):
        for i in range(ITEMS_PER_WORD):
            n = w * 100 + i + 1
            when = now - timedelta(hours=n)
            text = f"{word} item {i} of the {word} work"
            fakes.github.add_issue("acme/app", n, text, text, updated_at=_iso(when))
            fakes.github.add_code("acme/app", f"src/{word}_{i}.py", text)
            fakes.github.add_commit("acme/app", f"{n:040x}", text, date=_iso(when))
            fakes.github.add_repo(f"acme/{word}-{i}", description=text)
            fakes.gitlab.add_issue(1, n, text, text, updated_at=_iso(when))
            fakes.gitlab.add_issue(1, 1000 + n, text, text, updated_at=_iso(when),
                                   merge_request=True)
            fakes.gitlab.add_blob(1, f"src/{word}_{i}.py", text)
            fakes.gitlab.add_blob(1, f"wiki/{word}_{i}.md", text, wiki=True)
            fakes.slack.add_message("C1", "general", f"{1_700_000_000 + n}.000100", text)
            fakes.google_drive.add_file(f"f{n}", f"{word} doc {i}", text, modified=_iso(when))
            fakes.gmail.add_message(f"m{n}", f"{word} mail {i}", text, sent=when)
            fakes.google_calendar.add_event("primary", f"e{n}", text, start=_iso(when),
                                            end=_iso(when + timedelta(minutes=30)),
                                            updated=_iso(when))
            fakes.jira.add_issue("cloud-1", f"ACME-{n}", text, text)
            fakes.confluence.add_content("cloud-1", f"c{n}", f"{word} page {i}", text)


class Fakes:
    """The fake providers (all, or only the one named), seeded, each answering after
    `latency` seconds."""

    def __init__(self, latency: float, only: str | None = None) -> None:
        self.latency = latency
        self.fakes = FakeProviders(FakeGitHub(), FakeGitLab(), FakeSlack(), FakeDrive(),
                                   FakeGmail(), FakeCalendar(), FakeJira(), FakeConfluence())
        self.serving = [f for f in self.fakes.all() if only is None or f.name == only]
        if not self.serving:
            raise ValueError(f"no fake provider named {only!r}")
        self._seen: dict[str, int] = {}
        self._logged: dict[str, int] = {}

    async def start(self) -> None:
        """Listen on loopback and seed every corpus."""
        for fake in self.serving:
            await fake.server.start()
            fake.server.latency = self.latency
        seed(self.fakes)

    @property
    def urls(self) -> str:
        """`name=url,...` for SEARCH_PROVIDER_BASE_URLS-style overrides."""
        return ",".join(f"{f.name}={f.base_url}" for f in self.serving)

    def take_requests(self) -> dict[str, int]:
        """HTTP requests each fake served since the last take."""
        now = {fake.name: sum(fake.requests.values()) for fake in self.serving}
        delta = {name: count - self._seen.get(name, 0) for name, count in now.items()}
        self._seen = now
        return delta

    def take_exchanges(self) -> list[list[Any]]:
        """The HTTP requests the fakes read since the last take, in arrival order, as JSON:
        [provider, method, target, [[header, value], ...], base64 body, monotonic seconds]."""
        taken = []
        for fake in self.serving:
            log = list(fake.server.log)  # the most recent requests
            fresh = fake.server.served - self._logged.get(fake.name, 0)
            taken += [[fake.name, r.method, r.target, sorted(r.headers.items()),
                       base64.b64encode(r.body).decode(), r.received]
                      for r in log[max(0, len(log) - fresh):]]
            self._logged[fake.name] = fake.server.served
        return sorted(taken, key=lambda exchange: exchange[5])

    async def close(self) -> None:
        """Stop listening."""
        for fake in self.serving:
            await fake.server.stop()


class WorkspaceServer:
    """The workspace servicers behind the service's interceptor; `port` once started."""

    def __init__(self, data_dir: Path, urls: str) -> None:
        self.data_dir = data_dir
        self.urls = urls
        self.observer = TimingObserver()
        self.clock = FusionClock()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self._store: Any = None
        self._closers: list[Callable[[], Awaitable[None]]] = []

    async def start(self) -> None:
        """Build and start the server (provider base URLs pointed at `urls`)."""
        from search_client.pb.search.v1 import accounts_pb2_grpc, workspace_search_pb2_grpc
        from service.api.interceptor import ServiceInterceptor
        from service.api.workspace_wiring import build_workspace_servicers, parse_base_urls
        from service.auth import Authenticator
        from service.ranking.tokens import TokenSigner
        from service.settings import Settings
        from service.store.sqlite import SqliteStore

        self.clock.install()
        settings = Settings.from_mapping({"SEARCH_DATA_DIR": str(self.data_dir)})
        self._store = SqliteStore(self.data_dir / "search.sqlite3", None)
        await self._store.open()
        servicers = build_workspace_servicers(
            settings, self._store, TokenSigner(b"b" * 32), allow_insecure_http=True,
            base_url_overrides=parse_base_urls(self.urls), closers=self._closers,
        )
        self.server = grpc.aio.server(
            interceptors=[ServiceInterceptor(Authenticator(""), 4096, self.observer)]
        )
        workspace_search_pb2_grpc.add_WorkspaceSearchServiceServicer_to_server(
            servicers["search.v1.WorkspaceSearchService"], self.server)
        accounts_pb2_grpc.add_AccountServiceServicer_to_server(
            servicers["search.v1.AccountService"], self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def close(self) -> None:
        """Stop the server and its store."""
        if self.server is not None:
            await self.server.stop(0)
        for close in self._closers:
            await close()
        if self._store is not None:
            await self._store.close()
