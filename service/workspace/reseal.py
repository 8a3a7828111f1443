"""Stored credentials moved to the current key after SEARCH_CREDENTIALS_KEY changed.

A server started with SEARCH_CREDENTIALS_PREVIOUS_KEYS opens credentials sealed with those
keys, so searches go on during a rotation; this sweep seals each such blob anew with the
current key (under the account's lock, which every replica respects, so a token refreshed
meanwhile is never overwritten), after which the previous keys can be dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.store.base import AccountRecord, Store
from service.workspace.credentials import CredentialSealer, bound_to

__all__ = ["PAGE", "ResealReport", "reseal_credentials"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResealReport:
    """What a sweep found, by account."""

    resealed: int = 0  # sealed with a previous key, now with the current one
    current: int = 0  # already sealed with the current key
    unopened: tuple[str, ...] = ()  # ids of accounts no configured key opens

    def __str__(self) -> str:
        text = f"{self.resealed} re-sealed, {self.current} already sealed with the current key"
        if self.unopened:
            text += (f", {len(self.unopened)} open with no configured key (reconnect them, or "
                     f"list the key they were sealed with): {', '.join(self.unopened[:20])}")
        return text


PAGE = 500  # accounts read at a time


async def reseal_credentials(
    store: Store, sealer: CredentialSealer, *, page: int = PAGE
) -> ResealReport:
    """Seal every account's credentials with `sealer`'s current key, `page` accounts read
    at a time."""
    resealed = current = 0
    unopened: list[str] = []
    after = ""
    while records := await store.all_accounts(after, page):
        after = records[-1].account_id
        for record in records:
            bound = bound_to(record.tenant, record.account_id, record.provider)
            try:
                if sealer.reseal(record.sealed_credentials, bound) is None:
                    current += 1
                    continue
            except ValueError:
                unopened.append(record.account_id)
                continue
            if await _reseal(store, sealer, record, bound):
                resealed += 1
    return ResealReport(resealed, current, tuple(unopened))


async def _reseal(
    store: Store, sealer: CredentialSealer, record: AccountRecord, bound: bytes
) -> bool:
    """Re-seal one account's blob as stored now (it may have been refreshed since it was
    listed); False when it is gone or no longer needs it."""
    changed = False

    async def fresh(sealed: bytes) -> bytes | None:
        nonlocal changed
        try:
            blob = sealer.reseal(sealed, bound)
        except ValueError:
            return None
        changed = blob is not None
        return blob

    await store.refresh_account_credentials(record.tenant, record.account_id, fresh)
    return changed
