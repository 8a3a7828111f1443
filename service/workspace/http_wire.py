"""Pure helpers of provider HTTP: answer types, query strings, JSON bodies, origins."""

from __future__ import annotations

import functools
import json as jsonlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from service.workspace.model import ProviderError, QueryState

__all__ = [
    "JsonResponse",
    "Params",
    "RawResponse",
    "decode_json",
    "failed",
    "loads",
    "origin",
    "transient",
    "with_query",
]

Params = Mapping[str, str | int | Sequence[str]]


class JsonResponse(msgspec.Struct, frozen=True):
    """A successful provider answer: status, headers (case-insensitive) and decoded JSON."""

    status: int
    headers: Mapping[str, str]
    data: Any


@dataclass(frozen=True)
class RawResponse:
    """A successful non-JSON provider answer (a Gmail batch): status, headers and raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def failed(message: str) -> ProviderError:
    return ProviderError(QueryState.FAILED, message)


def transient(message: str) -> ProviderError:
    """FAILED, but the same request may well succeed later (paging retries it)."""
    return ProviderError(QueryState.FAILED, message, retryable=True)


@functools.lru_cache(maxsize=4096)
def _quoted(text: str) -> str:
    """Percent-encoded query component (names and values repeat across calls: cached)."""
    return quote(text, safe="")


def _query_string(params: Params | None) -> str:
    """`a=1&b=x%20y`, repeated keys for sequences, in the given order."""
    pairs: list[str] = []
    for key, value in (params or {}).items():
        name = _quoted(key)
        if isinstance(value, str | int):
            pairs.append(f"{name}={_quoted(str(value))}")
        else:
            pairs.extend(f"{name}={_quoted(str(item))}" for item in value)
    return "&".join(pairs)


def with_query(url: str, params: Params | None) -> str:
    query = _query_string(params)
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


_DECODER = msgspec.json.Decoder()


def loads(body: bytes) -> Any:
    """`json.loads(body)`, twice as fast on the JSON providers send, with every string valid
    Unicode.

    msgspec decodes strict UTF-8 JSON to the same values the standard library does (integers
    beyond 64 bits stay exact; not orjson, which reads them as floats). What it refuses and
    the standard library reads (a byte-order mark, UTF-16, lone surrogates, NaN, numbers beyond
    a double) is read by the standard library, so the result never depends on which one ran.
    Except one thing: a lone surrogate (a `"\\ud83d"` escape without its pair, as APIs that
    cut text at UTF-16 units send, or a lone unit of a UTF-16 body) becomes U+FFFD. Such a
    string cannot be encoded as UTF-8: it would fail the protobuf message that carries it,
    and with it the whole call.
    Raises ValueError (UnicodeDecodeError included) when the body is not JSON."""
    try:
        return _DECODER.decode(body)
    except msgspec.DecodeError:  # the only way to a lone surrogate (msgspec refuses them)
        return _mend_surrogates(jsonlib.loads(body))


_SURROGATE = re.compile("[\ud800-\udfff]")  # json joins pairs: what is left is alone


def _mend_surrogates(value: Any) -> Any:
    """`value` with U+FFFD for each lone surrogate of its strings (keys too); iterative, so a
    body as deep as the decoder allows is mended too."""
    root = [value]
    pending: list[list[Any] | dict[str, Any]] = [root]
    while pending:
        container = pending.pop()
        if isinstance(container, list):
            for index, item in enumerate(container):
                if isinstance(item, str):
                    container[index] = _SURROGATE.sub("\ufffd", item)
                elif isinstance(item, list | dict):
                    pending.append(item)
            continue
        for key, item in list(container.items()):
            if isinstance(item, str):
                container[key] = item = _SURROGATE.sub("\ufffd", item)
            elif isinstance(item, list | dict):
                pending.append(item)
            if _SURROGATE.search(key):  # JSON keys are strings
                del container[key]
                container[_SURROGATE.sub("\ufffd", key)] = item
    return root[0]


def decode_json(body: bytes) -> Any:
    if not body.strip():
        raise transient("provider returned an empty body where JSON was expected")
    try:
        return loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise transient("provider returned malformed JSON") from None


@functools.lru_cache(maxsize=1024)
def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL; parsed once per distinct URL (httpx parsing is slow)."""
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port
