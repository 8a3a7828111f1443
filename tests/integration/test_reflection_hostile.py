"""Reflection fed bytes that do not decode: INVALID_ARGUMENT with ErrorInfo, no stack trace.

Reflection needs no token, so a caller without one used to get INTERNAL and an ERROR log
with a stack trace on every such call (issue 17 item 12): log flooding without credentials.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.server import running_server
from tests.support.status import decode

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
AUTH = {"SEARCH_AUTH_TOKENS": "0" * 64 + ":acme:read"}


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xff\xff\xff",  # not a protobuf message
        b"\x1a\x02\xff\xfe",  # file_by_filename (field 3) with invalid UTF-8
        b"\x0a\x05\x80\x80",  # truncated length-delimited host field
    ],
)
async def test_undecodable_reflection_requests_are_invalid_argument(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, payload: bytes
) -> None:
    caplog.set_level(logging.INFO)
    async with running_server(tmp_path, AUTH) as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        method: Any = channel.stream_stream(REFLECTION)  # raw bytes both ways, no token
        call = method(iter([payload]))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    decoded = decode(caught.value)
    assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
    assert decoded.info is not None
    assert decoded.info.reason == "MALFORMED_REQUEST"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
