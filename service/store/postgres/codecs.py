"""Value preparation for PostgreSQL: NUL stripping, JSON and timestamps."""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from service import errors


def clean_text(value: str) -> str:
    """`value` without NUL characters (PostgreSQL text cannot hold them)."""
    return value.replace("\x00", "") if "\x00" in value else value


def clean_json(value: Any) -> Any:
    """A JSON value with NUL characters removed from every string and key (jsonb rejects them)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(key)): clean_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(item) for item in value]
    return value


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Metadata as JSON text for a jsonb column; InvalidArgument when it is not JSON."""
    try:
        return json.dumps(clean_json(metadata), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument.field("metadata", f"not JSON-serialisable: {exc}") from exc


def utc(value: datetime | None) -> datetime | None:
    """A tz-aware datetime (naive values are taken as UTC)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


# ASCII punctuation separates words (as in the english parser); translate + split run in C.
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation})
# PostgreSQL's english.stop (the 'english' text search configuration drops these).
_STOPWORDS_TEXT = (
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his "
    "himself she her hers herself it its itself they them their theirs themselves what which "
    "who whom this that these those am is are was were be been being have has had having do "
    "does did doing a an the and but if or because as until while of at by for with about "
    "against between into through during before after above below to from up down in out on "
    "off over under again further then once here there when where why how all any both each "
    "few more most other some such no nor not only own same so than too very s t can will just "
    "don should now"
)
ENGLISH_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def lexeme_count(text: str) -> int:
    """About how many lexemes `to_tsvector('english', text)` holds, repeats included.

    BM25's document length. Counted here because unnesting every new tsvector in SQL costs
    more than building it; words split on whitespace and punctuation and stopwords are
    skipped, as the english parser does for ordinary prose.
    """
    words = text.lower().translate(_PUNCTUATION).split()
    return len(words) - sum(map(ENGLISH_STOPWORDS.__contains__, words))
