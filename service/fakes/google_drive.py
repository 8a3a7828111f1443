"""Fake Google Drive v3 `files.list` with a parser for the `q` grammar (bare words rejected)
and the `corpora` a search covers (`user`, `drive`, `allDrives`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from service.fakes.base import FakeProvider, google_invalid_value, page_slice, parse_when
from service.fakes.server import Request, Response

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|\\.)*')|(?P<op><=|>=|!=|=|<|>|\(|\))|(?P<word>[\w.]+))"
)
File = dict[str, Any]
Predicate = Callable[[File], bool]


class QueryError(ValueError):
    """Drive's 400 invalid query."""


def tokenize(q: str) -> list[tuple[str, str]]:
    """(kind, text) tokens; anything else is an invalid query."""
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(q.rstrip()):
        found = _TOKEN.match(q, position)
        if not found or found.end() == position:
            raise QueryError(q)
        kind = found.lastgroup or ""
        tokens.append((kind, found.group(kind)))
        position = found.end()
    return tokens


def _unescape(literal: str) -> str:
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.index = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.index] if self.index < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.index += 1
        return token

    def parse(self) -> Predicate:
        predicate = self.disjunction()
        if self.peek()[0] != "end":
            raise QueryError("trailing tokens")
        return predicate

    def disjunction(self) -> Predicate:
        parts = [self.conjunction()]
        while self.peek() == ("word", "or"):
            self.take()
            parts.append(self.conjunction())
        return lambda f: any(p(f) for p in parts)

    def conjunction(self) -> Predicate:
        parts = [self.negation()]
        while self.peek() == ("word", "and"):
            self.take()
            parts.append(self.negation())
        return lambda f: all(p(f) for p in parts)

    def negation(self) -> Predicate:
        if self.peek() == ("word", "not"):
            self.take()
            inner = self.negation()
            return lambda f: not inner(f)
        if self.peek() == ("op", "("):
            self.take()
            inner = self.disjunction()
            if self.take() != ("op", ")"):
                raise QueryError("unbalanced parentheses")
            return inner
        return self.clause()

    def clause(self) -> Predicate:
        first = self.take()
        if first[0] == "str":
            if self.take() != ("word", "in"):
                raise QueryError("expected in")
            kind, collection = self.take()
            value = _unescape(first[1])
            return lambda f: value in _collection(f, collection)
        if first[0] != "word":
            raise QueryError("expected a term")
        op = self.take()
        if op not in (("word", "contains"), ("word", "has")) and op[0] != "op":
            raise QueryError(f"bare word {first[1]!r}")  # Drive rejects bare words
        kind, raw = self.take()
        if kind == "word" and raw in ("true", "false"):
            expected = raw == "true"
            return lambda f: bool(f.get(first[1], False)) == expected
        if kind != "str":
            raise QueryError("expected a quoted value")
        return _compare(first[1], op[1], _unescape(raw))


def _collection(file: File, name: str) -> list[str]:
    if name in ("owners", "writers", "readers"):
        return [o["emailAddress"] for o in file.get("owners", [])]
    if name == "parents":
        return list(file.get("parents", []))
    raise QueryError(f"unknown collection {name}")


def _compare(field: str, op: str, value: str) -> Predicate:
    if field == "fullText" and op == "contains":
        phrase = value.strip('"').lower()
        return lambda f: phrase in f"{f['name']} {f.get('description', '')} {f['_content']}".lower()
    if field == "name" and op == "contains":
        return lambda f: any(w.lower().startswith(value.lower()) for w in f["name"].split())
    if field == "mimeType" and op in ("=", "!="):
        return lambda f: (f["mimeType"] == value) == (op == "=")
    if field == "modifiedTime":
        bound = parse_when(value)
        ops: dict[str, Callable[[Any], bool]] = {
            ">=": lambda t: t >= bound,
            ">": lambda t: t > bound,
            "<=": lambda t: t <= bound,
            "<": lambda t: t < bound,
            "=": lambda t: t == bound,
        }
        check = ops[op]
        return lambda f: check(parse_when(f["modifiedTime"]))
    raise QueryError(f"unsupported clause {field} {op}")


CORPORA_REFUSED = (
    "corpora drive needs driveId, and corpora drive or allDrives needs "
    "includeItemsFromAllDrives=true and supportsAllDrives=true"
)  # the fake's wording


