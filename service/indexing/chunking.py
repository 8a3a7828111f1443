"""Markdown-aware chunking of a document's source text for embedding (reference 1.4).

Headers and list items start sections, so a chunk edge never falls inside a bullet or
right after a header. Consecutive sections are packed into chunks of at most `size`
characters. A section longer than that is split at blank lines (paragraphs), then at line
ends, and a single line still too long is cut into `size`-character windows that overlap
by `overlap` characters and end at whitespace where possible. Each chunk is an exact,
whitespace-trimmed slice of the input, so chunking is deterministic and linear in time.

Departure from the reference: a bullet does not get a chunk of its own; it is packed with
its neighbours (a one-line bullet alone embeds too little context to be found).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = ["DEFAULT_OVERLAP", "DEFAULT_SIZE", "Chunk", "chunk_markdown", "document_source_text"]

DEFAULT_SIZE = 900
DEFAULT_OVERLAP = 120

_HEADER = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_BULLET = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_FENCE = re.compile(r"[ \t]{0,3}(?:```|~~~)")

Span = tuple[int, int]


@dataclass(frozen=True)
class Chunk:
    """One chunk: its position in the document, its text and the sha256 hex of that text."""

    index: int
    text: str
    source_hash: str


def document_source_text(title: str, path: str, body: str) -> str:
    """What gets chunked for a document: title, path and body joined by blank lines."""
    return "\n\n".join(part for part in (title.strip(), path.strip(), body.strip()) if part)


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _lines(text: str, start: int, end: int) -> list[Span]:
    """Line spans (without their newline) of text[start:end]."""
    spans: list[Span] = []
    while start < end:
        newline = text.find("\n", start, end)
        stop = end if newline < 0 else newline
        spans.append((start, stop))
        start = stop + 1
    return spans


def _group(text: str, lines: list[Span], starts_unit: list[bool]) -> list[Span]:
    """Trimmed spans of line groups, a new group opening wherever `starts_unit` is true."""
    units: list[Span] = []
    group_start: int | None = None
    for (start, _), opens in zip(lines, starts_unit, strict=True):
        if opens and group_start is not None:
            span = _trim(text, group_start, start)
            if span:
                units.append(span)
            group_start = None
        if group_start is None:
            group_start = start
    if group_start is not None and lines:
        span = _trim(text, group_start, lines[-1][1])
        if span:
            units.append(span)
    return units


def _sections(text: str) -> list[Span]:
    """Sections opened by headers and list items (never inside a fenced code block)."""
    lines = _lines(text, 0, len(text))
    opens: list[bool] = []
    in_fence = False
    for start, end in lines:
        line = text[start:end]
        if _FENCE.match(line):
            in_fence = not in_fence
            opens.append(in_fence)  # a fence opens a section; its closing line does not
            continue
        opens.append(not in_fence and bool(_HEADER.match(line) or _BULLET.match(line)))
    return _group(text, lines, opens)


def _paragraphs(text: str, span: Span) -> list[Span]:
    lines = _lines(text, *span)
    blank = [not text[start:end].strip() for start, end in lines]
    return _group(text, lines, blank)


def _line_units(text: str, span: Span) -> list[Span]:
    return [trimmed for line in _lines(text, *span) if (trimmed := _trim(text, *line))]


def _last_space(text: str, low: int, high: int) -> int:
    for index in range(high - 1, low - 1, -1):
        if text[index].isspace():
            return index
    return -1


def _windows(text: str, span: Span, size: int, overlap: int) -> list[Span]:
    """Windows of at most `size` chars overlapping by about `overlap`, cut at spaces if possible."""
    windows: list[Span] = []
    start, end = span
    while True:
        if end - start <= size:
            trimmed = _trim(text, start, end)
            if trimmed:
                windows.append(trimmed)
            return windows
        stop = start + size
        space = _last_space(text, start + size - size // 4, stop)
        if space > start:
            stop = space
        trimmed = _trim(text, start, stop)
        if trimmed:
            windows.append(trimmed)
        # The next window starts `overlap` back, moved forward to a word start if one is near.
        following = max(stop - overlap, start + 1)
        space = text.find(" ", following, stop)
        start = space + 1 if 0 <= space < stop - 1 else following


def _pack(text: str, units: list[Span], size: int, overlap: int, level: int) -> list[Span]:
    """Greedily join adjacent units up to `size`; split larger units at the next level."""
    packed: list[Span] = []
    current: Span | None = None
    for unit in units:
        if unit[1] - unit[0] > size:
            if current:
                packed.append(current)
            pieces = _split(text, unit, size, overlap, level + 1)
            packed.extend(pieces[:-1])
            current = pieces[-1] if pieces else None
        elif current and unit[1] - current[0] <= size:
            current = (current[0], unit[1])
        else:
            if current:
                packed.append(current)
            current = unit
    if current:
        packed.append(current)
    return packed


def _split(text: str, span: Span, size: int, overlap: int, level: int) -> list[Span]:
    if level == 1:
        return _pack(text, _paragraphs(text, span), size, overlap, level)
    if level == 2:
        return _pack(text, _line_units(text, span), size, overlap, level)
    return _windows(text, span, size, overlap)


def chunk_markdown(
    text: str, *, size: int = DEFAULT_SIZE, overlap: int = DEFAULT_OVERLAP
) -> list[Chunk]:
    """Split Markdown into non-empty chunks of at most `size` characters."""
    if size < 1 or not 0 <= overlap <= size // 2:
        raise ValueError("chunk size must be positive and overlap at most half of it")
    spans = _pack(text, _sections(text), size, overlap, level=0)
    chunks: list[Chunk] = []
    for start, end in spans:
        body = text[start:end]
        chunks.append(Chunk(len(chunks), body, hashlib.sha256(body.encode()).hexdigest()))
    return chunks
