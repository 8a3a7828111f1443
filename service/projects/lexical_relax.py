"""Natural-language relaxation: the OR-able content words of a query (reference 2.4)."""

from __future__ import annotations

from service.projects.lexical_parse import is_explicit
from service.projects.lexical_script import contains_cjk
from service.projects.lexical_tokens import (
    STOPWORDS,
    dedupe,
    sanitize,
    strip_edges,
    without_formats,
    word_tokens,
)

__all__ = ["CJK_EDGE_PUNCTUATION", "relaxed_terms"]

# ASCII sentence punctuation plus its full-width and ideographic forms.
CJK_EDGE_PUNCTUATION = "?!.,;:\uff0c\u3002\uff01\uff1f\uff1b\uff1a\u3001"


def _cjk_terms(words: list[str]) -> tuple[str, ...] | None:
    # Whitespace-separated CJK words are already content words.
    if len(words) < 2:
        return None
    pruned = [word.lower() for word in words if word.isalnum() and word.lower() not in STOPWORDS]
    terms = dedupe(pruned)
    # Pruning must not let one surviving term pass for a multi-word query.
    return tuple(terms) if len(terms) >= 2 else None


def _word_terms(text: str) -> tuple[str, ...] | None:
    # Every word counts, numbers and the parts of `el/1` included: the any-word tier only
    # ever ranks after the documents holding all of them, so it adds and never displaces.
    tokens = word_tokens(text.lower())
    if len(tokens) < 2:
        return None
    kept = [token for token in tokens if token not in STOPWORDS]
    terms: list[str] = []
    for token in kept:
        clean = without_formats(token)
        # The stored note may or may not carry the invisible character: offer both forms.
        terms.extend((clean, token) if clean != token else (token,))
    return tuple(dedupe(terms)) or None


def relaxed_terms(text: str) -> tuple[str, ...] | None:
    """Lower-cased words of the any-word tier (ranked after the all-words tier), or None.

    None for empty or explicit text (operators, `prefix*`, a lone quoted phrase) and for
    fewer than two word tokens or no content word; words inside quotes of a sentence count
    like the others.
    Text with Han, kana or Hangul words needs two words that survive stopword and
    punctuation pruning.
    """
    clean = sanitize(text).strip()
    if not clean or is_explicit(clean):
        return None
    words = [word for word in (strip_edges(w, CJK_EDGE_PUNCTUATION) for w in clean.split()) if word]
    if any(contains_cjk(word) for word in words):
        return _cjk_terms(words)
    return _word_terms(clean)
