"""Base of every fake provider: routing, auth, fault helpers and simple text matching."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from service.fakes.server import FakeHttpServer, Fault, Request, Response

if TYPE_CHECKING:
    from service.fakes.oauth import FakeTokenIssuer

Route = Callable[[Request, "re.Match[str]"], Response]


def words(text: str) -> list[str]:
    """Lower-case words of a query (quotes dropped)."""
    return [w for w in re.split(r"[\s\"()]+", text.lower()) if w]


def matches_all(terms: Iterable[str], *haystacks: str) -> bool:
    """Every term appears (case-insensitive, prefix `x*` allowed) in the joined haystacks."""
    hay = " ".join(haystacks).lower()
    for term in terms:
        if term.endswith("*"):
            if not re.search(r"\b" + re.escape(term[:-1]), hay):
                return False
        elif term not in hay:
            return False
    return True


def parse_when(value: str) -> datetime:
    """ISO date/datetime (Z allowed) as aware UTC."""
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# Live page tokens are long: Drive's, Calendar's, Gmail's and Jira's run to 100-250
# characters, and a search over many accounts carries one per list in its page token.
_TOKEN_PADDING = 110


def offset_token(offset: int, epoch: int = 0) -> str:
    """Opaque page token encoding an offset, as long as the live APIs' (~160 characters), valid
    while its fake's `token_epoch` is `epoch`."""
    head = f"offset:{offset}:{epoch}:".encode()
    raw = head + hashlib.sha256(str(offset).encode()).digest() * 4
    return base64.urlsafe_b64encode(raw[: len(head) + _TOKEN_PADDING]).decode()


def token_offset(token: str, epoch: int = 0) -> int | None:
    """Offset of a page token; None when it is not one of ours or has expired (another
    epoch)."""
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except ValueError:
        return None
    head, _, rest = raw.partition(b":")
    number, sep, rest = rest.partition(b":")
    issued, sep_epoch, _ = rest.partition(b":")
    if head != b"offset" or not sep or not number.isdigit():
        return None
    if not sep_epoch or not issued.isdigit() or int(issued) != epoch:
        return None
    return int(number)


def google_invalid_value(location: str, message: str = "Invalid Value") -> dict[str, Any]:
    """Google's 400 body for a parameter it refuses (an unparsable `q`, an expired or unknown
    `pageToken`): the message says only "Invalid Value", `location` names the parameter."""
    return {
        "error": {
            "code": 400,
            "message": message,
            "errors": [{"domain": "global", "reason": "invalid", "message": message,
                        "locationType": "parameter", "location": location}],
        }
    }


