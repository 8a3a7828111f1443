"""Fake Gmail API: `users.messages.list` (q operators), `users.messages.get` (metadata),
`users.getProfile`, and the batch endpoint `POST /batch/gmail/v1`.

A batch is a multipart/mixed request of `application/http` parts, each a request line (path
only) and optional headers; the answer is multipart/mixed with its own boundary, one part per
call in request order, each `HTTP/1.1 <status>` + headers + JSON, its Content-ID the request's
prefixed `response-`. The outer answer is 200 unless the batch itself is refused (more than
100 calls: 400; the fake's wording, not Google's). Outer headers (Authorization) apply to every
part unless a part sets its own; with `parts_check_auth` a refused token is answered per part
(401 in each) instead of refusing the batch request.

Counting: `requests` counts each batched call under its own path too (Google meters every
inner call), besides the `/batch/gmail/v1` request itself; `log` holds HTTP requests only, and
`batch_sizes` the calls of each batch served. Status faults (`fail_status`, `rate_limit`) whose
path matches an inner call answer that part only.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from service.fakes.base import FakeProvider, google_invalid_value, matches_all, page_slice
from service.fakes.server import Request, Response

BATCH_LIMIT = 100  # calls Gmail takes in one batch
_ERRORS: dict[int, tuple[str, str, str]] = {  # status: (domain, reason, message), Google's
    401: ("global", "authError", "Invalid Credentials"),
    403: ("usageLimits", "userRateLimitExceeded", "User Rate Limit Exceeded"),
    404: ("global", "notFound", "Requested entity was not found."),
    429: ("global", "rateLimitExceeded", "Too many concurrent requests for user."),
    500: ("global", "backendError", "Backend Error"),
    503: ("global", "backendError", "The service is currently unavailable."),
}


def google_error(status: int) -> dict[str, Any]:
    """The legacy-shaped Google error body for `status`."""
    domain, reason, message = _ERRORS.get(status, ("global", "failed", "fault injected"))
    return {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"domain": domain, "reason": reason, "message": message}],
        }
    }


@dataclass
class ReadFault:
    """The next `times` reads of one message answer `status`."""

    status: int
    times: int
    retry_after: int | None = None


def _bound(value: str) -> float:
    if value.isdigit():
        return float(value)
    return datetime.strptime(value, "%Y/%m/%d").replace(tzinfo=UTC).timestamp()


def _matches_group(message: dict[str, Any], tokens: list[str]) -> bool:
    headers = {k.lower(): v for k, v in message["_headers"].items()}
    seconds = int(message["internalDate"]) / 1000
    hay = f"{headers.get('subject', '')} {headers.get('from', '')} {message['snippet']}"
    for token in tokens:
        negate = token.startswith("-")
        name, _, value = token.lstrip("-").partition(":")
        if value and name in ("from", "to", "subject"):
            ok = value.lower() in headers.get(name, "").lower()
        elif value and name == "after":
            ok = seconds > _bound(value)
        elif value and name == "before":
            ok = seconds < _bound(value)
        elif value:
            ok = True  # label:, has:, in: ... are not modelled
        else:
            ok = matches_all([token.lstrip("-").lower()], hay)
        if ok == negate:
            return False
    return True


def search(messages: list[dict[str, Any]], q: str) -> list[dict[str, Any]]:
    """Messages matching q: words all required, uppercase OR alternatives, `-` excludes."""
    try:
        tokens = shlex.split(q.replace("(", " ").replace(")", " "))
    except ValueError:
        tokens = q.split()
    bounds = [t for t in tokens if re.match(r"(after|before):", t)]
    groups: list[list[str]] = [[]]
    for token in tokens:
        if token == "OR":
            groups.append([])
        elif token not in bounds:
            groups[-1].append(token)
    return [
        m
        for m in messages
        if _matches_group(m, bounds) and any(_matches_group(m, g) for g in groups)
    ]


class FakeGmail(FakeProvider):
    """A mailbox of messages with Subject/From headers."""

    name = "gmail"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/gmail/v1/users/me/messages", self._list)
        self.route("GET", r"/gmail/v1/users/me/messages/([^/]+)", self._get)
        self.route("GET", r"/gmail/v1/users/me/profile", self._profile)
        self.route("POST", r"/batch/gmail/v1", self._batch)
        self.reset()

    def reset(self) -> None:
        """Empty mailbox, no read faults."""
        super().reset()
        self.messages: list[dict[str, Any]] = []
        self.address = "me@example.com"
        self.read_faults: dict[str, list[ReadFault]] = {}
        self.delete_after_list: set[str] = set()
        self.batch_sizes: list[int] = []
        # When set, the batch request itself is let through whatever its token and each inner
        # call checks the (outer) Authorization: a refused token answers 401 in every part.
        self.parts_check_auth = False
        # Called once when the next batch request arrives, before its parts are answered (a
        # test expires the tokens there: between the listing and the batch).
        self.before_next_batch: Callable[[], None] | None = None

    def authorized(self, request: Request) -> bool:
        """The credential check; the batch request itself passes with `parts_check_auth`."""
        if self.parts_check_auth and request.raw_path == "/batch/gmail/v1":
            return True
        return super().authorized(request)

    # ---- knobs ----------------------------------------------------------------------------
    def fail_reads(
        self, message_id: str, status: int, *, times: int = 1, retry_after: int | None = None
    ) -> None:
        """The next `times` reads of the message (direct or batched) answer `status` with
        Google's error body (403 = userRateLimitExceeded, 429 = rateLimitExceeded)."""
        fault = ReadFault(status, times, retry_after)
        self.read_faults.setdefault(message_id, []).append(fault)

    def delete_message(self, message_id: str) -> None:
        """Remove a message: it is no longer listed, and reading it answers 404."""
        self.messages = [m for m in self.messages if m["id"] != message_id]

    def delete_after_next_list(self, *message_ids: str) -> None:
        """Delete these messages right after the next list answer that holds them."""
        self.delete_after_list.update(message_ids)

    def unauthorized(self) -> Response:
        """Google's 401."""
        return Response.json({"error": {"code": 401, "status": "UNAUTHENTICATED"}}, 401)

    def add_message(
        self,
        message_id: str,
        subject: str,
        snippet: str,
        *,
        sent: datetime,
        sender: str = "Jane <jane@example.com>",
        internal_date: str = "",
    ) -> None:
        """A message (snippets are HTML-escaped as Gmail sends them); `internal_date`
        replaces the epoch milliseconds of `sent` (an imported message can carry 0, a
        negative number or one past year 9999)."""
        self.messages.append(
            {
                "id": message_id,
                "threadId": f"t-{message_id}",
                "labelIds": ["INBOX"],
                "snippet": snippet.replace("'", "&#39;"),
                "historyId": "1",
                "sizeEstimate": 100,
                "internalDate": internal_date or str(int(sent.timestamp() * 1000)),
                "_headers": {"Subject": subject, "From": sender, "To": "me@example.com"},
            }
        )

    def _list(self, request: Request, _: re.Match[str]) -> Response:
        hits = sorted(
            search(self.messages, request.arg("q")),
            key=lambda m: int(m["internalDate"]),
            reverse=True,
        )
        offset = self.page_offset(request.arg("pageToken")) if request.arg("pageToken") else 0
        if offset is None:
            return Response.json(google_invalid_value("pageToken"), 400)
        chunk, following = page_slice(hits, offset, min(int(request.arg("maxResults", "100")), 500))
        body: dict[str, Any] = {"resultSizeEstimate": len(hits)}
        if chunk:
            body["messages"] = [{"id": m["id"], "threadId": m["threadId"]} for m in chunk]
        if following is not None:
            body["nextPageToken"] = self.page_token(following)
        listed = {m["id"] for m in chunk} & self.delete_after_list
        for message_id in listed:
            self.delete_after_list.discard(message_id)
            self.delete_message(message_id)
        return Response.json(body)

    def _profile(self, _request: Request, _found: re.Match[str]) -> Response:
        threads = {m["threadId"] for m in self.messages}
        return Response.json(
            {
                "emailAddress": self.address,
                "messagesTotal": len(self.messages),
                "threadsTotal": len(threads),
                "historyId": "1",
            }
        )

    def _read_fault(self, message_id: str) -> Response | None:
        faults = self.read_faults.get(message_id, [])
        if not faults:
            return None
        fault = faults[0]
        fault.times -= 1
        if fault.times <= 0:
            faults.pop(0)
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        return Response.json(google_error(fault.status), fault.status, headers)

    def _get(self, request: Request, found: re.Match[str]) -> Response:
        injected = self._read_fault(found.group(1))
        if injected is not None:
            return injected
        message = next((m for m in self.messages if m["id"] == found.group(1)), None)
        if message is None:
            return Response.json(google_error(404), 404)
        wanted = {h.lower() for h in request.query.get("metadataHeaders", [])}
        headers = [
            {"name": k, "value": v}
            for k, v in message["_headers"].items()
            if not wanted or k.lower() in wanted
        ]
        public = {k: v for k, v in message.items() if not k.startswith("_")}
        return Response.json({**public, "payload": {"mimeType": "text/plain", "headers": headers}})

    # ---- the batch endpoint ---------------------------------------------------------------
    def _batch(self, request: Request, _found: re.Match[str]) -> Response:
        parts = _batch_parts(request.headers.get("content-type", ""), request.body)
        if parts is None:
            return Response.json(google_error(400), 400)
        if len(parts) > BATCH_LIMIT:
            body = google_error(400)
            body["error"]["message"] = f"A batch takes at most {BATCH_LIMIT} calls."
            return Response.json(body, 400)
        self.batch_sizes.append(len(parts))
        hook, self.before_next_batch = self.before_next_batch, None
        if hook is not None:
            hook()
        boundary = f"batch_{secrets.token_hex(8)}"
        chunks: list[bytes] = []
        for content_id, payload in parts:
            inner = _inner_request(payload, request)
            answer = self._answer_inner(inner) if inner else Response.json(google_error(400), 400)
            chunks.append(_response_part(boundary, content_id, answer))
        body_bytes = b"".join(chunks) + f"--{boundary}--\r\n".encode()
        return Response(200, body_bytes, {"Content-Type": f"multipart/mixed; boundary={boundary}"})

    def _answer_inner(self, inner: Request) -> Response:
        self.server.requests[inner.path] += 1
        chosen = None
        for fault in self.server.faults:  # as for requests: each counts the call, first applies
            if fault.kind == "status" and fault.path and fault.matches(inner) and chosen is None:
                chosen = fault
        if chosen is not None:
            if chosen.times is not None:
                chosen.times -= 1
            body = chosen.body if chosen.body is not None else google_error(chosen.status)
            return Response.json(body, chosen.status, chosen.headers)
        if not self.authorized(inner):
            return self.refused(inner)
        for method, pattern, handler in self._routes:
            found = pattern.fullmatch(inner.raw_path)
            if found and method == inner.method and handler != self._batch:
                return handler(inner, found)
        return Response.json(google_error(404), 404)


