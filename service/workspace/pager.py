"""Fused pages of one search call, with the threshold rule that keeps paging exact.

A result is emitted only when no other result, seen or not, can still outrank it once every
list is read to its end (see `rrf.ready_keys`). Otherwise the lists with the largest bound
term are read one provider page further, within the per-page round limit, the request budget
and the deadline; when those run out the best results so far are emitted and the page says
`ranking_is_exact = false`. Lists being swept (read again from their first page after their
end, see service.workspace.paging) do not bound the order: what they find is late. They are
read when nothing else is left to read, so the last page can say whether paging is over.

Results a provider listed as stubs (identity only: Gmail message ids) are completed just
before they are emitted, from reads the fan-out started early for each list's first stubs or
read then; a stub whose details cannot be read is still emitted, and its query is partial.

Statuses: before each page, one status for every (query, account) whose status changed
since the previous page (on the first page: every one), tagged with that page's number. The
last status received for a (query_index, account_id) is current.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from msgspec import structs

from service.ranking import rrf
from service.ranking.tokens import TokenSigner
from service.text import clip
from service.workspace.events import (
    FusedPage,
    FusedResult,
    QueryStatus,
    ResultContribution,
    SearchEvent,
)
from service.workspace.fanout import Call, details
from service.workspace.guidance import ProviderCard, cards_for
from service.workspace.lists import Fusion, ListRun, Vote
from service.workspace.model import NativeDocument, ProviderError, ProviderId, QueryState
from service.workspace.paging import (
    ListState,
    PageState,
    cursor_binding,
    encode_cursor,
    encode_page_token,
)
from service.workspace.plan import Plan
from service.workspace.providers import ProviderSpec
from service.workspace.results import NAME_CHARS, TITLE_CHARS, URL_CHARS, preview

__all__ = ["Pager", "PagerSettings"]


@dataclass(frozen=True)
class PagerSettings:
    """How hard a page tries to be exact."""

    rrf_k: int = rrf.DEFAULT_K
    max_rounds_per_page: int = 3  # extra fetch rounds per fused page
    min_round_seconds: float = 0.05  # no new fetch round with less time left than this


class Pager:
    """Streams statuses and fused pages for one planned search."""

    def __init__(
        self, plan: Plan, runs: Sequence[ListRun], call: Call, signer: TokenSigner,
        registry: Mapping[ProviderId, ProviderSpec], settings: PagerSettings,
    ) -> None:
        self._plan = plan
        self._runs = list(runs)
        self._call = call
        self._signer = signer
        self._registry = registry
        self._settings = settings
        resume = plan.resume
        # A search keeps the k it began with (a token from before tokens carried it: 0).
        self._k = resume.rrf_k if resume is not None and resume.rrf_k else settings.rrf_k
        # A search begun from per-query cursors starts with what they remember as emitted,
        # so its page tokens carry that on (a token keeps no list's own ids).
        first = (seen for run in runs for seen in run.start.seen)
        self._fusion = Fusion(self._k, resume.emitted if resume else first)
        self._page_number = resume.page_number if resume else 1
        self._sent: dict[int, QueryStatus] = {}
        self._cursors: dict[int, tuple[ListState, str]] = {}
        self._bindings: dict[int, str] = {}  # cursor bindings by list (they never change)

    async def events(self) -> AsyncGenerator[SearchEvent]:
        """Up to `max_pages` fused pages, each after the statuses that changed before it."""
        async with aclosing(self._call.fetch([r for r in self._runs if r.fetchable])) as settled:
            async for run, votes in settled:
                self._add(run, votes)
        for _ in range(self._plan.max_pages):
            page, best_effort = await self._fill_page()
            for run in self._runs:
                run.stop_if_idle()
            resumes = [run.resume(self._fusion.emitted) for run in self._runs]
            # Lists waiting for a reconnect do not keep the pages coming by themselves.
            done = not self._fusion.candidates() and all(r.exhausted or r.parked
                                                          for r in resumes)
            token = "" if done else self._page_token(resumes)
            for run, resume in zip(self._runs, resumes, strict=True):
                status = self._status(run, resume)
                if self._changed(run, status):
                    yield status
            yield self._page(page, token, best_effort)
            self._page_number += 1
            if not token:
                return

    async def _fill_page(self) -> tuple[list[FusedResult], bool]:
        """Emit up to top_k results, reading further when the order is not yet certain."""
        results: list[FusedResult] = []
        best_effort = False
        rounds = 0
        while True:
            want = self._plan.top_k - len(results)
            candidates = self._fusion.candidates()
            open_terms = {
                r.slot.index: rrf.term(r.fetched + 1, self._k)
                for r in self._runs if r.fetchable and not r.sweeping
            }
            ready = rrf.ready_keys(candidates, open_terms, want) if want > 0 else []
            if want > 0 and not ready and open_terms and self._may_fetch(rounds):
                await self._fetch(self._widest(open_terms))
                rounds += 1
                continue
            sweepers = unconfirmed = []
            if not candidates and not open_terms:
                sweepers = [r for r in self._runs if r.fetchable and r.sweeping]
                unconfirmed = [r for r in self._runs if r.unconfirmed]
            if sweepers or unconfirmed:
                # Nothing else left: sweep now, so this page knows whether paging is over.
                if not self._may_fetch(rounds):
                    for run in sweepers:
                        run.cut = True
                    break
                for run in unconfirmed:
                    run.begin_sweep()
                await self._fetch([*sweepers, *unconfirmed])
                rounds += 1
                continue
            if want <= 0:
                break
            if not ready:
                ready = rrf.best_keys(candidates, want)
                best_effort = best_effort or bool(ready)
            if not ready:
                break
            gone = await self._hydrate(ready)
            results.extend(self._take(key) for key in ready if key not in gone)
        return results, best_effort

    async def _hydrate(self, keys: Sequence[str]) -> set[str]:
        """Complete the stub documents of results about to be emitted, concurrently; returns
        the keys of results that are gone (settled, not to be emitted)."""
        jobs = []
        for key in keys:
            list_index, doc = self._fusion.best(key)
            run = self._runs[list_index]
            if doc.stub and run.spec.hydrate is not None and run.http is not None:
                jobs.append((key, list_index, run, doc))
        if not jobs:
            return set()
        done = await asyncio.gather(
            *(self._hydrate_one(key, run, doc) for key, _, run, doc in jobs)
        )
        gone: set[str] = set()
        for (key, list_index, _, _), completed in zip(jobs, done, strict=True):
            if completed is None:
                self._fusion.settle(key)
                gone.add(key)
            else:
                self._fusion.replace(key, list_index, completed)
        return gone

    async def _hydrate_one(
        self, key: str, run: ListRun, doc: NativeDocument
    ) -> NativeDocument | None:
        """The completed document; the stub itself when its read failed (the query says
        so); None when the item is gone."""
        assert run.spec.hydrate is not None
        assert run.http is not None
        started = run.prefetched.pop(key, None)
        if started is not None:
            outcome = await started
        else:
            outcome = await details(run.spec.hydrate, run.http, doc)
        if isinstance(outcome, ProviderError):
            if outcome.gone:
                return None
            run.degrade(f"details of some results could not be read: {outcome.message}")
            return doc
        return outcome

    def _may_fetch(self, rounds: int) -> bool:
        return (
            rounds < self._settings.max_rounds_per_page
            and self._call.time_left() > self._settings.min_round_seconds
        )

    def _widest(self, open_terms: dict[int, float]) -> list[ListRun]:
        widest = max(open_terms.values())
        return [r for r in self._runs if open_terms.get(r.slot.index) == widest]

    async def _fetch(self, batch: Sequence[ListRun]) -> None:
        async with aclosing(self._call.fetch(batch)) as settled:
            async for run, votes in settled:
                self._add(run, votes)

    def _add(self, run: ListRun, votes: Sequence[Vote]) -> None:
        """A list's new votes into the fusion; a sweep that read a result not emitted
        before it is marked (it does not end the list: see `resume_state`)."""
        if self._fusion.add(run.slot.index, votes) and run.sweeping:
            run.found = True

    def _take(self, key: str) -> FusedResult:
        votes, doc, best_list = self._fusion.take(key)
        contributions = []
        for vote in votes:
            run = self._runs[vote.list_index]
            run.contributed += 1
            contributions.append(ResultContribution(
                run.slot.query_index, run.slot.account.account_id, vote.rank, vote.score
            ))
        best = self._runs[best_list].slot
        return FusedResult(
            result_id=key,
            provider=best.account.provider,
            account_id=best.account.account_id,
            kind=clip(doc.kind, NAME_CHARS),
            title=clip(doc.title, TITLE_CHARS),
            url=doc.url if len(doc.url) <= URL_CHARS else "",
            snippet=preview(doc.content, best.query.text),
            author=clip(doc.author, NAME_CHARS),
            container=clip(doc.container, NAME_CHARS),
            update_time=doc.modified_at,
            event_start_time=doc.event_start_at,
            score=rrf.total(vote.score for vote in votes),
            contributions=tuple(contributions),
        )

    def _page_token(self, resumes: Sequence[ListState]) -> str:
        state = PageState(tuple(resumes), tuple(self._fusion.emitted), self._page_number + 1,
                          tuple(run.slot.key for run in self._runs), self._k)
        return encode_page_token(self._signer, self._plan.binding, state)

    def _cursor(self, run: ListRun, resume: ListState) -> str:
        """The list's signed cursor (signed again only when its resume state moved);
        `resume` is `run.resume` of the ids emitted so far."""
        state = structs.replace(resume, seen=run.own_emitted(self._fusion.emitted))
        known = self._cursors.get(run.slot.index)
        if known is not None and known[0] == state:
            return known[1]
        binding = self._bindings.get(run.slot.index)
        if binding is None:
            slot = run.slot
            binding = self._bindings[slot.index] = cursor_binding(
                self._plan.tenant, slot.account.provider, slot.account.account_id,
                slot.query.text, slot.query.kind, slot.query.time_range, slot.query.project,
            )
        cursor = encode_cursor(self._signer, binding, state, run.slot.account.account_id)
        self._cursors[run.slot.index] = (state, cursor)
        return cursor

    def _status(self, run: ListRun, resume: ListState) -> QueryStatus:
        slot = run.slot
        return QueryStatus(
            query_index=slot.query_index,
            account_id=slot.account.account_id,
            provider=slot.account.provider,
            state=run.state or QueryState.OK,
            message=run.message,
            partial=run.partial,
            retry_after=run.retry_after,
            total=run.total,
            total_is_exact=run.total_is_exact,
            result_count=run.contributed,
            next_cursor=self._cursor(run, resume),
            page_number=self._page_number,
        )

    def _changed(self, run: ListRun, status: QueryStatus) -> bool:
        before = self._sent.get(run.slot.index)
        if before is not None and structs.replace(before, page_number=status.page_number) == status:
            return False
        self._sent[run.slot.index] = status
        return True

    def _cards(self) -> tuple[ProviderCard, ...]:
        searched = {r.slot.account.provider for r in self._runs
                    if r.state is not QueryState.NEEDS_RECONNECT}
        return cards_for(searched, self._registry)

    def _page(self, results: Sequence[FusedResult], token: str, best_effort: bool) -> FusedPage:
        # A query that reached no account (none connected, or disconnected since) is SKIPPED:
        # the fused ranking may miss its results too.
        degraded = bool(self._plan.unmatched) or any(
            r.state is not QueryState.OK or r.partial for r in self._runs
        )
        return FusedPage(
            results=tuple(results),
            next_page_token=token,
            page_number=self._page_number,
            cards=self._cards(),
            ranking_is_exact=not (best_effort or degraded),
            rrf_k=self._k,
        )

