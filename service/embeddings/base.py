"""What every embedder offers: an identity, unit-normalised vectors, and one error class."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

# Below this norm a vector has no direction; normalising it would only amplify noise.
_MIN_NORM = 1e-12


@dataclass(frozen=True)
class EmbeddingIdentity:
    """Which vectors an embedder makes; stored with each vector so stale ones are never served."""

    model: str
    dimensions: int

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("embedding model name must not be empty")
        if self.dimensions <= 0:
            raise ValueError(f"embedding dimensions must be positive, got {self.dimensions}")

    def key(self) -> str:
        """Stable string for persistence, e.g. `sentence-transformers/all-MiniLM-L6-v2@384`."""
        return f"{self.model}@{self.dimensions}"


class EmbeddingError(Exception):
    """Embedding failed; callers map it to `errors.Unavailable` (with `retry_after` if known)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-normalised vectors of `identity.dimensions` floats."""

    @property
    def identity(self) -> EmbeddingIdentity:
        """The model and dimensions of every vector this embedder returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in input order, each with L2 norm 1."""
        ...

    async def warmup(self) -> None:
        """Load what the first `embed` would (readiness waits for it); raise if it cannot."""
        ...

    async def aclose(self) -> None:
        """Release clients, threads or memory held by the embedder."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list; a bare `str` is refused, since it would embed each character."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str")
    return list(texts)


def normalize_rows(matrix: NDArray[np.float32]) -> NDArray[np.float32]:
    """Scale each row to L2 norm 1 in place; EmbeddingError for a zero or non-finite row."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not np.isfinite(norms).all():
        raise EmbeddingError("embedding model returned a vector with NaN or infinite values")
    if matrix.shape[0] and float(norms.min()) < _MIN_NORM:
        raise EmbeddingError("embedding model returned a zero vector")
    matrix /= norms
    return matrix


class CountingEmbedder:
    """Wraps an embedder and counts calls and texts, so tests can assert what was embedded."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls = 0
        self.texts: list[str] = []

    @property
    def identity(self) -> EmbeddingIdentity:
        """The wrapped embedder's identity."""
        return self.inner.identity

    @property
    def text_count(self) -> int:
        """How many texts were passed to `embed` in total."""
        return len(self.texts)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Record the call, then delegate (a failing call still counts: it was attempted)."""
        self.calls += 1
        self.texts.extend(texts)
        return await self.inner.embed(texts)

    def reset(self) -> None:
        """Forget the counts, e.g. after indexing and before the requests under test."""
        self.calls = 0
        self.texts.clear()

    async def warmup(self) -> None:
        """Warm up the wrapped embedder."""
        await self.inner.warmup()

    async def aclose(self) -> None:
        """Close the wrapped embedder."""
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"CountingEmbedder({self.inner!r}, calls={self.calls}, texts={self.text_count})"
