"""Shared by Jira and Confluence: cloud sites, date clauses and per-site fan-out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from msgspec import structs

from service.workspace.http import HttpClient
from service.workspace.model import ProviderPage, ProviderQuery, TimeRange
from service.workspace.providers._common import (
    LegResult,
    decode_cursor_map,
    dicts,
    documents_of,
    encode_cursor,
    failed,
    gather_legs,
    join_messages,
    resumable_leg,
    settle,
    text,
)

RESOURCES_PATH = "/oauth/token/accessible-resources"
MAX_SITES = 4
SITE_CONCURRENCY = 4


@dataclass(frozen=True)
class Site:
    """An Atlassian cloud site: its id, web origin, and API prefix on the account base URL."""

    cloud_id: str
    url: str
    api_prefix: str

    @property
    def label(self) -> str:
        """Human name used in messages."""
        return f"site {self.url or self.cloud_id}"


def parse_sites(data: Any, product: str) -> list[Site]:
    """Sites of an accessible-resources answer granting `product` (jira / confluence) scopes."""
    sites: list[Site] = []
    for item in dicts(data):
        cloud_id = text(item.get("id"))
        scopes = [text(scope) for scope in item.get("scopes") or [] if isinstance(scope, str)]
        if cloud_id and (not scopes or any(product in scope for scope in scopes)):
            url = text(item.get("url")).rstrip("/")
            sites.append(Site(cloud_id, url, f"/ex/{product}/{cloud_id}"))
    return sites


def escape_string(value: str) -> str:
    """Body of a double-quoted JQL/CQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def date_clauses(field: str, time_range: TimeRange) -> list[str]:
    """`field >= "day"` / `field <= "day"` widened by a day (site time zones differ from UTC)."""
    clauses: list[str] = []
    if time_range.start is not None:
        clauses.append(f'{field} >= "{(time_range.start - timedelta(days=1)).date().isoformat()}"')
    if time_range.end is not None:
        clauses.append(f'{field} <= "{(time_range.end + timedelta(days=1)).date().isoformat()}"')
    return clauses


async def resolve_sites(
    http: HttpClient, query: ProviderQuery, product: str
) -> tuple[list[Site], bool, str]:
    """Sites to search, whether the query targets exactly one (then cursors are raw), and a note.

    A basic-auth account is its own site; an OAuth account lists its sites, capped at 4
    unless `project` names one cloud id.
    """
    if http.uses_basic_auth:
        return [Site("", http.base_url, "")], True, ""
    sites = parse_sites(await http.get_json_memo(RESOURCES_PATH), product)
    project = query.project.strip()
    if project:
        chosen = [site for site in sites if site.cloud_id == project]
        if not chosen:
            raise failed(f"no accessible {product} site has cloud id {project[:80]!r}")
        return chosen, True, ""
    if len(sites) > MAX_SITES:
        note = (
            f"only {MAX_SITES} of {len(sites)} sites were searched; set project to a cloud id "
            "to search another"
        )
        return sites[:MAX_SITES], False, note
    return sites, False, ""


async def fan_out(
    http: HttpClient,
    query: ProviderQuery,
    product: str,
    run: Callable[[Site, str | None], Awaitable[LegResult]],
) -> ProviderPage:
    """Search every site, interleave results; cursor is raw for one site, JSON per site else."""
    sites, single, note = await resolve_sites(http, query, product)
    if not sites:
        return ProviderPage(
            (), partial=True,
            message=f"no {product} site is accessible with this account; nothing was searched.",
        )
    tokens: dict[str, str | None]
    if single:
        tokens = {sites[0].cloud_id: query.cursor or None}
    elif query.cursor:
        wanted = decode_cursor_map(query.cursor)
        tokens = {site.cloud_id: wanted[site.cloud_id] for site in sites if site.cloud_id in wanted}
    else:
        tokens = dict.fromkeys(site.cloud_id for site in sites)
    chosen = [site for site in sites if site.cloud_id in tokens]

    def call(site: Site) -> Callable[[], Awaitable[LegResult]]:
        return lambda: resumable_leg(lambda token: run(site, token), tokens[site.cloud_id],
                                     query.resumed)

    outcomes = await gather_legs([call(site) for site in chosen], concurrency=SITE_CONCURRENCY)
    settled = settle([(site.label, out) for site, out in zip(chosen, outcomes, strict=True)])
    page = _page(chosen, settled.legs, single, [note, *settled.messages])
    restarted = any(leg.restarted for leg in settled.legs.values())
    return structs.replace(page, complete=settled.complete, retry_after=settled.retry_after,
                           restarted=restarted)


def _page(
    sites: Sequence[Site], legs: dict[str, LegResult], single: bool, degraded: list[str]
) -> ProviderPage:
    following = {
        site.cloud_id: leg.next_token
        for site in sites
        if (leg := legs.get(site.label)) is not None and leg.next_token
    }
    if single:
        cursor = next(iter(following.values()), None)
    else:
        cursor = encode_cursor(following) if following else None
    notes = [leg.message for leg in legs.values()]
    return ProviderPage(
        documents_of(legs),
        next_cursor=cursor,
        partial=any(degraded),
        message=join_messages([*degraded, *notes]),
    )