_BLANKED = "B"  # a token after an empty page: read the same offset for real


def invalid_parameter(location: str, message: str) -> Response:
    """Drive's 400 for a parameter it refuses."""
    error = {
        "domain": "global", "reason": "invalid", "message": message,
        "locationType": "parameter", "location": location,
    }
    return Response.json({"error": {"code": 400, "message": message, "errors": [error]}}, 400)


def _corpus(request: Request) -> Predicate | None:
    """The files `corpora` covers: `user` (the default) My Drive and files shared with the
    user, `drive` one shared drive, `allDrives` both; None for parameters Drive refuses."""
    corpora = request.arg("corpora", "user")
    flags = all(
        request.arg(name) == "true" for name in ("includeItemsFromAllDrives", "supportsAllDrives")
    )
    drive = request.arg("driveId")
    if corpora == "user":
        return lambda f: not f["driveId"]
    if corpora == "allDrives" and flags:
        return lambda f: True
    if corpora == "drive" and flags and drive:
        return lambda f: bool(f["driveId"] == drive)
    return None


class FakeDrive(FakeProvider):
    """Drive files, searched with the real `q` grammar."""

    name = "google_drive"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", r"/drive/v3/files", self._list)
        self.reset()

    def reset(self) -> None:
        """Empty corpus, complete searches."""
        super().reset()
        self.files: list[File] = []
        self.incomplete = False
        # Drive's pageSize is a maximum: "partial or empty result pages are possible even
        # before the end of the files list has been reached". page_cap: at most this many
        # files a page (0: pageSize); blank_at: offsets whose page first comes back empty,
        # with a token that then reads it.
        self.page_cap = 0
        self.blank_at: set[int] = set()

    def unauthorized(self) -> Response:
        """Google's 401."""
        return Response.json(
            {
                "error": {
                    "code": 401,
                    "status": "UNAUTHENTICATED",
                    "message": "Request had invalid authentication credentials.",
                }
            },
            401,
        )

    def add_file(
        self,
        file_id: str,
        name: str,
        content: str = "",
        *,
        modified: str = "2024-01-01T00:00:00Z",
        owner: str = "jane@example.com",
        mime: str = "application/vnd.google-apps.document",
        drive_id: str = "",
        trashed: bool = False,
        description: str = "",
    ) -> None:
        """A file (in a shared drive when `drive_id`; shared-drive files have no owners)."""
        self.files.append(
            {
                "kind": "drive#file",
                "id": file_id,
                "name": name,
                "mimeType": mime,
                "description": description,
                "webViewLink": f"https://docs.google.com/d/{file_id}",
                "modifiedTime": modified,
                "createdTime": modified,
                "trashed": trashed,
                "owners": []
                if drive_id
                else [{"displayName": owner.split("@")[0].title(), "emailAddress": owner}],
                "parents": [],
                "driveId": drive_id or None,
                "_content": content,
            }
        )

    def _list(self, request: Request, _: re.Match[str]) -> Response:
        try:
            predicate = _Parser(tokenize(request.arg("q", "trashed = false"))).parse()
        except QueryError:
            return invalid_parameter("q", "Invalid Value")
        corpus = _corpus(request)
        if corpus is None:
            return invalid_parameter("corpora", CORPORA_REFUSED)
        hits = [f for f in self.files if predicate(f) and corpus(f)]
        hits.sort(key=lambda f: f["modifiedTime"], reverse=True)
        raw = request.arg("pageToken")
        blanked = raw.startswith(_BLANKED)
        offset = self.page_offset(raw.removeprefix(_BLANKED)) if raw else 0
        if offset is None:
            return Response.json(google_invalid_value("pageToken"), 400)
        size = min(int(request.arg("pageSize", "100")), 1000)
        chunk, following = page_slice(hits, offset, min(size, self.page_cap or size))
        if offset in self.blank_at and not blanked and offset < len(hits):
            return Response.json({"kind": "drive#fileList", "incompleteSearch": self.incomplete,
                                  "files": [], "nextPageToken": _BLANKED + self.page_token(offset)})
        body: dict[str, Any] = {
            "kind": "drive#fileList",
            "incompleteSearch": self.incomplete,
            "files": [{k: v for k, v in f.items() if not k.startswith("_")} for f in chunk],
        }
        if following is not None:
            body["nextPageToken"] = self.page_token(following)
        return Response.json(body)
