"""Filters as SQL over `documents AS d`: fixed fragments, every value a bound parameter.

Metadata semantics (the acceptance suite pins them for both backends):
- eq / in: a string operand equals the stored value's JSON text (strings as is, numbers in
  decimal, `true`/`false`); a number operand equals a stored number numerically; a boolean
  operand equals a stored boolean.
- contains_all: the stored value is an array holding an element of the operand's type and
  value for every operand.
- gt/gte/lt/lte/between: numeric over stored numbers when the operands are numbers, else
  binary text order over stored strings; other stored types never match.
- is_null: the path is absent or JSON null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import apsw

from service import errors
from service.store.base import Filters, MetadataCondition
from service.store.sqlite.values import to_micros

# Membership lists are bound one parameter per value, and `contains_all` is one function
# call: the scope CTE is re-prepared for every reference to it, and SQLite refuses a
# statement once those nested preparations reach 1,000 ("VIEWs and/or subqueries nested too
# deep"), so every subquery here multiplies. The only subquery left is the scope's.
KINDS = "AND d.kind IN ({values})"
CATEGORIES = "AND d.category IN ({values})"
NOTE_TYPES = "AND d.note_type_key IN ({values})"
# Segment-exact prefix as an index-friendly range: in binary order the paths that start
# with "dir/" are exactly those in ["dir/", "dir0") since '0' follows '/'; "dir-archive/x"
# sorts before "dir/" ('-' < '/') and "dir" itself before "dir/".
DIRECTORY = "AND d.path >= :dir_low AND d.path < :dir_high"
CREATED_START = "AND d.created_at >= :created_start"
CREATED_END = "AND d.created_at < :created_end"
UPDATED_START = "AND d.updated_at >= :updated_start"
UPDATED_END = "AND d.updated_at < :updated_end"

_TYPE = "json_type(d.metadata, :{p})"
_VALUE = "json_extract(d.metadata, :{p})"
_TEXT_FORM = (
    "CASE json_type(d.metadata, :{p}) WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
    "WHEN 'text' THEN json_extract(d.metadata, :{p}) "
    "WHEN 'integer' THEN CAST(json_extract(d.metadata, :{p}) AS TEXT) "
    "WHEN 'real' THEN CAST(json_extract(d.metadata, :{p}) AS TEXT) END"
)  # the stored value's JSON text, as `eq` with a string operand compares it
EQ_TEXT = f"({_TEXT_FORM} = :{{v}})"
EQ_NUMBER = f"({_TYPE} IN ('integer', 'real') AND {_VALUE} = :{{v}})"
EQ_BOOL = f"({_TYPE} = :{{v}})"
# `in`: one call per row whatever the number of values (as many `eq` cases made a statement
# of 2,000 CASE expressions at the request limit: seconds to prepare it).
IN_ANY = f"search_metadata_in({_TEXT_FORM}, {_TYPE}, {_VALUE}, :{{v}})"
CONTAINS = f"({_TYPE} = 'array' AND search_contains_all({_VALUE}, :{{v}}))"
COMPARE_NUMBER = f"({_TYPE} IN ('integer', 'real') AND {_VALUE} {{op}} :{{v}})"
COMPARE_TEXT = f"({_TYPE} = 'text' AND {_VALUE} {{op}} :{{v}})"
BETWEEN_NUMBER = f"({_TYPE} IN ('integer', 'real') AND {_VALUE} BETWEEN :{{a}} AND :{{b}})"
BETWEEN_TEXT = f"({_TYPE} = 'text' AND {_VALUE} BETWEEN :{{a}} AND :{{b}})"
IS_NULL = f"({_TYPE} IS NULL OR {_TYPE} = 'null')"
_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

Bindings = dict[str, Any]


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
            names = [f"{name}_{j}" for j in range(len(values))]
            parts.append(fragment.format(values=", ".join(f":{n}" for n in names)))
            bindings.update(zip(names, values, strict=True))
    prefix = _normalise_prefix(filters.directory_prefix)
    if prefix:
        parts.append(DIRECTORY)
        bindings.update(dir_low=prefix + "/", dir_high=prefix + "0")
    _ranges(filters, parts, bindings)
    for i, condition in enumerate(filters.metadata):
        parts.append("AND " + _metadata(condition, f"m{i}", bindings))
    return "\n    ".join(parts), bindings


def _normalise_prefix(prefix: str) -> str:
    cleaned = prefix.strip()
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned.strip("/")


def _ranges(filters: Filters, parts: list[str], bindings: Bindings) -> None:
    for fragment, name, when in (
        (CREATED_START, "created_start", filters.created.start),
        (CREATED_END, "created_end", filters.created.end),
        (UPDATED_START, "updated_start", filters.updated.start),
        (UPDATED_END, "updated_end", filters.updated.end),
    ):
        if when is not None:
            parts.append(fragment)
            bindings[name] = to_micros(when)


def json_path(segments: tuple[str, ...]) -> str:
    """`$."a"."b"` for ("a", "b"); segments are quoted, never interpreted."""
    if not segments or any(not s or '"' in s or "\\" in s for s in segments):
        raise errors.InvalidArgument.field("filters.metadata.path", "dotted path of plain names")
    return "$" + "".join(f'."{s}"' for s in segments)


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
        bindings[f"{name}_any"] = json.dumps(list(values))
        return IN_ANY.format(p=p, v=f"{name}_any")
    if op == "contains_all":
        bindings[f"{name}_all"] = json.dumps(list(values))
        return CONTAINS.format(p=p, v=f"{name}_all")
    if op in _COMPARISONS:
        return _compare(p, f"{name}_0", _COMPARISONS[op], values[0], bindings)
    if op == "between" and len(values) == 2:
        return _between(p, name, values[0], values[1], bindings)
    raise _bad(op, "unknown operator or wrong number of values")


def _equals(p: str, v: str, value: str | float | bool, bindings: Bindings) -> str:
    if isinstance(value, bool):
        bindings[v] = "true" if value else "false"
        return EQ_BOOL.format(p=p, v=v)
    bindings[v] = value
    return (EQ_TEXT if isinstance(value, str) else EQ_NUMBER).format(p=p, v=v)


@dataclass(frozen=True)
class _Operands:
    texts: frozenset[str]
    numbers: frozenset[float]
    flags: frozenset[bool]


@lru_cache(maxsize=256)
def _operands(wanted: str) -> _Operands:
    values = json.loads(wanted)
    return _Operands(
        frozenset(v for v in values if isinstance(v, str)),
        frozenset(v for v in values if _is_number(v)),
        frozenset(v for v in values if isinstance(v, bool)),
    )


def metadata_in(*args: apsw.SQLiteValue) -> bool:
    """`search_metadata_in(text, type, value, operands)`: the stored value (its JSON text,
    JSON type and SQL value) equals one operand, with `eq`'s rules: a string operand its
    JSON text, a number operand a stored number numerically, a boolean the same boolean."""
    text, kind, value, wanted = args
    if not isinstance(wanted, str):
        return False
    operands = _operands(wanted)
    if kind in ("true", "false"):
        return (kind == "true") in operands.flags or text in operands.texts
    if kind in ("integer", "real"):
        return value in operands.numbers or text in operands.texts
    return isinstance(text, str) and text in operands.texts


def contains_all(*args: apsw.SQLiteValue) -> bool:
    """`search_contains_all(array, operands)`: every operand (JSON) has an equal element
    in `array` (the stored JSON array's text): a string an equal string, a number an equal
    number (integer or real), a boolean the same boolean; nested values never match."""
    stored, wanted = args
    if not isinstance(stored, str) or not isinstance(wanted, str):
        return False
    elements = json.loads(stored)
    operands = _operands(wanted)
    texts = {e for e in elements if isinstance(e, str)}
    numbers = {e for e in elements if _is_number(e)}
    flags = {e for e in elements if isinstance(e, bool)}
    return operands.texts <= texts and operands.flags <= flags and operands.numbers <= numbers


def _compare(p: str, v: str, op: str, value: str | float | bool, bindings: Bindings) -> str:
    if isinstance(value, bool):
        raise _bad("comparison", "booleans cannot be ordered")
    bindings[v] = value
    return (COMPARE_TEXT if isinstance(value, str) else COMPARE_NUMBER).format(p=p, v=v, op=op)


def _between(
    p: str, name: str, low: str | float | bool, high: str | float | bool, bindings: Bindings
) -> str:
    a, b = f"{name}_0", f"{name}_1"
    bindings[a], bindings[b] = low, high
    if isinstance(low, str) and isinstance(high, str):
        return BETWEEN_TEXT.format(p=p, a=a, b=b)
    if _is_number(low) and _is_number(high):
        return BETWEEN_NUMBER.format(p=p, a=a, b=b)
    raise _bad("between", "needs two numbers or two strings")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bad(op: str, description: str) -> errors.InvalidArgument:
    return errors.InvalidArgument.field("filters.metadata.operator", f"{op}: {description}")
