"""A project search request in domain terms, and its validation."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from service.errors import FieldViolation, InvalidArgument
from service.store.base import (
    DEFAULT_FUSION,
    RRF_K,
    Filters,
    Fusion,
    MetadataCondition,
    Mode,
)
from service.timerange import TimeRange

MAX_TEXT_CHARS = 2000
MAX_SCOPE = 1000
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 10
MAX_PAGES = 10
MAX_METADATA_FILTERS = 20
MAX_FILTER_VALUES = 100
MAX_FILTER_ITEMS = 100
MAX_RRF_K = 10_000
_PATH_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" allows a final newline
_OPERAND_COUNTS = {
    "eq": (1, 1),
    "gt": (1, 1),
    "gte": (1, 1),
    "lt": (1, 1),
    "lte": (1, 1),
    "between": (2, 2),
    "is_null": (0, 0),
    "contains_all": (1, MAX_FILTER_VALUES),
    "in": (1, MAX_FILTER_VALUES),
}


@dataclass(frozen=True)
class RawMetadataFilter:
    """A metadata filter as the caller sent it."""

    path: str
    op: str  # "" when unspecified
    values: tuple[object, ...]


@dataclass(frozen=True)
class RawFilters:
    """Filters as the caller sent them."""

    kinds: tuple[str, ...] = ()
    metadata: tuple[RawMetadataFilter, ...] = ()
    note_types: tuple[str, ...] = ()
    directory_prefix: str = ""
    categories: tuple[str, ...] = ()
    created: TimeRange = TimeRange()
    updated: TimeRange = TimeRange()


@dataclass(frozen=True)
class ProjectSearchRequest:
    """What a caller asked for; `scope` None means the scope message was absent."""

    scope: tuple[int, ...] | None
    text: str
    mode: Mode
    filters: RawFilters
    page_size: int
    page_token: str
    max_pages: int
    include_chunks: bool
    min_similarity: float
    fusion: Fusion = DEFAULT_FUSION  # HYBRID only
    rrf_k: int = 0  # 0: RRF_K


@dataclass(frozen=True)
class ValidRequest:
    """A request that passed validation, with defaults applied."""

    scope: tuple[int, ...]  # de-duplicated, sorted
    text: str
    mode: Mode
    filters: Filters
    page_size: int
    page_token: str
    max_pages: int
    include_chunks: bool
    min_similarity: float
    fusion: Fusion = DEFAULT_FUSION
    rrf_k: int = RRF_K


def validate(request: ProjectSearchRequest) -> ValidRequest:
    """Check every field; raises one InvalidArgument listing every violation."""
    problems: list[FieldViolation] = []
    scope = _scope(request.scope, problems)
    if len(request.text) > MAX_TEXT_CHARS:
        problems.append(FieldViolation("text", f"at most {MAX_TEXT_CHARS} characters"))
    if request.mode is not Mode.FTS and not request.text.strip():
        problems.append(FieldViolation("text", "required for VECTOR and HYBRID modes"))
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        problems.append(FieldViolation("page_size", f"must be 1..{MAX_PAGE_SIZE} (0 = 10)"))
    if not 0 <= request.max_pages <= MAX_PAGES:
        problems.append(FieldViolation("max_pages", f"must be 1..{MAX_PAGES} (0 = 1)"))
    if not (math.isfinite(request.min_similarity) and 0.0 <= request.min_similarity <= 1.0):
        problems.append(FieldViolation("min_similarity", "must be within [0, 1]"))
    if not 0 <= request.rrf_k <= MAX_RRF_K:
        problems.append(FieldViolation("rrf_k", f"must be 1..{MAX_RRF_K} (0 = {RRF_K})"))
    filters = _filters(request.filters, problems)
    if problems:
        raise InvalidArgument(
            "; ".join(f"{p.field}: {p.description}" for p in problems), violations=problems
        )
    return ValidRequest(
        scope=scope,
        text=request.text,
        mode=request.mode,
        filters=filters,
        page_size=request.page_size or DEFAULT_PAGE_SIZE,
        page_token=request.page_token,
        max_pages=request.max_pages or 1,
        include_chunks=request.include_chunks,
        min_similarity=request.min_similarity,
        fusion=request.fusion,
        rrf_k=request.rrf_k or RRF_K,
    )


def _scope(scope: tuple[int, ...] | None, problems: list[FieldViolation]) -> tuple[int, ...]:
    if scope is None:
        problems.append(
            FieldViolation("scope", "required: send a scope (an empty one searches nothing)")
        )
        return ()
    for i, pid in enumerate(scope):
        if pid <= 0:
            problems.append(FieldViolation(f"scope.project_ids[{i}]", "must be positive"))
    unique = tuple(sorted(set(scope)))
    if len(unique) > MAX_SCOPE:
        problems.append(FieldViolation("scope.project_ids", f"at most {MAX_SCOPE} projects"))
    return unique


def _strings(name: str, values: tuple[str, ...], problems: list[FieldViolation]) -> None:
    if len(values) > MAX_FILTER_ITEMS:
        problems.append(FieldViolation(name, f"at most {MAX_FILTER_ITEMS} values"))
    for i, value in enumerate(values):
        if not value.strip() or len(value) > 200:
            problems.append(FieldViolation(f"{name}[{i}]", "must be 1..200 characters"))


def _filters(raw: RawFilters, problems: list[FieldViolation]) -> Filters:
    _strings("filters.kinds", raw.kinds, problems)
    _strings("filters.note_types", raw.note_types, problems)
    _strings("filters.categories", raw.categories, problems)
    if len(raw.metadata) > MAX_METADATA_FILTERS:
        problems.append(
            FieldViolation("filters.metadata", f"at most {MAX_METADATA_FILTERS} conditions")
        )
    conditions = tuple(
        c
        for i, m in enumerate(raw.metadata)
        if (c := _metadata(f"filters.metadata[{i}]", m, problems)) is not None
    )
    for name, rng in (("filters.create_time", raw.created), ("filters.update_time", raw.updated)):
        if rng.start is not None and rng.end is not None and rng.start >= rng.end:
            problems.append(FieldViolation(f"{name}.end_time", "must be after start_time"))
    if len(raw.directory_prefix) > 1000:
        problems.append(FieldViolation("filters.directory_prefix", "at most 1000 characters"))
    return Filters(
        kinds=tuple(sorted(set(raw.kinds))),
        metadata=conditions,
        note_types=tuple(sorted({n.strip().lower() for n in raw.note_types})),
        directory_prefix=normalise_prefix(raw.directory_prefix),
        categories=tuple(sorted(set(raw.categories))),
        created=raw.created,
        updated=raw.updated,
    )


def normalise_prefix(prefix: str) -> str:
    """Strip whitespace, a leading "./" and surrounding "/"; "" means no restriction."""
    cleaned = prefix.strip()
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned.strip("/")


def _metadata(
    name: str, raw: RawMetadataFilter, problems: list[FieldViolation]
) -> MetadataCondition | None:
    segments = tuple(raw.path.split("."))
    ok = True
    if not raw.path or not all(_PATH_SEGMENT.match(s) for s in segments):
        problems.append(FieldViolation(f"{name}.path", "dotted path of [A-Za-z0-9_-]+ segments"))
        ok = False
    bounds = _OPERAND_COUNTS.get(raw.op)
    if bounds is None:
        problems.append(FieldViolation(f"{name}.operator", "required"))
        return None
    low, high = bounds
    if not low <= len(raw.values) <= high:
        want = str(low) if low == high else f"{low}..{high}"
        problems.append(FieldViolation(f"{name}.values", f"{raw.op} takes {want} value(s)"))
        ok = False
    values: list[str | float | bool] = []
    for i, v in enumerate(raw.values):
        if isinstance(v, bool | str) or (isinstance(v, float) and math.isfinite(v)):
            values.append(v)
        else:
            problems.append(
                FieldViolation(f"{name}.values[{i}]", "strings, finite numbers and booleans only")
            )
            ok = False
    return MetadataCondition(segments, raw.op, tuple(values)) if ok else None
