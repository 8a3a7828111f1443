"""Embedders: local all-MiniLM-L6-v2 (default), OpenAI-compatible HTTP, deterministic (tests)."""

from __future__ import annotations

from typing import Any

from service.embeddings.base import (
    CountingEmbedder,
    Embedder,
    EmbeddingError,
    EmbeddingIdentity,
)
from service.embeddings.deterministic import DeterministicEmbedder
from service.embeddings.http import OpenAIEmbedder
from service.embeddings.minilm import MiniLMEmbedder, ModelNotInstalledError

__all__ = [
    "EMBEDDER_KINDS",
    "CountingEmbedder",
    "DeterministicEmbedder",
    "Embedder",
    "EmbeddingError",
    "EmbeddingIdentity",
    "MiniLMEmbedder",
    "ModelNotInstalledError",
    "OpenAIEmbedder",
    "build_embedder",
]

EMBEDDER_KINDS = ("local", "openai", "deterministic")


def build_embedder(kind: str, **options: Any) -> Embedder:
    """Build the embedder `kind` with its constructor `options` ("no embedder" is the caller's)."""
    if kind == "local":
        return MiniLMEmbedder(**options)
    if kind == "openai":
        return OpenAIEmbedder(**options)
    if kind == "deterministic":
        return DeterministicEmbedder(**options)
    raise ValueError(f"unknown embedder kind {kind!r}; expected one of {', '.join(EMBEDDER_KINDS)}")
