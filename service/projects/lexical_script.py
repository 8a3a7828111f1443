"""Gram analysis for scripts written without spaces between words (CJK, Thai, Khmer, ...).

SQLite's unicode61 and PostgreSQL's parser keep a whole run of such text as one token, so
a word inside a sentence ("适者生存" in "即适者生存") is never found. Both stores therefore
index an extra `ngrams` text: unigrams and bigrams of every run. A query run becomes the
ordered phrase of its bigrams (or its single character), which matches exactly the texts
that contain the run as a substring.
"""

from __future__ import annotations

import bisect
import itertools
import unicodedata

from service.projects.lexical_tokens import has_index_token

__all__ = [
    "SCRIPT_BOUNDARY",
    "contains_cjk",
    "contains_script",
    "is_script_char",
    "run_grams",
    "script_ngrams",
    "script_runs",
    "split_script",
]

# Separates runs so a query phrase never matches across two runs of the document.
SCRIPT_BOUNDARY = "bm_script_boundary"

_SCRIPT_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, zero
    (0x303B, 0x303B),  # vertical ideographic iteration mark
    (0x3041, 0x30FA),  # Hiragana, Katakana (the middle dot U+30FB separates words)
    (0x30FC, 0x30FF),  # prolonged sound mark, Katakana iteration marks
    (0x3100, 0x318F),  # Bopomofo, Hangul compatibility Jamo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xA9E0, 0xA9FF),  # Myanmar extended B
    (0xAA60, 0xAA7F),  # Myanmar extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x1B000, 0x1B16F),  # Kana supplement and extensions
    (0x20000, 0x2FFFF),  # supplementary ideographic plane
    (0x30000, 0x323AF),  # CJK extensions G and H
)
# Han, kana and Hangul only: the scripts whose whitespace-separated words relax (reference 2.4).
_CJK_RANGES = (
    (0x1100, 0x11FF),
    (0x3005, 0x3007),
    (0x3041, 0x30FA),
    (0x30FC, 0x30FF),
    (0x3130, 0x318F),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0xFF65, 0xFF9F),  # halfwidth Katakana (relaxation reads text before NFKC)
    (0x1B000, 0x1B16F),
    (0x20000, 0x2FFFF),
    (0x30000, 0x323AF),
)
_SCRIPT_STARTS = [low for low, _ in _SCRIPT_RANGES]
_CJK_STARTS = [low for low, _ in _CJK_RANGES]
_MARKS = frozenset(("Mn", "Mc", "Me"))


def _in_ranges(char: str, starts: list[int], ranges: tuple[tuple[int, int], ...]) -> bool:
    code = ord(char)
    index = bisect.bisect_right(starts, code) - 1
    return index >= 0 and code <= ranges[index][1]


def is_script_char(char: str) -> bool:
    """Whether an (NFKC-normalised) character belongs to a script indexed by grams."""
    return _in_ranges(char, _SCRIPT_STARTS, _SCRIPT_RANGES)


def contains_script(text: str) -> bool:
    """Whether text has any character indexed by grams."""
    return any(is_script_char(char) for char in unicodedata.normalize("NFKC", text))


def contains_cjk(text: str) -> bool:
    """Whether text has a Han, kana or Hangul character."""
    return any(_in_ranges(char, _CJK_STARTS, _CJK_RANGES) for char in text)


def script_runs(text: str) -> tuple[tuple[str, ...], ...]:
    """Runs of script text after NFKC, as units (a base character plus its combining marks)."""
    runs: list[tuple[str, ...]] = []
    current: list[str] = []
    for char in unicodedata.normalize("NFKC", text):
        if current and unicodedata.category(char) in _MARKS:
            current[-1] += char
        elif is_script_char(char):
            current.append(char)
        elif current:
            runs.append(tuple(current))
            current = []
    if current:
        runs.append(tuple(current))
    return tuple(runs)


def run_grams(run: tuple[str, ...]) -> tuple[str, ...]:
    """The run's ordered bigrams, or the run itself when it is one unit long."""
    if len(run) < 2:
        return run
    return tuple(first + second for first, second in itertools.pairwise(run))


def script_ngrams(text: str) -> str:
    """Index text for the `ngrams` column: per run its unigrams then its bigrams.

    Unigrams make a one-character query findable inside a longer run; the bigrams stay
    adjacent so a longer query matches as an ordered phrase.
    """
    parts: list[str] = []
    for run in script_runs(text):
        terms = run if len(run) == 1 else run + run_grams(run)
        parts.append(" ".join(terms))
    return f" {SCRIPT_BOUNDARY} ".join(parts)


def _remove_script(word: str) -> str:
    """The word with script characters (and marks on them) replaced by spaces."""
    kept: list[str] = []
    in_run = False
    for char in word:
        normal = unicodedata.normalize("NFKC", char)
        if normal and is_script_char(normal[0]):
            in_run = True
            kept.append(" ")
        elif in_run and unicodedata.category(char) in _MARKS:
            continue
        else:
            in_run = False
            kept.append(char)
    return "".join(kept)


def split_script(text: str) -> tuple[str, tuple[tuple[str, ...], ...]]:
    """Split text into its non-script remainder and the gram phrases of its script runs.

    Phrases without any indexed character are dropped: FTS5 would read them as empty.
    """
    if not contains_script(text):
        return text, ()
    phrases = tuple(
        grams
        for grams in (run_grams(run) for run in script_runs(text))
        if has_index_token("".join(grams))
    )
    return _remove_script(text), phrases
