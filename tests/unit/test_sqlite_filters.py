"""Filter SQL for SQLite: fixed fragments, bound values, quoted JSON paths."""

from __future__ import annotations

import json

import pytest

from service import errors
from service.store.base import Filters, MetadataCondition
from service.store.sqlite.filters import contains_all, filter_sql, json_path, metadata_in


def test_json_path_quotes_every_segment() -> None:
    assert json_path(("owner", "team-1")) == '$."owner"."team-1"'


@pytest.mark.parametrize("segments", [(), ("",), ('a"b',), ("a\\b",)])
def test_json_path_rejects_unquotable_segments(segments: tuple[str, ...]) -> None:
    with pytest.raises(errors.InvalidArgument):
        json_path(segments)


def test_user_values_are_bound_never_inlined() -> None:
    hostile = "x' OR '1'='1"
    filters = Filters(
        kinds=(hostile,),
        categories=(hostile,),
        note_types=(hostile,),
        directory_prefix=hostile,
        metadata=(
            MetadataCondition(("status",), "eq", (hostile,)),
            MetadataCondition(("tags",), "contains_all", (hostile, 2.0, True)),
            MetadataCondition(("n",), "between", (1.0, 2.0)),
        ),
    )
    sql, bindings = filter_sql(filters)
    assert "OR '1'" not in sql
    assert hostile in bindings["m0_0"]
    assert bindings["dir_low"] == hostile + "/"
    assert json.loads(bindings["m1_all"]) == [hostile, 2.0, True]
    assert bindings["kinds_0"] == bindings["categories_0"] == hostile


def test_lists_and_contains_all_add_no_subquery() -> None:
    """Each subquery in the scope is prepared again for every reference to it, and SQLite
    refuses the statement past 1,000 such preparations: only the scope's own may remain."""
    filters = Filters(
        kinds=tuple(f"k{j}" for j in range(100)),
        categories=("a", "b"),
        note_types=("n",),
        metadata=tuple(
            MetadataCondition((f"m{i}",), "contains_all", tuple(f"v{j}" for j in range(100)))
            for i in range(20)
        ),
    )
    sql, _ = filter_sql(filters)
    assert "SELECT" not in sql.upper()


@pytest.mark.parametrize(
    ("stored", "wanted", "found"),
    [
        ('["a", 2, true]', '["a", 2.0, true]', True),
        ('["a", 2]', '["a", 3]', False),
        ('["2", "true"]', "[2]", False),
        ('["2", "true"]', "[true]", False),
        ("[1, 0]", "[true]", False),
        ("[true]", "[1]", False),
        ('[["a"], {"a": 1}]', '["a"]', False),
        ("[]", '["a"]', False),
        (None, '["a"]', False),
    ],
)
def test_contains_all_matches_elements_of_the_operand_type(
    stored: str | None, wanted: str, found: bool
) -> None:
    assert contains_all(stored, wanted) is found


def test_directory_prefix_is_normalised_to_a_segment_range() -> None:
    _, bindings = filter_sql(Filters(directory_prefix="./specs/"))
    assert (bindings["dir_low"], bindings["dir_high"]) == ("specs/", "specs0")
    sql, bindings = filter_sql(Filters(directory_prefix=" / "))
    assert sql == ""
    assert bindings == {}


def test_note_types_are_lower_cased() -> None:
    _, bindings = filter_sql(Filters(note_types=("Spec", "MEMO")))
    assert (bindings["note_types_0"], bindings["note_types_1"]) == ("spec", "memo")


@pytest.mark.parametrize(
    "condition",
    [
        MetadataCondition(("a",), "gt", (True,)),
        MetadataCondition(("a",), "between", ("x", 1.0)),
        MetadataCondition(("a",), "between", (1.0,)),
        MetadataCondition(("a",), "eq", ()),
        MetadataCondition(("a",), "regex", ("x",)),
    ],
)
def test_malformed_conditions_are_invalid_arguments(condition: MetadataCondition) -> None:
    with pytest.raises(errors.InvalidArgument):
        filter_sql(Filters(metadata=(condition,)))


@pytest.mark.parametrize(
    ("text", "kind", "value", "wanted", "found"),
    [
        ("open", "text", "open", '["closed", "open"]', True),
        ("open", "text", "open", '["closed"]', False),
        ("2", "integer", 2, "[2.0]", True),
        ("2", "integer", 2, '["2"]', True),
        ("2.5", "real", 2.5, "[2]", False),
        ("true", "true", 1, "[true]", True),
        ("true", "true", 1, '["true"]', True),
        ("true", "true", 1, "[1]", False),
        ("false", "false", 0, "[true]", False),
        ("1", "integer", 1, "[true]", False),
        (None, "null", None, '["null"]', False),
        (None, "array", '["a"]', '["a"]', False),
        (None, None, None, '["a"]', False),
    ],
)
def test_in_matches_with_the_rules_of_eq(
    text: str | None, kind: str | None, value: object, wanted: str, found: bool
) -> None:
    assert metadata_in(text, kind, value, wanted) is found
