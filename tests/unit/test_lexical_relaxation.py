"""relaxed_terms: eligibility and word rules (reference 2.4, relaxation test suites)."""

# Test data is deliberately non-ASCII (Cyrillic, full-width forms, typographic quotes).
# ruff: noqa: RUF001

from __future__ import annotations

import unicodedata

import pytest

from service.projects.lexical import relaxed_terms
from service.projects.lexical_tokens import (
    WORD_INTERNAL_PUNCTUATION,
    WORD_SEPARATOR_FORMATS,
    is_numeric_token,
    word_tokens,
)


def _in_categories(*categories: str) -> list[str]:
    wanted = set(categories)
    return [char for code in range(0x110000) if unicodedata.category(char := chr(code)) in wanted]


FORMAT_CHARACTERS = _in_categories("Cf")
COMBINING_MARKS = _in_categories("Mn", "Mc", "Me")
NUMBER_CHARACTERS = _in_categories("Nd", "Nl", "No")
PUNCTUATION = _in_categories("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po")
HAN_NUMERALS = ["三", "四", "五", "十", "百", "千", "万", "億", "零"]


def _hex(chars: list[str]) -> str:
    return " ".join(f"U+{ord(char):04X}" for char in chars[:8])


def test_stopwords_are_dropped() -> None:
    assert relaxed_terms("what is the meaning of life") == ("meaning", "life")
    assert relaxed_terms("how to revoke granted access") == ("revoke", "granted", "access")


def test_only_stopwords_do_not_relax() -> None:
    # The any-word tier needs a content word: "what OR is OR this" would match nearly anything.
    assert relaxed_terms("what is this") is None


def test_punctuated_ascii_pieces_are_kept() -> None:
    assert relaxed_terms("auth-service token refresh?") == ("auth", "service", "token", "refresh")
    assert relaxed_terms("docs/specs/a.md") == ("docs", "specs", "md")


def test_case_insensitive_dedupe() -> None:
    assert relaxed_terms("Coffee coffee COFFEE brewing") == ("coffee", "brewing")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "word",
        '"quoted phrase with many words"',
        '"quoted prefix phrase"*',
        "alpha OR beta gamma",
        "alpha AND beta gamma",
        "alpha NOT beta gamma",
        "NOT alpha beta",
        "alpha* beta gamma",
    ],
)
def test_ineligible_queries(text: str) -> None:
    assert relaxed_terms(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("two words", ("two", "words")),
        ("SPEC 16 design", ("spec", "16", "design")),
        ("root note 1", ("root", "note", "1")),
        ("report 70803 on el/1", ("report", "70803", "el", "1")),
        ('editors "what you see is what you get"', ("editors", "see", "get")),
        ('the "deploy freeze', ("deploy", "freeze")),
    ],
)
def test_short_numeric_and_quoted_sentences_relax(text: str, expected: tuple[str, ...]) -> None:
    # Issue 16: numbers are terms, two words relax, quotes inside a sentence are not syntax.
    assert relaxed_terms(text) == expected


def test_all_capitals_operator_words_are_words() -> None:
    assert relaxed_terms("ANALYSIS AND DESIGN OF FILTERS") == ("analysis", "design", "filters")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("季度 报告", ("季度", "报告")),
        ("カタカナ レポート", ("カタカナ", "レポート")),
        ("분기 보고", ("분기", "보고")),
        ("季度。 报告？", ("季度", "报告")),
    ],
)
def test_whitespace_separated_cjk_relaxes(text: str, expected: tuple[str, ...]) -> None:
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize("text", ["季度", "SPEC-16 设计", "foo/bar 季度", "季度 季度", "the 季度"])
def test_short_query_guard_after_cjk_pruning(text: str) -> None:
    assert relaxed_terms(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("как отозвать выданный доступ", ("как", "отозвать", "выданный", "доступ")),
        ("як відкликати виданий доступ", ("як", "відкликати", "виданий", "доступ")),
        ("πώς να ανακαλέσετε πρόσβαση", ("πώς", "να", "ανακαλέσετε", "πρόσβαση")),
        ("כיצד לבטל גישה שניתנה", ("כיצד", "לבטל", "גישה", "שניתנה")),
        ("كيف تلغي الوصول الممنوح", ("كيف", "تلغي", "الوصول", "الممنوح")),
        ("ինչպես չեղարկել տրված մուտքը", ("ինչպես", "չեղարկել", "տրված", "մուտքը")),
    ],
)
def test_non_latin_alphabets_reach_the_same_guard(text: str, expected: tuple[str, ...]) -> None:
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("पहुंच कैसे रद्द करें", ("पहुंच", "कैसे", "रद्द", "करें")),
        ("วิธี เพิกถอน การเข้าถึง", ("วิธี", "เพิกถอน", "การเข้าถึง")),
        ("como revogar acesso concedido", ("como", "revogar", "acesso", "concedido")),
    ],
)
def test_combining_marks_stay_with_their_base(text: str, expected: tuple[str, ...]) -> None:
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize("text", ["अंतर्राष्ट्रीयकरण", "การเข้าถึง", "pre\u0301sentation"])
def test_single_words_with_marks_stay_single(text: str) -> None:
    assert relaxed_terms(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("می\u200cروم خانه", ("میروم", "می\u200cروم", "خانه")),
        (
            "نمی\u200cخواهم دسترسی را لغو",
            ("نمیخواهم", "نمی\u200cخواهم", "دسترسی", "را", "لغو"),
        ),
        ("क\u200dष विशेष पहुंच", ("कष", "क\u200dष", "विशेष", "पहुंच")),
    ],
)
def test_join_controls_stay_inside_words(text: str, expected: tuple[str, ...] | None) -> None:
    # Both the cleaned and the raw form: the stored note may or may not carry the joiner.
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SPEC Ⅻ design", ("spec", "ⅻ", "design")),
        ("spec ½ design", ("spec", "½", "design")),
        ("٣ ٤ ٥", ("٣", "٤", "٥")),
    ],
)
def test_unicode_numbers_are_terms(text: str, expected: tuple[str, ...]) -> None:
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("п’ять проектів", ("п’ять", "проектів")),
        ("об'єкт доступу", ("об'єкт", "доступу")),
        ("скасувати п’ять виданих об'єктів", ("скасувати", "п’ять", "виданих", "об'єктів")),
    ],
)
def test_apostrophes_stay_inside_words(text: str, expected: tuple[str, ...] | None) -> None:
    assert relaxed_terms(text) == expected


