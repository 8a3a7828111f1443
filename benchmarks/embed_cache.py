"""An embedder wrapper that remembers vectors on disk, so a rerun does not embed a corpus again.

Only the relevance benchmark uses it (the local model embeds ~20 short texts/s on two cores,
and the same collection is indexed into both stores). Vectors are keyed by the embedding
identity and the sha256 of the text, so a different model or text is always embedded anew.
Indexing throughput is measured by the `index` benchmark without any cache.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.embeddings.base import Embedder, EmbeddingIdentity

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"
_SELECT = "SELECT vector FROM vectors WHERE key = ?"
_INSERT = "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)"


class CachingEmbedder:
    """Delegates to `inner` for texts not yet in the cache file; counts hits and misses."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path))
        self._db.execute(_SCHEMA)
        self.hits = 0
        self.misses = 0

    @property
    def identity(self) -> EmbeddingIdentity:
        """The wrapped embedder's identity."""
        return self.inner.identity

    def _key(self, text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self.identity.key()}:{digest}"

    def _lookup(self, key: str) -> list[float] | None:
        row = self._db.execute(_SELECT, (key,)).fetchone()
        if row is None:
            return None
        vector: list[float] = np.frombuffer(row[0], dtype=np.float32).tolist()
        return vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Cached vectors where known; the rest embedded in one call and stored."""
        keys = [self._key(t) for t in texts]
        found = [self._lookup(k) for k in keys]
        missing = [i for i, v in enumerate(found) if v is None]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = await self.inner.embed([texts[i] for i in missing])
            rows = []
            for i, vector in zip(missing, fresh, strict=True):
                found[i] = vector
                rows.append((keys[i], np.asarray(vector, dtype=np.float32).tobytes()))
            with self._db:
                self._db.executemany(_INSERT, rows)
        return [v for v in found if v is not None]

    async def warmup(self) -> None:
        """Warm up the wrapped embedder."""
        await self.inner.warmup()

    async def aclose(self) -> None:
        """Close the cache file and the wrapped embedder."""
        self._db.close()
        await self.inner.aclose()
