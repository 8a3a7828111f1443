"""Lexical channel: relaxation over the whole scope, malformed and explicit-invalid syntax."""

from __future__ import annotations

import pytest

from service.projects.lexical import LexicalQuery
from service.store.base import Fusion, Mode
from tests.integration.conftest import SEMANTIC, Corpus, Doc, shared_nebula

LEXICAL = (Mode.FTS, Mode.HYBRID)


@pytest.mark.parametrize("mode", LEXICAL)
@pytest.mark.parametrize("text", ["Did nebula go hiking at sunrise?", "foo<nebula baz qux"])
async def test_relaxed_query_keeps_scope_counts_and_pages(
    corpus: Corpus, mode: Mode, text: str
) -> None:
    projects = await corpus.projects(3)
    for project in projects[:2]:
        await corpus.write(
            project.project_id,
            [
                Doc(kind, "500", f"nebula {kind} notes", vectors="pending")
                for kind in ("note", "observation", "relation")
            ],
        )
    scope = [p.project_id for p in projects]
    whole = await corpus.search(scope, mode, text, limit=100)
    assert len(whole.hits) == 6
    assert whole.relaxed is True
    assert {h.project_id for h in whole.hits} == {p.project_id for p in projects[:2]}
    assert all(h.vector_score == 0 and h.fts_score > 0 for h in whole.hits)
    if mode is Mode.FTS:
        assert whole.total == 6
    pages = [await corpus.search(scope, mode, text, limit=2, offset=o) for o in (0, 2, 4)]
    assert [h for p in pages for h in p.hits] == list(whole.hits)
    assert [p.has_more for p in pages] == [True, True, False]
    assert all(p.relaxed for p in pages)


@pytest.mark.parametrize("mode", LEXICAL)
async def test_relaxation_is_decided_over_the_whole_scope(corpus: Corpus, mode: Mode) -> None:
    # Two rows match every word; six more match some word. Relaxation is tiered: the rows
    # matching every word rank first, the rest follow, and every page agrees on it.
    (project,) = await corpus.projects(1)
    docs = [
        Doc("note", f"s{i}", "shared nebula observation log", vectors="pending") for i in range(2)
    ]
    docs += [Doc("note", f"w{i}", f"shared memo {i}", vectors="pending") for i in range(6)]
    await corpus.write(project.project_id, docs)
    text = "shared nebula observation"

    whole = await corpus.search([project.project_id], mode, text, limit=100)
    pages = [
        await corpus.search([project.project_id], mode, text, limit=2, offset=o)
        for o in (0, 2, 4, 6)
    ]

    assert sorted(h.row_id for h in pages[0].hits) == ["s0", "s1"]
    assert [h for p in pages for h in p.hits] == list(whole.hits)
    assert {h.row_id for p in pages[1:] for h in p.hits} == {f"w{i}" for i in range(6)}
    assert all(p.relaxed for p in pages)
    assert [p.has_more for p in pages] == [True, True, True, False]
    if mode is Mode.FTS:
        assert {p.total for p in pages} == {8}


async def test_strict_matches_alone_do_not_relax(corpus: Corpus) -> None:
    (project,) = await corpus.projects(1)
    docs = [Doc("note", f"s{i}", "shared nebula observation", vectors="pending") for i in range(2)]
    docs += [Doc("note", "x", "unrelated words", vectors="pending")]
    await corpus.write(project.project_id, docs)
    page = await corpus.search([project.project_id], Mode.FTS, "shared nebula observation")
    assert (page.total, page.relaxed) == (2, False)


@pytest.mark.parametrize("mode", LEXICAL)
@pytest.mark.parametrize("text", ["foo<bar", "nebula AND unavailable", '"unbalanced'])
async def test_invalid_or_explicit_text_never_broadens(
    corpus: Corpus, mode: Mode, text: str
) -> None:
    projects = await shared_nebula(corpus, 1)
    # min_similarity -1 admits every valid vector, whatever the query's words.
    page = await corpus.search([projects[0].project_id], mode, text, min_similarity=-1.0)
    if mode is Mode.FTS:
        assert (page.hits, page.total, page.relaxed) == ((), 0, False)
    else:
        # The vector channel still answers; the lexical one adds nothing.
        assert len(page.hits) == 3
        assert all(h.fts_score == 0 and h.fts_normalized == 0 for h in page.hits)


