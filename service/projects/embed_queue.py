"""Query embeddings through one fair queue that sheds what it cannot serve in time.

The local model runs one forward pass at a time, so semantic searches queue for it: turns
go round-robin across tenants, and a caller whose deadline would pass before its turn comes
is refused at once (EMBEDDING_QUEUE_FULL, RetryInfo) instead of timing out in the queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.embeddings.base import Embedder
from service.fair_queue import FairQueue


class EmbedQueue:
    """At most `concurrency` query embeddings at once; the rest wait, fairly, or are shed."""

    def __init__(self, embedder: Embedder, *, concurrency: int = 1) -> None:
        self._embedder = embedder
        self._turns = FairQueue(
            concurrency, reason="EMBEDDING_QUEUE_FULL", what="the embedding model"
        )

    async def embed(
        self, tenant: str, texts: Sequence[str], budget: float | None
    ) -> list[list[float]]:
        """The embedder's vectors once it is this call's turn; RESOURCE_EXHAUSTED
        (EMBEDDING_QUEUE_FULL) at once when the turn would come too late for `budget`."""
        async with self._turns.turn(tenant, budget):
            return await self._embedder.embed(texts)
