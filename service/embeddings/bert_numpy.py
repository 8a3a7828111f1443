"""A BERT encoder forward pass in float32 numpy (inference only, no torch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]

# Abramowitz & Stegun 7.1.26: |error| < 1.5e-7, below float32 resolution near 1,
# so this "exact" GELU matches torch's erf GELU to float32 rounding.
_AS_P = np.float32(0.3275911)
_AS_A = tuple(
    np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))
_ONE = np.float32(1.0)

# Rows per elementwise GELU step: the temporaries stay in cache instead of streaming RAM.
_GELU_ROWS = 32


@dataclass(frozen=True)
class BertConfig:
    """The shape parameters of a BERT encoder (from its `config.json`)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BertConfig:
        """Read the fields HuggingFace's BertConfig uses."""
        return cls(
            hidden_size=int(data["hidden_size"]),
            num_layers=int(data["num_hidden_layers"]),
            num_heads=int(data["num_attention_heads"]),
            intermediate_size=int(data["intermediate_size"]),
            max_positions=int(data["max_position_embeddings"]),
            layer_norm_eps=float(data["layer_norm_eps"]),
        )


@dataclass(frozen=True)
class _Layer:
    qkv_w: F32  # (hidden, 3*hidden), query part pre-scaled by 1/sqrt(head_dim)
    qkv_b: F32
    attn_out_w: F32
    attn_out_b: F32
    attn_ln_g: F32
    attn_ln_b: F32
    ffn_in_w: F32
    ffn_in_b: F32
    ffn_out_w: F32
    ffn_out_b: F32
    ffn_ln_g: F32
    ffn_ln_b: F32


def _f32(array: NDArray[Any]) -> F32:
    return np.ascontiguousarray(array, dtype=np.float32)


def _linear_t(weights: Mapping[str, NDArray[Any]], name: str) -> F32:
    # torch Linear stores (out, in); x @ W.T is what we want, so keep W.T contiguous.
    return _f32(weights[f"{name}.weight"].T)