# Deliberately broken strict forms for both dialects, as if a compiler bug let them through.
BROKEN = LexicalQuery(
    fts5='content : ("nebula" AND',
    fts5_relaxed=None,
    tsquery="nebula & (",
    tsquery_relaxed=None,
    script_tsquery=None,
    terms=("nebula",),
    explicit=False,
)
BROKEN_WITH_RELAXED = LexicalQuery(
    fts5='content : ("nebula" AND',
    fts5_relaxed='content : ("nebula" OR "quasar")',
    tsquery="nebula & (",
    tsquery_relaxed="nebula | quasar",
    script_tsquery=None,
    terms=("nebula", "quasar"),
    explicit=False,
)


@pytest.mark.parametrize("mode", LEXICAL)
async def test_syntax_error_falls_back_to_relaxed_form(corpus: Corpus, mode: Mode) -> None:
    projects = await shared_nebula(corpus, 2)
    scope = [p.project_id for p in projects]
    page = await corpus.search(scope, mode, "nebula quasar", lexical=BROKEN_WITH_RELAXED)
    assert len(page.hits) == 6
    assert page.relaxed is True
    assert all(h.fts_score > 0 for h in page.hits)


@pytest.mark.parametrize("mode", LEXICAL)
async def test_syntax_error_without_relaxed_form_empties_the_channel(
    corpus: Corpus, mode: Mode
) -> None:
    projects = await shared_nebula(corpus, 2)
    scope = [p.project_id for p in projects]
    page = await corpus.search(scope, mode, "nebula", lexical=BROKEN)
    if mode is Mode.FTS:
        assert (page.hits, page.total) == ((), 0)
    else:
        assert len(page.hits) == 6
        assert all(h.fts_score == 0 for h in page.hits)


async def test_cjk_text_matches_through_ngrams(corpus: Corpus) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id,
        [
            Doc("note", "zh", "物竞天择\uff0c即适者生存\u3002"),
            Doc("note", "en", "survival of the fittest"),
        ],
    )
    page = await corpus.search([project.project_id], Mode.FTS, "适者生存")
    assert [h.row_id for h in page.hits] == ["zh"]


@pytest.mark.parametrize("mode", SEMANTIC)
async def test_hybrid_fuses_with_global_normalisation(corpus: Corpus, mode: Mode) -> None:
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id,
        [
            Doc("note", "both", "quasar jet quasar jet"),
            Doc("note", "lexical", "quasar jet", vectors="pending"),
            Doc("note", "vector", "radio jet emission"),
        ],
    )
    page = await corpus.search([project.project_id], mode, "quasar jet", fusion=Fusion.MAX_MIN)
    hits = {h.row_id: h for h in page.hits}
    for hit in hits.values():
        v, f = hit.vector_score, hit.fts_normalized
        expected = max(v, f) + 0.3 * min(v, f) if mode is Mode.HYBRID else v
        assert hit.score == pytest.approx(expected, abs=1e-9)
    if mode is Mode.HYBRID:
        assert max(h.fts_normalized for h in hits.values()) == pytest.approx(1.0)
        assert hits["lexical"].vector_score == 0
        assert hits["lexical"].score == pytest.approx(hits["lexical"].fts_normalized)
        assert hits["both"].score > 1.0


async def test_a_rewritten_document_is_scored_on_its_new_text(corpus: Corpus) -> None:
    # SQLite reads term frequencies from the FTS5 index: the old text must not linger.
    (project,) = await corpus.projects(1)
    await corpus.write(
        project.project_id,
        [
            Doc("note", "a", "star star star", title="t"),
            Doc("note", "b", "star map night sky", title="t"),
        ],
    )
    await corpus.write(project.project_id, [Doc("note", "a", "star map night sky", title="t")])
    page = await corpus.search([project.project_id], Mode.FTS, "star")
    scores = {h.row_id: h.fts_score for h in page.hits}
    assert scores["a"] == pytest.approx(scores["b"])
    assert scores["a"] > 0


async def test_a_prefix_scores_its_exact_stem_and_one_for_longer_terms_only(
    corpus: Corpus,
) -> None:
    # "comet" is a prefix: B holds the word once, C only the longer "cometary" (twice): both
    # tf 1, so with equal lengths they score alike; A holds the word twice and scores higher.
    project = await corpus.project("p0")
    await corpus.write(project.project_id, [
        Doc("note", "a", "comet comet planet", title="alpha", vectors="pending"),
        Doc("note", "b", "comet planet planet", title="alpha", vectors="pending"),
        Doc("note", "c", "cometary cometary planet", title="alpha", vectors="pending"),
        Doc("note", "d", "planet planet planet", title="alpha", vectors="pending"),
    ])
    page = await corpus.search([project.project_id], Mode.FTS, "comet", limit=10)
    scores = {h.row_id: h.fts_score for h in page.hits}
    assert set(scores) == {"a", "b", "c"}
    assert scores["b"] == pytest.approx(scores["c"])
    assert scores["a"] > scores["b"] > 0