class FakeProvider:
    """One provider API on its own loopback port."""

    name = "fake"

    def __init__(self) -> None:
        self.token = f"tok-{self.name}-secret"
        self.basic_user = ""  # when set, `Basic base64(user:token)` is also accepted
        self.token_epoch = 0  # page tokens of another epoch have expired
        # When set, the issuer's live access tokens are accepted too, and its expired ones get
        # `expired()` (the provider's expired-token answer).
        self.issuer: FakeTokenIssuer | None = None
        self.server = FakeHttpServer(self._dispatch)
        self._routes: list[tuple[str, re.Pattern[str], Route]] = []

    # ---- wiring ---------------------------------------------------------------------------
    def route(self, method: str, pattern: str, handler: Route) -> None:
        """Serve `method` on raw paths fully matching `pattern`."""
        self._routes.append((method, re.compile(pattern), handler))

    @property
    def base_url(self) -> str:
        """Loopback base URL of this fake."""
        return self.server.base_url

    @property
    def requests(self) -> Counter[str]:
        """Requests served, per decoded path."""
        return self.server.requests

    @property
    def log(self) -> deque[Request]:
        """The requests served, in order (the most recent `LOG_LIMIT` of them; `requests` counts
        every one)."""
        return self.server.log

    def reset(self) -> None:
        """Empty the corpus and forget faults and requests."""
        self.server.reset()
        self.basic_user = ""
        self.token_epoch = 0
        self.token = f"tok-{self.name}-secret"

    def revoke_token(self) -> str:
        """Stop accepting the credential issued so far (the user revoked it, or changed a
        password); returns the one accepted from now on, to reconnect with."""
        self.token = f"tok-{self.name}-{secrets.token_hex(4)}"
        return self.token

    def page_token(self, offset: int) -> str:
        """A page token for `offset`, valid until `expire_page_tokens`."""
        return offset_token(offset, self.token_epoch)

    def page_offset(self, token: str) -> int | None:
        """The offset of a page token this fake issued and has not expired; None otherwise."""
        return token_offset(token, self.token_epoch)

    def expire_page_tokens(self) -> None:
        """Make every page token issued so far invalid, as live page tokens and cursors expire
        (Jira's after 7 days; Slack answers `invalid_cursor`, Google 400 on `pageToken`)."""
        self.token_epoch += 1

    def authorized(self, request: Request) -> bool:
        """True when the request carries this fake's credential."""
        header = request.headers.get("authorization", "")
        if header == f"Bearer {self.token}":
            return True
        if self.issuer is not None and header.startswith("Bearer "):
            return self.issuer.state(header[7:]) == "live"
        if self.basic_user:
            pair = base64.b64encode(f"{self.basic_user}:{self.token}".encode()).decode()
            return header == f"Basic {pair}"
        return False

    def unauthorized(self) -> Response:
        """The provider's answer to a missing or wrong credential."""
        return Response.json({"message": "Bad credentials"}, 401)

    def expired(self) -> Response:
        """The provider's answer to an expired access token (by default its 401)."""
        return self.unauthorized()

    def refused(self, request: Request) -> Response:
        """The answer to a request without an accepted credential."""
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.startswith("Bearer ") else ""
        if self.issuer is not None and bearer and self.issuer.state(bearer) == "expired":
            return self.expired()
        return self.unauthorized()

    async def _dispatch(self, request: Request) -> Response:
        for method, pattern, handler in self._routes:
            found = pattern.fullmatch(request.raw_path)
            if found and method == request.method:
                if not self.authorized(request):
                    return self.refused(request)
                return handler(request, found)
        return Response.json({"message": "Not Found"}, 404)

    # ---- fault knobs ----------------------------------------------------------------------
    def fault(self, kind: str, **options: Any) -> Fault:
        """Add a fault (see `Fault`) and return it."""
        added = Fault(kind, **options)
        self.server.faults.append(added)
        return added

    def slow(self, seconds: float, *, path: str = "", times: int | None = None) -> Fault:
        """Answer after `seconds`."""
        return self.fault("latency", delay=seconds, path=path, times=times)

    def fail_status(self, status: int, *, path: str = "", times: int | None = None) -> Fault:
        """Answer `status` with a JSON error body."""
        return self.fault("status", status=status, path=path, times=times)

    def rate_limit(
        self, retry_after: int = 30, *, path: str = "", times: int | None = None
    ) -> Fault:
        """429 with Retry-After."""
        headers = {"Retry-After": str(retry_after)}
        return self.fault("status", status=429, headers=headers, path=path, times=times)

    def exhaust_quota(
        self, reset_in: int = 42, *, path: str = "", times: int | None = None
    ) -> Fault:
        """GitHub-style 403 with x-ratelimit-remaining: 0 and a reset time."""
        headers = {
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": str(int(time.time()) + reset_in),
        }
        body = {"message": "API rate limit exceeded"}
        return self.fault("status", status=403, headers=headers, body=body, path=path, times=times)

    def malformed(self, *, path: str = "", times: int | None = None) -> Fault:
        """200 with broken JSON."""
        return self.fault("malformed", path=path, times=times)

    def truncate(self, *, path: str = "", times: int | None = None) -> Fault:
        """Content-Length larger than the body sent, then close."""
        return self.fault("truncated", path=path, times=times)

    def reset_connection(self, *, path: str = "", times: int | None = None) -> Fault:
        """Reset the connection instead of answering."""
        return self.fault("reset", path=path, times=times)

    def close_kept_alive(self, *, path: str = "", times: int | None = None) -> Fault:
        """Close a kept-alive connection, unanswered, when a request arrives on it (the
        server's idle timeout fired as the request went out); new connections are served."""
        return self.fault("stale", path=path, times=times)

    def drip(self, interval: float, *, path: str = "", times: int | None = None) -> Fault:
        """Send the body 16 bytes at a time, `interval` seconds apart."""
        return self.fault("drip", delay=interval, path=path, times=times)

    def fail_call(
        self,
        path: str,
        call: int,
        status: int = 500,
        *,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> Fault:
        """Answer only the `call`-th request (1-based, from now) whose path contains `path`
        with `status` (and the given headers and JSON body); every other request is served."""
        return self.fault(
            "status", status=status, headers=dict(headers or {}), body=body, path=path,
            on_call=call,
        )

    def answer(self, body: Any, *, path: str = "", times: int | None = None) -> Fault:
        """200 with this JSON body instead of the real answer (e.g. Slack ok:false)."""
        return self.fault("body", body=body, path=path, times=times)


def page_slice(items: list[Any], offset: int, size: int) -> tuple[list[Any], int | None]:
    """Items of one page and the next offset (None at the end)."""
    chunk = items[offset : offset + size]
    following = offset + size
    return chunk, following if following < len(items) else None
