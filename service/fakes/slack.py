"""Fake Slack Web API: `assistant.search.context` (Real-time Search), keyword retrieval."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from service.fakes.base import (
    FakeProvider,
    matches_all,
    page_slice,
    words,
)
from service.fakes.server import Request, Response

_MODIFIER = re.compile(r"(?<!\S)(in|with|is|has|after|before|on|during|from):(\S+)")


class FakeSlack(FakeProvider):
    """Slack with messages and files; errors come as HTTP 200 `ok: false` like the real API."""

    name = "slack"

    def __init__(self) -> None:
        super().__init__()
        self.route("POST", r"/api/assistant\.search\.context", self._search)
        self.reset()

    def reset(self) -> None:
        """Empty corpus."""
        super().reset()
        self.messages: list[dict[str, Any]] = []
        self.files: list[dict[str, Any]] = []
        # Past the last page: "" (the real end), "empty" (empty pages with fresh cursors
        # without end) or "cycle" (the cursor leads back to the first page): broken paging.
        self.runaway = ""

    def unauthorized(self) -> Response:
        """Slack answers auth failures with HTTP 200 and ok:false."""
        return Response.json({"ok": False, "error": "invalid_auth"})

    def expired(self) -> Response:
        """Slack's expired token (rotation on): HTTP 200, ok:false."""
        return Response.json({"ok": False, "error": "token_expired"})

    def add_message(
        self,
        channel_id: str,
        channel_name: str,
        ts: str,
        text: str,
        *,
        author: str = "Jane",
        thread_ts: str | None = None,
    ) -> None:
        """A channel message."""
        self.messages.append(
            {
                "author_user_id": "U1",
                "author_name": author,
                "team_id": "T1",
                "channel_id": channel_id,
                "channel_name": channel_name,
                "message_ts": ts,
                "thread_ts": thread_ts or ts,
                "content": text,
                "is_author_bot": False,
                "permalink": f"https://acme.slack.com/archives/{channel_id}/p{ts.replace('.', '')}",
                "context_messages": {"before": [], "after": []},
            }
        )

    def add_file(self, file_id: str, title: str, content: str, *, updated: int) -> None:
        """A shared file."""
        self.files.append(
            {
                "file_id": file_id,
                "title": title,
                "content": content,
                "author_name": "Jane",
                "permalink": f"https://acme.slack.com/files/U1/{file_id}",
                "date_created": updated,
                "date_updated": updated,
            }
        )

    def _search(self, request: Request, _: re.Match[str]) -> Response:
        args = _args(request)
        if "query" not in args:
            return Response.json({"ok": False, "error": "invalid_arguments"})
        query = str(args["query"])
        limit = min(int(args.get("limit", 20)), 20)
        offset = self.page_offset(str(args["cursor"])) if args.get("cursor") else 0
        if offset is None:
            return Response.json({"ok": False, "error": "invalid_cursor"})
        modifiers = _MODIFIER.findall(query)
        terms = words(_MODIFIER.sub(" ", query))
        # Keyword retrieval needs every word; OR is not an operator, so `a OR b` finds nothing.
        alternatives = bool(re.search(r"(?<!\S)OR(?!\S)", query))
        hits = (
            []
            if alternatives
            else [
                m
                for m in self.messages
                if matches_all(terms, m["content"]) and _passes(m, modifiers, args)
            ]
        )
        # Newest first unless a test re-scored a message (`_rank`: higher comes first).
        hits.sort(key=lambda m: (m.get("_rank", 0), float(m["message_ts"])), reverse=True)
        chunk, following = page_slice(hits, offset, limit)
        if following is None and self.runaway:
            following = offset + limit if self.runaway == "empty" else 0
        chunk = [{k: v for k, v in m.items() if not k.startswith("_")} for m in chunk]
        types = str(args.get("content_types", "messages"))
        files = [f for f in self.files if matches_all(terms, f["title"], f["content"])]
        results: dict[str, Any] = {"messages": chunk}
        if "files" in types and not alternatives and offset == 0:
            results["files"] = files[:limit]
        cursor = self.page_token(following) if following is not None else ""
        return Response.json(
            {"ok": True, "results": results, "response_metadata": {"next_cursor": cursor}}
        )


def _args(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").startswith("application/json"):
        body = json.loads(request.body or b"{}")
        return body if isinstance(body, dict) else {}
    return {k: v[0] for k, v in parse_qs(request.body.decode()).items()}


def _passes(
    message: dict[str, Any], modifiers: list[tuple[str, str]], args: dict[str, Any]
) -> bool:
    when = datetime.fromtimestamp(float(message["message_ts"]), tz=UTC)
    if "after" in args and when.timestamp() < float(args["after"]):
        return False
    if "before" in args and when.timestamp() > float(args["before"]):
        return False
    for name, value in modifiers:
        if name == "in" and value.strip("<>#") != message["channel_id"]:
            return False
        if name == "after" and when < _day(value) + timedelta(days=1):
            return False
        if name == "before" and when >= _day(value):
            return False
    return True


def _day(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(tzinfo=UTC)
