"""Servicers for contract methods not built yet: UNIMPLEMENTED through the normal error path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor

from service.errors import Unimplemented


def unimplemented_servicer(base: type, descriptor: ServiceDescriptor) -> Any:
    """An instance of `base` whose every method raises errors.Unimplemented."""

    def make(name: str, streaming: bool) -> Any:
        full = f"/{descriptor.full_name}/{name}"

        if streaming:

            async def stream_method(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
                error = Unimplemented(f"{full} is not implemented yet", metadata={"method": full})
                for _ in ():  # never runs: the yield only makes this an async generator
                    yield _
                raise error

            return stream_method

        async def unary_method(self: Any, request: Any, context: Any) -> Any:
            raise Unimplemented(f"{full} is not implemented yet", metadata={"method": full})

        return unary_method

    methods = {m.name: make(m.name, m.server_streaming) for m in descriptor.methods}
    return type(f"Unimplemented{descriptor.name}", (base,), methods)()
