"""Deterministic hashing embedder for tests and benchmarks: no model, stable across runs."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from service.embeddings.base import EmbeddingIdentity, check_texts, normalize_rows

MODEL_NAME = "deterministic-hash-v1"
DEFAULT_DIMENSIONS = 384

_TOKEN = re.compile(r"\w+")
_BIGRAM_WEIGHT = np.float32(0.5)
# Stands in for texts without a single word, so every vector still has a direction.
_EMPTY_FEATURE = "\x00empty"
# Past this many texts the work moves to a thread so the event loop keeps serving.
_THREAD_THRESHOLD = 256
_CACHE_LIMIT = 1_000_000
# Texts hashed together; bounds the temporaries (~1 KB per token) and keeps them in cache.
_CHUNK = 1024
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_BIGRAM_SALT = np.uint64(0x9E3779B97F4A7C15)


def _token_hash(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8, person=b"dethash1").digest()
    return int.from_bytes(digest, "little")


class _HashCache(dict[str, int]):
    """token -> 64-bit hash; `__missing__` keeps the lookup loop inside C (`map`)."""

    def __missing__(self, token: str) -> int:
        value = self[token] = _token_hash(token)
        return value


def _mix(values: NDArray[np.uint64]) -> NDArray[np.uint64]:
    # splitmix64's finaliser: spreads every input bit over the output (uint64 wraps silently).
    z = values.copy()
    z ^= z >> np.uint64(30)
    z *= _MIX_1
    z ^= z >> np.uint64(27)
    z *= _MIX_2
    z ^= z >> np.uint64(31)
    return z


class DeterministicEmbedder:
    """Signed feature hashing of words and word pairs: shared words mean similar vectors."""

    # Same text, same vector, in every process (blake2b, not hash()); case-insensitive.

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        self._identity = EmbeddingIdentity(MODEL_NAME, dimensions)
        self._dimensions = dimensions
        self._cache = _HashCache()

    @property
    def identity(self) -> EmbeddingIdentity:
        """`deterministic-hash-v1@<dimensions>`."""
        return self._identity

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text."""
        batch = check_texts(texts)
        if len(batch) > _THREAD_THRESHOLD:
            matrix = await asyncio.to_thread(self.vectors, batch)
        else:
            matrix = self.vectors(batch)
        result: list[list[float]] = matrix.tolist()
        return result

    def vectors(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """The same vectors as `embed`, as a `(len(texts), dimensions)` float32 array."""
        batch = check_texts(texts)
        out = np.empty((len(batch), self._dimensions), dtype=np.float32)
        for start in range(0, len(batch), _CHUNK):
            out[start : start + _CHUNK] = self._chunk(batch[start : start + _CHUNK])
        return out

    def _chunk(self, texts: list[str]) -> NDArray[np.float32]:
        hashes, rows = self._token_hashes(texts)
        buckets, weights, owners = self._features(hashes, rows)
        flat = owners * self._dimensions + buckets
        counts = np.bincount(flat, weights=weights, minlength=len(texts) * self._dimensions)
        matrix = counts.astype(np.float32).reshape(len(texts), self._dimensions)
        return normalize_rows(matrix)

    async def warmup(self) -> None:
        """Nothing to load."""
        return None

    async def aclose(self) -> None:
        """Forget the token-hash cache."""
        self._cache.clear()

    def _token_hashes(self, texts: list[str]) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        if len(self._cache) > _CACHE_LIMIT:
            self._cache.clear()
        lookup = self._cache.__getitem__
        hashes: list[int] = []
        counts: list[int] = []
        for text in texts:
            tokens = _TOKEN.findall(text.casefold()) or [_EMPTY_FEATURE]
            hashes.extend(map(lookup, tokens))
            counts.append(len(tokens))
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
        return np.array(hashes, dtype=np.uint64), rows

    def _features(
        self, hashes: NDArray[np.uint64], rows: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]:
        # Word pairs are hashed from their words' hashes; pairs never span two texts.
        same_text = rows[1:] == rows[:-1]
        pairs = _mix(hashes[:-1][same_text] * _BIGRAM_SALT + hashes[1:][same_text])
        unigrams = _mix(hashes)
        features = np.concatenate([unigrams, pairs])
        owners = np.concatenate([rows, rows[:-1][same_text]])
        weights = np.ones(len(features), dtype=np.float64)
        weights[len(unigrams) :] = _BIGRAM_WEIGHT
        # The top bit picks the sign, so unrelated features cancel out rather than pile up.
        weights *= 1.0 - 2.0 * (features >> np.uint64(63)).astype(np.float64)
        # Bits 31..62 scaled into [0, dimensions): multiply-shift, much cheaper than uint64 %.
        low = (features >> np.uint64(31)) & np.uint64(0xFFFFFFFF)
        buckets = ((low * np.uint64(self._dimensions)) >> np.uint64(32)).astype(np.int64)
        return buckets, weights, owners

    def __repr__(self) -> str:
        return f"DeterministicEmbedder(dimensions={self._dimensions})"
