"""Filters as SQL over `documents AS d`: fixed fragments, every value a bound parameter.

Metadata semantics are the SQLite store's (the acceptance suite pins them for both):
- eq / in: a string operand equals the stored value's JSON text (strings as is, numbers in
  decimal, `true`/`false`); a number operand equals a stored number numerically; a boolean
  operand equals a stored boolean.
- contains_all: the stored value is an array holding an element of the operand's type and
  value for every operand (jsonb `@>`).
- gt/gte/lt/lte/between: numeric over stored numbers when the operands are numbers, else
  binary ("C" collation) text order over stored strings; other stored types never match.
- is_null: the path is absent or JSON null.
Paths are bound as text arrays (`jsonb_extract_path(metadata, VARIADIC :path)`).
"""

from __future__ import annotations

import math
from typing import Any

from service import errors
from service.store.base import Filters, MetadataCondition

Bindings = dict[str, Any]

KINDS = "AND d.kind = ANY(:kinds::text[])"
CATEGORIES = "AND d.category = ANY(:categories::text[])"
NOTE_TYPES = "AND lower(d.note_type) = ANY(:note_types::text[])"
# starts_with is byte-exact (no LIKE wildcards); the trailing "/" keeps it segment-exact.
DIRECTORY = "AND starts_with(d.path, :dir_prefix::text)"
CREATED_START = "AND d.created_at >= :created_start::timestamptz"
CREATED_END = "AND d.created_at < :created_end::timestamptz"
UPDATED_START = "AND d.updated_at >= :updated_start::timestamptz"
UPDATED_END = "AND d.updated_at < :updated_end::timestamptz"

_VALUE = "jsonb_extract_path(d.metadata, VARIADIC :{p}::text[])"
_TEXT = "jsonb_extract_path_text(d.metadata, VARIADIC :{p}::text[])"
_TYPE = f"jsonb_typeof({_VALUE})"
# CASE guards the casts: they only ever see stored numbers (never text that would not parse).
_NUMBER = f"(CASE WHEN {_TYPE} = 'number' THEN {_TEXT}::numeric END)"
_STRING = f"(CASE WHEN {_TYPE} = 'string' THEN {_TEXT} END) COLLATE \"C\""
EQ_TEXT = f"({_TYPE} IN ('string', 'number', 'boolean') AND {_TEXT} = :{{v}}::text)"
EQ_NUMBER = f"({_NUMBER} = :{{v}}::numeric)"
EQ_BOOL = f"({_VALUE} = to_jsonb(:{{v}}::boolean))"
CONTAINS_ALL = f"({_TYPE} = 'array' AND {_VALUE} @> :{{v}}::jsonb)"
COMPARE_NUMBER = f"({_NUMBER} {{op}} :{{v}}::numeric)"
COMPARE_TEXT = f"({_STRING} {{op}} :{{v}}::text)"
BETWEEN_NUMBER = f"({_NUMBER} BETWEEN :{{a}}::numeric AND :{{b}}::numeric)"
BETWEEN_TEXT = f"({_STRING} BETWEEN :{{a}}::text AND :{{b}}::text)"
IS_NULL = f"({_VALUE} IS NULL OR {_TYPE} = 'null')"
_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def filter_sql(filters: Filters) -> tuple[str, Bindings]:
    """The AND-ed predicates of `filters` and their bindings."""
    parts: list[str] = []
    bindings: Bindings = {}
    for fragment, name, values in (
        (KINDS, "kinds", filters.kinds),
        (CATEGORIES, "categories", filters.categories),
        (NOTE_TYPES, "note_types", tuple(t.lower() for t in filters.note_types)),
    ):
        if values:
            parts.append(fragment)
            bindings[name] = list(values)
    prefix = normalise_prefix(filters.directory_prefix)
    if prefix:
        parts.append(DIRECTORY)
        bindings["dir_prefix"] = prefix + "/"
    for fragment, name, when in (
        (CREATED_START, "created_start", filters.created.start),
        (CREATED_END, "created_end", filters.created.end),
        (UPDATED_START, "updated_start", filters.updated.start),
        (UPDATED_END, "updated_end", filters.updated.end),
    ):
        if when is not None:
            parts.append(fragment)
            bindings[name] = when
    for i, condition in enumerate(filters.metadata):
        parts.append("AND " + _metadata(condition, f"m{i}", bindings))
    return "\n      ".join(parts), bindings


