"""Fake Gmail API: `users.messages.list` (q operators) and `users.messages.get` (metadata)."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from typing import Any

from tests.fakes.base import FakeProvider, matches_all, offset_token, page_slice, token_offset
from tests.fakes.server import Request, Response


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
        self.reset()

    def reset(self) -> None:
        """Empty mailbox."""
        super().reset()
        self.messages: list[dict[str, Any]] = []

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
    ) -> None:
        """A message (snippets are HTML-escaped as Gmail sends them)."""
        self.messages.append(
            {
                "id": message_id,
                "threadId": f"t-{message_id}",
                "labelIds": ["INBOX"],
                "snippet": snippet.replace("'", "&#39;"),
                "historyId": "1",
                "sizeEstimate": 100,
                "internalDate": str(int(sent.timestamp() * 1000)),
                "_headers": {"Subject": subject, "From": sender, "To": "me@example.com"},
            }
        )

    def _list(self, request: Request, _: re.Match[str]) -> Response:
        hits = sorted(
            search(self.messages, request.arg("q")),
            key=lambda m: int(m["internalDate"]),
            reverse=True,
        )
        offset = token_offset(request.arg("pageToken")) if request.arg("pageToken") else 0
        if offset is None:
            return Response.json({"error": {"code": 400, "message": "Invalid pageToken"}}, 400)
        chunk, following = page_slice(hits, offset, min(int(request.arg("maxResults", "100")), 500))
        body: dict[str, Any] = {"resultSizeEstimate": len(hits)}
        if chunk:
            body["messages"] = [{"id": m["id"], "threadId": m["threadId"]} for m in chunk]
        if following is not None:
            body["nextPageToken"] = offset_token(following)
        return Response.json(body)

    def _get(self, request: Request, found: re.Match[str]) -> Response:
        message = next((m for m in self.messages if m["id"] == found.group(1)), None)
        if message is None:
            return Response.json(
                {"error": {"code": 404, "message": "Requested entity was not found."}}, 404
            )
        wanted = {h.lower() for h in request.query.get("metadataHeaders", [])}
        headers = [
            {"name": k, "value": v}
            for k, v in message["_headers"].items()
            if not wanted or k.lower() in wanted
        ]
        public = {k: v for k, v in message.items() if not k.startswith("_")}
        return Response.json({**public, "payload": {"mimeType": "text/plain", "headers": headers}})
