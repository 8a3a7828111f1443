"""Every filter restricts the eligible set before ranking, identically on both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from service.embeddings.deterministic import DeterministicEmbedder
from service.store.base import Filters, MetadataCondition, Mode, ProjectRecord
from service.timerange import TimeRange
from tests.integration.conftest import BACKENDS, Corpus, Doc, at, fresh_backend, shared_nebula


@pytest.mark.parametrize("mode", list(Mode))
async def test_combined_filters_pick_one_row(corpus: Corpus, mode: Mode) -> None:
    projects = await shared_nebula(corpus)
    filters = Filters(
        kinds=("observation",),
        metadata=(MetadataCondition(("status",), "eq", ("open",)),),
        note_types=("note",),
        directory_prefix="notes",
        categories=("fact",),
    )
    page = await corpus.search(
        [p.project_id for p in projects[:2]], mode, "shared nebula", filters=filters
    )
    assert [(h.project_id, h.kind, h.row_id) for h in page.hits] == [
        (projects[0].project_id, "observation", "500")
    ]
    assert page.hits[0].project_external_id == projects[0].external_id
    assert page.total == (1 if mode is Mode.FTS else None)
    assert page.has_more is False


async def _catalogue(corpus: Corpus) -> ProjectRecord:
    project = await corpus.project("catalogue")
    docs = [
        Doc(
            "note",
            "a",
            "alpha",
            path="specs/a.md",
            note_type="Spec",
            category="design",
            metadata={
                "status": "open",
                "priority": 3,
                "score": 2.5,
                "tags": ["x", "y"],
                "owner": {"team": "core"},
                "flag": True,
                "due": "2026-03-01",
            },
            created_at=at(1),
            updated_at=at(10),
        ),
        Doc(
            "note",
            "b",
            "beta",
            path="specs-archive/b.md",
            note_type="SPEC",
            category="design",
            metadata={
                "status": "closed",
                "priority": 10,
                "tags": ["x"],
                "owner": {"team": "edge"},
                "flag": False,
                "due": "2026-01-15",
            },
            created_at=at(2),
            updated_at=at(11),
        ),
        Doc(
            "observation",
            "c",
            "gamma",
            path="specs/deep/c.md",
            note_type="memo",
            category="fact",
            metadata={"status": "3", "priority": 7, "tags": [3, "z"], "note": None},
            created_at=at(3),
            updated_at=at(12),
        ),
        Doc(
            "relation",
            "d",
            "delta",
            path="specs",
            note_type="",
            category="",
            metadata={"priority": "high", "tags": "x"},
            created_at=at(4),
            updated_at=at(13),
        ),
    ]
    await corpus.write(project.project_id, docs)
    return project


def _meta(path: str, op: str, *values: str | float | bool) -> Filters:
    return Filters(metadata=(MetadataCondition(tuple(path.split(".")), op, tuple(values)),))


FILTER_CASES = [
    ("kinds", Filters(kinds=("note", "relation")), "abd"),
    ("categories", Filters(categories=("design", "fact")), "abc"),
    ("note types ignore case", Filters(note_types=("spec",)), "ab"),
    ("directory is segment exact", Filters(directory_prefix="specs"), "ac"),
    ("directory nested", Filters(directory_prefix="specs/deep"), "c"),
    ("created start inclusive", Filters(created=TimeRange(at(2), None)), "bcd"),
    ("created end exclusive", Filters(created=TimeRange(None, at(3))), "ab"),
    ("updated window", Filters(updated=TimeRange(at(11), at(13))), "bc"),
    ("eq text", _meta("status", "eq", "open"), "a"),
    ("eq text matches number text", _meta("priority", "eq", "3"), "a"),
    ("eq number", _meta("priority", "eq", 3.0), "a"),
    ("eq number never matches text", _meta("status", "eq", 3.0), ""),
    ("eq bool", _meta("flag", "eq", False), "b"),
    ("eq dotted path", _meta("owner.team", "eq", "edge"), "b"),
    ("in", _meta("status", "in", "open", "closed"), "ab"),
    ("in mixed", _meta("priority", "in", 10.0, "high"), "bd"),
    ("contains all", _meta("tags", "contains_all", "x", "y"), "a"),
    ("contains one", _meta("tags", "contains_all", "x"), "ab"),
    ("contains number", _meta("tags", "contains_all", 3.0), "c"),
    ("gt numeric", _meta("priority", "gt", 3.0), "bc"),
    ("gte numeric", _meta("priority", "gte", 3.0), "abc"),
    ("lt numeric", _meta("priority", "lt", 7.0), "a"),
    ("lte numeric", _meta("priority", "lte", 7.0), "ac"),
    ("gt real", _meta("score", "gt", 2.0), "a"),
    ("gt text", _meta("due", "gt", "2026-02-01"), "a"),
    ("between numeric", _meta("priority", "between", 3.0, 7.0), "ac"),
    ("between text", _meta("due", "between", "2026-01-01", "2026-01-31"), "b"),
    ("is null absent or null", _meta("note", "is_null"), "abcd"),
    ("is null absent", _meta("status", "is_null"), "d"),
    ("is null nested", _meta("owner.team", "is_null"), "cd"),
]


@pytest_asyncio.fixture(scope="module", params=BACKENDS)
async def catalogue(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: DeterministicEmbedder,
) -> AsyncIterator[tuple[Corpus, ProjectRecord]]:
    """One catalogue per backend for the read-only filter cases (one database, not 30)."""
    directory = tmp_path_factory.mktemp("catalogue")
    async with (
        fresh_backend(request.param, request, directory) as backend,
        backend.opened(embedder.identity) as store,
    ):
        corpus = Corpus(store, embedder, "acme")
        yield corpus, await _catalogue(corpus)


@pytest.mark.parametrize(
    ("name", "filters", "expected"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
async def test_each_filter(
    catalogue: tuple[Corpus, ProjectRecord], name: str, filters: Filters, expected: str
) -> None:
    corpus, project = catalogue
    page = await corpus.search([project.project_id], Mode.FTS, "", filters=filters)
    assert "".join(sorted(h.row_id for h in page.hits)) == expected, name
    assert page.total == len(expected)


@pytest.mark.parametrize("mode", list(Mode))
async def test_filters_apply_in_every_mode(
    catalogue: tuple[Corpus, ProjectRecord], mode: Mode
) -> None:
    corpus, project = catalogue
    filters = Filters(directory_prefix="specs", note_types=("spec",))
    page = await corpus.search([project.project_id], mode, "alpha beta gamma", filters=filters)
    assert [h.row_id for h in page.hits] == ["a"]


async def test_note_type_filter_is_not_injectable(
    catalogue: tuple[Corpus, ProjectRecord],
) -> None:
    corpus, project = catalogue
    filters = Filters(note_types=("spec') OR 1=1 --",), categories=("x' OR '1'='1",))
    page = await corpus.search([project.project_id], Mode.FTS, "", filters=filters)
    assert page.hits == ()
    assert page.total == 0


async def test_metadata_value_is_not_injectable(
    catalogue: tuple[Corpus, ProjectRecord],
) -> None:
    corpus, project = catalogue
    page = await corpus.search(
        [project.project_id], Mode.FTS, "", filters=_meta("status", "eq", "x' OR '1'='1")
    )
    assert page.total == 0


# Each kind of lexical query (plain, phrase and digits, OR and prefix, unsegmented script)
# and the metadata operators of test_every_filter_at_its_limit_still_plans; the reliability
# abuse run sends the same through the server (tests/support/reliability/abuse_store.py).
LEXICAL_SHAPES = (
    "shared nebula", 'the "shared nebula" of 70803 el/1', "shared OR nebula*", "東京 nebula",
)
LIMIT_METADATA_OPS = ("contains_all", "in", "eq", "contains_all") * 5


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("text", LEXICAL_SHAPES)
async def test_every_filter_at_its_limit_still_plans(corpus: Corpus, mode: Mode, text: str) -> None:
    """The statement with every filter kind at its request limit, each kind of lexical
    query and each mode prepares and runs (SQLite refuses statements whose subqueries nest
    past its expression depth: a lexical rewrite once did, with one filter)."""
    projects = await shared_nebula(corpus)
    values = tuple(f"v{j}" for j in range(100))
    metadata = tuple(
        MetadataCondition((f"m{i}", "x"), op, values if op != "eq" else values[:1])
        for i, op in enumerate(LIMIT_METADATA_OPS)
    )
    filters = Filters(
        kinds=(*(f"kind{j}" for j in range(99)), "observation"),
        metadata=metadata,
        note_types=tuple(f"t{j}" for j in range(100)),
        directory_prefix="notes",
        categories=tuple(f"c{j}" for j in range(100)),
        created=TimeRange(start=at(1, year=2000), end=at(1, year=2100)),
        updated=TimeRange(start=at(1, year=2000), end=at(1, year=2100)),
    )
    page = await corpus.search([p.project_id for p in projects], mode, text, filters=filters)
    assert list(page.hits) == []
