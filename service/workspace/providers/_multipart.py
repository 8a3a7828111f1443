"""Google's batch format (multipart/mixed): encoding inner calls, parsing inner answers.

One HTTP request carries several inner calls, each part an `application/http` request with
its own Content-ID; the answer is a multipart body whose parts are `HTTP/1.1 <status>`,
headers and a JSON body, each Content-ID echoed as `response-<id>`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.workspace.providers._common import failed

__all__ = ["BatchPart", "boundary_of", "encode_batch", "new_boundary", "parse_batch", "parse_part"]

_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_BOUNDARY = re.compile(r'boundary=(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)


@dataclass(frozen=True)
class BatchPart:
    """One inner HTTP response of a batch answer."""

    content_id: str  # the request's Content-ID, without `<>` and the `response-` prefix
    status: int  # 0 when the part holds no readable status line
    headers: Mapping[str, str]  # the inner response's headers, names lower-cased
    body: bytes


def new_boundary() -> str:
    """A multipart boundary no JSON or path can contain by chance."""
    return f"batch_{secrets.token_hex(16)}"


def encode_batch(calls: Sequence[tuple[str, str]], boundary: str) -> bytes:
    """A multipart/mixed body of GET calls, each given as (content id, path with query)."""
    lines: list[str] = []
    for content_id, target in calls:
        lines += [
            f"--{boundary}",
            "Content-Type: application/http",
            f"Content-ID: <{content_id}>",
            "",
            f"GET {target} HTTP/1.1",
            "",
            "",
        ]
    lines.append(f"--{boundary}--")
    return ("\r\n".join(lines) + "\r\n").encode("ascii")


def boundary_of(content_type: str) -> str:
    """The boundary of a multipart Content-Type, '' when there is none."""
    if not content_type.strip().lower().startswith("multipart/"):
        return ""
    found = _BOUNDARY.search(content_type)
    return (found.group(1) or found.group(2)) if found else ""


def _split_head(data: bytes) -> tuple[list[str], bytes]:
    """Header lines and the body after the first blank line (CRLF or LF)."""
    found = _BLANK_LINE.search(data)
    head, rest = (data[: found.start()], data[found.end() :]) if found else (data, b"")
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    return [line for line in lines if line.strip()], rest


def _header_map(lines: Sequence[str]) -> dict[str, str]:
    pairs = (line.partition(":") for line in lines)
    return {name.strip().lower(): value.strip() for name, colon, value in pairs if colon}


def _status(line: str) -> int:
    """The code of an `HTTP/1.1 404 Not Found` line; 0 when it is not one."""
    fields = line.split()
    if len(fields) >= 2 and fields[0].upper().startswith("HTTP/") and fields[1].isdigit():
        return int(fields[1])
    return 0


def parse_part(content: bytes) -> BatchPart:
    """One part: its MIME headers, then the HTTP response it holds."""
    part_lines, response = _split_head(content)
    content_id = _header_map(part_lines).get("content-id", "").strip("<> ")
    content_id = content_id.removeprefix("response-")
    response_lines, body = _split_head(response)
    status = _status(response_lines[0]) if response_lines else 0
    return BatchPart(content_id, status, _header_map(response_lines[1:]), body)


def parse_batch(content_type: str, body: bytes) -> list[BatchPart]:
    """The parts of a multipart/mixed batch answer, in order; FAILED when it is not one."""
    boundary = boundary_of(content_type)
    if not boundary:
        raise failed("Gmail batch answer is not multipart")
    # Split at "\n--boundary" and drop the CR of a CRLF before it: what splitting at
    # r"\r?\n--boundary" gives, without compiling a pattern for every (random) boundary.
    pieces = (b"\r\n" + body).split(b"\n--" + boundary.encode("latin-1"))
    last = len(pieces) - 1
    parts: list[BatchPart] = []
    for number, raw in enumerate(pieces[1:], start=1):  # pieces[0] is the preamble
        piece = raw.removesuffix(b"\r") if number < last else raw  # the next delimiter's CR
        if piece.startswith(b"--"):
            break  # the close delimiter; the rest is epilogue
        _, _, content = piece.partition(b"\n")  # the rest of the delimiter line
        parts.append(parse_part(content))
    return parts