def normalise_prefix(prefix: str) -> str:
    """The directory without surrounding blanks, leading "./" or surrounding "/"."""
    cleaned = prefix.strip()
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned.strip("/")


def json_path(segments: tuple[str, ...]) -> list[str]:
    """The path as a text array; plain non-empty names only (as on SQLite)."""
    if not segments or any(not s or '"' in s or "\\" in s for s in segments):
        raise errors.InvalidArgument.field("filters.metadata.path", "dotted path of plain names")
    return list(segments)


def _metadata(condition: MetadataCondition, name: str, bindings: Bindings) -> str:
    p = f"{name}_path"
    bindings[p] = json_path(condition.path)
    op, values = condition.op, condition.values
    if op == "is_null":
        return IS_NULL.format(p=p)
    if not values:
        raise _bad(op, "needs at least one value")
    if op == "eq":
        return _equals(p, f"{name}_0", values[0], bindings)
    if op == "in":
        alternatives = [_equals(p, f"{name}_{j}", v, bindings) for j, v in enumerate(values)]
        return "(" + " OR ".join(alternatives) + ")"
    if op == "contains_all":
        # A list: the connection's jsonb codec serialises it.
        bindings[f"{name}_all"] = [_json_scalar(v) for v in values]
        return CONTAINS_ALL.format(p=p, v=f"{name}_all")
    if op in _COMPARISONS:
        return _compare(p, f"{name}_0", _COMPARISONS[op], values[0], bindings)
    if op == "between" and len(values) == 2:
        return _between(p, name, values[0], values[1], bindings)
    raise _bad(op, "unknown operator or wrong number of values")


def _json_scalar(value: str | float | bool) -> str | float | bool:
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad("contains_all", "numbers must be finite")
    return value


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise _bad("comparison", "numbers must be finite")
    return repr(value)


def _equals(p: str, v: str, value: str | float | bool, bindings: Bindings) -> str:
    if isinstance(value, bool):
        bindings[v] = value
        return EQ_BOOL.format(p=p, v=v)
    if isinstance(value, str):
        bindings[v] = value
        return EQ_TEXT.format(p=p, v=v)
    bindings[v] = _number(value)
    return EQ_NUMBER.format(p=p, v=v)


def _compare(p: str, v: str, op: str, value: str | float | bool, bindings: Bindings) -> str:
    if isinstance(value, bool):
        raise _bad("comparison", "booleans cannot be ordered")
    if isinstance(value, str):
        bindings[v] = value
        return COMPARE_TEXT.format(p=p, v=v, op=op)
    bindings[v] = _number(value)
    return COMPARE_NUMBER.format(p=p, v=v, op=op)


def _between(
    p: str, name: str, low: str | float | bool, high: str | float | bool, bindings: Bindings
) -> str:
    a, b = f"{name}_0", f"{name}_1"
    if isinstance(low, str) and isinstance(high, str):
        bindings[a], bindings[b] = low, high
        return BETWEEN_TEXT.format(p=p, a=a, b=b)
    if _is_number(low) and _is_number(high):
        bindings[a], bindings[b] = _number(float(low)), _number(float(high))
        return BETWEEN_NUMBER.format(p=p, a=a, b=b)
    raise _bad("between", "needs two numbers or two strings")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bad(op: str, description: str) -> errors.InvalidArgument:
    return errors.InvalidArgument.field("filters.metadata.operator", f"{op}: {description}")
