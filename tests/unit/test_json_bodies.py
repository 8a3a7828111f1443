"""Provider JSON bodies decode to what the standard library reads, whichever decoder ran."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.workspace.http_wire import decode_json, loads
from service.workspace.model import ProviderError, QueryState

# What msgspec refuses and the standard library reads: each must still decode, the same way.
EDGES = [
    b'{"id": 123456789012345678901234567890}',  # beyond 64 bits: exact, never a float
    b'{"n": -18446744073709551616, "m": 18446744073709551615}',
    b'{"x": 1e400, "y": -1e400}',  # beyond a double: infinities
    b'\xef\xbb\xbf{"bom": true}',  # UTF-8 with a byte-order mark
    '{"utf16": "é"}'.encode("utf-16"),
    b'{"a": 1, "a": 2}',  # duplicate keys: the last wins
    b"  [1, 2.5, -0, 0.1, 1E-7, true, null]  ",
    b'{"deep": ' + b"[" * 200 + b"]" * 200 + b"}",
]


@pytest.mark.parametrize("body", EDGES, ids=range(len(EDGES)))
def test_bodies_the_fast_decoder_refuses_read_as_the_standard_library_reads_them(
    body: bytes,
) -> None:
    assert repr(loads(body)) == repr(json.loads(body))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"text": "cut emoji \\ud83d"}', {"text": "cut emoji \ufffd"}),
        (b'["\\udc00 low first", "\\ud83d\\ud83d twice"]',
         ["\ufffd low first", "\ufffd\ufffd twice"]),
        (b'{"k\\ud800": {"deep": ["\\ud800"]}, "pair": "\\ud83d\\ude00"}',
         {"k\ufffd": {"deep": ["\ufffd"]}, "pair": "\U0001f600"}),
        ('{"utf16": "x\ud83d"}'.encode("utf-16", "surrogatepass"), {"utf16": "x\ufffd"}),
        (b'"\\ud83d"', "\ufffd"),
    ],
)
def test_lone_surrogates_become_replacement_characters(body: bytes, expected: Any) -> None:
    """A `\\ud83d` without its pair (text cut at a UTF-16 unit) cannot be encoded as UTF-8, so
    a protobuf string refuses it: it is read as U+FFFD, in values and keys, at any depth."""
    decoded = loads(body)
    assert decoded == expected
    json.dumps(decoded, ensure_ascii=False).encode("utf-8")  # every string encodes


def test_nan_reads_as_the_standard_library_reads_it() -> None:
    assert math.isnan(loads(b"[NaN]")[0])


@pytest.mark.parametrize(
    "body", [b'{"a": ', b'{"a": 1} x', b"\xff\xfe\xfa", b"{'a': 1}", b'"\xff"', b"[" * 5000]
)
def test_malformed_bodies_are_a_retryable_provider_failure(body: bytes) -> None:
    with pytest.raises(ProviderError) as raised:
        decode_json(body)
    assert raised.value.state is QueryState.FAILED
    assert raised.value.retryable
    assert "malformed JSON" in str(raised.value)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_any_json_value_decodes_to_the_standard_librarys_value(value: Any, ascii: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii).encode()
    assert repr(loads(body)) == repr(json.loads(body))
