"""EmbeddingIdentity, normalisation helpers, CountingEmbedder and the factory."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from service.embeddings import (
    EMBEDDER_KINDS,
    CountingEmbedder,
    DeterministicEmbedder,
    Embedder,
    EmbeddingError,
    EmbeddingIdentity,
    MiniLMEmbedder,
    ModelNotInstalledError,
    OpenAIEmbedder,
    build_embedder,
)
from service.embeddings.base import check_texts, normalize_rows


class _FailingEmbedder:
    """Stands in for a broken embedding backend."""

    identity = EmbeddingIdentity("failing", 4)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbeddingError("backend down", retry_after=2.0)

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def test_identity_key_is_model_at_dimensions() -> None:
    identity = EmbeddingIdentity("sentence-transformers/all-MiniLM-L6-v2", 384)
    assert identity.key() == "sentence-transformers/all-MiniLM-L6-v2@384"
    assert identity == EmbeddingIdentity("sentence-transformers/all-MiniLM-L6-v2", 384)
    assert identity != EmbeddingIdentity("sentence-transformers/all-MiniLM-L6-v2", 256)
    assert hash(identity) == hash(EmbeddingIdentity("sentence-transformers/all-MiniLM-L6-v2", 384))


@pytest.mark.parametrize(("model", "dimensions"), [("", 4), ("m", 0), ("m", -1)])
def test_identity_rejects_nonsense(model: str, dimensions: int) -> None:
    with pytest.raises(ValueError, match="embedding"):
        EmbeddingIdentity(model, dimensions)


def test_normalize_rows_makes_unit_vectors() -> None:
    matrix = np.array([[3.0, 4.0], [0.0, -2.0]], dtype=np.float32)
    out = normalize_rows(matrix)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, -1.0]], rtol=1e-6)


@pytest.mark.parametrize("row", [[0.0, 0.0], [np.nan, 1.0], [np.inf, 1.0]])
def test_normalize_rows_refuses_zero_and_non_finite(row: list[float]) -> None:
    with pytest.raises(EmbeddingError):
        normalize_rows(np.array([[1.0, 0.0], row], dtype=np.float32))


def test_check_texts_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError, match="not a single str"):
        check_texts("hello")
    assert check_texts(("a", "b")) == ["a", "b"]


async def test_counting_embedder_counts_calls_and_texts() -> None:
    inner = DeterministicEmbedder(dimensions=8)
    counting = CountingEmbedder(inner)
    assert isinstance(counting, Embedder)
    assert counting.identity == inner.identity

    first = await counting.embed(["alpha", "beta"])
    await counting.embed(["gamma"])
    assert counting.calls == 2
    assert counting.text_count == 3
    assert counting.texts == ["alpha", "beta", "gamma"]
    assert first == await inner.embed(["alpha", "beta"])  # results pass through unchanged
    assert "calls=2" in repr(counting)

    counting.reset()
    assert (counting.calls, counting.texts) == (0, [])
    await counting.aclose()


async def test_counting_embedder_counts_failed_calls() -> None:
    counting = CountingEmbedder(_FailingEmbedder())
    with pytest.raises(EmbeddingError) as raised:
        await counting.embed(["x"])
    assert raised.value.retry_after == 2.0
    assert counting.calls == 1
    assert counting.texts == ["x"]


async def test_build_embedder_kinds() -> None:
    assert EMBEDDER_KINDS == ("local", "openai", "deterministic")

    deterministic = build_embedder("deterministic", dimensions=16)
    assert isinstance(deterministic, DeterministicEmbedder)
    assert deterministic.identity.key() == "deterministic-hash-v1@16"

    remote = build_embedder(
        "openai", base_url="http://127.0.0.1:9/v1", model="text-embedding-3-small", dimensions=8
    )
    assert isinstance(remote, OpenAIEmbedder)
    await remote.aclose()

    try:
        local = build_embedder("local")
    except ModelNotInstalledError:
        pass  # the weights package is optional; the error is the documented outcome
    else:
        assert isinstance(local, MiniLMEmbedder)
        assert local.identity.key() == "sentence-transformers/all-MiniLM-L6-v2@384"


def test_build_embedder_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown embedder kind 'none'"):
        build_embedder("none")
