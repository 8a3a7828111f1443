"""What identifies a fused result, and what it carries of a provider's text."""

from __future__ import annotations

import functools
import hashlib
from urllib.parse import urlsplit, urlunsplit

from service.workspace.model import NativeDocument, ProviderId
from service.workspace.paging import short_id

__all__ = [
    "NAME_CHARS",
    "PREVIEW_CHARS",
    "TITLE_CHARS",
    "URL_CHARS",
    "canonical_url",
    "fusion_key",
    "identity",
    "preview",
    "result_id",
]

PREVIEW_CHARS = 1800
# What a fused result carries of a provider's text, so that a page of 50 stays far under the
# response limit whatever a provider sends: longer titles and names are cut, and a longer URL
# is left out (a cut link leads nowhere; browsers refuse longer ones anyway).
TITLE_CHARS = 1000
NAME_CHARS = 500  # kind, author, container
URL_CHARS = 8192


@functools.lru_cache(maxsize=16_384)
def canonical_url(url: str) -> str:
    """A URL spelled one way: scheme and host lower-cased, default port and trailing slash
    dropped (the query and fragment kept: Gmail and Drive put the item's id there)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url.strip()
    if not parts.scheme or not parts.hostname:
        return url.strip()
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if port is not None and (scheme, port) not in (("https", 443), ("http", 80)):
        host = f"{host}:{port}"
    path = parts.path.rstrip("/")
    return urlunsplit((scheme, host, path, parts.query, parts.fragment))


def fusion_key(provider: ProviderId, account_id: str, doc: NativeDocument) -> str:
    """Identity for fusion: one per real item whichever account saw it.

    The provider's global key when it has one (calendar event ids), else the item's
    canonical URL (the same issue, file or page through two accounts); only an item
    without either is told apart by account.
    """
    if doc.dedupe_key:
        return f"{provider.value}\x1f*\x1f{doc.dedupe_key}"
    if doc.url:
        return f"{provider.value}\x1f*\x1f{canonical_url(doc.url)}"
    return f"{provider.value}\x1f{account_id}\x1f{doc.id}"


@functools.lru_cache(maxsize=65_536)
def identity(key: str) -> tuple[str, str]:
    """(result id, short id) of a fusion key; cached: the same items come back page after
    page and search after search, and each costs two digests."""
    public = result_id(key)
    return public, short_id(public)


def result_id(key: str) -> str:
    """Stable public id of a fused result (also the tie-breaker of the fused order)."""
    return "r_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def preview(content: str, text: str, size: int = PREVIEW_CHARS) -> str:
    """At most `size` characters of content, centred on the longest query word it contains."""
    if len(content) <= size:
        return content
    lowered = content.casefold()
    words = sorted((w for w in text.casefold().split() if len(w) > 2), key=len, reverse=True)
    at = next((lowered.find(w) for w in words if lowered.find(w) >= 0), 0)
    start = max(0, min(at - size // 2, len(content) - size))
    return content[start : start + size]
