"""A Drive corpus and Drive accounts that several workspace tests share."""

from __future__ import annotations

from collections.abc import Iterable

from search_client import AsyncSearchClient, Provider
from service.fakes.suite import FakeProviders


def add_files(fakes: FakeProviders, count: int, words: Iterable[str] = ("alpha",)) -> None:
    """`count` files matching each word (`<word>-<n>`, "<word> plan <n>"), in May 2026."""
    for word in words:
        for n in range(count):
            fakes.google_drive.add_file(f"{word}-{n}", f"{word} plan {n}", f"{word} notes {n}",
                                        modified=f"2026-05-{1 + n % 28:02d}T10:00:00Z")


async def connect_accounts(client: AsyncSearchClient, fakes: FakeProviders, count: int) -> None:
    """`count` Drive accounts ("drive 0", ...) with the credential the fake accepts."""
    for index in range(count):
        await client.connect_account(
            Provider.GOOGLE_DRIVE, f"drive {index}", fakes.google_drive.token
        )
