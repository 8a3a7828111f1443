"""Which IP addresses a provider base URL may reach, at connect time and at request time.

A base URL the caller chose must not reach loopback, private, link-local or multicast
addresses (SEARCH_ALLOW_PRIVATE_BASE_URLS off), nor their IPv4-mapped, NAT64, 6to4 or
Teredo forms. ConnectAccount checks what the host resolves to then; the account's connection pool
(service.workspace.http1, `address_check`) checks every later resolution too, so a host that
resolves elsewhere afterwards (DNS rebinding) is refused before a connection is opened.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_public", "is_reachable"]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known prefix: IPv4 in the last 32 bits
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use (RFC 8215): never public


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches: mapped, NAT64, 6to4 and Teredo forms."""
    found = [v4 for v4 in (ip.ipv4_mapped, ip.sixtofour) if v4 is not None]
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def is_public(address: str) -> bool:
    """Whether the address (and any IPv4 address it translates to) is globally routable."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        embedded = _embedded_ipv4(ip)
        # A translated address is as public as the IPv4 address it reaches.
        candidates = list(embedded) if embedded else candidates
    return all(c.is_global and not c.is_multicast for c in candidates)


def is_reachable(address: str) -> bool:
    """Whether a resolved address may be connected to: public, and an IP address at all."""
    try:
        return is_public(address)
    except ValueError:
        return False