def test_apostrophe_does_not_join_a_number() -> None:
    # "16's" is the number 16 and the stopword "s".
    assert relaxed_terms("SPEC 16's design") == ("spec", "16", "design")


def test_contractions_stay_whole() -> None:
    assert relaxed_terms("don't touch this") == ("don't", "touch")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("数据 三 分析", ("数据", "三", "分析")),
        ("日本 十 経済 統計", ("日本", "十", "経済", "統計")),
        ("データ 二 分析 結果", ("データ", "二", "分析", "結果")),
    ],
)
def test_han_numerals_are_words(text: str, expected: tuple[str, ...]) -> None:
    assert relaxed_terms(text) == expected


@pytest.mark.parametrize(
    ("text", "number"), [("SPEC 16 设计", "16"), ("SPEC Ⅻ 设计", "ⅻ"), ("SPEC ½ 设计", "½")]
)
def test_numbers_are_terms_of_cjk_queries_too(text: str, number: str) -> None:
    assert relaxed_terms(text) == ("spec", number, "设计")


@pytest.mark.parametrize("number", ["1\ufe0f\u20e3", "1\u0301"])
def test_marks_stay_with_their_digit(number: str) -> None:
    assert is_numeric_token(number)
    assert relaxed_terms(f"SPEC {number} design") == ("spec", number, "design")


@pytest.mark.parametrize("joiner", ["\u00ad", "\u2060", "\ufeff", "\u180e", "\u200f"])
def test_format_characters_do_not_split_a_word(joiner: str) -> None:
    # One word, offered with and without the invisible character.
    assert relaxed_terms(f"сло{joiner}во доступа") == ("слово", f"сло{joiner}во", "доступа")


def test_zero_width_space_separates_words() -> None:
    assert relaxed_terms("ฉัน\u200bจะลอง\u200bชำระเงิน") == ("ฉัน", "จะลอง", "ชำระเงิน")


def test_tokeniser_is_linear() -> None:
    # Pathological repetition of every continuation rule; finishing at all is the check.
    text = ("a\u0301\u00adb'" * 50_000) + " " + ("1'" * 50_000)
    assert len(word_tokens(text)) == 50_001


class TestUnicodeClasses:
    """Sweeps over whole Unicode classes the guards depend on (UAX #29 with two departures)."""

    def test_every_format_character_but_the_separator_stays_inside(self) -> None:
        splitting = [
            char
            for char in FORMAT_CHARACTERS
            if char not in WORD_SEPARATOR_FORMATS and len(word_tokens(f"сло{char}во доступа")) != 2
        ]
        assert not splitting, _hex(splitting)

    def test_zero_width_space_is_the_only_separator(self) -> None:
        assert WORD_SEPARATOR_FORMATS == "\u200b"
        assert len(word_tokens("сло\u200bво доступа")) == 3

    def test_no_combining_mark_splits_a_word(self) -> None:
        splitting = [c for c in COMBINING_MARKS if len(word_tokens(f"сло{c}во доступа")) != 2]
        assert not splitting, _hex(splitting)

    def test_every_number_character_is_a_term(self) -> None:
        dropped = [
            c
            for c in NUMBER_CHARACTERS
            if relaxed_terms(f"spec {c} design") != ("spec", c.lower(), "design")
        ]
        assert not dropped, _hex(dropped)

    @pytest.mark.parametrize("numeral", HAN_NUMERALS)
    def test_han_numerals_stay_content_words(self, numeral: str) -> None:
        assert unicodedata.category(numeral) == "Lo"
        assert relaxed_terms(f"数据 {numeral} 分析") == ("数据", numeral, "分析")

    def test_only_declared_punctuation_joins(self) -> None:
        joining = [
            char
            for char in PUNCTUATION
            if char not in WORD_INTERNAL_PUNCTUATION
            and len(word_tokens(f"сло{char}во доступа")) != 3
        ]
        assert not joining, _hex(joining)

    def test_declared_punctuation_is_pinned(self) -> None:
        assert WORD_INTERNAL_PUNCTUATION == "'\u2019\uff07\u00b7\u0387\u055f\u05f3\u05f4\u2027"

    def test_declared_punctuation_joins_letters_but_not_digits(self) -> None:
        not_joining = [
            c for c in WORD_INTERNAL_PUNCTUATION if len(word_tokens(f"сло{c}во доступа")) != 2
        ]
        assert not not_joining, _hex(not_joining)
        joining_digits = [
            c for c in WORD_INTERNAL_PUNCTUATION if word_tokens(f"1{c}2") != ["1", "2"]
        ]
        assert not joining_digits, _hex(joining_digits)

    @pytest.mark.parametrize("structural", [":", "."])
    def test_colon_and_full_stop_split(self, structural: str) -> None:
        assert len(word_tokens(f"сло{structural}во доступа")) == 3
        assert relaxed_terms(f"spec 1{structural}2 design") == ("spec", "1", "2", "design")
