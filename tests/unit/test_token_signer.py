"""TokenSigner: signs with its key, verifies with it or with a previous key (rotation)."""

from __future__ import annotations

import pytest

from service.errors import InvalidPageToken
from service.ranking.tokens import TokenSigner

OLD, NEW, OTHER = b"o" * 32, b"n" * 32, b"x" * 32


def test_a_previous_key_verifies_but_never_signs() -> None:
    old_token = TokenSigner(OLD).sign("k", "b", {"n": 1})
    rotated = TokenSigner(NEW, (OLD,))
    assert rotated.verify(old_token, "k", "b", field="page_token") == {"n": 1}
    new_token = rotated.sign("k", "b", {"n": 2})
    assert TokenSigner(NEW).verify(new_token, "k", "b", field="page_token") == {"n": 2}
    with pytest.raises(InvalidPageToken):
        TokenSigner(OLD).verify(new_token, "k", "b", field="page_token")
    with pytest.raises(InvalidPageToken):
        TokenSigner(NEW, (OTHER,)).verify(old_token, "k", "b", field="page_token")


def test_keys_shorter_than_16_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        TokenSigner(NEW, (b"short",))