_PART_BOUNDARY = re.compile(r'boundary=(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)
_BLANK = re.compile(rb"\r?\n\r?\n")


def _batch_parts(content_type: str, body: bytes) -> list[tuple[str, bytes]] | None:
    """(Content-ID, payload) of each part of a multipart/mixed body; None when it is not one.

    The fake's own small reader (not the service's, and not the standard-library email
    parser, which costs milliseconds a batch and made the fake the bottleneck of benchmarks).
    """
    found = _PART_BOUNDARY.search(content_type)
    if not content_type.lower().startswith("multipart/") or found is None:
        return None
    delimiter = b"--" + (found.group(1) or found.group(2)).encode("latin-1")
    parts: list[tuple[str, bytes]] = []
    for piece in body.split(delimiter)[1:]:
        if piece.startswith(b"--"):
            break
        head, *rest = _BLANK.split(piece.lstrip(b"\r\n"), maxsplit=1)
        payload = rest[0] if rest else b""
        if payload.endswith(b"\r\n"):
            payload = payload[:-2]
        elif payload.endswith(b"\n"):
            payload = payload[:-1]
        content_id = ""
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-id":
                content_id = value.strip()
        parts.append((content_id, payload))
    return parts


def _inner_request(payload: bytes, outer: Request) -> Request | None:
    """The HTTP request a batch part holds; the outer headers apply unless it sets its own."""
    head, _, body = payload.replace(b"\r\n", b"\n").partition(b"\n\n")
    lines = head.decode("latin-1").strip("\n").split("\n")
    fields = lines[0].split()
    if len(fields) not in (2, 3) or not fields[1].startswith("/"):
        return None
    headers = {k: v for k, v in outer.headers.items() if not k.startswith("content-")}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return Request(fields[0].upper(), fields[1], headers, body.strip())


def _response_part(boundary: str, content_id: str, answer: Response) -> bytes:
    """One `application/http` part holding a complete HTTP response."""
    lines = [f"--{boundary}", "Content-Type: application/http"]
    if content_id:
        lines.append(f"Content-ID: <response-{content_id.strip('<>')}>")
    lines += ["", f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}"]
    lines += [f"{name}: {value}" for name, value in answer.headers.items()]
    lines += [f"Content-Length: {len(answer.body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + answer.body + b"\r\n"
