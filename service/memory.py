"""How much memory this process may use: its cgroup's limit, else the machine's RAM.

In a container the machine's RAM is not what the process can have: the cgroup limit
(`memory.max` in cgroup v2, `memory.limit_in_bytes` in v1) is. Caches sized from memory
(the SQLite KNN matrices) read it here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # v1
)
AUTO_SHARE = 8  # an automatic cache may take an eighth of it
AUTO_FLOOR = 256 << 20


def memory_limit(cgroup_files: Sequence[Path] = CGROUP_LIMITS) -> int:
    """Bytes this process may use: the smaller of the machine's RAM and a cgroup limit
    ("max", absent or unreadable files, and v1's "no limit" values count as none)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not a POSIX system with these names
        ram = 0
    limits = [ram] if ram > 0 else []
    for path in cgroup_files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < 1 << 60:  # v1 writes ~2**63 for "no limit"
            limits.append(int(text))
    return min(limits) if limits else 0


def auto_cache_bytes(limit: int) -> int:
    """An automatic cache budget for a process that may use `limit` bytes: an eighth of it,
    at least 256 MiB (and 256 MiB when the limit is unknown)."""
    return max(AUTO_FLOOR, limit // AUTO_SHARE)


def cache_budget(megabytes: int) -> int:
    """Bytes for a cache configured in MiB, where -1 means automatic (`auto_cache_bytes`)."""
    if megabytes < 0:
        return auto_cache_bytes(memory_limit())
    return megabytes << 20