def _load_layer(weights: Mapping[str, NDArray[Any]], index: int, config: BertConfig) -> _Layer:
    prefix = f"encoder.layer.{index}"
    attn = f"{prefix}.attention"
    scale = np.float32(1.0 / math.sqrt(config.hidden_size // config.num_heads))
    q_w = _linear_t(weights, f"{attn}.self.query") * scale
    q_b = _f32(weights[f"{attn}.self.query.bias"]) * scale
    qkv_w = np.concatenate(
        [q_w, _linear_t(weights, f"{attn}.self.key"), _linear_t(weights, f"{attn}.self.value")],
        axis=1,
    )
    qkv_b = np.concatenate(
        [q_b, _f32(weights[f"{attn}.self.key.bias"]), _f32(weights[f"{attn}.self.value.bias"])]
    )
    return _Layer(
        qkv_w=_f32(qkv_w),
        qkv_b=_f32(qkv_b),
        attn_out_w=_linear_t(weights, f"{attn}.output.dense"),
        attn_out_b=_f32(weights[f"{attn}.output.dense.bias"]),
        attn_ln_g=_f32(weights[f"{attn}.output.LayerNorm.weight"]),
        attn_ln_b=_f32(weights[f"{attn}.output.LayerNorm.bias"]),
        ffn_in_w=_linear_t(weights, f"{prefix}.intermediate.dense"),
        ffn_in_b=_f32(weights[f"{prefix}.intermediate.dense.bias"]),
        ffn_out_w=_linear_t(weights, f"{prefix}.output.dense"),
        ffn_out_b=_f32(weights[f"{prefix}.output.dense.bias"]),
        ffn_ln_g=_f32(weights[f"{prefix}.output.LayerNorm.weight"]),
        ffn_ln_b=_f32(weights[f"{prefix}.output.LayerNorm.bias"]),
    )


def layer_norm_(x: F32, gamma: F32, beta: F32, eps: float) -> F32:
    """LayerNorm over the last axis, in place."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var /= np.float32(x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= gamma
    x += beta
    return x


def gelu_(x: F32, bias: F32 | None = None) -> F32:
    """GELU of `x + bias` with the erf form BERT uses (`0.5 x (1 + erf(x / sqrt 2))`), in place."""
    for start in range(0, x.shape[0], _GELU_ROWS):
        block = x[start : start + _GELU_ROWS]
        if bias is not None:
            block += bias  # here rather than as its own pass: the block is in cache now
        _gelu_block(block)
    return x


def _gelu_block(x: F32) -> None:
    # Phi(x) = (1 + sign(x) * (1 - poly(t) * exp(-x^2/2))) / 2 with t = 1 / (1 + p|x|/sqrt2).
    # Branch-free on purpose: masked numpy ops (where=, np.where) are ~50x slower here.
    t = np.abs(x)
    t *= _AS_P * _INV_SQRT2
    t += _ONE
    np.divide(_ONE, t, out=t)
    poly = t * _AS_A[0]
    for coefficient in _AS_A[1:]:
        poly += coefficient
        poly *= t
    phi = np.square(x)
    phi *= np.float32(-0.5)
    np.exp(phi, out=phi)
    phi *= poly
    np.subtract(_ONE, phi, out=phi)
    np.copysign(phi, x, out=phi)
    phi += _ONE
    x *= phi
    x *= np.float32(0.5)


def _attention_bias(mask: NDArray[np.int64]) -> F32 | None:
    # Padded keys get a large negative score, so softmax gives them weight 0. A batch of
    # equal lengths (common once inputs are sorted by length) needs no mask at all.
    if bool(mask.all()):
        return None
    bias = np.zeros(mask.shape, dtype=np.float32)
    bias[mask == 0] = np.float32(-1e9)
    return bias[:, None, None, :]


def _softmax_(scores: F32) -> F32:
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    sums = scores.sum(axis=-1, keepdims=True)
    np.reciprocal(sums, out=sums)
    scores *= sums
    return scores


class BertEncoder:
    """Runs token ids through BERT's embeddings and encoder layers; returns hidden states."""

    def __init__(self, weights: Mapping[str, NDArray[Any]], config: BertConfig) -> None:
        self.config = config
        self._word = _f32(weights["embeddings.word_embeddings.weight"])
        # Every input is a single segment, so token type 0 folds into the position table.
        self._position = _f32(
            weights["embeddings.position_embeddings.weight"]
            + weights["embeddings.token_type_embeddings.weight"][0]
        )
        self._emb_ln_g = _f32(weights["embeddings.LayerNorm.weight"])
        self._emb_ln_b = _f32(weights["embeddings.LayerNorm.bias"])
        self._layers = tuple(_load_layer(weights, i, config) for i in range(config.num_layers))

    def forward(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> F32:
        """Hidden states `(batch, tokens, hidden)` for padded `ids` with `mask` 1 on real tokens."""
        batch, tokens = ids.shape
        if tokens > self.config.max_positions:
            raise ValueError(f"{tokens} tokens exceed {self.config.max_positions} positions")
        x = self._word[ids.reshape(-1)]
        x.reshape(batch, tokens, -1)[...] += self._position[:tokens]
        eps = self.config.layer_norm_eps
        layer_norm_(x, self._emb_ln_g, self._emb_ln_b, eps)
        bias = _attention_bias(mask)
        for layer in self._layers:
            x = self._layer(x, layer, bias, batch, tokens)
        return x.reshape(batch, tokens, -1)

    def _layer(self, x: F32, layer: _Layer, bias: F32 | None, batch: int, tokens: int) -> F32:
        heads = self.config.num_heads
        head_dim = self.config.hidden_size // heads
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        # (batch, tokens, 3, heads, head_dim) -> (3, batch, heads, tokens, head_dim)
        q, k, v = qkv.reshape(batch, tokens, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))
        if bias is not None:
            scores += bias
        context = np.matmul(_softmax_(scores), v)
        context2d = context.transpose(0, 2, 1, 3).reshape(batch * tokens, -1)
        attn = context2d @ layer.attn_out_w
        attn += layer.attn_out_b
        attn += x
        eps = self.config.layer_norm_eps
        layer_norm_(attn, layer.attn_ln_g, layer.attn_ln_b, eps)
        hidden = attn @ layer.ffn_in_w
        gelu_(hidden, layer.ffn_in_b)
        out = hidden @ layer.ffn_out_w
        out += layer.ffn_out_b
        out += attn
        return layer_norm_(out, layer.ffn_ln_g, layer.ffn_ln_b, eps)


def mean_pool(hidden: F32, mask: NDArray[np.int64]) -> F32:
    """Average of the hidden states over real tokens (sentence-transformers' mean pooling)."""
    weights = mask.astype(np.float32)
    summed = np.matmul(weights[:, None, :], hidden)[:, 0, :]
    counts = np.maximum(weights.sum(axis=1, keepdims=True), np.float32(1e-9))
    return _f32(summed / counts)
