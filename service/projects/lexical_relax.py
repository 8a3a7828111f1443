"""Natural-language relaxation: the OR-able content words of a query (reference 2.4)."""

from __future__ import annotations

from service.projects.lexical_parse import is_explicit
from service.projects.lexical_script import contains_cjk
from service.projects.lexical_tokens import (
    STOPWORDS,
    dedupe,
    is_numeric_token,
    sanitize,
    strip_edges,
    without_formats,
    word_tokens,
)

__all__ = ["CJK_EDGE_PUNCTUATION", "relaxed_terms"]

# ASCII sentence punctuation plus its full-width and ideographic forms.
CJK_EDGE_PUNCTUATION = "?!.,;:\uff0c\u3002\uff01\uff1f\uff1b\uff1a\u3001"


def _cjk_terms(words: list[str]) -> tuple[str, ...] | None:
    # Whitespace-separated CJK words are already content words: no three-token gate.
    if len(words) < 2 or any(is_numeric_token(word) for word in words):
        return None
    pruned = [word.lower() for word in words if word.isalnum() and word.lower() not in STOPWORDS]
    terms = dedupe(pruned)
    # Pruning must not let one surviving term pass for a multi-word query.
    return tuple(terms) if len(terms) >= 2 else None


def _word_terms(text: str) -> tuple[str, ...] | None:
    tokens = word_tokens(text.lower())
    # Short and identifier-like queries ("SPEC 16") over-broaden when ORed.
    if len(tokens) < 3 or any(is_numeric_token(token) for token in tokens):
        return None
    kept = [token for token in tokens if token not in STOPWORDS] or tokens
    terms: list[str] = []
    for token in kept:
        clean = without_formats(token)
        # The stored note may or may not carry the invisible character: offer both forms.
        terms.extend((clean, token) if clean != token else (token,))
    return tuple(dedupe(terms)) or None


def relaxed_terms(text: str) -> tuple[str, ...] | None:
    """Lower-cased words to OR together when the strict query finds nothing, or None.

    None for empty, quoted or boolean text, for fewer than three word tokens, and for any
    numeric token. Text with Han, kana or Hangul words needs only two words that survive
    stopword and punctuation pruning.
    """
    clean = sanitize(text).strip()
    if not clean or is_explicit(clean):
        return None
    words = [word for word in (strip_edges(w, CJK_EDGE_PUNCTUATION) for w in clean.split()) if word]
    if any(contains_cjk(word) for word in words):
        return _cjk_terms(words)
    return _word_terms(clean)
