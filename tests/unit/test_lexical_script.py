"""Gram analysis for unsegmented scripts (reference 2.3)."""

# Test data is deliberately non-ASCII (Cyrillic, full-width forms, typographic quotes).
# ruff: noqa: RUF001

from __future__ import annotations

import pytest

from service.projects.lexical import SCRIPT_BOUNDARY, script_ngrams
from service.projects.lexical_script import (
    contains_cjk,
    contains_script,
    run_grams,
    script_runs,
    split_script,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("适者生存", (("适", "者", "生", "存"),)),
        ("適者生存", (("適", "者", "生", "存"),)),
        ("サバイバル", (("サ", "バ", "イ", "バ", "ル"),)),
        ("ｻﾊﾞｲﾊﾞﾙ", (("サ", "バ", "イ", "バ", "ル"),)),  # half-width kana after NFKC
        ("생존 경쟁", (("생", "존"), ("경", "쟁"))),
        ("ภาษาไทย", (("ภ", "า", "ษ", "า", "ไ", "ท", "ย"),)),
        ("人々", (("人", "々"),)),
        ("ＡＢＣ", ()),
        ("plain text", ()),
    ],
)
def test_script_runs_cover_scripts_and_normalise_width(
    text: str, expected: tuple[tuple[str, ...], ...]
) -> None:
    assert script_runs(text) == expected


def test_combining_marks_attach_to_the_previous_unit() -> None:
    assert script_runs("漢\N{VARIATION SELECTOR-1}") == (("漢\N{VARIATION SELECTOR-1}",),)
    assert script_runs("ก่อน") == (("ก่", "อ", "น"),)


def test_run_grams_keep_order_and_single_characters() -> None:
    assert run_grams(("适", "者", "生", "存")) == ("适者", "者生", "生存")
    assert run_grams(("猫",)) == ("猫",)
    assert run_grams(()) == ()


def test_script_ngrams_emit_unigrams_then_bigrams_per_run() -> None:
    assert script_ngrams("适者生存") == "适 者 生 存 适者 者生 生存"
    assert script_ngrams("猫") == "猫"


def test_script_ngrams_separate_runs() -> None:
    assert script_ngrams("适者 and 生存") == f"适 者 适者 {SCRIPT_BOUNDARY} 生 存 生存"


def test_script_ngrams_of_plain_text_is_empty() -> None:
    assert script_ngrams("nothing to see here") == ""
    assert script_ngrams("") == ""


def test_script_ngrams_is_linear_in_size() -> None:
    text = "即适者生存" * 20_000
    assert len(script_ngrams(text).split()) == 2 * len(text) - 1


def test_split_script_separates_words_and_phrases() -> None:
    remainder, phrases = split_script("OpenAI适者生存")
    assert remainder.strip() == "OpenAI"
    assert phrases == (("适者", "者生", "生存"),)
    assert split_script("plain") == ("plain", ())


def test_split_script_drops_phrases_without_letters() -> None:
    assert split_script("\u0f0b")[1] == ()  # Tibetan tsheg alone: punctuation


def test_detectors() -> None:
    assert contains_script("ภาษา")
    assert not contains_cjk("ภาษา")  # Thai does not relax by whitespace words
    assert contains_cjk("ｶﾅ")
    assert not contains_script("مرحبا")
