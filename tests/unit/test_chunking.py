"""Markdown-aware chunking (reference 1.4)."""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.indexing.chunking import Chunk, chunk_markdown, document_source_text


def _texts(chunks: list[Chunk]) -> list[str]:
    return [chunk.text for chunk in chunks]


def test_document_source_text_joins_non_empty_parts_with_blank_lines() -> None:
    assert document_source_text("Title", "notes/title.md", "Body\n") == (
        "Title\n\nnotes/title.md\n\nBody"
    )
    assert document_source_text("Title", "", "  ") == "Title"
    assert document_source_text("", "", "") == ""


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n"])
def test_blank_text_has_no_chunks(text: str) -> None:
    assert chunk_markdown(text) == []


def test_small_note_is_one_chunk_with_its_hash() -> None:
    text = "Title\n\nnotes/a.md\n\n# Heading\n\nSome prose.\n\n- bullet one\n- bullet two"

    assert chunk_markdown(text) == [
        Chunk(0, text, hashlib.sha256(text.encode()).hexdigest()),
    ]


def test_sections_pack_up_to_the_size() -> None:
    sections = [f"## Part {n}\n" + "p" * 200 for n in range(10)]
    text = "\n\n".join(sections)

    chunks = chunk_markdown(text)

    assert all(len(chunk.text) <= 900 for chunk in chunks)
    # Every chunk starts at a header: edges fall only between sections.
    assert all(chunk.text.startswith("## Part") for chunk in chunks)
    assert len(chunks) == 3
    assert [chunk.index for chunk in chunks] == [0, 1, 2]


def test_bullets_start_sections_so_an_edge_never_cuts_a_bullet() -> None:
    bullets = [f"- item {n} " + "b" * 90 + "\n  continued line" for n in range(20)]
    text = "# List\n" + "\n".join(bullets)

    chunks = chunk_markdown(text)

    assert len(chunks) > 1
    for chunk in chunks[1:]:
        assert chunk.text.startswith("- item")
        assert chunk.text.endswith("continued line")


def test_headers_inside_code_fences_are_not_sections() -> None:
    text = "p" * 250 + "\n\n```\n# not a header\n# neither\n```"

    chunks = chunk_markdown(text, size=260, overlap=0)

    assert _texts(chunks) == ["p" * 250, "```\n# not a header\n# neither\n```"]


def test_oversized_section_splits_at_paragraphs_first() -> None:
    paragraphs = ["para " + str(n) + " " + "w " * 200 for n in range(4)]
    text = "# Big\n" + "\n\n".join(paragraphs)

    chunks = chunk_markdown(text)

    assert len(chunks) == 2
    assert chunks[0].text.startswith("# Big\npara 0")
    assert chunks[1].text.startswith("para 2")


def test_oversized_line_uses_overlapping_windows_cut_at_spaces() -> None:
    words = [f"w{n:04d}" for n in range(400)]
    text = " ".join(words)  # 2,399 characters on one line

    chunks = chunk_markdown(text)

    assert len(chunks) == 3
    assert all(len(chunk.text) <= 900 for chunk in chunks)
    for chunk in chunks:
        assert all(len(word) == 5 for word in chunk.text.split())  # never a cut word
    for first, second in itertools.pairwise(chunks):
        overlap = set(first.text.split()) & set(second.text.split())
        assert 15 <= len(overlap) <= 20  # about 120 characters of 6-character words


def test_unbroken_text_uses_exact_windows() -> None:
    chunks = chunk_markdown("x" * 2000)

    assert [len(chunk.text) for chunk in chunks] == [900, 900, 440]


def test_chunks_are_exact_slices_in_document_order() -> None:
    words = " ".join(f"a{n:04d}" for n in range(300))
    text = "# A\n" + words + "\n\n- b\n- c\n\n# D\n" + "delta " * 50
    position = -1
    for chunk in chunk_markdown(text):
        found = text.find(chunk.text)
        assert found > position
        position = found


def test_size_and_overlap_are_validated() -> None:
    with pytest.raises(ValueError, match="overlap"):
        chunk_markdown("text", size=100, overlap=60)
    with pytest.raises(ValueError, match="positive"):
        chunk_markdown("text", size=0, overlap=0)


def test_large_input_is_linear() -> None:
    text = ("- item " + "y" * 50 + "\n") * 20_000 + "z" * 500_000
    chunks = chunk_markdown(text)
    # Every chunk but the windows is at least half full; windows advance >= 555 chars.
    assert len(chunks) < len(text) // 400


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab #-*1.\n\t ")), max_size=3000),
    st.integers(min_value=1, max_value=300),
)
def test_fuzz_chunks_are_bounded_non_empty_and_deterministic(text: str, size: int) -> None:
    overlap = size // 3
    chunks = chunk_markdown(text, size=size, overlap=overlap)

    assert chunks == chunk_markdown(text, size=size, overlap=overlap)
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text.strip() == chunk.text != ""
        assert len(chunk.text) <= size
        assert chunk.source_hash == hashlib.sha256(chunk.text.encode()).hexdigest()
    # Nothing but whitespace is lost (windows overlap, so coverage may exceed the text).
    covered = sum(len("".join(chunk.text.split())) for chunk in chunks)
    assert covered >= len("".join(text.split()))
