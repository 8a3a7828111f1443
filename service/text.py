"""Text cut to a bound, visibly: what the service echoes or shows of text it does not own."""

from __future__ import annotations

__all__ = ["clip"]


def clip(text: str, size: int) -> str:
    """`text`, or its first characters and "..." (`size` in all) when it is longer."""
    return text if len(text) <= size else text[: size - 3] + "..."
