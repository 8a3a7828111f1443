"""Validation of incoming documents into DocumentInput, one violation per bad field."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.embeddings.base import EmbeddingIdentity
from service.errors import FieldViolation
from service.projects.lexical import script_ngrams
from service.store.base import DocumentInput

MAX_BODY_BYTES = 1024 * 1024
MAX_METADATA_BYTES = 64 * 1024
# Objects and lists nested in metadata, the top object counting 1. Each level is 2-3
# protobuf message levels (Struct > Value > Struct); with the response's own nesting, 16
# keeps every search result well inside the stock decoders' limit of 100.
MAX_METADATA_DEPTH = 16
MAX_SUPPLIED_CHUNK_CHARS = 20_000
_FLOAT32_MAX = 3.4028234663852886e38
_FLOAT32_TINY = 1.1754943508222875e-38  # smallest normal 32-bit float
_KIND = re.compile(r"^[a-z0-9_-]{1,64}\Z")  # \Z: "$" allows a final newline
_LIMITS = {"title": 1000, "path": 1000, "category": 200, "note_type": 200}


@dataclass(frozen=True)
class SuppliedChunk:
    """A caller-computed chunk and vector."""

    text: str
    vector: tuple[float, ...]


@dataclass(frozen=True)
class IncomingDocument:
    """A document as the caller sent it (before validation)."""

    kind: str
    row_id: str
    title: str
    path: str
    body: str
    category: str
    note_type: str
    metadata: Any  # the decoded JSON object, or something else to reject
    created_at: datetime | None
    updated_at: datetime | None
    supplied_identity: EmbeddingIdentity | None = None
    supplied_chunks: tuple[SuppliedChunk, ...] = ()


def check(doc: IncomingDocument, field: str) -> list[FieldViolation]:
    """Every problem of one document; `field` is its path, e.g. `documents[3]`."""
    problems: list[FieldViolation] = []
    if not _KIND.match(doc.kind):
        problems.append(FieldViolation(f"{field}.kind", "required, 1..64 of [a-z0-9_-]"))
    if not doc.row_id.strip() or len(doc.row_id) > 256:
        problems.append(FieldViolation(f"{field}.row_id", "required, 1..256 characters"))
    for name, limit in _LIMITS.items():
        if len(getattr(doc, name)) > limit:
            problems.append(FieldViolation(f"{field}.{name}", f"at most {limit} characters"))
    if len(doc.body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        problems.append(FieldViolation(f"{field}.body", f"at most {MAX_BODY_BYTES} bytes"))
    if not isinstance(doc.metadata, dict):
        problems.append(FieldViolation(f"{field}.metadata", "must be a JSON object"))
    elif len(_canonical(doc.metadata)) > MAX_METADATA_BYTES:
        problems.append(FieldViolation(f"{field}.metadata", f"at most {MAX_METADATA_BYTES} bytes"))
    elif _depth(doc.metadata) > MAX_METADATA_DEPTH:
        problems.append(FieldViolation(
            f"{field}.metadata", f"nested at most {MAX_METADATA_DEPTH} objects or lists deep"))
    problems += _check_supplied(doc, field)
    return problems


def _depth(value: Any) -> int:
    """Objects and lists nested in `value` (a scalar is 0); iterative, so any input is safe."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_METADATA_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _check_supplied(doc: IncomingDocument, field: str) -> list[FieldViolation]:
    if doc.supplied_identity is None:
        return []
    name = f"{field}.supplied_vectors"
    identity = doc.supplied_identity
    if not identity.model or not 1 <= identity.dimensions <= 8192:
        return [FieldViolation(f"{name}.identity", "model required, dimensions 1..8192")]
    if not doc.supplied_chunks:
        return [FieldViolation(f"{name}.chunks", "at least one chunk")]
    problems = []
    for i, chunk in enumerate(doc.supplied_chunks):
        if not chunk.text or len(chunk.text) > MAX_SUPPLIED_CHUNK_CHARS:
            problems.append(FieldViolation(f"{name}.chunks[{i}].text", "1..20000 characters"))
        if len(chunk.vector) != identity.dimensions:
            problems.append(
                FieldViolation(
                    f"{name}.chunks[{i}].vector", f"length must be {identity.dimensions}"
                )
            )
        elif not _comparable(chunk.vector):
            problems.append(
                FieldViolation(
                    f"{name}.chunks[{i}].vector",
                    "values must be finite, with a norm a 32-bit float can hold (not 0)",
                )
            )
    return problems


def _comparable(vector: Sequence[float]) -> bool:
    """True when cosine similarity is defined for the vector in 32-bit floats (the stores use
    them): a zero, vanishing, overflowing or NaN norm scores NaN, which ranks first."""
    squares = math.fsum(x * x for x in vector)
    return all(math.isfinite(x) for x in vector) and _FLOAT32_TINY < squares < _FLOAT32_MAX


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def to_input(doc: IncomingDocument) -> DocumentInput:
    """A valid document as stored; the hash covers every stored field and supplied vectors."""
    digest = hashlib.sha256()
    for part in (
        doc.kind,
        doc.row_id,
        doc.title,
        doc.path,
        doc.body,
        doc.category,
        doc.note_type,
        _canonical(doc.metadata),
        doc.created_at.isoformat() if doc.created_at else "",
        doc.updated_at.isoformat() if doc.updated_at else "",
    ):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    if doc.supplied_identity is not None:
        digest.update(f"{doc.supplied_identity.model}@{doc.supplied_identity.dimensions}".encode())
        for chunk in doc.supplied_chunks:
            digest.update(chunk.text.encode())
            digest.update(repr(chunk.vector).encode())
    return DocumentInput(
        kind=doc.kind,
        row_id=doc.row_id,
        title=doc.title,
        path=doc.path,
        body=doc.body,
        category=doc.category,
        note_type=doc.note_type,
        metadata=doc.metadata,
        created_at=doc.created_at,
        updated_at=doc.updated_at,
        content_hash=digest.hexdigest(),
        ngrams=script_ngrams(f"{doc.title} {doc.body}"),
    )
