"""The memory a process may use, and the automatic cache budget taken from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.memory import AUTO_FLOOR, auto_cache_bytes, cache_budget, memory_limit
from service.settings import Settings, SettingsError

RAM = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_cgroup_limit_below_the_ram_is_the_limit(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # v2 without a limit
    v1.write_text(f"{2**63 - 4096}\n")  # v1 without a limit
    assert memory_limit((v2, v1, tmp_path / "absent")) == RAM
    v2.write_text(f"{1 << 30}\n")
    assert memory_limit((v2, v1)) == min(RAM, 1 << 30)


def test_the_automatic_budget_is_an_eighth_with_a_floor() -> None:
    assert auto_cache_bytes(16 << 30) == 2 << 30
    assert auto_cache_bytes(1 << 30) == AUTO_FLOOR  # an eighth would be 128 MiB
    assert auto_cache_bytes(0) == AUTO_FLOOR  # unknown
    assert cache_budget(0) == 0  # always vec0
    assert cache_budget(300) == 300 << 20
    assert cache_budget(-1) == auto_cache_bytes(memory_limit())


def test_the_setting_takes_minus_one_for_automatic() -> None:
    assert Settings.from_mapping({}).sqlite_vector_cache_mb == -1
    chosen = Settings.from_mapping({"SEARCH_SQLITE_VECTOR_CACHE_MB": "512"})
    assert chosen.sqlite_vector_cache_mb == 512
    with pytest.raises(SettingsError, match=r"(?i)sqlite_vector_cache_mb"):
        Settings.from_mapping({"SEARCH_SQLITE_VECTOR_CACHE_MB": "-2"})
