"""Unicode word rules shared by query compilation and natural-language relaxation."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = [
    "EDGE_PUNCTUATION",
    "POSTGRES_ENGLISH_STOPWORDS",
    "STOPWORDS",
    "WORD_INTERNAL_PUNCTUATION",
    "WORD_SEPARATOR_FORMATS",
    "dedupe",
    "has_index_token",
    "is_numeric_token",
    "sanitize",
    "strip_edges",
    "without_formats",
    "word_tokens",
]

# Function words that only add noise to an OR of terms ("when OR did OR a"): the reference
# list (2.4) plus PostgreSQL's english stopword list, so SQLite drops exactly the words that
# `to_tsquery('english', ...)` drops and both stores match and rank the same rows.
_REFERENCE_STOPWORDS = (
    "a an and are as at be but by did do does for from had has have how i in is it of on "
    "or our that the their they this to was we were what when where which who whom whose why "
    "will with you your"
)
# PostgreSQL's english.stop (its 'english' configuration drops these; BM25 lengths skip them).
_POSTGRES_ENGLISH_TEXT = (
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his "
    "himself she her hers herself it its itself they them their theirs themselves what which "
    "who whom this that these those am is are was were be been being have has had having do "
    "does did doing a an the and but if or because as until while of at by for with about "
    "against between into through during before after above below to from up down in out on "
    "off over under again further then once here there when where why how all any both each "
    "few more most other some such no nor not only own same so than too very s t can will "
    "just don should now"
)
POSTGRES_ENGLISH_STOPWORDS = frozenset(_POSTGRES_ENGLISH_TEXT.split())
STOPWORDS = frozenset(_REFERENCE_STOPWORDS.split()) | POSTGRES_ENGLISH_STOPWORDS
# Sentence punctuation stripped from word edges: a trailing "?" must not make a question a phrase.
EDGE_PUNCTUATION = "?!.,;:"
# Joins two letters into one word (UAX #29 MidLetter subset); colon and full stop always split.
WORD_INTERNAL_PUNCTUATION = "'\u2019\uff07\u00b7\u0387\u055f\u05f3\u05f4\u2027"
# Zero-width space separates words in Thai and Khmer; every other format character is word-internal.
WORD_SEPARATOR_FORMATS = "\u200b"
# Letters that SQLite's unicode61 tables (Unicode 6.1) classify as separators.
_NON_INDEXED_LETTERS = ((0x19B0, 0x19C9), (0x1CF2, 0x1CF3))


def sanitize(text: str) -> str:
    """Replace control characters and lone surrogates by spaces (FTS5 stops at NUL)."""
    if text.isprintable():
        return text
    return "".join(
        " " if unicodedata.category(char) in ("Cc", "Cs") and not char.isspace() else char
        for char in text
    )


def strip_edges(word: str, punctuation: str = EDGE_PUNCTUATION) -> str:
    """The word without sentence punctuation at either end."""
    return word.strip(punctuation)


def _is_indexed_char(char: str) -> bool:
    category = unicodedata.category(char)
    if category[0] not in "LN" and category != "Co":
        return False
    code = ord(char)
    return not any(low <= code <= high for low, high in _NON_INDEXED_LETTERS)


def has_index_token(text: str) -> bool:
    """Whether the FTS5 unicode61 tokenizer surely finds a token in `text`.

    Conservative on purpose: an FTS5 phrase without tokens matches nothing, which would
    silently empty a strict AND, so only characters both Python and SQLite call letters,
    digits or private-use characters count.
    """
    return any(_is_indexed_char(char) for char in text)


def _is_internal_format(char: str) -> bool:
    return unicodedata.category(char) == "Cf" and char not in WORD_SEPARATOR_FORMATS


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _continues_word(text: str, index: int, current: list[str]) -> bool:
    """Whether a non-alphanumeric character belongs to the word being read."""
    char = text[index]
    if _is_internal_format(char) or _is_mark(char):
        return True
    if char in WORD_INTERNAL_PUNCTUATION:
        # Between two letters only: "don't" is one word, "16's" keeps its digit token.
        after_letter = current[-1].isalpha()
        before_letter = index + 1 < len(text) and text[index + 1].isalpha()
        return after_letter and before_letter
    return False


def _finish(current: list[str], tokens: list[str]) -> None:
    token = "".join(current)
    # A trailing format character separates rather than joins.
    while token and _is_internal_format(token[-1]):
        token = token[:-1]
    if token:
        tokens.append(token)
    current.clear()


def word_tokens(text: str) -> list[str]:
    """Split text into words: alphanumeric runs with their marks, joiners and apostrophes.

    Linear in the length of `text`. A mark, format character or apostrophe never opens a word.
    """
    tokens: list[str] = []
    current: list[str] = []
    for index, char in enumerate(text):
        if char.isalnum() or (current and _continues_word(text, index, current)):
            current.append(char)
        elif current:
            _finish(current, tokens)
    _finish(current, tokens)
    return tokens


def without_formats(token: str) -> str:
    """The token without invisible format characters (soft hyphens, joiners, bidi marks)."""
    return "".join(char for char in token if not _is_internal_format(char))


def is_numeric_token(token: str) -> bool:
    """Whether a token is a bare number in any script (every base character in category N).

    Marks and format characters are ignored so a keycap or accented digit still counts;
    Han numerals are letters (Lo) and so are words, not numbers.
    """
    core = [char for char in token if not _is_mark(char) and not _is_internal_format(char)]
    return bool(core) and all(unicodedata.category(char).startswith("N") for char in core)


def dedupe(words: Iterable[str]) -> list[str]:
    """Words in first-seen order without case-insensitive repeats."""
    seen: set[str] = set()
    result: list[str] = []
    for word in words:
        key = word.lower()
        if key not in seen:
            seen.add(key)
            result.append(word)
    return result
