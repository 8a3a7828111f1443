"""The deterministic hashing embedder: stable, normalised, similar for shared words, fast."""

from __future__ import annotations

import numpy as np
import pytest

from service.embeddings import DeterministicEmbedder, Embedder


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


async def test_identity_and_protocol() -> None:
    embedder = DeterministicEmbedder()
    assert isinstance(embedder, Embedder)
    assert embedder.identity.key() == "deterministic-hash-v1@384"
    assert DeterministicEmbedder(dimensions=32).identity.dimensions == 32
    assert repr(embedder) == "DeterministicEmbedder(dimensions=384)"


@pytest.mark.parametrize("dimensions", [1, 16, 384, 1000])
async def test_vectors_are_unit_length_with_configured_dimensions(dimensions: int) -> None:
    vectors = await DeterministicEmbedder(dimensions).embed(
        ["alpha beta", "", "   ", "!!!", "日本語 テキスト", "x" * 5000]
    )
    assert len(vectors) == 6
    for vector in vectors:
        assert len(vector) == dimensions
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)


def test_vectors_are_pinned() -> None:
    # Persisted vectors carry the identity "deterministic-hash-v1": the algorithm must not drift.
    vector = DeterministicEmbedder(16).vectors(["The quick brown fox"])[0]
    expected = [-0.458831, 0, 0.458831, 0, 0, 0, 0, 0.229416, -0.229416, 0, -0.229416, 0]
    np.testing.assert_allclose(vector[:12], expected, atol=1e-6)


async def test_same_text_same_vector_across_instances() -> None:
    texts = ["Shared storage ranks all projects together", "another text"]
    assert await DeterministicEmbedder().embed(texts) == await DeterministicEmbedder().embed(texts)


async def test_case_and_punctuation_do_not_matter() -> None:
    embedder = DeterministicEmbedder()
    a, b = await embedder.embed(["Hello, World!", "hello world"])
    assert _cos(a, b) == pytest.approx(1.0, abs=1e-6)


async def test_shared_words_make_texts_similar() -> None:
    embedder = DeterministicEmbedder()
    query, close, far = await embedder.embed(
        [
            "postgres vector index rebuild",
            "how to rebuild the postgres vector index after an upgrade",
            "banana bread recipe with walnuts",
        ]
    )
    assert _cos(query, close) > 0.4
    assert _cos(query, close) > _cos(query, far) + 0.3


async def test_batching_does_not_change_vectors() -> None:
    embedder = DeterministicEmbedder()
    texts = ["alpha beta", "gamma delta", "", "alpha beta gamma delta"]
    together = await embedder.embed(texts)
    alone = [(await embedder.embed([text]))[0] for text in texts]
    np.testing.assert_allclose(together, alone, atol=1e-7)
    # Word pairs never span two texts: "beta gamma" must not leak into either neighbour.
    assert together[0] != together[3]


async def test_large_batches_cross_chunk_and_thread_boundaries() -> None:
    embedder = DeterministicEmbedder(dimensions=64)
    texts = [f"document {i} about topic {i % 7} and shard {i % 3}" for i in range(2500)]
    vectors = np.array(await embedder.embed(texts), dtype=np.float32)
    assert vectors.shape == (2500, 64)
    for i in (0, 1023, 1024, 2047, 2048, 2499):
        np.testing.assert_allclose(vectors[i], embedder.vectors([texts[i]])[0], atol=1e-7)


def test_empty_inputs() -> None:
    embedder = DeterministicEmbedder(dimensions=8)
    assert embedder.vectors([]).shape == (0, 8)
    empty, blank = embedder.vectors(["", " \t\n"])
    np.testing.assert_array_equal(empty, blank)


async def test_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError):
        await DeterministicEmbedder().embed("not a list")
